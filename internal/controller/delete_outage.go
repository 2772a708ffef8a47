package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// DefaultDeletionGracePeriod is how long the deletion of a WorkflowRun or
// WorkflowRegistry waits for an unreachable inbox before its finalizer is
// removed anyway.
const DefaultDeletionGracePeriod = 10 * time.Minute

// Bounds of the retry delay of a deletion waiting for the inbox.
const (
	minDeletionRetry = time.Second
	maxDeletionRetry = 30 * time.Second
)

// deletionWait says, for an object being deleted whose inbox call failed,
// whether the grace period is over and, if not, when to try again: the delay
// grows with the time already waited (a quarter of it, between one and 30
// seconds) and never passes the end of the grace period.
func deletionWait(obj client.Object, grace time.Duration, now time.Time) (overdue bool, retry time.Duration) {
	if grace <= 0 {
		grace = DefaultDeletionGracePeriod
	}
	since := obj.GetDeletionTimestamp()
	if since == nil {
		return false, minDeletionRetry
	}
	waited := now.Sub(since.Time)
	left := grace - waited
	if left <= 0 {
		return true, 0
	}
	retry = min(max(waited/4, minDeletionRetry), maxDeletionRetry)
	return false, min(retry, left)
}

// unreachableCondition is the Deleting condition for an inbox error.
func unreachableCondition(generation int64, err error, grace time.Duration) metav1.Condition {
	if grace <= 0 {
		grace = DefaultDeletionGracePeriod
	}
	return metav1.Condition{
		Type: workflowv1alpha1.ConditionDeleting, Status: metav1.ConditionTrue, Reason: workflowv1alpha1.ReasonInboxUnreachable,
		ObservedGeneration: generation,
		Message: fmt.Sprintf("Waiting for the inbox to handle the deletion (retrying; the finalizer is removed anyway %s after the deletion): %v",
			grace, err),
	}
}

// inboxOutage is an inbox error met while deleting an object, and what
// handling it needs.
type inboxOutage struct {
	client   client.Client
	recorder recorder.EventRecorder
	grace    time.Duration
	now      time.Time
	// obj is the object being deleted; conditions is its status's list.
	obj        client.Object
	conditions *[]metav1.Condition
	cause      error
	// without ends the Warning Event of a finalizer removed anyway: "the
	// finalizer was removed without <without>".
	without string
	// removeFinalizer lets the object go.
	removeFinalizer func(context.Context) error
}

// handle handles the outage as every reconciler does: within the grace
// period it records the Deleting condition (and a Warning Event when the
// condition changes) and retries; after it, the finalizer goes anyway,
// with a Warning Event saying what was left undone.
func (o inboxOutage) handle(ctx context.Context, keysAndValues ...any) (ctrl.Result, error) {
	// The pass's context may be what ran out (a database that hangs): the
	// API writes get a context of their own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	log := logf.FromContext(ctx).WithValues(keysAndValues...)
	overdue, retry := deletionWait(o.obj, o.grace, o.now)
	if overdue {
		log.Error(o.cause, "The inbox stayed unreachable for the deletion grace period; removing the finalizer anyway")
		o.recorder.Eventf(o.obj, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonDeletedWithoutInbox, "Delete",
			"The inbox was unreachable for the deletion grace period; the finalizer was removed without %s: %v",
			o.without, o.cause)
		return ctrl.Result{}, o.removeFinalizer(ctx)
	}
	log.Info("The inbox is unreachable; retrying the deletion", "after", retry, "error", o.cause.Error())
	before := o.obj.DeepCopyObject().(client.Object)
	if setCondition(o.conditions, unreachableCondition(o.obj.GetGeneration(), o.cause, o.grace)) {
		o.recorder.Eventf(o.obj, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonInboxUnreachable, "Delete",
			"The inbox is unreachable; the deletion is retried: %v", o.cause)
		if err := o.client.Status().Patch(ctx, o.obj, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("write Deleting condition: %w", err))
		}
	}
	return ctrl.Result{RequeueAfter: retry}, nil
}
