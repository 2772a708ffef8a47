package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// Finalizer keeps an object until the inbox has been told of its deletion.
const Finalizer = "workflow.simpleworkflow.dev/finalizer"

// ensureFinalizer adds the operator's finalizer to obj when it lacks it,
// with a merge patch of its finalizers.
func ensureFinalizer(ctx context.Context, c client.Client, obj client.Object) error {
	if controllerutil.ContainsFinalizer(obj, Finalizer) {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	controllerutil.AddFinalizer(obj, Finalizer)
	if err := c.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("add finalizer: %w", err)
	}
	return nil
}

// dropFinalizer removes the operator's finalizer from a deleted obj, so the
// API server lets it go; an object already gone is not an error.
func dropFinalizer(ctx context.Context, c client.Client, obj client.Object) error {
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	controllerutil.RemoveFinalizer(obj, Finalizer)
	return client.IgnoreNotFound(c.Patch(ctx, obj, patch))
}
