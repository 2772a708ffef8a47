package console

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
}

// listRuns returns a page of runs matching f, newest first, and the cursor
// of the next page (empty on the last), from workflow.list_runs_newest:
// that function picks the form of the read that an index serves (see its
// header in the schema file); every value is a parameter, and a filter that
// is not set is null.
//
// A viewer without the inbox-wide permission sees only runs of the
// namespaces it may read (every run has one, SQL producers' runs too).
func listRuns(ctx context.Context, db *pgxpool.Pool, f runFilter, a access) ([]runRow, string, error) {
	var namespaces []string // nil: every run
	if !a.all {
		namespaces = a.list()
		if f.Namespace != "" && !a.may(f.Namespace) || len(namespaces) == 0 {
			return nil, "", nil
		}
	}
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
	rows, err := db.Query(ctx, `
select id::text, type, status, attempt, max_attempts, namespace, coalesce(source_name, ''),
       created_at, finished_at, coalesce(wait_kind, ''), deleted_at is not null, coalesce(last_error, '')
from workflow.list_runs_newest($1::text, $2::text, $3::text, $4::text[], $5::timestamptz, $6::timestamptz,
                               $7::timestamptz, $8::uuid, $9::integer)`,
		orNull(f.Prefix), orNull(f.Status), orNull(f.Namespace), namespaces, timeOrNull(f.From), timeOrNull(f.To),
		beforeAt, orNull(f.AfterID), pageSize+1)
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (runRow, error) {
		var r runRow
		err := row.Scan(&r.ID, &r.Type, &r.Status, &r.Attempt, &r.MaxAttempts, &r.Namespace, &r.Name,
			&r.CreatedAt, &r.FinishedAt, &r.WaitKind, &r.Deleted, &r.Error)
		return r, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	next := ""
	if len(out) > pageSize {
		out = out[:pageSize]
		last := out[pageSize-1]
		next = engine.EncodeCursor(last.CreatedAt, last.ID)
	}
	return out, next, nil
}
