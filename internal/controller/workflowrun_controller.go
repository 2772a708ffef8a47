package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// DefaultResyncPeriod is how often an unfinished run is re-read from the
// inbox even without a notification.
const DefaultResyncPeriod = 30 * time.Second

// acceptedStatusDelay is how long after recording a run the controller
// writes its first status when nothing happened to it meanwhile.
const acceptedStatusDelay = 500 * time.Millisecond

// quietStart reports whether the first status of a run just recorded may
// wait for acceptedStatusDelay (or the run's first change): nothing but its
// acceptance would be shown, and nothing else is asked of the object.
func quietStart(wfr *workflowv1alpha1.WorkflowRun, run engine.Run) bool {
	return run.Status == engine.StatusPending && run.Wait == nil && !isDAGRun(run) &&
		!wfr.Spec.Cancel && len(wfr.Spec.Signals) == 0
}

// WorkflowRunReconciler mirrors WorkflowRuns into the inbox and writes each
// run's progress back to its object.
type WorkflowRunReconciler struct {
	client.Client
	// Inbox is the only inbox, when Inboxes is nil.
	Inbox Inbox
	// Inboxes, when set, finds the inbox of each object's namespace.
	Inboxes  *InboxSet
	Recorder recorder.EventRecorder
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// ResyncPeriod re-reads unfinished runs; DefaultResyncPeriod when zero.
	ResyncPeriod time.Duration
	// DAGResyncPeriod re-reads unfinished DAG runs, whose steps' changes
	// are not announced; DefaultDAGResyncPeriod when zero (ResyncPeriod
	// when that is shorter).
	DAGResyncPeriod time.Duration
	// Changes delivers objects whose run changed in the inbox (see
	// InboxWatcher); optional.
	Changes <-chan event.GenericEvent
	// MaxConcurrentReconciles defaults to 8.
	MaxConcurrentReconciles int
	// Metrics, optional.
	Metrics *Metrics
	// DeletionGracePeriod is how long a deletion waits for an unreachable
	// inbox before the finalizer is removed without cancelling the run;
	// DefaultDeletionGracePeriod when zero.
	DeletionGracePeriod time.Duration
	// Followers are the objects showing a run recorded from another object,
	// woken with it by the InboxWatcher (its Followers()); optional: without
	// it such objects follow the run at the resync period.
	Followers *Followers

	// RunningStatusDelay is how long a just-started attempt's Running
	// status waits for the run's end; DefaultRunningStatusDelay when zero.
	RunningStatusDelay time.Duration

	// recorded holds the runs recorded by a look that left the first
	// status to a later one.
	recorded recordedRuns
	// held holds the attempts whose Running status a look left to a
	// later one (briefRunning).
	held heldAttempts
	// written holds the versions this manager's writes replaced, until
	// the cache shows the writes.
	written writtenObjects
}

// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowruns,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowruns/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile brings one WorkflowRun and its inbox row together.
func (r *WorkflowRunReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return inboxPass(ctx, r.Inboxes, r.Inbox, r.Client, r.Recorder, req, conditionedRun{&workflowv1alpha1.WorkflowRun{}},
		func(ctx context.Context, inbox Inbox, name string) (ctrl.Result, error) {
			return (&runPass{WorkflowRunReconciler: r, Inbox: inbox, inboxName: name}).reconcileRequest(ctx, req)
		})
}

func (r *runPass) reconcileRequest(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	var wfr workflowv1alpha1.WorkflowRun
	if err := r.Get(ctx, req.NamespacedName, &wfr); err != nil {
		if apierrors.IsNotFound(err) {
			r.Followers.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.written.stale(wfr.UID, wfr.ResourceVersion, r.now()) {
		// The cache has not shown this manager's own last write yet: a
		// patch made from it would be refused with a conflict.
		return ctrl.Result{RequeueAfter: staleCacheWait, Priority: ptr.To(inboxChangePriority)}, nil
	}
	if !wfr.DeletionTimestamp.IsZero() {
		res, err := r.finalize(ctx, &wfr)
		if apierrors.IsConflict(err) {
			log.V(1).Info("Conflict removing the finalizer; requeueing", "workflowrun", req.NamespacedName)
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return res, err
	}
	if !controllerutil.ContainsFinalizer(&wfr, Finalizer) {
		// The merge patch writes the whole list of finalizers: with the
		// resourceVersion, it cannot undo a change made meanwhile.
		patch := client.MergeFromWithOptions(wfr.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&wfr, Finalizer)
		replaced := wfr.ResourceVersion
		if err := r.Patch(ctx, &wfr, patch); err != nil {
			if apierrors.IsConflict(err) {
				log.V(1).Info("Conflict adding the finalizer; requeueing", "workflowrun", req.NamespacedName)
				return ctrl.Result{RequeueAfter: conflictRetry}, nil
			}
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
		r.written.remember(wfr.UID, replaced, r.now())
	}
	result, err := r.reconcile(ctx, &wfr)
	if err != nil {
		if apierrors.IsConflict(err) {
			log.V(1).Info("Conflict writing WorkflowRun status; requeueing", "workflowrun", req.NamespacedName)
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, err
	}
	return result, nil
}

// reconcile is the list of steps for a live object.
func (r *runPass) reconcile(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun) (ctrl.Result, error) {
	before := wfr.DeepCopy()
	runID, known, outcome, err := r.ensureMirrored(ctx, before, wfr)
	if err == nil && outcome == awaitingRegistration {
		return ctrl.Result{RequeueAfter: registrationRetryPeriod}, nil
	}
	if err != nil || outcome == leftAlone {
		if err == nil && wfr.Status.Phase.Finished() {
			return r.expireWithoutRun(ctx, wfr)
		}
		return ctrl.Result{}, err
	}
	signalsToSend := int(wfr.Status.SignalsSent) < len(wfr.Spec.Signals)
	rejected, err := r.sendSignals(ctx, wfr, runID)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The run as ensureMirrored read it a moment ago, unless this look
	// recorded it or sent it signals (which may have woken it).
	justRecorded := known == nil
	if known == nil || signalsToSend {
		run, err := r.Inbox.GetRun(ctx, runID)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("read run %s: %w", runID, err)
		}
		known = &run
	}
	run := *known
	if run, err = r.cancelOnSpec(ctx, wfr, run); err != nil {
		return ctrl.Result{}, err
	}
	if run, err = r.retryOnSpec(ctx, wfr, run); err != nil {
		return ctrl.Result{}, err
	}
	r.trackFollower(wfr, run)
	if justRecorded && quietStart(wfr, run) {
		// Most runs start within moments: their first status is then
		// Running or finished, one write instead of two. A run still
		// waiting after acceptedStatusDelay is shown Pending then.
		r.recorded.remember(wfr.UID, run.ID)
		// Ahead of new objects, like the inbox's announcements: the
		// status is due.
		return ctrl.Result{RequeueAfter: acceptedStatusDelay, Priority: ptr.To(inboxChangePriority)}, nil
	}
	// A look that sent signals or changed anything else in the status so
	// far writes it now; otherwise a just-started attempt waits a moment.
	// (The run id found or recorded by this look is written with the
	// status the next look writes; recorded remembers it meanwhile.)
	sofar := wfr.Status
	sofar.RunID = before.Status.RunID
	if !signalsToSend && len(rejected) == 0 && briefRunning(before, run) &&
		equality.Semantic.DeepEqual(before.Status, sofar) {
		left, held := r.held.hold(wfr.UID, run.Attempt, r.now(), cmp.Or(r.RunningStatusDelay, DefaultRunningStatusDelay))
		if held {
			if wfr.Status.RunID != before.Status.RunID {
				r.recorded.remember(wfr.UID, run.ID)
			}
			return ctrl.Result{RequeueAfter: left, Priority: ptr.To(inboxChangePriority)}, nil
		}
	}
	entry, err := r.registryEntry(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	blockedBy := disabledBy(run, entry)
	unserved, err := r.unserved(ctx, run, entry, wfr.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	sum, children, err := r.progress(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	steps, err := r.dagSteps(ctx, wfr, run, sum)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.applyStatus(wfr, run, blockedBy)
	applyProgress(wfr, sum, children)
	applyDAG(wfr, run, steps)
	evs, err := r.newAuditEvents(ctx, wfr, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	applyCancelled(wfr, run, evs)
	applyUnserved(wfr, unserved)
	cancelIgnored := applyCancelRequest(wfr, run)
	if err := r.writeStatus(ctx, before, wfr, run); err != nil {
		return ctrl.Result{}, err
	}
	r.recorded.forget(wfr.UID)
	r.held.forget(wfr.UID)
	// The steps' Events go between the run's own: after it started, before
	// it ended.
	ongoing, final := splitFinal(worthTelling(evs))
	r.emitEvents(wfr, ongoing)
	r.emitStepEvents(wfr, stepEvents(before.Status.DAGSteps, wfr.Status.DAGSteps))
	r.emitEvents(wfr, final)
	r.emitSignalRejections(wfr, rejected)
	r.emitCancelIgnored(wfr, cancelIgnored)
	return r.afterStatus(ctx, wfr, run)
}

// progress reads the run's journal summary and, when it has any, its first
// children.
func (r *runPass) progress(ctx context.Context, run engine.Run) (engine.StepSummary, []engine.ChildRun, error) {
	sum, err := r.Inbox.SummarizeSteps(ctx, run.ID)
	if err != nil {
		return engine.StepSummary{}, nil, fmt.Errorf("read journal of run %s: %w", run.ID, err)
	}
	if sum.Children == 0 {
		return sum, nil, nil
	}
	children, err := r.Inbox.ListChildren(ctx, run.ID, MaxChildrenInStatus)
	if err != nil {
		return engine.StepSummary{}, nil, fmt.Errorf("read children of run %s: %w", run.ID, err)
	}
	return sum, children, nil
}

// registryEntry returns the registry entry of the run's type while the run
// waits for a worker, or nil (no entry, or the run is not waiting for one).
func (r *runPass) registryEntry(ctx context.Context, run engine.Run) (*engine.RegistryEntry, error) {
	if run.Status != engine.StatusPending || isDAGRun(run) {
		// A DAG run is run by the database, never claimed: its type needs
		// no worker, and disabling it does not hold it.
		return nil, nil
	}
	entry, err := r.Inbox.GetRegistryEntry(ctx, run.TypeNamespace, run.Type)
	if errors.Is(err, engine.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read registry entry %s: %w", run.Type, err)
	}
	return &entry, nil
}

// disabledBy returns the registry entry that disables the run's type while
// the run waits, or nil.
func disabledBy(run engine.Run, entry *engine.RegistryEntry) *engine.RegistryEntry {
	if entry == nil || entry.Enabled || run.Status != engine.StatusPending {
		return nil
	}
	return entry
}

func (r *WorkflowRunReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock.Now()
	}
	return time.Now()
}

// afterStatus deletes finished objects whose TTL passed and schedules the
// next look at the object.
func (r *runPass) afterStatus(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun, run engine.Run) (ctrl.Result, error) {
	if !wfr.Status.Phase.Finished() {
		resync := r.ResyncPeriod
		if resync == 0 {
			resync = DefaultResyncPeriod
		}
		if len(wfr.Status.DAGSteps) > 0 {
			resync = min(resync, cmp.Or(r.DAGResyncPeriod, DefaultDAGResyncPeriod))
		}
		// Look again when a retry may start, or when a wait ends by time (the
		// run is then runnable, no longer waiting).
		for _, at := range []*metav1.Time{wfr.Status.NextAttemptAt, waitUntil(wfr)} {
			if at == nil {
				continue
			}
			if d := at.Sub(r.now()); d > 0 && d < resync {
				resync = d + time.Second
			}
		}
		return ctrl.Result{RequeueAfter: resync}, nil
	}
	// The inbox's finish time, not the status's (which is whole seconds).
	return r.expire(ctx, wfr, run.FinishedAt)
}

// expireWithoutRun applies the TTL of a finished object whose run is no
// longer in the inbox, from the finish time in its status.
func (r *runPass) expireWithoutRun(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun) (ctrl.Result, error) {
	if wfr.Status.FinishedAt == nil {
		return ctrl.Result{}, nil
	}
	at := wfr.Status.FinishedAt.Time
	return r.expire(ctx, wfr, &at)
}

// expire deletes a finished object once its TTL after finishedAt passed.
func (r *runPass) expire(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun, finishedAt *time.Time) (ctrl.Result, error) {
	ttl := wfr.Spec.TTLSecondsAfterFinished
	if ttl == nil || finishedAt == nil {
		return ctrl.Result{}, nil
	}
	expire := finishedAt.Add(time.Duration(*ttl) * time.Second)
	if wait := expire.Sub(r.now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	logf.FromContext(ctx).Info("Deleting finished WorkflowRun after its TTL", "workflowrun", client.ObjectKeyFromObject(wfr))
	if err := r.Delete(ctx, wfr, client.Preconditions{UID: &wfr.UID}); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("delete after TTL: %w", err)
	}
	return ctrl.Result{}, nil
}

func waitUntil(wfr *workflowv1alpha1.WorkflowRun) *metav1.Time {
	if wfr.Status.WaitingFor == nil {
		return nil
	}
	return wfr.Status.WaitingFor.Until
}

// SetupWithManager registers the controller; inbox notifications arrive
// through r.Changes.
func (r *WorkflowRunReconciler) SetupWithManager(mgr ctrl.Manager) error {
	workers := r.MaxConcurrentReconciles
	if workers == 0 {
		workers = 8
	}
	b := ctrl.NewControllerManagedBy(mgr).
		// Status writes do not bump the generation: only spec changes,
		// creation and deletion wake the reconciler from the API side.
		For(&workflowv1alpha1.WorkflowRun{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Named("workflowrun")
	if r.Changes != nil {
		b = b.WatchesRawSource(source.Channel(r.Changes, inboxChangeHandler()))
	}
	return b.Complete(r)
}
