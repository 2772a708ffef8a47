package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// retryOnSpec retries the run from where it stopped when spec.retries was
// raised past status.retries (admission lets that happen only while the
// run is Failed or Cancelled), counts the raise as handled, and returns the
// run as it is then. The run's 'retried' event records the object as who
// asked. A retry the inbox refuses (the run changed since, say) is a
// Warning Event with the reason, and counts as handled too.
func (r *runPass) retryOnSpec(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun, run engine.Run) (engine.Run, error) {
	if wfr.Spec.Retries <= wfr.Status.Retries {
		return run, nil
	}
	by := fmt.Sprintf("spec.retries of WorkflowRun %s/%s", wfr.Namespace, wfr.Name)
	// A retry this object asked for whose status.retries was never written
	// (the write failed, the manager stopped) is not asked for again.
	done, err := r.retriesAskedBy(ctx, run.ID, by)
	if err != nil {
		return run, err
	}
	if done >= wfr.Spec.Retries {
		wfr.Status.Retries = wfr.Spec.Retries
		return run, nil
	}
	err = r.Inbox.RetryRun(ctx, engine.RetryParams{ID: run.ID, By: by})
	switch {
	case err == nil:
		r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonRetried, "Retry",
			"Retried from where it stopped (spec.retries %d): the run is pending again with fresh attempts", wfr.Spec.Retries)
	case errors.Is(err, engine.ErrInvalid), errors.Is(err, engine.ErrNotFound):
		r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonRetryRefused, "Retry",
			"spec.retries %d was not carried out: %v", wfr.Spec.Retries, err)
	default:
		return run, err
	}
	wfr.Status.Retries = wfr.Spec.Retries
	now, err := r.Inbox.GetRun(ctx, run.ID)
	if err != nil {
		return run, fmt.Errorf("read run %s: %w", run.ID, err)
	}
	return now, nil
}

// retriesAskedBy counts the run's retries from failure that by asked for,
// from its audit trail.
func (r *runPass) retriesAskedBy(ctx context.Context, runID, by string) (int32, error) {
	evs, err := r.Inbox.ListEventsAfter(ctx, runID, 0)
	if err != nil {
		return 0, fmt.Errorf("read events of run %s: %w", runID, err)
	}
	if len(by) > engine.MaxCancelledByBytes { // as the event keeps it
		by = strings.ToValidUTF8(by[:engine.MaxCancelledByBytes], "")
	}
	var n int32
	for _, e := range evs {
		if e.Type != engine.EventRetried {
			continue
		}
		var d struct {
			Reason string `json:"reason"`
			By     string `json:"by"`
		}
		if json.Unmarshal(e.Data, &d) == nil && d.Reason == "retry_run" && d.By == by {
			n++
		}
	}
	return n, nil
}
