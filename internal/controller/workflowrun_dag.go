package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// waitKindDAG is the wait kind of a DAG run: parked for the database, which
// runs its steps as child runs; no worker ever claims it.
const waitKindDAG engine.StepKind = "dag"

// DefaultDAGResyncPeriod is how often an unfinished DAG run is re-read. Its
// steps are runs of their own, whose changes are not announced on the
// object's channel (only the DAG run ending is), so progress is polled.
const DefaultDAGResyncPeriod = 5 * time.Second

// isDAGRun reports whether run is an unfinished DAG run.
func isDAGRun(run engine.Run) bool {
	return run.Status == engine.StatusPending && run.Wait != nil && run.Wait.Kind == waitKindDAG
}

// readsDAG reports whether the run's steps are worth reading: it is an
// unfinished DAG run, or was one, or is a finished run with children (a DAG
// run loses its wait kind when it ends; one that ended before the
// controller first saw it is known by its step runs).
func readsDAG(wfr *workflowv1alpha1.WorkflowRun, run engine.Run, sum engine.StepSummary) bool {
	return isDAGRun(run) || len(wfr.Status.DAGSteps) > 0 || (run.Status.Finished() && sum.Children > 0)
}

// dagSteps reads the steps of a DAG run; none for any other run.
func (r *runPass) dagSteps(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun, run engine.Run, sum engine.StepSummary) ([]engine.DAGStep, error) {
	if !readsDAG(wfr, run, sum) {
		return nil, nil
	}
	steps, err := r.Inbox.DAGSteps(ctx, run.ID)
	if err != nil {
		return nil, fmt.Errorf("read steps of run %s: %w", run.ID, err)
	}
	return steps, nil
}

// skippedByCondition is the error of a step its condition skipped.
const skippedByCondition = "skipped: its condition (when) did not hold"

// stepPhase maps the state of a step's run to the step's phase.
func stepPhase(s engine.DAGStep) workflowv1alpha1.DAGStepPhase {
	switch engine.Status(s.Status) {
	case engine.StepSkipped:
		return workflowv1alpha1.StepSkipped
	case "":
		if engine.Status(s.WorkflowStatus).Finished() {
			return workflowv1alpha1.StepSkipped
		}
		return workflowv1alpha1.StepPending
	case engine.StatusPending:
		switch {
		case s.WaitKind != "":
			return workflowv1alpha1.StepWaiting
		case s.Attempt > 0:
			return workflowv1alpha1.StepRetrying
		}
		return workflowv1alpha1.StepPending
	case engine.StatusLeased:
		return workflowv1alpha1.StepRunning
	case engine.StatusSucceeded:
		return workflowv1alpha1.StepSucceeded
	case engine.StatusFailed:
		return workflowv1alpha1.StepFailed
	case engine.StatusCancelled:
		return workflowv1alpha1.StepCancelled
	}
	return workflowv1alpha1.StepPending
}

// applyDAG sets status.dagSteps and status.progress from the steps of a DAG
// run, and says in the Finished condition where the DAG is. A DAG run has no
// attempts of its own (no worker runs it): status.attempts stays empty.
func applyDAG(wfr *workflowv1alpha1.WorkflowRun, run engine.Run, steps []engine.DAGStep) {
	st := &wfr.Status
	if len(steps) == 0 {
		st.DAGSteps, st.Progress = nil, ""
		return
	}
	st.DAGSteps = make([]workflowv1alpha1.DAGStepStatus, 0, min(len(steps), engine.MaxDAGSteps))
	for _, s := range steps[:min(len(steps), engine.MaxDAGSteps)] {
		ds := workflowv1alpha1.DAGStepStatus{
			Name: s.Name, Type: s.Type, Phase: stepPhase(s), RunID: s.RunID,
			StartedAt: timeOrNil(s.StartedAt), FinishedAt: timeOrNil(s.FinishedAt),
			Error: truncate(s.Error, MaxStepErrorBytes),
		}
		if s.Status == engine.StepSkipped {
			ds.Error = skippedByCondition
		}
		if s.Elements != nil && s.ElementsDone != nil {
			ds.Elements = fmt.Sprintf("%d/%d", *s.ElementsDone, *s.Elements)
			ds.Attempts = ""
		}
		if s.RunID != "" {
			ds.Attempts = fmt.Sprintf("%d/%d", s.Attempt, s.MaxAttempts)
		}
		st.DAGSteps = append(st.DAGSteps, ds)
	}
	byPhase := stepsByPhase(st.DAGSteps)
	succeeded := len(byPhase[workflowv1alpha1.StepSucceeded])
	st.Progress = fmt.Sprintf("%d/%d", succeeded, len(st.DAGSteps))
	st.Attempt, st.Attempts = 0, ""

	cond := metav1.Condition{Type: workflowv1alpha1.ConditionFinished, Status: metav1.ConditionFalse, Reason: workflowv1alpha1.ReasonRunning,
		ObservedGeneration: wfr.Generation}
	switch st.Phase {
	case workflowv1alpha1.PhaseSucceeded:
		cond.Status, cond.Reason = metav1.ConditionTrue, workflowv1alpha1.ReasonSucceeded
		cond.Message = fmt.Sprintf("all %d steps succeeded", len(st.DAGSteps))
		if skipped := byPhase[workflowv1alpha1.StepSkipped]; len(skipped) > 0 {
			cond.Message = fmt.Sprintf("%d of %d steps succeeded; skipped by their conditions: %s",
				succeeded, len(st.DAGSteps), strings.Join(skipped, ", "))
		}
	case workflowv1alpha1.PhaseFailed, workflowv1alpha1.PhaseCancelled:
		cond.Status, cond.Reason = metav1.ConditionTrue, string(st.Phase)
		cond.Message = fmt.Sprintf("%s after %d of %d steps succeeded", strings.ToLower(string(st.Phase)),
			succeeded, len(st.DAGSteps))
		if st.Phase == workflowv1alpha1.PhaseFailed && st.LastError != "" {
			cond.Message += ": " + st.LastError
		}
	default:
		cond.Message = fmt.Sprintf("%d of %d steps succeeded", succeeded, len(st.DAGSteps)) +
			describeSteps(byPhase, workflowv1alpha1.StepRunning, workflowv1alpha1.StepRetrying,
				workflowv1alpha1.StepWaiting, workflowv1alpha1.StepPending)
	}
	setCondition(&st.Conditions, cond)
}

// stepsByPhase lists the step names of each phase, in definition order.
func stepsByPhase(steps []workflowv1alpha1.DAGStepStatus) map[workflowv1alpha1.DAGStepPhase][]string {
	out := map[workflowv1alpha1.DAGStepPhase][]string{}
	for _, s := range steps {
		out[s.Phase] = append(out[s.Phase], s.Name)
	}
	return out
}

// describeSteps says which steps are in each of phases, such as "; running:
// b, c; pending: d".
func describeSteps(byPhase map[workflowv1alpha1.DAGStepPhase][]string, phases ...workflowv1alpha1.DAGStepPhase) string {
	var b strings.Builder
	for _, p := range phases {
		if names := byPhase[p]; len(names) > 0 {
			fmt.Fprintf(&b, "; %s: %s", strings.ToLower(string(p)), listWithinBytes(names, ", ", 512))
		}
	}
	return b.String()
}
