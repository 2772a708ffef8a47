package controller

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// cancelOnSpec cancels the run when spec.cancel asks for it and the run has
// not finished, and returns the run as it is then. The cancelled event
// records the object as the canceller.
func (r *runPass) cancelOnSpec(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun, run engine.Run) (engine.Run, error) {
	if !wfr.Spec.Cancel || run.Status.Finished() {
		return run, nil
	}
	by := fmt.Sprintf("spec.cancel of WorkflowRun %s/%s", wfr.Namespace, wfr.Name)
	if _, err := r.Inbox.CancelRunAs(ctx, run.ID, by); err != nil {
		return run, fmt.Errorf("cancel run %s: %w", run.ID, err)
	}
	now, err := r.Inbox.GetRun(ctx, run.ID)
	if err != nil {
		return run, fmt.Errorf("read run %s: %w", run.ID, err)
	}
	return now, nil
}

// cancelDescription says how a run was cancelled, from its cancelled event.
func cancelDescription(d eventData) string {
	var msg string
	switch d.Reason {
	case "requested":
		msg = "cancelled through workflow.cancel_run (an SDK client's Cancel, say)"
		if d.By != "" {
			msg = "cancelled by " + d.By
		}
	case "plain_sql":
		msg = "cancelled by a plain SQL UPDATE of its inbox row"
		if d.By != "" {
			msg += " (workflow.cancelled_by: " + d.By + ")"
		}
	case "parent_ended":
		msg = "cancelled because its parent run " + d.ParentID + " ended"
		if d.ParentID == "" {
			msg = "cancelled because its parent run ended"
		}
	case "deleted":
		msg = "cancelled because its inbox row was deleted"
	default:
		msg = "cancelled"
	}
	return msg + whereItWas(d)
}

// applyCancelled says on the Finished condition of a cancelled run how it was
// cancelled, from the cancelled event among the events read now (once
// reported, the message stays).
func applyCancelled(wfr *workflowv1alpha1.WorkflowRun, run engine.Run, evs []engine.Event) {
	if run.Status != engine.StatusCancelled {
		return
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type != engine.EventCancelled {
			continue
		}
		var d eventData
		_ = json.Unmarshal(evs[i].Data, &d)
		setCondition(&wfr.Status.Conditions, metav1.Condition{
			Type: workflowv1alpha1.ConditionFinished, Status: metav1.ConditionTrue, Reason: string(workflowv1alpha1.PhaseCancelled),
			Message: cancelDescription(d), ObservedGeneration: wfr.Generation,
		})
		return
	}
}

// applyCancelRequest reports on the CancelRequested condition what
// spec.cancel did: the run is cancelled, or it had finished before and
// nothing was cancelled. It returns true when the latter is new.
func applyCancelRequest(wfr *workflowv1alpha1.WorkflowRun, run engine.Run) bool {
	if !wfr.Spec.Cancel {
		return false
	}
	c := metav1.Condition{
		Type: workflowv1alpha1.ConditionCancelRequested, Status: metav1.ConditionTrue, Reason: workflowv1alpha1.ReasonCancelled,
		Message: "spec.cancel is set; the run is cancelled", ObservedGeneration: wfr.Generation,
	}
	switch run.Status {
	case engine.StatusCancelled:
	case engine.StatusSucceeded, engine.StatusFailed:
		c.Status, c.Reason = metav1.ConditionFalse, workflowv1alpha1.ReasonRunFinished
		c.Message = fmt.Sprintf("nothing was cancelled: spec.cancel was set after the run had already %s", run.Status)
	default:
		c.Status, c.Reason = metav1.ConditionUnknown, workflowv1alpha1.ReasonCancelling
		c.Message = "spec.cancel is set; the run is being cancelled"
	}
	changed := setCondition(&wfr.Status.Conditions, c)
	return changed && c.Status == metav1.ConditionFalse
}

// emitCancelIgnored reports, once the status is written, a spec.cancel that
// came after the run had finished.
func (r *runPass) emitCancelIgnored(wfr *workflowv1alpha1.WorkflowRun, cancelIgnored bool) {
	if c := meta.FindStatusCondition(wfr.Status.Conditions, workflowv1alpha1.ConditionCancelRequested); cancelIgnored && c != nil {
		r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonCancelIgnored, "Cancel", "%s", capitalize(c.Message))
	}
}
