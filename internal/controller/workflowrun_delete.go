package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// finalize cancels the run of a WorkflowRun being deleted if it has not
// finished, then lets the object go. The inbox row and its audit trail stay.
//
// While the inbox is unreachable, the deletion is retried with a growing
// delay, the Deleting condition says why the object stays, and a Warning
// Event is recorded. Once the deletion has waited DeletionGracePeriod the
// finalizer is removed anyway: an unfinished run then stays in the inbox,
// not cancelled, and runs or waits as any run does.
func (r *runPass) finalize(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun) (ctrl.Result, error) {
	r.Followers.Forget(client.ObjectKeyFromObject(wfr))
	r.recorded.forget(wfr.UID)
	r.held.forget(wfr.UID)
	r.written.forget(wfr.UID)
	if !controllerutil.ContainsFinalizer(wfr, Finalizer) {
		return ctrl.Result{}, nil
	}
	// Only a run mirrored from this object is cancelled, whatever
	// status.runID says.
	runID, err := r.ownRun(ctx, wfr)
	if err != nil {
		return r.inboxUnreachable(ctx, wfr, fmt.Errorf("find run of deleted object: %w", err))
	}
	if runID != "" {
		by := fmt.Sprintf("deletion of WorkflowRun %s/%s", wfr.Namespace, wfr.Name)
		cancelled, err := r.Inbox.CancelRunAs(ctx, runID, by)
		if err != nil {
			return r.inboxUnreachable(ctx, wfr, fmt.Errorf("cancel run %s of deleted object: %w", runID, err))
		}
		if cancelled {
			logf.FromContext(ctx).Info("Cancelled the unfinished run of a deleted WorkflowRun",
				"workflowrun", client.ObjectKeyFromObject(wfr), "runID", runID)
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonCancelledOnDelete, "Cancel",
				"Cancelled run %s because the WorkflowRun was deleted before it finished", runID)
		}
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, wfr)
}

// removeFinalizer lets a deleted object go. With the resourceVersion: a
// finalizer another party removed meanwhile is not written back (a conflict
// requeues).
func (r *runPass) removeFinalizer(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun) error {
	patch := client.MergeFromWithOptions(wfr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(wfr, Finalizer)
	if err := r.Patch(ctx, wfr, patch); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("remove finalizer: %w", err))
	}
	return nil
}

// inboxUnreachable handles an inbox error met while deleting (see
// inboxOutage.handle).
func (r *runPass) inboxUnreachable(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun, cause error) (ctrl.Result, error) {
	return inboxOutage{
		client: r.Client, recorder: r.Recorder, grace: r.DeletionGracePeriod, now: r.now(),
		obj: wfr, conditions: &wfr.Status.Conditions, cause: cause,
		without:         fmt.Sprintf("cancelling the run (run %q stays in the inbox, not cancelled, and runs or waits as any run does)", wfr.Status.RunID),
		removeFinalizer: func(ctx context.Context) error { return r.removeFinalizer(ctx, wfr) },
	}.handle(ctx, "workflowrun", client.ObjectKeyFromObject(wfr), "runID", wfr.Status.RunID)
}
