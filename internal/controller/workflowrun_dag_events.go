package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// stepEvent is a Kubernetes Event about steps of a DAG run.
type stepEvent struct {
	eventType, reason, note string
}

// stepEventOrder is the order of the step Events of one look at a run, and
// the type of each.
var stepEventOrder = []struct {
	phase     workflowv1alpha1.DAGStepPhase
	reason    string
	eventType string
}{
	{workflowv1alpha1.StepRunning, workflowv1alpha1.ReasonStepStarted, corev1.EventTypeNormal},
	{workflowv1alpha1.StepWaiting, workflowv1alpha1.ReasonStepWaiting, corev1.EventTypeNormal},
	{workflowv1alpha1.StepRetrying, workflowv1alpha1.ReasonStepRetrying, corev1.EventTypeWarning},
	{workflowv1alpha1.StepSucceeded, workflowv1alpha1.ReasonStepSucceeded, corev1.EventTypeNormal},
	{workflowv1alpha1.StepFailed, workflowv1alpha1.ReasonStepFailed, corev1.EventTypeWarning},
	{workflowv1alpha1.StepCancelled, workflowv1alpha1.ReasonStepCancelled, corev1.EventTypeNormal},
	{workflowv1alpha1.StepSkipped, workflowv1alpha1.ReasonStepsSkipped, corev1.EventTypeNormal},
}

// stepEvents derives Events from the change of the steps between two looks
// at a DAG run: steps started (or started again), retrying, parked,
// succeeded, failed, cancelled, or skipped because the workflow ended. A
// change between two looks that both missed (a step started and finished in
// between) shows as its outcome only.
//
// The steps that changed alike make one Event, listing them in definition
// order ("Step b (…) succeeded on attempt 1/3; step c (…) succeeded on
// attempt 2/3"): the recorder folds Events of one object with the same
// reason into a series keeping the first note, so one Event per reason and
// look is what reaches the API server, at most seven in all.
func stepEvents(before, after []workflowv1alpha1.DAGStepStatus) []stepEvent {
	was := make(map[string]workflowv1alpha1.DAGStepPhase, len(before))
	for _, s := range before {
		was[s.Name] = s.Phase
	}
	phrases := map[workflowv1alpha1.DAGStepPhase][]string{}
	var skipped []string
	for _, s := range after {
		prev, ok := was[s.Name]
		if !ok {
			prev = workflowv1alpha1.StepPending
		}
		if s.Phase == prev {
			continue
		}
		step := fmt.Sprintf("step %s (%s)", s.Name, s.Type)
		var p string
		switch s.Phase {
		case workflowv1alpha1.StepRunning:
			p = fmt.Sprintf("%s started: attempt %s, run %s", step, s.Attempts, s.RunID)
		case workflowv1alpha1.StepRetrying:
			p = fmt.Sprintf("%s attempt %s failed, to be retried: %s", step, s.Attempts, orUnknown(s.Error))
		case workflowv1alpha1.StepWaiting:
			p = step + " is parked in a durable wait; no worker holds it"
		case workflowv1alpha1.StepSucceeded:
			p = fmt.Sprintf("%s succeeded on attempt %s", step, s.Attempts)
		case workflowv1alpha1.StepFailed:
			p = fmt.Sprintf("%s failed for good on attempt %s: %s", step, s.Attempts, orUnknown(s.Error))
		case workflowv1alpha1.StepCancelled:
			p = step + " was cancelled"
		case workflowv1alpha1.StepSkipped:
			if s.Error == skippedByCondition {
				p = step + " was " + skippedByCondition
				break
			}
			skipped = append(skipped, s.Name)
			continue
		default:
			continue
		}
		phrases[s.Phase] = append(phrases[s.Phase], p)
	}
	if len(skipped) > 0 {
		phrases[workflowv1alpha1.StepSkipped] = append(phrases[workflowv1alpha1.StepSkipped], fmt.Sprintf(
			"skipped %d step(s) that never started, the workflow having ended: %s",
			len(skipped), listWithinBytes(skipped, ", ", maxEventNoteBytes-100)))
	}
	var out []stepEvent
	for _, o := range stepEventOrder {
		if ps := phrases[o.phase]; len(ps) > 0 {
			for i := range ps {
				ps[i] = truncate(ps[i], maxEventNoteBytes)
			}
			out = append(out, stepEvent{o.eventType, o.reason, capitalize(listWithinBytes(ps, "; ", maxEventNoteBytes))})
		}
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "(no error recorded)"
	}
	return s
}

// emitStepEvents records the Events of the steps on the object.
func (r *runPass) emitStepEvents(wfr *workflowv1alpha1.WorkflowRun, evs []stepEvent) {
	for _, e := range evs {
		r.Recorder.Eventf(wfr, nil, e.eventType, e.reason, "Step", "%s", e.note)
	}
}

// splitFinal separates the audit events that end a run from the others.
func splitFinal(evs []engine.Event) (ongoing, final []engine.Event) {
	for _, ev := range evs {
		switch ev.Type {
		case engine.EventSucceeded, engine.EventFailed, engine.EventCancelled:
			final = append(final, ev)
		default:
			ongoing = append(ongoing, ev)
		}
	}
	return ongoing, final
}
