package console

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// runRow is one line of the runs page.
type runRow struct {
	ID          string
	Type        string
	Status      string
	Attempt     int
	MaxAttempts int
	Namespace   string
	Name        string
	CreatedAt   time.Time
	FinishedAt  *time.Time
	WaitKind    string
	Deleted     bool
	Error       string
	// Inbox names the inbox database the run is in.
	Inbox string
}

// listRuns returns a page of runs matching f, newest first, and the cursor
// of the next page (empty on the last), from workflow.list_runs_newest:
// that function picks the form of the read that an index serves (see its
// header in the schema file); every value is a parameter, and a filter that
// is not set is null.
//
// A viewer without the inbox-wide permission sees only runs of the
// namespaces it may read (every run has one, SQL producers' runs too).
//
// With several inboxes, each is read with the same cursor and the pages
// are merged, newest first: the page is the newest pageSize runs of all of
// them after the cursor, and the next page goes on from its last run. The
// inboxes that could not be read are returned beside it.
func (s *Server) listRuns(ctx context.Context, f runFilter, a access) ([]runRow, string, []inboxProblem, error) {
	all, problems, err := s.mergedRuns(ctx, f, a, pageSize+1)
	if err != nil {
		return nil, "", problems, err
	}
	next := ""
	if len(all) > pageSize {
		all = all[:pageSize]
		last := all[pageSize-1]
		next = engine.EncodeCursor(last.CreatedAt, last.ID)
	}
	return all, next, problems, nil
}

// mergedRuns reads up to limit runs of every inbox that f selects and the
// viewer may read, and merges them newest first (as each inbox's are:
// created_at desc, id desc). The inboxes that could not be read are
// returned beside them, also when the viewer may read nothing.
func (s *Server) mergedRuns(ctx context.Context, f runFilter, a access, limit int) ([]runRow, []inboxProblem, error) {
	var namespaces []string // nil: every run
	if !a.all {
		namespaces = a.list()
		if f.Namespace != "" && !a.may(f.Namespace) || len(namespaces) == 0 {
			_, down := s.inboxes.current()
			return nil, down, nil
		}
	}
	var mu sync.Mutex
	var all []runRow
	problems, err := s.each(ctx, func(ctx context.Context, src *source) error {
		runs, err := listInboxRuns(ctx, src, f, namespaces, limit)
		mu.Lock()
		all = append(all, runs...)
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, problems, err
	}
	slices.SortFunc(all, func(x, y runRow) int {
		if c := y.CreatedAt.Compare(x.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(y.ID, x.ID)
	})
	return all, problems, nil
}

// listInboxRuns reads up to limit runs of one inbox, newest first.
func listInboxRuns(ctx context.Context, src *source, f runFilter, namespaces []string, limit int) ([]runRow, error) {
	orNull := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	timeOrNull := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t
	}
	var beforeAt any
	if f.AfterID != "" {
		beforeAt = f.AfterAt
	}
	rows, err := src.db.Query(ctx, `
select id::text, type, status, attempt, max_attempts, namespace, coalesce(source_name, ''),
       created_at, finished_at, coalesce(wait_kind, ''), deleted_at is not null, coalesce(last_error, '')
from workflow.list_runs_newest($1::text, $2::text, $3::text, $4::text[], $5::timestamptz, $6::timestamptz,
                               $7::timestamptz, $8::uuid, $9::integer)`,
		orNull(f.Prefix), orNull(f.Status), orNull(f.Namespace), namespaces, timeOrNull(f.From), timeOrNull(f.To),
		beforeAt, orNull(f.AfterID), limit)
	if err != nil {
		return nil, fmt.Errorf("list runs of inbox %s: %w", src.name, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (runRow, error) {
		r := runRow{Inbox: src.name}
		err := row.Scan(&r.ID, &r.Type, &r.Status, &r.Attempt, &r.MaxAttempts, &r.Namespace, &r.Name,
			&r.CreatedAt, &r.FinishedAt, &r.WaitKind, &r.Deleted, &r.Error)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("list runs of inbox %s: %w", src.name, err)
	}
	return out, nil
}
