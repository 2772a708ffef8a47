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
)

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
	log := logf.FromContext(ctx).WithValues(keysAndValues...)
	overdue, retry := deletionWait(o.obj, o.grace, o.now)
	if overdue {
		log.Error(o.cause, "The inbox stayed unreachable for the deletion grace period; removing the finalizer anyway")
		o.recorder.Eventf(o.obj, nil, corev1.EventTypeWarning, ReasonDeletedWithoutInbox, "Delete",
			"The inbox was unreachable for the deletion grace period; the finalizer was removed without %s: %v",
			o.without, o.cause)
		return ctrl.Result{}, o.removeFinalizer(ctx)
	}
	log.Info("The inbox is unreachable; retrying the deletion", "after", retry, "error", o.cause.Error())
	before := o.obj.DeepCopyObject().(client.Object)
	if setCondition(o.conditions, unreachableCondition(o.obj.GetGeneration(), o.cause, o.grace)) {
		o.recorder.Eventf(o.obj, nil, corev1.EventTypeWarning, ReasonInboxUnreachable, "Delete",
			"The inbox is unreachable; the deletion is retried: %v", o.cause)
		if err := o.client.Status().Patch(ctx, o.obj, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("write Deleting condition: %w", err))
		}
	}
	return ctrl.Result{RequeueAfter: retry}, nil
}
