package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// CompleteRunsHandOff records the results of runs a worker holds, as
// CompleteRuns does, and in the same transaction claims for the worker the
// runs those completions made runnable (the next steps of their DAGs,
// their durable parents woken; see workflow.claim_runs' p_after), up to
// p.Limit: a chain's next step starts on the worker that ended the step
// before it, without a trip through the queue and its wake-up. p.After is
// set from the completions. A run the hand-off cannot take (a flow limit,
// a better-priority run waiting, a type the worker does not handle) stays
// in the queue. Both statements go in one round trip; either both commit
// or neither does.
func (e *Engine) CompleteRunsHandOff(ctx context.Context, workerID string, cs []Completion, p ClaimParams) ([]Completed, []ClaimedRun, error) {
	if len(cs) == 0 {
		return nil, nil, nil
	}
	if p.Limit < 1 {
		done, err := e.CompleteRuns(ctx, workerID, cs)
		return done, nil, err
	}
	p.WorkerID = workerID
	p.After = make([]string, len(cs))
	for i, c := range cs {
		p.After[i] = c.ID
	}
	// A batch outside a transaction runs in one implicit transaction.
	b := &pgx.Batch{}
	complete, claim := completeArgs(workerID, cs), claimArgs(p)
	queue := queries.New(batchQueuer{b})
	if _, err := queue.RunComplete(ctx, complete); queued(err) != nil {
		return nil, nil, fmt.Errorf("complete runs and hand off: %w", err)
	}
	if _, err := queue.RunClaim(ctx, claim); queued(err) != nil {
		return nil, nil, fmt.Errorf("complete runs and hand off: %w", err)
	}
	res := e.pool.SendBatch(ctx, b)
	done, claimed, err := readHandOff(ctx, queries.New(batchReader{res}), complete, claim)
	if cerr := res.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, nil, translate("complete runs and hand off", err)
	}
	return done, claimed, nil
}

// readHandOff reads the two results of a hand-off batch.
func readHandOff(ctx context.Context, read *queries.Queries, complete queries.RunCompleteParams,
	claim queries.RunClaimParams) ([]Completed, []ClaimedRun, error) {
	done, err := read.RunComplete(ctx, complete)
	if err != nil {
		return nil, nil, fmt.Errorf("completions: %w", err)
	}
	claimed, err := read.RunClaim(ctx, claim)
	if err != nil {
		return nil, nil, fmt.Errorf("hand-off claim: %w", err)
	}
	return completedRuns(done), claimedRuns(claimed), nil
}
