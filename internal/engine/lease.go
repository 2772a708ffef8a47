package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	rows, err := e.pool.Query(ctx, e.q[qRunClaim], claimArgs(p))
	if err != nil {
		return nil, translate("claim runs", err)
	}
	out, err := collectClaimed(rows)
	if err != nil {
		return nil, translate("claim runs", err)
	}
	return out, nil
}

// claimArgs are the arguments of the RunClaim query.
func claimArgs(p ClaimParams) pgx.NamedArgs {
	prefixes := p.TypePrefixes
	if prefixes == nil {
		prefixes = []string{}
	}
	return pgx.NamedArgs{
		"worker_id":     p.WorkerID,
		"type_prefixes": prefixes,
		"runtime":       nullIfEmpty(p.Runtime),
		"limit":         p.Limit,
		"lease_ms":      p.LeaseDuration.Milliseconds(),
		"types":         nilIfEmpty(p.Types),
		"namespace":     nullIfEmpty(p.Namespace),
		"after":         nilIfEmpty(p.After),
		"woken":         p.Woken,
	}
}

// collectClaimed reads the rows of a RunClaim query. A journal that cannot
// be decoded fails its own run (DecodeError), not the claim.
func collectClaimed(rows pgx.Rows) ([]ClaimedRun, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ClaimedRun, error) {
		var c ClaimedRun
		var payload, journal []byte
		var traceParent, parentID *string
		err := row.Scan(&c.ID, &c.Type, &payload, &c.Attempt, &c.MaxAttempts, &c.LeaseUntil, &c.CreatedAt,
			&c.LeaseToken, &c.DeadlineAt, &journal, &traceParent, &parentID)
		if err != nil {
			return c, err
		}
		c.TraceParent = deref(traceParent)
		c.ParentID = deref(parentID)
		c.Payload = payload
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
		return c, nil
	})
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
	rows, err := e.pool.Query(ctx, e.q[qRunHeartbeat], pgx.NamedArgs{
		"worker_id": workerID, "ids": ids, "tokens": tokens, "lease_ms": lease.Milliseconds(),
	})
	if err != nil {
		return nil, translate("heartbeat runs", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (HeartbeatResult, error) {
		var h HeartbeatResult
		var status string
		err := row.Scan(&h.ID, &status, &h.Owned, &h.DeadlineExceeded)
		h.Status = Status(status)
		return h, err
	})
	if err != nil {
		return nil, translate("heartbeat runs", err)
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
	rows, err := e.pool.Query(ctx, e.q[qRunComplete], completeArgs(workerID, cs))
	if err != nil {
		return nil, translate("complete runs", err)
	}
	done, err := collectCompleted(rows)
	if err != nil {
		return nil, translate("complete runs", err)
	}
	return done, nil
}

// completeArgs are the arguments of the RunComplete query.
func completeArgs(workerID string, cs []Completion) pgx.NamedArgs {
	ids := make([]string, len(cs))
	tokens := make([]int64, len(cs))
	results := make([]*string, len(cs))
	for i, c := range cs {
		ids[i], tokens[i] = c.ID, c.Token
		if len(c.Result) > 0 {
			s := string(c.Result)
			results[i] = &s
		}
	}
	return pgx.NamedArgs{"worker_id": workerID, "ids": ids, "tokens": tokens, "results": results}
}

// collectCompleted reads the rows of a RunComplete query.
func collectCompleted(rows pgx.Rows) ([]Completed, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Completed, error) {
		var c Completed
		var status string
		var msg *string
		err := row.Scan(&c.ID, &status, &msg)
		c.Status, c.Error = Status(status), deref(msg)
		return c, err
	})
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
	rows, err := e.pool.Query(ctx, e.q[qRunFail], pgx.NamedArgs{
		"worker_id": workerID, "ids": ids, "tokens": tokens, "errors": errs, "retryable": retryable,
	})
	if err != nil {
		return nil, translate("fail runs", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailResult, error) {
		var f FailResult
		var status string
		err := row.Scan(&f.ID, &status, &f.RunAt)
		f.Status = Status(status)
		return f, err
	})
	if err != nil {
		return nil, translate("fail runs", err)
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
	rows, err := e.pool.Query(ctx, e.q[qRunRelease], pgx.NamedArgs{
		"worker_id": workerID, "ids": ids, "tokens": tokens,
	})
	if err != nil {
		return nil, translate("release runs", err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, translate("release runs", err)
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
	rows, err := e.pool.Query(ctx, e.q[qRunReapExpired], pgx.NamedArgs{"limit": limit})
	if err != nil {
		return nil, translate("reap expired leases", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReapResult, error) {
		var r ReapResult
		var status string
		err := row.Scan(&r.ID, &status)
		r.Status = Status(status)
		return r, err
	})
	if err != nil {
		return nil, translate("reap expired leases", err)
	}
	return out, nil
}

// ExpireDeadlines fails up to limit unfinished runs whose deadline passed
// (pending, parked or leased) with "deadline exceeded", and returns their
// ids. Safe to call from many processes.
func (e *Engine) ExpireDeadlines(ctx context.Context, limit int) ([]string, error) {
	rows, err := e.pool.Query(ctx, e.q[qRunExpireDeadlines], pgx.NamedArgs{"limit": limit})
	if err != nil {
		return nil, translate("expire deadlines", err)
	}
	ids, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var id, prev string
		err := row.Scan(&id, &prev)
		return id, err
	})
	if err != nil {
		return nil, translate("expire deadlines", err)
	}
	return ids, nil
}

// DeleteFinishedRuns deletes up to limit runs (with their events) that
// finished more than retention ago by the database's clock, and returns how
// many it deleted.
func (e *Engine) DeleteFinishedRuns(ctx context.Context, retention time.Duration, limit int) (int64, error) {
	var n int64
	err := e.pool.QueryRow(ctx, e.q[qRunDeleteFinished],
		pgx.NamedArgs{"retention": retention.Milliseconds(), "limit": limit}).Scan(&n)
	if err != nil {
		return 0, translate("delete finished runs", err)
	}
	return n, nil
}
