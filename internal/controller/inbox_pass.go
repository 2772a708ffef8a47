package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// runPass is one reconcile of a WorkflowRun, bound to the inbox of its
// namespace: its Inbox field is the one every step uses.
type runPass struct {
	*WorkflowRunReconciler
	Inbox Inbox
	// inboxName names Inbox.
	inboxName string
}

// registryPass is one reconcile of a WorkflowRegistry, bound to the inbox
// of its namespace.
type registryPass struct {
	*WorkflowRegistryReconciler
	Inbox Inbox
	// inboxName names Inbox (status.inbox).
	inboxName string
}

// schedulePass is one reconcile of a WorkflowSchedule, bound to the inbox
// of its namespace.
type schedulePass struct {
	*WorkflowScheduleReconciler
	Inbox ScheduleInbox
}

// inboxUnavailableRetry is how soon an object whose inbox cannot be used is
// looked at again (the inbox's recovery wakes it sooner).
const inboxUnavailableRetry = 5 * time.Second

// conditioned is an object with status conditions.
type conditioned interface {
	// object is the API object itself (a kind of the scheme).
	object() client.Object
	conditions() *[]metav1.Condition
	finished() bool
}

// reconcilePassTimeout bounds one reconcile of an object when the manager
// serves several inboxes: a database that hangs holds a worker of the
// controller this long at most, not forever.
const reconcilePassTimeout = 15 * time.Second

// downPassTimeout bounds the pass over an object being deleted while its
// inbox does not answer: its calls fail fast and its finalizer's grace
// period applies.
const downPassTimeout = 2 * time.Second

// passTimeout is how long a pass over an object of inbox name may take.
func passTimeout(set *InboxSet, name string) time.Duration {
	if up, _ := set.Up(name); !up {
		return downPassTimeout
	}
	return reconcilePassTimeout
}

// inboxPass runs one reconcile's pass in the inbox of req's namespace, or
// in single when set is nil (one inbox: no routing, no bound). It routes
// and enters the namespace (marking the object when its inbox cannot be
// used), bounds the pass, and marks the object when the pass failed while
// its inbox does not answer.
func inboxPass(ctx context.Context, set *InboxSet, single Inbox, c client.Client, rec recorder.EventRecorder,
	req ctrl.Request, obj conditioned, pass func(ctx context.Context, inbox Inbox, name string) (ctrl.Result, error)) (ctrl.Result, error) {
	if set == nil {
		res, err := pass(ctx, single, defaultInbox)
		return endOnShutdown(ctx, res, err)
	}
	inbox, name, release, ok, res, err := routeOrMark(ctx, set, c, rec, req, obj)
	if !ok {
		return endOnShutdown(ctx, res, err)
	}
	defer release()
	pctx, cancel := context.WithTimeout(ctx, passTimeout(set, name))
	defer cancel()
	res, err = pass(pctx, inbox, name)
	markDown(ctx, set, c, rec, req, obj, err)
	return endOnShutdown(ctx, res, err)
}

// routeOrMark finds the inbox of req's namespace and enters it (release
// ends the pass). When it cannot be used, or its database does not answer
// (an object being deleted still goes ahead: its finalizer's grace period
// applies), it marks the object (condition InboxAvailable False, an Event)
// and returns ok false with the result to return.
func routeOrMark(ctx context.Context, set *InboxSet, c client.Client, rec recorder.EventRecorder,
	req ctrl.Request, obj conditioned) (inbox Inbox, name string, release func(), ok bool, res ctrl.Result, err error) {
	inbox, name, release, err = set.Enter(ctx, req.Namespace)
	if err == nil {
		if up, _ := set.Up(name); up || deleting(ctx, c, req, obj) {
			return inbox, name, release, true, ctrl.Result{}, nil
		}
		release()
		err = &InboxUnavailableError{Inbox: name, Namespace: req.Namespace, Reason: workflowv1alpha1.ReasonInboxUnavailable,
			Err: fmt.Errorf("its database does not answer (the WorkflowInbox's Ready condition says more)")}
	}
	u, isU := asInboxUnavailable(err)
	if !isU {
		return nil, "", nil, false, ctrl.Result{}, fmt.Errorf("find the inbox of namespace %s: %w", req.Namespace, err)
	}
	if u.Brief {
		return nil, "", nil, false, ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if err := markInbox(ctx, c, rec, req, obj, u.Reason, u.Error()); err != nil {
		return nil, "", nil, false, ctrl.Result{}, err
	}
	return nil, "", nil, false, ctrl.Result{RequeueAfter: inboxUnavailableRetry}, nil
}

// deleting reports whether the object is being deleted (false when it
// cannot be read).
func deleting(ctx context.Context, c client.Client, req ctrl.Request, obj conditioned) bool {
	o := obj.object()
	if err := c.Get(ctx, req.NamespacedName, o); err != nil {
		return false
	}
	return !o.GetDeletionTimestamp().IsZero()
}

// markDown marks the object when its reconcile failed while its inbox's
// database does not answer.
func markDown(ctx context.Context, set *InboxSet, c client.Client, rec recorder.EventRecorder,
	req ctrl.Request, obj conditioned, reconcileErr error) {
	if reconcileErr == nil || set == nil {
		return
	}
	_, name, err := set.For(ctx, req.Namespace)
	if err != nil {
		return
	}
	if up, _ := set.Up(name); !up {
		// A fresh context: the pass's may be what ran out.
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		msg := fmt.Sprintf("inbox %s of namespace %s does not answer (the WorkflowInbox's Ready condition says more)", name, req.Namespace)
		if err := markInbox(mctx, c, rec, req, obj, workflowv1alpha1.ReasonInboxUnavailable, msg); err != nil {
			logf.FromContext(ctx).Error(err, "Marking an object whose inbox does not answer failed")
		}
	}
}

// markInbox sets condition InboxAvailable False on an unfinished object
// that does not have it yet, with an Event.
func markInbox(ctx context.Context, c client.Client, rec recorder.EventRecorder, req ctrl.Request,
	obj conditioned, reason, msg string) error {
	o := obj.object()
	if err := c.Get(ctx, req.NamespacedName, o); err != nil {
		return client.IgnoreNotFound(err)
	}
	if obj.finished() || !o.GetDeletionTimestamp().IsZero() {
		return nil
	}
	conds := obj.conditions()
	if cur := meta.FindStatusCondition(*conds, workflowv1alpha1.ConditionInboxAvailable); cur != nil &&
		cur.Status == metav1.ConditionFalse && cur.Reason == reason {
		return nil
	}
	before := o.DeepCopyObject().(client.Object)
	meta.SetStatusCondition(conds, metav1.Condition{Type: workflowv1alpha1.ConditionInboxAvailable,
		Status: metav1.ConditionFalse, Reason: reason, Message: truncate(msg, 1024), ObservedGeneration: o.GetGeneration()})
	// No optimistic lock: the patch names only the conditions, which only
	// this object's reconcile (the caller) writes; a cache a moment behind
	// must not keep the mark from landing.
	if err := c.Status().Patch(ctx, o, client.MergeFrom(before)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("write condition %s: %w", workflowv1alpha1.ConditionInboxAvailable, err)
	}
	if rec != nil {
		rec.Eventf(o, nil, corev1.EventTypeWarning, reason, "Route", "%s", truncate(msg, 1024))
	}
	return nil
}

// inboxAvailableAgain turns a False InboxAvailable condition True; a
// reconcile that reached its inbox calls it before writing status.
func inboxAvailableAgain(conds *[]metav1.Condition, generation int64) {
	if cur := meta.FindStatusCondition(*conds, workflowv1alpha1.ConditionInboxAvailable); cur != nil && cur.Status == metav1.ConditionFalse {
		meta.SetStatusCondition(conds, metav1.Condition{Type: workflowv1alpha1.ConditionInboxAvailable,
			Status: metav1.ConditionTrue, Reason: workflowv1alpha1.ReasonInboxAvailable,
			Message: "the inbox answers again", ObservedGeneration: generation})
	}
}

// conditionedRun, conditionedRegistry and conditionedSchedule adapt the
// kinds to conditioned.
type conditionedRun struct{ *workflowv1alpha1.WorkflowRun }

func (o conditionedRun) object() client.Object           { return o.WorkflowRun }
func (o conditionedRun) conditions() *[]metav1.Condition { return &o.Status.Conditions }
func (o conditionedRun) finished() bool                  { return o.Status.Phase.Finished() }

type conditionedRegistry struct {
	*workflowv1alpha1.WorkflowRegistry
}

func (o conditionedRegistry) object() client.Object           { return o.WorkflowRegistry }
func (o conditionedRegistry) conditions() *[]metav1.Condition { return &o.Status.Conditions }
func (o conditionedRegistry) finished() bool                  { return false }

type conditionedSchedule struct {
	*workflowv1alpha1.WorkflowSchedule
}

func (o conditionedSchedule) object() client.Object           { return o.WorkflowSchedule }
func (o conditionedSchedule) conditions() *[]metav1.Condition { return &o.Status.Conditions }
func (o conditionedSchedule) finished() bool                  { return false }
