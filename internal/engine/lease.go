package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// ClaimParams asks for up to Limit runnable runs.
type ClaimParams struct {
	// WorkerID is recorded as leased_by; every later write is guarded by it.
	WorkerID string
	// TypePrefixes are literal type prefixes; empty claims every type.
	TypePrefixes []string
	// Runtime is the worker's runtime ("go", "python"): types registered for
	// another runtime are never claimed. Empty skips that check.
	Runtime string
	// Limit is the most runs one call claims.
	Limit int
	// LeaseDuration is how long the lease lasts without a heartbeat.
	LeaseDuration time.Duration
	// Types, when not empty, narrows the claim to exactly these types (the
	// ones the worker has handlers for).
	Types []string
	// Namespace is the namespace the worker serves: it claims only runs
	// whose type belongs to it. Empty means "default".
	Namespace string
	// After, when not empty, makes the claim a hand-off (see
	// CompleteRunsHandOff): it claims only the runs that these runs, ended
	// by the worker earlier in the same transaction, made runnable.
	After []string
	// Woken says the claim follows an insert notification: it claims
	// nothing while another woken claim of the same namespace, prefixes
	// and types is under way (that one takes what there is, and a claim
	// that fills its limit notifies the others again). A claim of a
	// worker that polls, or goes on after a full claim, is not woken.
	Woken bool
}

// ClaimedRun is a run leased to the caller.
type ClaimedRun struct {
	ID          string
	Type        string
	Payload     json.RawMessage
	Attempt     int
	MaxAttempts int
	LeaseUntil  time.Time
	CreatedAt   time.Time
	// LeaseToken fences this attempt: every later write names it.
	LeaseToken int64
	// DeadlineAt is when the run fails with "deadline exceeded", if it has
	// a deadline.
	DeadlineAt *time.Time
	// Journal is what earlier attempts recorded, in position order (nil for
	// a run that has recorded nothing).
	Journal []JournalEntry
	// TraceParent is the W3C traceparent stored with the run ("" when none).
	TraceParent string
	// ParentID is the run's DAG run or durable parent ("" when it has
	// none): completing it may make another run runnable at once.
	ParentID string
	// DecodeError is set when the run's journal could not be decoded (a
	// value nested deeper than this client decodes, say): the run cannot
	// be replayed, and the caller fails it alone, for good, with this error;
	// the other runs of the claim are unaffected.
	DecodeError error
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// Ref returns the lease reference that guards this attempt's writes.
func (c ClaimedRun) Ref() LeaseRef {
	return LeaseRef{ID: c.ID, Token: c.LeaseToken, Attempt: c.Attempt}
}

// ClaimRuns leases runnable runs in priority, then age order (see
// workflow.claim_runs).
func (e *Engine) ClaimRuns(ctx context.Context, p ClaimParams) ([]ClaimedRun, error) {
	rows, err := e.q.RunClaim(ctx, claimArgs(p))
	if err != nil {
		return nil, translate("claim runs", err)
	}
	return claimedRuns(rows), nil
}

// claimArgs are the arguments of the RunClaim query.
func claimArgs(p ClaimParams) queries.RunClaimParams {
	prefixes := p.TypePrefixes
	if prefixes == nil {
		prefixes = []string{}
	}
	return queries.RunClaimParams{
		WorkerID:     p.WorkerID,
		TypePrefixes: prefixes,
		Runtime:      nullIfEmpty(p.Runtime),
		MaxRows:      clamp32(p.Limit),
		LeaseMs:      p.LeaseDuration.Milliseconds(),
		Types:        nilIfEmpty(p.Types),
		Namespace:    nullIfEmpty(p.Namespace),
		After:        nilIfEmpty(p.After),
		Woken:        p.Woken,
	}
}

// claimedRuns reads the rows of a RunClaim query. A journal that cannot be
// decoded fails its own run (DecodeError), not the claim.
func claimedRuns(rows []queries.RunClaimRow) []ClaimedRun {
	out := make([]ClaimedRun, len(rows))
	for i, row := range rows {
		c := ClaimedRun{
			ID: deref(row.ID), Type: deref(row.Type), Payload: row.Payload, Attempt: int(deref(row.Attempt)),
			MaxAttempts: int(deref(row.MaxAttempts)), LeaseUntil: deref(row.LeaseUntil),
			CreatedAt: deref(row.CreatedAt), LeaseToken: deref(row.LeaseToken), DeadlineAt: row.DeadlineAt,
			TraceParent: deref(row.Traceparent), ParentID: deref(row.ParentID),
		}
		journal := row.Journal
		var tooLarge string
		if len(journal) > 0 && journal[0] == '"' && json.Unmarshal(journal, &tooLarge) == nil {
			// The database's word that the journal is too large to load.
			c.DecodeError = fmt.Errorf("the journal of run %s cannot be loaded: %s", c.ID, tooLarge)
		} else if len(journal) > 0 {
			if err := json.Unmarshal(journal, &c.Journal); err != nil {
				c.Journal = nil
				c.DecodeError = fmt.Errorf("the journal of run %s cannot be decoded: %w", c.ID, err)
			}
		}
		out[i] = c
	}
	return out
}

// LeaseRef names one attempt of a run held by a worker: the lease token
// guards the writes, the attempt is for logs.
type LeaseRef struct {
	ID      string
	Token   int64
	Attempt int
}

// HeartbeatResult is the answer for one run of a heartbeat.
type HeartbeatResult struct {
	ID string
	// Owned is true when the lease was extended: the run is still leased by
	// the caller at the same attempt.
	Owned bool
	// Status is the run's current status ("missing" if it no longer exists).
	Status Status
	// DeadlineExceeded is true when the run failed because its deadline
	// passed.
	DeadlineExceeded bool
}

func splitRefs(refs []LeaseRef) ([]string, []int64) {
	ids := make([]string, len(refs))
	tokens := make([]int64, len(refs))
	for i, r := range refs {
		ids[i] = r.ID
		tokens[i] = r.Token
	}
	return ids, tokens
}

// HeartbeatRuns extends the leases the worker still holds among refs and
// reports, for each, whether it still holds it.
func (e *Engine) HeartbeatRuns(ctx context.Context, workerID string, refs []LeaseRef, lease time.Duration) ([]HeartbeatResult, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	ids, tokens := splitRefs(refs)
	rows, err := e.q.RunHeartbeat(ctx, queries.RunHeartbeatParams{
		WorkerID: workerID, Ids: ids, Tokens: tokens, LeaseMs: lease.Milliseconds(),
	})
	if err != nil {
		return nil, translate("heartbeat runs", err)
	}
	out := make([]HeartbeatResult, len(rows))
	for i, row := range rows {
		out[i] = HeartbeatResult{ID: deref(row.ID), Status: Status(deref(row.Status)), Owned: deref(row.Owned),
			DeadlineExceeded: deref(row.DeadlineExceeded)}
	}
	return out, nil
}

// Completion is a successful attempt and its JSON result (nil for none).
type Completion struct {
	LeaseRef
	Result json.RawMessage
}

// Completed is what workflow.complete_runs did with one run the worker
// still held: succeeded, or failed for good because the database refused its
// result (too large, nested too deeply), with Error saying why.
type Completed struct {
	ID     string
	Status Status
	Error  string
}

// CompleteRuns records successful attempts. Only runs still leased by
// workerID at the given attempt change; each is returned with what became of
// it. A result over the limits fails its run alone: the rest of the batch
// stands.
func (e *Engine) CompleteRuns(ctx context.Context, workerID string, cs []Completion) ([]Completed, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	rows, err := e.q.RunComplete(ctx, completeArgs(workerID, cs))
	if err != nil {
		return nil, translate("complete runs", err)
	}
	return completedRuns(rows), nil
}

// completeArgs are the arguments of the RunComplete query.
func completeArgs(workerID string, cs []Completion) queries.RunCompleteParams {
	ids := make([]string, len(cs))
	tokens := make([]int64, len(cs))
	results := make([][]byte, len(cs))
	for i, c := range cs {
		ids[i], tokens[i] = c.ID, c.Token
		if len(c.Result) > 0 {
			results[i] = c.Result
		}
	}
	return queries.RunCompleteParams{WorkerID: workerID, Ids: ids, Tokens: tokens, Results: results}
}

// completedRuns reads the rows of a RunComplete query.
func completedRuns(rows []queries.RunCompleteRow) []Completed {
	out := make([]Completed, len(rows))
	for i, row := range rows {
		out[i] = Completed{ID: deref(row.ID), Status: Status(deref(row.Status)), Error: deref(row.Error)}
	}
	return out
}

// Failure is a failed attempt.
type Failure struct {
	LeaseRef
	Error string
	// Retryable false fails the run for good whatever attempts are left.
	Retryable bool
}

// FailResult says what became of a failed attempt.
type FailResult struct {
	ID string
	// Status is pending when the run will be retried, failed otherwise.
	Status Status
	// RunAt is when the next attempt may start (pending runs only).
	RunAt time.Time
}

// FailRuns records failed attempts: runs with attempts left (and a retryable
// error) go back to pending after their backoff; the others fail.
func (e *Engine) FailRuns(ctx context.Context, workerID string, fs []Failure) ([]FailResult, error) {
	if len(fs) == 0 {
		return nil, nil
	}
	ids := make([]string, len(fs))
	tokens := make([]int64, len(fs))
	errs := make([]string, len(fs))
	retryable := make([]bool, len(fs))
	for i, f := range fs {
		ids[i], tokens[i], errs[i], retryable[i] = f.ID, f.Token, f.Error, f.Retryable
	}
	rows, err := e.q.RunFail(ctx, queries.RunFailParams{
		WorkerID: workerID, Ids: ids, Tokens: tokens, Errors: errs, Retryable: retryable,
	})
	if err != nil {
		return nil, translate("fail runs", err)
	}
	out := make([]FailResult, len(rows))
	for i, row := range rows {
		out[i] = FailResult{ID: deref(row.ID), Status: Status(deref(row.Status)), RunAt: deref(row.RunAt)}
	}
	return out, nil
}

// ReleaseRuns hands unfinished runs back: pending at once, the attempt not
// counted. Used by a worker shutting down.
func (e *Engine) ReleaseRuns(ctx context.Context, workerID string, refs []LeaseRef) ([]string, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	ids, tokens := splitRefs(refs)
	rows, err := e.q.RunRelease(ctx, queries.RunReleaseParams{WorkerID: workerID, Ids: ids, Tokens: tokens})
	if err != nil {
		return nil, translate("release runs", err)
	}
	done := make([]string, len(rows))
	for i, id := range rows {
		done[i] = deref(id)
	}
	return done, nil
}

// ReapResult is a run whose lease had expired.
type ReapResult struct {
	ID string
	// Status is pending (will be retried) or failed (no attempts left).
	Status Status
}

// ReapExpiredLeases returns up to limit runs whose lease expired to pending,
// or fails them when out of attempts. Safe to call from many processes.
func (e *Engine) ReapExpiredLeases(ctx context.Context, limit int) ([]ReapResult, error) {
	rows, err := e.q.RunReapExpired(ctx, clamp32(limit))
	if err != nil {
		return nil, translate("reap expired leases", err)
	}
	out := make([]ReapResult, len(rows))
	for i, row := range rows {
		out[i] = ReapResult{ID: deref(row.ID), Status: Status(deref(row.Status))}
	}
	return out, nil
}

// ExpireDeadlines fails up to limit unfinished runs whose deadline passed
// (pending, parked or leased) with "deadline exceeded", and returns their
// ids. Safe to call from many processes.
func (e *Engine) ExpireDeadlines(ctx context.Context, limit int) ([]string, error) {
	rows, err := e.q.RunExpireDeadlines(ctx, clamp32(limit))
	if err != nil {
		return nil, translate("expire deadlines", err)
	}
	ids := make([]string, len(rows))
	for i, row := range rows {
		ids[i] = deref(row.ID)
	}
	return ids, nil
}

// DeleteFinishedRuns deletes up to limit runs (with their events) that
// finished more than retention ago by the database's clock, and returns how
// many it deleted.
func (e *Engine) DeleteFinishedRuns(ctx context.Context, retention time.Duration, limit int) (int64, error) {
	n, err := e.q.RunDeleteFinished(ctx, queries.RunDeleteFinishedParams{
		RetentionMs: retention.Milliseconds(), MaxRows: clamp32(limit),
	})
	if err != nil {
		return 0, translate("delete finished runs", err)
	}
	return deref(n), nil
}
