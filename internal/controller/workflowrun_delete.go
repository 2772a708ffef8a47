package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// finalize cancels the run of a WorkflowRun being deleted if it has not
// finished, then lets the object go. The inbox row and its audit trail stay.
func (r *WorkflowRunReconciler) finalize(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun) error {
	if !controllerutil.ContainsFinalizer(wfr, Finalizer) {
		return nil
	}
	// Only a run mirrored from this object is cancelled, whatever
	// status.runID says (Issue 10, item 2).
	runID, err := r.ownRun(ctx, wfr)
	if err != nil {
		return fmt.Errorf("find run of deleted object: %w", err)
	}
	if runID != "" {
		cancelled, err := r.Inbox.CancelRun(ctx, runID)
		if err != nil {
			return fmt.Errorf("cancel run %s of deleted object: %w", runID, err)
		}
		if cancelled {
			logf.FromContext(ctx).Info("Cancelled the unfinished run of a deleted WorkflowRun",
				"workflowrun", client.ObjectKeyFromObject(wfr), "runID", runID)
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, ReasonCancelledOnDelete, "Cancel",
				"Cancelled run %s because the WorkflowRun was deleted before it finished", runID)
		}
	}
	// With the resourceVersion: a finalizer another party removed meanwhile
	// is not written back (a conflict requeues).
	patch := client.MergeFromWithOptions(wfr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(wfr, Finalizer)
	if err := r.Patch(ctx, wfr, patch); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("remove finalizer: %w", err))
	}
	return nil
}
