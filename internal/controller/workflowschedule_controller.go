package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// ScheduleInbox is what the WorkflowSchedule controller needs from the
// inbox. *engine.Engine implements it.
type ScheduleInbox interface {
	PutSchedule(ctx context.Context, spec engine.ScheduleSpec) (engine.Schedule, error)
	GetSchedule(ctx context.Context, namespace, name string) (engine.Schedule, error)
	DeleteSchedule(ctx context.Context, namespace, name string) (bool, error)
	ScheduleLatestRuns(ctx context.Context, namespace, name string, limit int) ([]engine.ScheduleRun, error)
	GetRun(ctx context.Context, id string) (engine.Run, error)
}

var _ ScheduleInbox = (*engine.Engine)(nil)

// DefaultScheduleResyncPeriod is how often a WorkflowSchedule is looked at
// when nothing happens to it: a run fired by someone other than this
// manager's maintenance loop gets its WorkflowRun within that time.
const DefaultScheduleResyncPeriod = 30 * time.Second

// WorkflowScheduleReconciler mirrors each WorkflowSchedule into the inbox's
// workflow_schedule table, where the database fires its ticks, and makes a
// WorkflowRun for each run a tick recorded: at once when the manager's
// maintenance loop fired it (Fired), and on every look for the schedule's
// recent runs that have none yet (a manager that stopped between firing and
// creating the object, a tick fired by another caller).
type WorkflowScheduleReconciler struct {
	client.Client
	// Inbox is the only inbox, when Inboxes is nil.
	Inbox ScheduleInbox
	// Inboxes, when set, finds the inbox of each object's namespace.
	Inboxes *InboxSet
	// Woken, optional, delivers schedules to look at again (their
	// namespace moved to another inbox, or its inbox answers again).
	Woken    <-chan event.GenericEvent
	Recorder recorder.EventRecorder
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// ResyncPeriod bounds the time between two looks at a schedule;
	// DefaultScheduleResyncPeriod when zero.
	ResyncPeriod time.Duration
	// DeletionGracePeriod is how long a deletion waits for an unreachable
	// inbox before the finalizer is removed without deleting the schedule
	// from it; DefaultDeletionGracePeriod when zero.
	DeletionGracePeriod time.Duration

	// fired wakes the reconciler for schedules whose ticks Fired handled.
	fired chan event.GenericEvent
}

// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowschedules,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowschedules/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowschedules/finalizers,verbs=update
// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowruns,verbs=create;list;delete

// Reconcile mirrors one WorkflowSchedule.
func (r *WorkflowScheduleReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return inboxPass(ctx, r.Inboxes, nil, r.Client, r.Recorder, req, conditionedSchedule{&workflowv1alpha1.WorkflowSchedule{}},
		func(ctx context.Context, routed Inbox, _ string) (ctrl.Result, error) {
			inbox := r.Inbox
			if routed != nil {
				var ok bool
				if inbox, ok = routed.(ScheduleInbox); !ok {
					return ctrl.Result{}, fmt.Errorf("the inbox of namespace %s keeps no schedules", req.Namespace)
				}
			}
			return (&schedulePass{WorkflowScheduleReconciler: r, Inbox: inbox}).reconcileRequest(ctx, req)
		})
}

func (r *schedulePass) reconcileRequest(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileObject(ctx, r.Client, req, &workflowv1alpha1.WorkflowSchedule{}, r.finalize, r.reconcile)
}

func (r *schedulePass) reconcile(ctx context.Context, ws *workflowv1alpha1.WorkflowSchedule) (ctrl.Result, error) {
	before := ws.DeepCopy()
	stored, accepted, err := r.mirror(ctx, ws)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The runs the schedule recorded that have no WorkflowRun yet.
	watermark, err := r.catchUp(ctx, ws)
	if err != nil {
		return ctrl.Result{}, err
	}
	owned, err := r.ownedRuns(ctx, ws)
	if err != nil {
		return ctrl.Result{}, err
	}
	applyScheduleStatus(ws, stored, owned, watermark)
	setCondition(&ws.Status.Conditions, accepted)
	inboxAvailableAgain(&ws.Status.Conditions, ws.Generation)
	if !equality.Semantic.DeepEqual(before.Status, ws.Status) {
		if err := r.Status().Patch(ctx, ws, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("write status: %w", err)
		}
		if accepted.Status == metav1.ConditionFalse && !conditionMatches(before.Status.Conditions, accepted) {
			r.Recorder.Eventf(ws, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonInvalidSchedule, "Mirror",
				"%s", capitalize(truncate(accepted.Message, maxEventNoteBytes)))
		}
	}
	// History: only WorkflowRuns whose tick the written status counts
	// (lastScheduleTime) are deleted, so that a later look never takes a
	// deleted one for a run still waiting for its object.
	if err := r.trimHistory(ctx, ws, owned); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.resync()}, nil
}

// mirror writes the schedule into the inbox and returns it as stored (nil
// when there is none) and the Accepted condition.
func (r *schedulePass) mirror(ctx context.Context, ws *workflowv1alpha1.WorkflowSchedule) (*engine.Schedule, metav1.Condition, error) {
	cond := metav1.Condition{Type: workflowv1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: workflowv1alpha1.ReasonMirrored,
		Message: "the schedule is in the inbox", ObservedGeneration: ws.Generation}
	s, err := r.Inbox.PutSchedule(ctx, scheduleSpec(ws))
	if err == nil {
		return &s, cond, nil
	}
	if !isRefusal(err) {
		return nil, cond, fmt.Errorf("mirror schedule: %w", err)
	}
	why := err.Error()
	if _, after, ok := strings.Cut(why, engine.ErrInvalid.Error()+": "); ok {
		why = after
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, workflowv1alpha1.ReasonInvalidSchedule
	cond.Message = "the database refused the schedule: " + why
	old, gerr := r.Inbox.GetSchedule(ctx, ws.Namespace, ws.Name)
	switch {
	case gerr == nil:
		cond.Message += "; it keeps firing as it was last accepted"
		return &old, cond, nil
	case errors.Is(gerr, engine.ErrNotFound):
		return nil, cond, nil
	default:
		return nil, cond, fmt.Errorf("read schedule: %w", gerr)
	}
}

// scheduleSpec is the inbox's schedule for ws.
func scheduleSpec(ws *workflowv1alpha1.WorkflowSchedule) engine.ScheduleSpec {
	t := ws.Spec.RunTemplate
	s := engine.ScheduleSpec{
		Name: ws.Name, Namespace: ws.Namespace, UID: string(ws.UID),
		Cron: ws.Spec.Schedule, TimeZone: ws.Spec.TimeZone, Type: t.Type,
		ConcurrencyPolicy: engine.ConcurrencyPolicy(ws.Spec.ConcurrencyPolicy), Suspend: ws.Spec.Suspend,
		ConcurrencyKey: t.ConcurrencyKey,
	}
	if t.Payload != nil {
		s.Payload = t.Payload.Raw
	}
	if t.Priority != nil {
		p := int(*t.Priority)
		s.Priority = &p
	}
	if t.MaxAttempts != nil {
		s.MaxAttempts = int(*t.MaxAttempts)
	}
	if t.Deadline != nil {
		s.Deadline = t.Deadline.Duration
	}
	if rp := t.RetryPolicy; rp != nil {
		s.RetryPolicy = &engine.RetryPolicy{}
		if rp.BaseDelay != nil {
			s.RetryPolicy.BaseDelay = rp.BaseDelay.Duration
		}
		if rp.MaxDelay != nil {
			s.RetryPolicy.MaxDelay = rp.MaxDelay.Duration
		}
	}
	if ws.Spec.StartingDeadlineSeconds != nil {
		d := time.Duration(*ws.Spec.StartingDeadlineSeconds) * time.Second
		s.StartingDeadline = &d
	}
	return s
}

// finalize deletes the schedule from the inbox, then lets the object go.
// Its WorkflowRuns are its dependents: Kubernetes' garbage collector
// deletes them (cancelling the unfinished ones), as for a CronJob's Jobs.
// While the inbox is unreachable the deletion is retried, as a
// WorkflowRegistry's is, until the deletion grace period is over.
func (r *schedulePass) finalize(ctx context.Context, ws *workflowv1alpha1.WorkflowSchedule) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(ws, Finalizer) {
		return ctrl.Result{}, nil
	}
	if _, err := r.Inbox.DeleteSchedule(ctx, ws.Namespace, ws.Name); err != nil {
		return inboxOutage{
			client: r.Client, recorder: r.Recorder, grace: r.DeletionGracePeriod, now: r.now(),
			obj: ws, conditions: &ws.Status.Conditions, cause: fmt.Errorf("delete schedule: %w", err),
			without:         "deleting the schedule from the inbox (it keeps firing until it is deleted there, or a WorkflowSchedule of the same namespace and name takes it over)",
			removeFinalizer: func(ctx context.Context) error { return dropFinalizer(ctx, r.Client, ws) },
		}.handle(ctx, "workflowschedule", client.ObjectKeyFromObject(ws))
	}
	return ctrl.Result{}, dropFinalizer(ctx, r.Client, ws)
}

func (r *WorkflowScheduleReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock.Now()
	}
	return time.Now()
}

func (r *WorkflowScheduleReconciler) resync() time.Duration {
	return orDefault(r.ResyncPeriod, DefaultScheduleResyncPeriod)
}

// conditionMatches reports whether conds holds c with the same status,
// reason and message.
func conditionMatches(conds []metav1.Condition, c metav1.Condition) bool {
	for _, o := range conds {
		if o.Type == c.Type {
			return o.Status == c.Status && o.Reason == c.Reason && o.Message == boundMessage(c.Message)
		}
	}
	return false
}

// SetupWithManager registers the controller. It watches the WorkflowRuns
// the schedules own (their phases make status.active and the history) and
// the schedules whose ticks Fired handled.
// woken is Woken, or a channel nothing is sent on.
func (r *WorkflowScheduleReconciler) woken() <-chan event.GenericEvent {
	if r.Woken != nil {
		return r.Woken
	}
	return make(chan event.GenericEvent)
}

func (r *WorkflowScheduleReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.fired == nil {
		r.fired = make(chan event.GenericEvent, 1024)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&workflowv1alpha1.WorkflowSchedule{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&workflowv1alpha1.WorkflowRun{}).
		WatchesRawSource(source.Channel(r.fired, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(r.woken(), &handler.EnqueueRequestForObject{})).
		Named("workflowschedule").
		Complete(r)
}
