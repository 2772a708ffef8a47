package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
	// waiting, woken and signal_received
	WaitKind       engine.StepKind `json:"wait_kind"`
	Step           string          `json:"step"`
	Signal         string          `json:"signal"`
	Until          *time.Time      `json:"until"`
	ChildID        string          `json:"child_id"`
	ChildStatus    string          `json:"child_status"`
	IdempotencyKey string          `json:"idempotency_key"`
	// failed by a deadline
	DeadlineAt     *time.Time      `json:"deadline_at"`
	PreviousStatus engine.Status   `json:"previous_status"`
	Parked         engine.StepKind `json:"parked"`
	// cancelled: who asked (a label), and the parent whose end cancelled it
	By       string `json:"by"`
	ParentID string `json:"parent_id"`
	// a DAG run: parked for the database (waiting, kind dag), ended by it
	Kind  engine.StepKind `json:"kind"`
	Steps int             `json:"steps"`
}

// dagEnded reports whether a final audit event was written by the database
// ending a DAG run (no worker involved).
func dagEnded(d eventData) bool {
	switch d.Reason {
	case "step_failed", "result_too_large", "payload_too_large":
		return true
	}
	return d.Steps > 0 && d.WorkerID == ""
}

// newAuditEvents reads the run's audit events that were not reported yet and
// advances status.lastEventID past them. The caller reports them with
// emitEvents once the status is written, so that a reconcile that loses a
// status conflict reports nothing twice.
func (r *runPass) newAuditEvents(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun, run engine.Run) ([]engine.Event, error) {
	evs, err := r.Inbox.ListEventsAfter(ctx, run.ID, wfr.Status.LastEventID)
	if err != nil {
		return nil, fmt.Errorf("read audit events of run %s: %w", run.ID, err)
	}
	if len(evs) == 0 {
		return nil, nil
	}
	if !run.Status.Finished() && slices.ContainsFunc(evs, isFinalEvent) {
		// The run ended after it was read: its events wait for the next
		// look (its end is announced), which reads both together, so the
		// status can say how it ended.
		return nil, nil
	}
	wfr.Status.LastEventID = evs[len(evs)-1].ID
	if len(evs) > maxEventsPerReconcile {
		evs = evs[len(evs)-maxEventsPerReconcile:]
	}
	return evs, nil
}

// worthTelling returns the audit events that become Kubernetes Events: not
// the run's acceptance (its Accepted condition and status.runID say it), and
// a start only when it is the latest event a look finds (the run is running
// now); an attempt that already ended, failed or parked is told by that
// event, which names the attempt and its worker. So a run that starts and
// ends between two looks costs one Event, not three.
func worthTelling(evs []engine.Event) []engine.Event {
	latest := -1 // the latest event that is not a heartbeat
	for i, ev := range evs {
		if ev.Type != engine.EventHeartbeat {
			latest = i
		}
	}
	out := make([]engine.Event, 0, len(evs))
	for i, ev := range evs {
		switch ev.Type {
		case engine.EventCreated, engine.EventLeased, engine.EventHeartbeat:
			continue
		case engine.EventStarted:
			if i != latest {
				continue
			}
		}
		out = append(out, ev)
	}
	return out
}

// isFinalEvent reports whether ev ended its run.
func isFinalEvent(ev engine.Event) bool {
	switch ev.Type {
	case engine.EventSucceeded, engine.EventFailed, engine.EventCancelled:
		return true
	}
	return false
}

// emitEvents turns audit events into Kubernetes Events on the object (never
// one per heartbeat).
func (r *runPass) emitEvents(wfr *workflowv1alpha1.WorkflowRun, evs []engine.Event) {
	for _, ev := range evs {
		var d eventData
		_ = json.Unmarshal(ev.Data, &d)
		switch ev.Type {
		case engine.EventStarted:
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonStarted, "Start",
				"Started by worker %s, attempt %d", d.WorkerID, d.Attempt)
		case engine.EventRetried:
			switch d.Reason {
			case "released":
				r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonReleased, "Retry",
					"Worker %s handed the run back while shutting down; the attempt does not count", d.WorkerID)
			case "lease_expired":
				r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonRetrying, "Retry",
					"Attempt %d lost its lease (worker %s stopped heartbeating); retrying now", d.Attempt, d.WorkerID)
			default:
				next := "soon"
				if d.NextRunAt != nil {
					next = "at " + d.NextRunAt.UTC().Format(time.RFC3339)
				}
				r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonRetrying, "Retry",
					"Attempt %d failed: %s; next attempt %s", d.Attempt, truncate(d.Error, 512), next)
			}
		case engine.EventSucceeded:
			if dagEnded(d) {
				r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonSucceeded, "Finish",
					"Succeeded: all %d steps succeeded", d.Steps)
				break
			}
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonSucceeded, "Finish",
				"Succeeded on attempt %d (worker %s)", d.Attempt, d.WorkerID)
		case engine.EventFailed:
			if d.Reason == "deadline_exceeded" {
				r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonFailed, "Finish",
					"Failed for good: %s", deadlineMessage(d))
				break
			}
			if dagEnded(d) {
				r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonFailed, "Finish",
					"Failed for good: %s", truncate(d.Error, 512))
				break
			}
			msg := truncate(d.Error, 512)
			if d.Reason == "lease_expired" {
				msg = "lease expired (worker " + d.WorkerID + " stopped heartbeating)"
			}
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonFailed, "Finish",
				"Failed for good on attempt %d: %s", d.Attempt, msg)
		case engine.EventCancelled:
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonCancelled, "Cancel", "%s", capitalize(cancelDescription(d)))
		case engine.EventWaiting:
			if d.Kind == waitKindDAG {
				r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonStarted, "Start",
					"Started: the database runs its %d steps, each as a run of the step's type, once the steps it depends on succeeded", d.Steps)
				break
			}
			w := &engine.Wait{Kind: d.WaitKind, Step: d.Step, Signal: d.Signal, Until: d.Until}
			msg := capitalize(describeWait(w))
			if d.WaitKind == engine.StepKindChild && d.ChildID != "" {
				msg = fmt.Sprintf("Waiting for child run %s of step %s", d.ChildID, d.Step)
			}
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonWaiting, "Wait",
				"%s; the worker slot is free", msg)
		case engine.EventWoken:
			var msg string
			switch d.Reason {
			case "timer":
				msg = "the sleep at step " + d.Step + " ended"
			case "timeout":
				msg = "the wait at step " + d.Step + " timed out"
			case "signal":
				msg = "signal " + d.Signal + " arrived for step " + d.Step
			case "child_finished":
				msg = fmt.Sprintf("child run %s of step %s ended %s", d.ChildID, d.Step, d.ChildStatus)
			default:
				msg = "the wait at step " + d.Step + " ended (" + d.Reason + ")"
			}
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonWoken, "Wake", "Woken: %s", msg)
		case engine.EventSignalReceived:
			from := ""
			if i := signalIndex(wfr, d.IdempotencyKey); i >= 0 {
				from = fmt.Sprintf(" (spec.signals[%d])", i)
			}
			r.Recorder.Eventf(wfr, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonSignalReceived, "Signal",
				"Received signal %s%s", d.Signal, from)
		}
	}
}

// deadlineMessage says when a run's deadline passed and where the run was.
func deadlineMessage(d eventData) string {
	msg := "deadline exceeded"
	if d.DeadlineAt != nil {
		msg += " at " + d.DeadlineAt.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	return msg + whereItWas(d)
}

// whereItWas says where a run was when an event ended it (" while …"), or
// "" when the event does not say.
func whereItWas(d eventData) string {
	switch {
	case d.Parked == waitKindDAG:
		return " while its steps ran"
	case d.Parked != "":
		return " while waiting (" + string(d.Parked) + ")"
	case d.PreviousStatus == engine.StatusLeased:
		return fmt.Sprintf(" while attempt %d ran on worker %s", d.Attempt, d.WorkerID)
	case d.PreviousStatus == engine.StatusPending:
		return " while waiting for a worker"
	}
	return ""
}
