package controller

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// recordedFrom returns the namespace/name of the WorkflowRun the run was
// recorded from when that is another object than wfr (wfr was deduplicated
// onto it through its idempotency key), or "". An object recreated under
// the same name, which adopted its predecessor's run, is the same object
// here: the run's notifications already name it.
func recordedFrom(run engine.Run, wfr *workflowv1alpha1.WorkflowRun) string {
	src := run.Source
	if src == nil || src.Name == "" {
		return ""
	}
	if src.Namespace == wfr.Namespace && (src.UID == string(wfr.UID) || src.Name == wfr.Name) {
		return ""
	}
	return src.Namespace + "/" + src.Name
}

// trackFollower makes an object deduplicated onto another object's run
// follow that run's notifications while it is unfinished.
func (r *runPass) trackFollower(wfr *workflowv1alpha1.WorkflowRun, run engine.Run) {
	key := client.ObjectKeyFromObject(wfr)
	src := recordedFrom(run, wfr)
	if src == "" || engine.Status(run.Status).Finished() {
		r.Followers.Forget(key)
		return
	}
	r.Followers.Follow(src, key)
}

// acceptedMessage says how the object's run came to be: recorded from it,
// or shared with the object that recorded it.
func acceptedMessage(run engine.Run, wfr *workflowv1alpha1.WorkflowRun) (reason, msg string) {
	src := recordedFrom(run, wfr)
	if src == "" {
		return workflowv1alpha1.ReasonMirrored, "recorded in the inbox as run " + run.ID
	}
	return workflowv1alpha1.ReasonDeduplicated, fmt.Sprintf(
		"deduplicated onto run %s (created by WorkflowRun %s): both objects have spec.idempotencyKey %q, the same type and the same payload; this object shows that run and records none of its own",
		run.ID, src, wfr.Spec.IdempotencyKey)
}
