package engine

import (
	"context"
)

// StepSummary is what a run's status shows of its journal and children.
type StepSummary struct {
	// StepsDone counts the journal entries that finished (an open wait is
	// not counted).
	StepsDone int
	// LastStep is the entry that finished last; empty when none did.
	LastStep string
	// Children counts the child runs the run started.
	Children int
}

// SummarizeSteps reads a run's StepSummary without loading any output. An
// unknown run has an empty summary.
func (e *Engine) SummarizeSteps(ctx context.Context, runID string) (StepSummary, error) {
	row, err := e.q.RunStepSummary(ctx, runID)
	if err != nil {
		return StepSummary{}, translate("summarize steps of run "+runID, err)
	}
	return StepSummary{StepsDone: int(deref(row.StepsDone)), LastStep: deref(row.LastStep),
		Children: int(deref(row.Children))}, nil
}
