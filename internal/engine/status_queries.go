package engine

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// qRunStepSummary is in queries/status.sql.
const qRunStepSummary = "RunStepSummary"

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
	var (
		s    StepSummary
		last *string
	)
	err := e.pool.QueryRow(ctx, e.q[qRunStepSummary], pgx.NamedArgs{"run_id": runID}).Scan(&s.StepsDone, &last, &s.Children)
	if err != nil {
		return StepSummary{}, translate("summarize steps of run "+runID, err)
	}
	s.LastStep = deref(last)
	return s, nil
}
