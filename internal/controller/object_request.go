package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// reconcileObject is the request handling the registry and schedule
// reconcilers share: read the object (gone: nothing to do), finalize it
// when it is being deleted, otherwise keep the operator's finalizer on it
// and reconcile it; a conflict with a newer version of the object requeues
// the request instead of failing it.
func reconcileObject[T client.Object](ctx context.Context, c client.Client, req ctrl.Request, obj T,
	finalize, reconcile func(context.Context, T) (ctrl.Result, error)) (ctrl.Result, error) {
	if err := c.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return finalize(ctx, obj)
	}
	if err := ensureFinalizer(ctx, c, obj); err != nil {
		return ctrl.Result{}, err
	}
	res, err := reconcile(ctx, obj)
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

// conflictRetry is how long a look whose write was refused with a conflict
// (the object changed since the cache showed it) waits before looking
// again, at the version the cache then shows.
const conflictRetry = 100 * time.Millisecond
