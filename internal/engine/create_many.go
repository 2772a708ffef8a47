package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// MaxCreateMany is the most runs one CreateRuns call records (the limit of
// workflow.create_runs).
const MaxCreateMany = 10000

// CreateRuns records a batch of runs in one round trip (workflow.create_runs).
// Each run's idempotency key works as in CreateRun: a key already taken, or
// repeated earlier in the batch, records nothing for that run and returns
// the run that holds it with Created false. The results are in input order.
// Every run is checked first, and a bad one fails the whole batch with an
// error naming it (rows count from 1); nothing is written then. Source and
// DeadlineAt are not supported in a batch.
func (e *Engine) CreateRuns(ctx context.Context, ps []CreateParams) ([]CreateResult, error) {
	return e.CreateRunsIn(ctx, e.pool, ps)
}

// CreateRunsIn is CreateRuns through db, e.g. inside the caller's
// transaction: the runs commit or roll back with the caller's own writes.
func (e *Engine) CreateRunsIn(ctx context.Context, db Querier, ps []CreateParams) ([]CreateResult, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	if len(ps) > MaxCreateMany {
		return nil, fmt.Errorf("create runs: %w: at most %d runs per call, got %d", ErrInvalid, MaxCreateMany, len(ps))
	}
	n := len(ps)
	var (
		types       = make([]*string, n)
		payloads    = make([]*string, n)
		priorities  = make([]*int32, n)
		runAts      = make([]*time.Time, n)
		keys        = make([]*string, n)
		maxAttempts = make([]*int32, n)
		deadlineMS  = make([]*int64, n)
		baseMS      = make([]*int64, n)
		maxMS       = make([]*int64, n)
		traces      = make([]*string, n)
		flowKeys    = make([]*string, n)
	)
	// One namespace and type namespace per batch (the first row's).
	ns, typeNS := ps[0].Namespace, ps[0].TypeNamespace
	for i, p := range ps {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("create runs: row %d: %w", i+1, err)
		}
		if p.Namespace != ns || p.TypeNamespace != typeNS {
			return nil, fmt.Errorf("create runs: row %d: %w: every run of a batch has the same namespace and type namespace", i+1, ErrInvalid)
		}
		if p.Source != nil || p.DeadlineAt != nil {
			return nil, fmt.Errorf("create runs: row %d: %w: a batch takes no source and no deadline instant", i+1, ErrInvalid)
		}
		types[i] = &ps[i].Type
		payload := "{}"
		if s := strings.TrimSpace(string(p.Payload)); s != "" {
			payload = s
		}
		payloads[i] = &payload
		if p.Priority != nil {
			v := int32(*p.Priority)
			if int(v) != *p.Priority {
				return nil, fmt.Errorf("create runs: row %d: %w: priority %d is out of range", i+1, ErrInvalid, *p.Priority)
			}
			priorities[i] = &v
		}
		runAts[i] = p.RunAt
		traces[i] = nullIfEmpty(p.TraceParent)
		flowKeys[i] = nullIfEmpty(p.ConcurrencyKey)
		keys[i] = nullIfEmpty(p.IdempotencyKey)
		maxAttempts[i] = int32OrNil(p.MaxAttempts)
		deadlineMS[i] = millisOrNil(p.Deadline)
		if p.RetryPolicy != nil {
			baseMS[i], maxMS[i] = millisOrNil(p.RetryPolicy.BaseDelay), millisOrNil(p.RetryPolicy.MaxDelay)
		}
	}
	// A column no run sets goes as NULL, not as an array of n NULLs that
	// the server would decode and unnest for nothing.
	priorities, runAts, keys = noneSet(priorities), noneSet(runAts), noneSet(keys)
	maxAttempts, deadlineMS, baseMS, maxMS = noneSet(maxAttempts), noneSet(deadlineMS), noneSet(baseMS), noneSet(maxMS)
	traces, flowKeys = noneSet(traces), noneSet(flowKeys)
	row, err := queries.New(db).RunCreateMany(ctx, queries.RunCreateManyParams{
		Types: types, Payloads: payloads, Priorities: priorities, RunAts: runAts, IdempotencyKeys: keys,
		MaxAttempts: maxAttempts, DeadlineMs: deadlineMS, RetryBaseMs: baseMS, RetryMaxMs: maxMS,
		Traceparents: traces, ConcurrencyKeys: flowKeys, Namespace: nullIfEmpty(ns), TypeNamespace: nullIfEmpty(typeNS),
	})
	ids, created := row.Ids, row.Created
	if err != nil {
		return nil, translate("create runs", err)
	}
	if len(ids) != n || len(created) != n {
		return nil, fmt.Errorf("create runs: %d results for %d runs", len(ids), n)
	}
	out := make([]CreateResult, n)
	for i := range out {
		out[i] = CreateResult{ID: ids[i], Created: created[i]}
	}
	return out, nil
}

// noneSet returns vs, or nil (sent as NULL) when no element is set.
func noneSet[T any](vs []*T) []*T {
	for _, v := range vs {
		if v != nil {
			return vs
		}
	}
	return nil
}
