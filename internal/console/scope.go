package console

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxParentHops is passed to workflow.run_namespace, which no longer
// walks up: every run records its namespace (a child its parent's).
const maxParentHops = 32

// findRun returns the inbox that holds run id when the viewer may read it,
// nil when no inbox the console could read holds it or the viewer may not
// read it (the same answer), and the inboxes that could not be read. Every
// run belongs to a namespace: a WorkflowRun's own, a SQL or SDK producer's
// (the one its login records for), a child's parent's. The viewer may read
// it when it may read that namespace.
func (s *Server) findRun(ctx context.Context, a access, id string) (*source, []inboxProblem, error) {
	var mu sync.Mutex
	var holders []*source
	problems, err := s.each(ctx, func(ctx context.Context, src *source) error {
		var ns *string
		err := src.db.QueryRow(ctx, `select workflow.run_namespace($1::uuid, $2::integer)`, id, maxParentHops).Scan(&ns)
		if err != nil {
			return fmt.Errorf("the run's namespace in inbox %s: %w", src.name, err)
		}
		if ns != nil && a.may(*ns) {
			mu.Lock()
			holders = append(holders, src)
			mu.Unlock()
		}
		return nil
	})
	if err != nil || len(holders) == 0 {
		return nil, problems, err
	}
	// A run id is in one inbox; should one be in two, the default inbox's,
	// then the first by name, is shown.
	slices.SortFunc(holders, func(x, y *source) int {
		switch {
		case x.name == y.name:
			return 0
		case x.name == DefaultInbox:
			return -1
		case y.name == DefaultInbox:
			return 1
		}
		return strings.Compare(x.name, y.name)
	})
	return holders[0], problems, nil
}

// overviewFor returns the overview a viewer may see: the whole inbox's with
// the inbox-wide permission; otherwise the worker pools of the namespaces
// it may read and the queues and last hour of those namespaces' runs only.
func (s *Server) overviewFor(ctx context.Context, a access) (overview, error) {
	if a.all {
		return s.overview(ctx)
	}
	readable := a.list()
	key := strings.Join(readable, ",")
	c := &s.scoped
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byScope[key]; ok && time.Since(e.at) < overviewFresh {
		return e.last, nil
	}
	ov, err := s.loadScopedOverview(ctx, a, readable)
	if err != nil {
		return ov, err
	}
	if c.byScope == nil || len(c.byScope) >= maxScopedOverviews {
		c.byScope = map[string]cachedOverview{}
	}
	c.byScope[key] = cachedOverview{at: time.Now(), last: ov}
	return ov, nil
}

// maxScopedOverviews bounds the overviews kept for sets of namespaces.
const maxScopedOverviews = 64

// cachedOverview is an overview and when it was read.
type cachedOverview struct {
	at   time.Time
	last overview
}

// scopedOverviews holds the latest overview of each set of namespaces, so
// viewers of the same namespaces share one read a second, as the whole
// inbox's viewers do.
type scopedOverviews struct {
	mu      sync.Mutex
	byScope map[string]cachedOverview
}

// loadScopedOverview reads the overview of the namespaces readable.
func (s *Server) loadScopedOverview(ctx context.Context, a access, readable []string) (overview, error) {
	ov := overview{Now: time.Now()}
	var problems []inboxProblem
	if s.pools != nil {
		pools, err := s.pools.WorkerPools(ctx)
		if err != nil {
			s.log.Error("Console could not list the worker pools", "error", err)
			ov.PoolsErr = "the WorkflowRegistry objects could not be read (see the manager's log)"
		} else {
			var mine []WorkerPool
			for _, p := range pools {
				if a.may(p.Namespace) {
					mine = append(mine, p)
				}
			}
			if ov.Pools, problems, err = s.poolRows(ctx, mine); err != nil {
				return ov, err
			}
		}
	}
	if len(readable) == 0 {
		s.noteInboxes(&ov, problems, false)
		return ov, nil
	}
	types, more, typeProblems, err := s.readTypes(ctx,
		`select type, runnable, leased, parked, oldest_due from workflow.namespace_type_depths($1::text[])`,
		`select type, bucket, succeeded, ended_otherwise from workflow.finished_last_hour($1::text[])`,
		readable)
	if err != nil {
		return ov, err
	}
	ov.Types, ov.MoreTypes = types, more
	s.noteInboxes(&ov, append(problems, typeProblems...), false)
	return ov, nil
}
