package controller

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// phaseOf maps an inbox status to a WorkflowRun phase.
func phaseOf(s engine.Status) workflowv1alpha1.WorkflowRunPhase {
	switch s {
	case engine.StatusLeased:
		return workflowv1alpha1.PhaseRunning
	case engine.StatusSucceeded:
		return workflowv1alpha1.PhaseSucceeded
	case engine.StatusFailed:
		return workflowv1alpha1.PhaseFailed
	case engine.StatusCancelled:
		return workflowv1alpha1.PhaseCancelled
	default:
		return workflowv1alpha1.PhasePending
	}
}

func timeOrNil(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	mt := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &mt
}

// truncate shortens s to at most n bytes, marking the cut, which falls on
// a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "… (truncated)"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// applyStatus sets wfr.Status from the run's row.
func (r *runPass) applyStatus(wfr *workflowv1alpha1.WorkflowRun, run engine.Run, blockedBy *engine.RegistryEntry) {
	st := &wfr.Status
	gen := wfr.Generation
	inboxAvailableAgain(&st.Conditions, gen)
	st.RunID = run.ID
	st.Phase = phaseOf(run.Status)
	st.WaitingFor = nil
	wait := r.parkedOn(run)
	if wait != nil && wait.Kind == waitKindDAG {
		// Parked for the database, which runs its steps (applyDAG says
		// where they are): the run is running, though no worker holds it.
		st.Phase = workflowv1alpha1.PhaseRunning
		wait = nil
	}
	if wait != nil {
		st.Phase = workflowv1alpha1.PhaseWaiting
		st.WaitingFor = &workflowv1alpha1.WaitingFor{
			Kind: string(wait.Kind), Step: wait.Step, Signal: wait.Signal, Until: timeOrNil(wait.Until),
		}
	}
	st.DeadlineAt = timeOrNil(run.DeadlineAt)
	st.Attempt = int32(run.Attempt)
	st.Attempts = fmt.Sprintf("%d/%d", run.Attempt, run.MaxAttempts)
	st.LeasedBy = run.LeasedBy
	st.StartedAt = timeOrNil(run.StartedAt)
	st.FinishedAt = timeOrNil(run.FinishedAt)
	st.NextAttemptAt = nil
	if run.Status == engine.StatusPending && run.Wait == nil && run.RunAt.After(r.now()) {
		st.NextAttemptAt = timeOrNil(&run.RunAt)
	}
	retrying := run.Status == engine.StatusPending && run.Wait == nil && run.Attempt > 0 && run.LastError != ""
	if retrying {
		st.Phase = workflowv1alpha1.PhaseRetrying
	}
	st.LastError = truncate(run.LastError, MaxLastErrorBytes)
	st.ObservedGeneration = gen

	reason, msg := acceptedMessage(run, wfr)
	setCondition(&st.Conditions, metav1.Condition{
		Type: workflowv1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: reason,
		Message: msg, ObservedGeneration: gen,
	})
	switch st.Phase {
	case workflowv1alpha1.PhaseCancelled:
		// How it was cancelled is said once, from its cancelled event
		// (applyCancelled); later looks keep that message.
		if c := meta.FindStatusCondition(st.Conditions, workflowv1alpha1.ConditionFinished); c == nil || c.Reason != string(workflowv1alpha1.PhaseCancelled) {
			setCondition(&st.Conditions, metav1.Condition{
				Type: workflowv1alpha1.ConditionFinished, Status: metav1.ConditionTrue, Reason: string(st.Phase),
				Message: "cancelled", ObservedGeneration: gen,
			})
		}
	case workflowv1alpha1.PhaseSucceeded, workflowv1alpha1.PhaseFailed:
		msg := fmt.Sprintf("finished after %d attempt(s)", run.Attempt)
		if run.LastError != "" && st.Phase == workflowv1alpha1.PhaseFailed {
			msg += ": " + st.LastError
		}
		setCondition(&st.Conditions, metav1.Condition{
			Type: workflowv1alpha1.ConditionFinished, Status: metav1.ConditionTrue, Reason: string(st.Phase),
			Message: msg, ObservedGeneration: gen,
		})
	case workflowv1alpha1.PhaseWaiting:
		setCondition(&st.Conditions, metav1.Condition{
			Type: workflowv1alpha1.ConditionFinished, Status: metav1.ConditionFalse, Reason: workflowv1alpha1.ReasonWaiting,
			Message: describeWait(wait), ObservedGeneration: gen,
		})
	case workflowv1alpha1.PhaseRunning:
		setCondition(&st.Conditions, metav1.Condition{
			Type: workflowv1alpha1.ConditionFinished, Status: metav1.ConditionFalse, Reason: workflowv1alpha1.ReasonRunning,
			Message: fmt.Sprintf("attempt %d running on %s", run.Attempt, run.LeasedBy), ObservedGeneration: gen,
		})
	case workflowv1alpha1.PhaseRetrying:
		next := "now, waiting for a worker"
		if st.NextAttemptAt != nil {
			next = "at " + st.NextAttemptAt.UTC().Format(time.RFC3339)
		}
		setCondition(&st.Conditions, metav1.Condition{
			Type: workflowv1alpha1.ConditionFinished, Status: metav1.ConditionFalse, Reason: workflowv1alpha1.ReasonRetrying,
			Message:            fmt.Sprintf("attempt %d of %d failed: %s; next attempt %s", run.Attempt, run.MaxAttempts, st.LastError, next),
			ObservedGeneration: gen,
		})
	default:
		setCondition(&st.Conditions, metav1.Condition{
			Type: workflowv1alpha1.ConditionFinished, Status: metav1.ConditionFalse, Reason: workflowv1alpha1.ReasonPending,
			Message: "waiting for a worker", ObservedGeneration: gen,
		})
	}
	if blockedBy != nil {
		owner := "the registry table"
		if blockedBy.OwnerName != "" {
			owner = "WorkflowRegistry " + blockedBy.OwnerNamespace + "/" + blockedBy.OwnerName
		}
		setCondition(&st.Conditions, metav1.Condition{
			Type: workflowv1alpha1.ConditionBlocked, Status: metav1.ConditionTrue, Reason: workflowv1alpha1.ReasonTypeDisabled,
			Message:            fmt.Sprintf("workflow type %s is disabled in %s; the run stays pending until it is enabled", run.Type, owner),
			ObservedGeneration: gen,
		})
	} else if meta.FindStatusCondition(st.Conditions, workflowv1alpha1.ConditionBlocked) != nil {
		setCondition(&st.Conditions, metav1.Condition{
			Type: workflowv1alpha1.ConditionBlocked, Status: metav1.ConditionFalse, Reason: workflowv1alpha1.ReasonTypeEnabled,
			Message: "the run's type may be claimed", ObservedGeneration: gen,
		})
	}

	st.Result = nil
	if len(run.Result) > 0 && string(run.Result) != "null" {
		if len(run.Result) <= MaxResultBytes {
			st.Result = &apiextensionsv1.JSON{Raw: append([]byte(nil), run.Result...)}
			meta.RemoveStatusCondition(&st.Conditions, workflowv1alpha1.ConditionResultTruncated)
		} else {
			setCondition(&st.Conditions, metav1.Condition{
				Type: workflowv1alpha1.ConditionResultTruncated, Status: metav1.ConditionTrue, Reason: workflowv1alpha1.ReasonTooLarge,
				Message: fmt.Sprintf("the result is %d bytes, above the %d shown in status; read it from the inbox (run %s)",
					len(run.Result), MaxResultBytes, run.ID),
				ObservedGeneration: gen,
			})
		}
	}
}

// parkedOn returns what a parked run waits for, or nil. A parked run whose
// wait ended by time is runnable again (the claim that takes it resolves the
// wait), so it is not shown as waiting.
func (r *runPass) parkedOn(run engine.Run) *engine.Wait {
	w := run.Wait
	if run.Status != engine.StatusPending || w == nil {
		return nil
	}
	if w.Until != nil && !w.Until.After(r.now()) {
		return nil
	}
	return w
}

// describeWait says in words what a parked run waits for.
func describeWait(w *engine.Wait) string {
	var msg string
	switch w.Kind {
	case engine.StepKindSleep:
		msg = "sleeping at step " + w.Step
	case engine.StepKindSignal:
		msg = fmt.Sprintf("waiting for signal %s at step %s", w.Signal, w.Step)
	case engine.StepKindChild:
		msg = "waiting for the child run of step " + w.Step
	case engine.WaitKindLimit:
		msg = "held back by its type's flow limits (concurrency or rate)"
	default:
		msg = fmt.Sprintf("waiting (%s) at step %s", w.Kind, w.Step)
	}
	if w.Until != nil {
		msg += " until " + w.Until.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	return msg
}

// applyProgress sets the journal summary and the children from the inbox.
func applyProgress(wfr *workflowv1alpha1.WorkflowRun, sum engine.StepSummary, children []engine.ChildRun) {
	st := &wfr.Status
	st.StepsDone = int32(sum.StepsDone)
	st.LastStep = sum.LastStep
	st.ChildrenTotal = int32(sum.Children)
	st.Children = nil
	for _, c := range children {
		if len(st.Children) == MaxChildrenInStatus {
			break
		}
		st.Children = append(st.Children, workflowv1alpha1.ChildRunStatus{
			Step: c.Step, RunID: c.ID, Type: c.Type, Phase: phaseOf(c.Status),
		})
	}
}

// writeStatus patches the status subresource when it changed, and records
// how long the change took to reach the object.
func (r *runPass) writeStatus(ctx context.Context, before, wfr *workflowv1alpha1.WorkflowRun, run engine.Run) error {
	changed := !equality.Semantic.DeepEqual(before.Status, wfr.Status)
	if err := r.patchStatus(ctx, before, wfr); err != nil || !changed {
		return err
	}
	if r.Metrics != nil && before.Status.Phase != wfr.Status.Phase {
		r.Metrics.StatusLag.Observe(r.now().Sub(run.UpdatedAt).Seconds())
	}
	return nil
}

// patchStatus writes the status subresource when it changed since before,
// failing with a conflict when the object changed meanwhile.
func (r *runPass) patchStatus(ctx context.Context, before, wfr *workflowv1alpha1.WorkflowRun) error {
	if equality.Semantic.DeepEqual(before.Status, wfr.Status) {
		return nil
	}
	replaced := wfr.ResourceVersion
	if err := r.Status().Patch(ctx, wfr, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	r.written.remember(wfr.UID, replaced, r.now())
	return nil
}
