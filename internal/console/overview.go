package console

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// WorkerPool is a pool of workers as the console shows it: declared by a
// WorkflowRegistry, serving some type prefixes.
type WorkerPool struct {
	// Namespace and Registry name the WorkflowRegistry that declares it.
	Namespace, Registry string
	// Target is the name of the scaled Deployment (or other object).
	Target string
	// Runtime of its workers (go or python).
	Runtime string
	// Prefixes are the type prefixes its workers claim.
	Prefixes []string
}

// PoolLister lists the worker pools for the overview.
type PoolLister interface {
	WorkerPools(ctx context.Context) ([]WorkerPool, error)
}

// buckets is how many five-minute columns the hourly charts have.
const buckets = 12

// maxOverviewTypes bounds the types the overview lists.
const maxOverviewTypes = 500

// poolRow is a worker pool with its queue.
type poolRow struct {
	WorkerPool
	Runnable, Leased int64
}

// typeRow is a type with its queue and its last hour.
type typeRow struct {
	Type                      string
	Runnable, Leased, Parked  int64
	OldestDue                 *time.Time
	Succeeded, Failed         [buckets]int64
	SucceededHour, FailedHour int64
}

// overview is what the overview page shows.
type overview struct {
	// Inboxes lists the inboxes read, when there are several.
	Inboxes   []inboxRow
	Unread    []string
	Pools     []poolRow
	PoolsErr  string
	Types     []typeRow
	MoreTypes bool
	Now       time.Time
}

// overviewFresh is how long an overview read for one viewer serves the
// others: every open overview is refreshed on the same notifications.
const overviewFresh = time.Second

// overviewCache holds the latest overview.
type overviewCache struct {
	mu   sync.Mutex
	at   time.Time
	last overview
}

// overview returns an overview at most overviewFresh old, reading it anew
// (one reader at a time) when it is older.
func (s *Server) overview(ctx context.Context) (overview, error) {
	c := &s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < overviewFresh {
		return c.last, nil
	}
	ov, err := s.loadOverview(ctx)
	if err != nil {
		return ov, err
	}
	c.at, c.last = time.Now(), ov
	return ov, nil
}

// loadOverview reads the queue of every pool and type, and what finished in
// the last hour (from idx_workflow_run_finished_at: its cost follows the
// runs of that hour, not the history).
func (s *Server) loadOverview(ctx context.Context) (overview, error) {
	ov := overview{Now: time.Now()}
	var problems []inboxProblem
	if s.pools != nil {
		pools, err := s.pools.WorkerPools(ctx)
		if err != nil {
			s.log.Error("Console could not list the worker pools", "error", err)
			ov.PoolsErr = "the WorkflowRegistry objects could not be read (see the manager's log)"
		} else if ov.Pools, problems, err = s.poolRows(ctx, pools); err != nil {
			return ov, err
		}
	}

	types, more, typeProblems, err := s.readTypes(ctx,
		`select type, runnable, leased, parked, oldest_due from workflow.type_depths()`,
		`select type, bucket, succeeded, ended_otherwise from workflow.finished_last_hour()`)
	if err != nil {
		return ov, err
	}
	ov.Types, ov.MoreTypes = types, more
	s.noteInboxes(&ov, append(problems, typeProblems...), true)
	return ov, nil
}

// poolRows reads the queue of each worker pool: every run of its
// namespace's types (its own runs and those recorded by namespaces it
// shares a type with), summed over the inboxes (a namespace's runs are in
// one; a namespace that moved left only finished runs behind).
func (s *Server) poolRows(ctx context.Context, pools []WorkerPool) ([]poolRow, []inboxProblem, error) {
	if len(pools) == 0 {
		return nil, nil, nil
	}
	qs := make([]engine.PoolQuery, len(pools))
	for i, p := range pools {
		qs[i] = engine.PoolQuery{TypePrefixes: p.Prefixes, Runtime: p.Runtime, Namespace: p.Namespace}
	}
	out := make([]poolRow, len(pools))
	for i, p := range pools {
		out[i] = poolRow{WorkerPool: p}
	}
	var mu sync.Mutex
	problems, err := s.each(ctx, func(ctx context.Context, src *source) error {
		depths, err := src.eng.QueueDepths(ctx, qs)
		if err != nil {
			return fmt.Errorf("overview: queue depths in inbox %s: %w", src.name, err)
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range out {
			out[i].Runnable += depths[i].Runnable
			out[i].Leased += depths[i].Leased
		}
		return nil
	})
	if err != nil {
		return nil, problems, err
	}
	return out, problems, nil
}

// readTypes reads the types' rows of an overview from every inbox:
// queues (type, runnable, leased, parked, oldest due) and the last hour
// (type, five-minute bucket counted back from now, succeeded, ended
// otherwise), both with args; a type in several inboxes is summed.
func (s *Server) readTypes(ctx context.Context, queues, lastHour string, args ...any) ([]typeRow, bool, []inboxProblem, error) {
	var mu sync.Mutex
	byType := map[string]*typeRow{}
	problems, err := s.each(ctx, func(ctx context.Context, src *source) error {
		part, err := src.readTypes(ctx, queues, lastHour, args...)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for t, p := range part {
			r, ok := byType[t]
			if !ok {
				byType[t] = p
				continue
			}
			r.Runnable += p.Runnable
			r.Leased += p.Leased
			r.Parked += p.Parked
			if r.OldestDue == nil || p.OldestDue != nil && p.OldestDue.Before(*r.OldestDue) {
				r.OldestDue = p.OldestDue
			}
			for i := range buckets {
				r.Succeeded[i] += p.Succeeded[i]
				r.Failed[i] += p.Failed[i]
			}
			r.SucceededHour += p.SucceededHour
			r.FailedHour += p.FailedHour
		}
		return nil
	})
	if err != nil {
		return nil, false, problems, err
	}
	types := make([]typeRow, 0, len(byType))
	for _, r := range byType {
		types = append(types, *r)
	}
	sort.Slice(types, func(i, j int) bool { return types[i].Type < types[j].Type })
	if len(types) > maxOverviewTypes {
		return types[:maxOverviewTypes], true, problems, nil
	}
	return types, false, problems, nil
}

// readTypes reads the types' rows of one inbox for Server.readTypes.
func (src *source) readTypes(ctx context.Context, queues, lastHour string, args ...any) (map[string]*typeRow, error) {
	byType := map[string]*typeRow{}
	get := func(t string) *typeRow {
		if r, ok := byType[t]; ok {
			return r
		}
		r := &typeRow{Type: t}
		byType[t] = r
		return r
	}
	rows, err := src.db.Query(ctx, queues, args...)
	if err != nil {
		return nil, fmt.Errorf("overview: queues of inbox %s: %w", src.name, err)
	}
	var t string
	var runnable, leased, parked int64
	var oldest *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&t, &runnable, &leased, &parked, &oldest}, func() error {
		r := get(t)
		r.Runnable, r.Leased, r.Parked, r.OldestDue = runnable, leased, parked, oldest
		return nil
	}); err != nil {
		return nil, fmt.Errorf("overview: queues of inbox %s: %w", src.name, err)
	}
	rows, err = src.db.Query(ctx, lastHour, args...)
	if err != nil {
		return nil, fmt.Errorf("overview: last hour of inbox %s: %w", src.name, err)
	}
	var bucket int
	var ok, bad int64
	if _, err := pgx.ForEachRow(rows, []any{&t, &bucket, &ok, &bad}, func() error {
		r := get(t)
		bucket = min(max(bucket, 0), buckets-1)
		// Column 0 is the oldest five minutes, the last column the latest.
		r.Succeeded[buckets-1-bucket] += ok
		r.Failed[buckets-1-bucket] += bad
		r.SucceededHour += ok
		r.FailedHour += bad
		return nil
	}); err != nil {
		return nil, fmt.Errorf("overview: last hour of inbox %s: %w", src.name, err)
	}
	return byType, nil
}
