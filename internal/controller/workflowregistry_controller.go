package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// conflictRetryPeriod is how often a registry with conflicting names checks
// whether their owner let them go.
const conflictRetryPeriod = 30 * time.Second

// WorkflowRegistryReconciler mirrors spec.workflows into the inbox's
// workflow_registry table: a runtime, or the steps of a DAG that the
// database validates and runs.
type WorkflowRegistryReconciler struct {
	client.Client
	// Inbox is the only inbox, when Inboxes is nil.
	Inbox Inbox
	// Inboxes, when set, finds the inbox of each object's namespace.
	Inboxes *InboxSet
	// Woken, optional, delivers registries to look at again (their
	// namespace moved to another inbox, or its inbox answers again).
	Woken    <-chan event.GenericEvent
	Recorder recorder.EventRecorder
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// DeletionGracePeriod is how long a deletion waits for an unreachable
	// inbox before the finalizer is removed without unregistering the
	// workflows; DefaultDeletionGracePeriod when zero.
	DeletionGracePeriod time.Duration
}

// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowregistries,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowregistries/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowregistries/finalizers,verbs=update

// Reconcile mirrors one WorkflowRegistry.
func (r *WorkflowRegistryReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return inboxPass(ctx, r.Inboxes, r.Inbox, r.Client, r.Recorder, req, conditionedRegistry{&workflowv1alpha1.WorkflowRegistry{}},
		func(ctx context.Context, inbox Inbox, name string) (ctrl.Result, error) {
			return (&registryPass{WorkflowRegistryReconciler: r, Inbox: inbox, inboxName: name}).reconcileRequest(ctx, req)
		})
}

func (r *registryPass) reconcileRequest(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileObject(ctx, r.Client, req, &workflowv1alpha1.WorkflowRegistry{}, r.finalize, r.reconcile)
}

func (r *registryPass) reconcile(ctx context.Context, reg *workflowv1alpha1.WorkflowRegistry) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	before := reg.DeepCopy()
	owned, err := r.Inbox.ListRegistryEntriesByOwner(ctx, reg.Namespace, reg.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	ownedBefore := map[string]bool{}
	for _, e := range owned {
		ownedBefore[e.WorkflowName] = true
	}
	wanted := map[string]bool{}
	var conflicts, conflictMsgs []string
	var invalid, invalidMsgs, definitionMsgs, newlyInvalid []string
	registered, defined, withSteps := int32(0), int32(0), 0
	for _, wf := range reg.Spec.Workflows {
		wanted[wf.Name] = true
		if len(wf.Steps) > 0 {
			withSteps++
		}
		err := r.Inbox.UpsertRegistryEntry(ctx, registryEntry(reg, wf))
		switch {
		case errors.Is(err, engine.ErrOwnedElsewhere):
			owner := "another owner"
			if e, gerr := r.Inbox.GetRegistryEntry(ctx, reg.Namespace, wf.Name); gerr == nil {
				owner = "WorkflowRegistry " + e.OwnerNamespace + "/" + e.OwnerName
				if e.OwnerName == "" {
					owner = "a row written directly to workflow.workflow_registry"
				}
			}
			conflicts = append(conflicts, wf.Name)
			msg := fmt.Sprintf("workflow %s is already registered by %s; that registration stays in force", wf.Name, owner)
			conflictMsgs = append(conflictMsgs, msg)
			if !slices.Contains(before.Status.ConflictingWorkflows, wf.Name) {
				r.Recorder.Eventf(reg, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonConflict, "Register", "%s", msg)
			}
		case isRefusal(err):
			// The database refused the entry (a cycle in its steps, say):
			// only a change of the spec helps. The other workflows are
			// registered all the same.
			msg := refusalMessage(wf.Name, err, ownedBefore[wf.Name])
			invalid = append(invalid, wf.Name)
			invalidMsgs = append(invalidMsgs, msg)
			if len(wf.Steps) > 0 {
				definitionMsgs = append(definitionMsgs, msg)
			}
			if before.Status.ObservedGeneration != reg.Generation || !slices.Contains(before.Status.InvalidWorkflows, wf.Name) {
				newlyInvalid = append(newlyInvalid, truncate(msg, maxEventNoteBytes/2))
			}
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("register %s: %w", wf.Name, err)
		default:
			registered++
			if len(wf.Steps) > 0 {
				defined++
			}
		}
	}
	if len(newlyInvalid) > 0 {
		// One Event for all: the recorder folds Events of one object with
		// one reason into a series that keeps the first note.
		r.Recorder.Eventf(reg, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonInvalidDefinition, "Register", "%s",
			capitalize(listWithinBytes(newlyInvalid, "; ", maxEventNoteBytes)))
	}
	for _, e := range owned {
		if wanted[e.WorkflowName] {
			continue
		}
		if _, err := r.Inbox.DeleteRegistryEntry(ctx, e.WorkflowName, reg.Namespace, reg.Name); err != nil {
			return ctrl.Result{}, fmt.Errorf("unregister %s: %w", e.WorkflowName, err)
		}
		log.Info("Unregistered workflow removed from the WorkflowRegistry", "workflow", e.WorkflowName,
			"workflowregistry", client.ObjectKeyFromObject(reg))
	}

	reg.Status.ObservedGeneration = reg.Generation
	reg.Status.RegisteredWorkflows = registered
	reg.Status.ConflictingWorkflows = conflicts
	reg.Status.DefinedWorkflows = defined
	reg.Status.InvalidWorkflows = invalid
	reg.Status.WorkerPools = int32(len(reg.Spec.Workers))
	reg.Status.Inbox = r.inboxName
	inboxAvailableAgain(&reg.Status.Conditions, reg.Generation)
	cond := metav1.Condition{Type: workflowv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: workflowv1alpha1.ReasonRegistered,
		Message: fmt.Sprintf("%d workflow(s) registered", registered), ObservedGeneration: reg.Generation}
	switch {
	case len(invalid) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, workflowv1alpha1.ReasonInvalidDefinition
		cond.Message = listWithinBytes(append(invalidMsgs, conflictMsgs...), "; ", maxOwnershipMessageBytes)
	case len(conflicts) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, workflowv1alpha1.ReasonConflict
		cond.Message = listWithinBytes(conflictMsgs, "; ", maxOwnershipMessageBytes)
	}
	setCondition(&reg.Status.Conditions, cond)
	if withSteps > 0 {
		setCondition(&reg.Status.Conditions, definitionsCondition(reg.Generation, int(defined), definitionMsgs))
	} else {
		meta.RemoveStatusCondition(&reg.Status.Conditions, workflowv1alpha1.ConditionDefinitionsValid)
	}
	if !equality.Semantic.DeepEqual(before.Status, reg.Status) {
		if err := r.Status().Patch(ctx, reg, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("write status: %w", err)
		}
		if registered > 0 && before.Status.RegisteredWorkflows != registered {
			r.Recorder.Eventf(reg, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonRegistered, "Register",
				"%d workflow(s) registered", registered)
		}
	}
	if len(conflicts) > 0 || len(invalid) > 0 {
		// A refusal may also depend on other registrations (a step's type
		// that has steps of its own): look again now and then.
		return ctrl.Result{RequeueAfter: conflictRetryPeriod}, nil
	}
	return ctrl.Result{}, nil
}

// finalize removes the entries this object owns, then lets it go.
//
// While the inbox is unreachable, the deletion is retried with a growing
// delay, the Deleting condition says why the object stays, and a Warning
// Event is recorded. Once the deletion has waited DeletionGracePeriod the
// finalizer is removed anyway: the registry rows this object owned stay in
// the inbox.
func (r *registryPass) finalize(ctx context.Context, reg *workflowv1alpha1.WorkflowRegistry) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(reg, Finalizer) {
		return ctrl.Result{}, nil
	}
	owned, err := r.Inbox.ListRegistryEntriesByOwner(ctx, reg.Namespace, reg.Name)
	if err != nil {
		return r.inboxUnreachable(ctx, reg, fmt.Errorf("list registry entries: %w", err))
	}
	for _, e := range owned {
		if _, err := r.Inbox.DeleteRegistryEntry(ctx, e.WorkflowName, reg.Namespace, reg.Name); err != nil {
			return r.inboxUnreachable(ctx, reg, fmt.Errorf("unregister %s: %w", e.WorkflowName, err))
		}
	}
	return ctrl.Result{}, dropFinalizer(ctx, r.Client, reg)
}

func (r *WorkflowRegistryReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock.Now()
	}
	return time.Now()
}

// inboxUnreachable handles an inbox error met while deleting (see
// inboxOutage.handle).
func (r *registryPass) inboxUnreachable(ctx context.Context, reg *workflowv1alpha1.WorkflowRegistry, cause error) (ctrl.Result, error) {
	return inboxOutage{
		client: r.Client, recorder: r.Recorder, grace: r.DeletionGracePeriod, now: r.now(),
		obj: reg, conditions: &reg.Status.Conditions, cause: cause,
		without:         "unregistering the workflows (their registry rows stay in the inbox, owned by this deleted object, until a WorkflowRegistry of the same namespace and name is created again or they are deleted by hand)",
		removeFinalizer: func(ctx context.Context) error { return dropFinalizer(ctx, r.Client, reg) },
	}.handle(ctx, "workflowregistry", client.ObjectKeyFromObject(reg))
}

// SetupWithManager registers the controller.
func (r *WorkflowRegistryReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&workflowv1alpha1.WorkflowRegistry{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A registry that lets names go wakes the ones waiting for them.
		Watches(&workflowv1alpha1.WorkflowRegistry{}, handler.EnqueueRequestsFromMapFunc(r.waitingRegistries),
			builder.WithPredicates(releasePredicate())).
		Named("workflowregistry")
	if r.Woken != nil {
		b = b.WatchesRawSource(source.Channel(r.Woken, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// releasePredicate passes the events after which a registry may have
// released names: its deletion, and a new generation having been mirrored.
func releasePredicate() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*workflowv1alpha1.WorkflowRegistry)
			n, ok2 := e.ObjectNew.(*workflowv1alpha1.WorkflowRegistry)
			return ok1 && ok2 && o.Status.ObservedGeneration != n.Status.ObservedGeneration
		},
	}
}

// waitingRegistries lists the other registries with conflicting names, so
// they retry at once rather than after conflictRetryPeriod.
func (r *WorkflowRegistryReconciler) waitingRegistries(ctx context.Context, obj client.Object) []reconcile.Request {
	var regs workflowv1alpha1.WorkflowRegistryList
	if err := r.List(ctx, &regs); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, reg := range regs.Items {
		if len(reg.Status.ConflictingWorkflows) == 0 ||
			(reg.Namespace == obj.GetNamespace() && reg.Name == obj.GetName()) {
			continue
		}
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&reg)})
	}
	return out
}
