package engine

import (
	"context"
	"fmt"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// RetryParams asks for another go of a failed or cancelled run.
type RetryParams struct {
	// ID is the run's id.
	ID string
	// Attempts is the fresh budget of attempts, 1 to 1000; 0 means as many
	// as the run was created with.
	Attempts int
	// By says who asked, in the run's 'retried' event (cut to
	// MaxCancelledByBytes).
	By string
}

// RetryRun makes a failed or cancelled run pending again from where it
// stopped (see workflow.retry_run): its journal is kept, and a DAG keeps the
// steps that succeeded and runs its failed, cancelled and unstarted steps.
// A run that cannot be retried (not failed or cancelled, deleted, a step or
// child of another run) gives an error wrapping ErrInvalid with the reason;
// an unknown run one wrapping ErrNotFound.
func (e *Engine) RetryRun(ctx context.Context, p RetryParams) error {
	if p.Attempts < 0 || p.Attempts > MaxAttemptsLimit {
		return fmt.Errorf("retry run %s: %w: attempts must be between 1 and %d, or 0 for the run's own", p.ID, ErrInvalid, MaxAttemptsLimit)
	}
	row, err := e.q.RunRetry(ctx, queries.RunRetryParams{ID: p.ID, Attempts: int32OrNil(p.Attempts), By: eventLabel(p.By)})
	if err != nil {
		return translate("retry run "+p.ID, err)
	}
	message := row.Message
	switch deref(row.Status) {
	case "retried":
		return nil
	case "not_found":
		return fmt.Errorf("retry run %s: %w", p.ID, ErrNotFound)
	default:
		return fmt.Errorf("retry run %s: %w: %s", p.ID, ErrInvalid, deref(message))
	}
}
