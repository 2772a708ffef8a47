package simpleworkflow

import (
	"context"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// RetryRunOptions tunes Client.Retry.
type RetryRunOptions struct {
	// Attempts is the fresh budget of attempts, 1 to 1000; zero gives the
	// run as many as it was created with.
	Attempts int
	// By says who asked, recorded in the run's 'retried' event (at most
	// 256 bytes).
	By string
}

// Retry gives a failed or cancelled run another go from where it stopped:
// it is pending again with a fresh budget of attempts. A durable run keeps
// its journal, so the steps it recorded are replayed, not redone; a DAG
// keeps the steps that succeeded, and runs its failed and cancelled steps
// again and its unstarted steps after them. Its audit trail gets a
// 'retried' event with reason retry_run. The error wraps ErrNotFound for
// an unknown run, and ErrInvalid with the reason for a run that cannot be
// retried (one that did not fail or was not cancelled, a deleted run, or a
// step or child of another run: retry that run instead).
func (c *Client) Retry(ctx context.Context, runID string, opts *RetryRunOptions) error {
	var o RetryRunOptions
	if opts != nil {
		o = *opts
	}
	return c.eng.RetryRun(ctx, engine.RetryParams{ID: runID, Attempts: o.Attempts, By: o.By})
}
