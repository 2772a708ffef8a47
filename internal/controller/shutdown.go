package controller

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
)

// endOnShutdown drops the error of a reconcile cut short because the manager
// is stopping (its context is cancelled on SIGTERM and when leadership
// ends): the object is reconciled again by whoever leads next, and a clean
// shutdown logs no "Reconciler error".
func endOnShutdown(ctx context.Context, res ctrl.Result, err error) (ctrl.Result, error) {
	if err != nil && ctx.Err() != nil {
		return ctrl.Result{}, nil
	}
	return res, err
}
