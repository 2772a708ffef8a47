package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// maxEventsPerReconcile bounds the Kubernetes Events emitted at once when a
// run has made many transitions since the last look.
const maxEventsPerReconcile = 20

// eventData is the part of an audit event's data the messages use.
type eventData struct {
	WorkerID  string     `json:"worker_id"`
	Attempt   int        `json:"attempt"`
	Error     string     `json:"error"`
	Reason    string     `json:"reason"`
	NextRunAt *time.Time `json:"next_run_at"`
}

// newAuditEvents reads the run's audit events that were not reported yet and
// advances status.lastEventID past them. The caller reports them with
// emitEvents once the status is written, so that a reconcile that loses a
// status conflict reports nothing twice.
func (r *WorkflowRunReconciler) newAuditEvents(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun, run engine.Run) ([]engine.Event, error) {
	evs, err := r.Inbox.ListEventsAfter(ctx, run.ID, wfr.Status.LastEventID)
	if err != nil {
		return nil, fmt.Errorf("read audit events of run %s: %w", run.ID, err)
	}
	if len(evs) == 0 {
		return nil, nil
	}
	wfr.Status.LastEventID = evs[len(evs)-1].ID
	if len(evs) > maxEventsPerReconcile {
		evs = evs[len(evs)-maxEventsPerReconcile:]
	}
	return evs, nil
}

// emitEvents turns audit events into Kubernetes Events on the object (never
// one per heartbeat).
func (r *WorkflowRunReconciler) emitEvents(wfr *workflowv1alpha1.WorkflowRun, run engine.Run, evs []engine.Event) {
	for _, ev := range evs {
		var d eventData
		_ = json.Unmarshal(ev.Data, &d)
		switch ev.Type {
		case engine.EventCreated:
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, ReasonAccepted, "Mirror",
				"Recorded in the inbox as run %s", run.ID)
		case engine.EventStarted:
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, ReasonStarted, "Start",
				"Started by worker %s, attempt %d", d.WorkerID, d.Attempt)
		case engine.EventRetried:
			switch d.Reason {
			case "released":
				r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, ReasonReleased, "Retry",
					"Worker %s handed the run back while shutting down; the attempt does not count", d.WorkerID)
			case "lease_expired":
				r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, ReasonRetrying, "Retry",
					"Attempt %d lost its lease (worker %s stopped heartbeating); retrying now", d.Attempt, d.WorkerID)
			default:
				next := "soon"
				if d.NextRunAt != nil {
					next = "at " + d.NextRunAt.UTC().Format(time.RFC3339)
				}
				r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, ReasonRetrying, "Retry",
					"Attempt %d failed: %s; next attempt %s", d.Attempt, truncate(d.Error, 512), next)
			}
		case engine.EventSucceeded:
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, ReasonSucceeded, "Finish",
				"Succeeded on attempt %d (worker %s)", d.Attempt, d.WorkerID)
		case engine.EventFailed:
			msg := truncate(d.Error, 512)
			if d.Reason == "lease_expired" {
				msg = "lease expired (worker " + d.WorkerID + " stopped heartbeating)"
			}
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, ReasonFailed, "Finish",
				"Failed for good on attempt %d: %s", d.Attempt, msg)
		case engine.EventCancelled:
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, ReasonCancelled, "Cancel", "Cancelled")
		}
	}
}
