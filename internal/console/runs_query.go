package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	RunAt       time.Time
	WaitKind    string
	Deleted     bool
	Error       string
}

// listRuns returns a page of runs matching f, newest first, and the cursor
// of the next page (empty on the last). The statement is put together from
// fixed fragments, one per filter that is set; every value is a parameter
// (the status filter is the fixed fragment of a known status). Each filter
// has an index in the list's order, or narrows one: idx_workflow_run_created
// (everything, a time window), idx_workflow_run_type_created (a type prefix),
// idx_workflow_run_namespace_created (a namespace),
// idx_workflow_run_ended_badly (failed or cancelled) and the queue's own
// indexes (pending or leased).
func listRuns(ctx context.Context, db *pgxpool.Pool, f runFilter) ([]runRow, string, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.Prefix != "" {
		// Types hold only a-z, 0-9, '_' and '.': every type under the
		// prefix sorts (collation C) between it and it followed by DEL.
		where = append(where, fmt.Sprintf(`r.type collate "C" >= %s and r.type collate "C" < %s`,
			arg(f.Prefix), arg(f.Prefix+"\x7f")))
	}
	if f.Status != "" {
		where = append(where, statusFilters[f.Status])
	}
	if f.Namespace != "" {
		where = append(where, "r.source_namespace = "+arg(f.Namespace))
	}
	if !f.From.IsZero() {
		where = append(where, "r.created_at >= "+arg(f.From))
	}
	if !f.To.IsZero() {
		where = append(where, "r.created_at < "+arg(f.To))
	}
	if f.AfterID != "" {
		where = append(where, fmt.Sprintf("(r.created_at, r.id) < (%s, %s::uuid)", arg(f.AfterAt), arg(f.AfterID)))
	}
	sql := `select r.id::text, r.type, r.status, r.attempt, r.max_attempts,
       coalesce(r.source_namespace, ''), coalesce(r.source_name, ''),
       r.created_at, r.finished_at, r.run_at, coalesce(r.wait_kind, ''),
       r.deleted_at is not null, coalesce(left(r.last_error, 200), '')
from workflow.workflow_run r`
	if len(where) > 0 {
		sql += "\nwhere " + strings.Join(where, "\n  and ")
	}
	sql += "\norder by r.created_at desc, r.id desc\nlimit " + arg(pageSize+1)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (runRow, error) {
		var r runRow
		err := row.Scan(&r.ID, &r.Type, &r.Status, &r.Attempt, &r.MaxAttempts, &r.Namespace, &r.Name,
			&r.CreatedAt, &r.FinishedAt, &r.RunAt, &r.WaitKind, &r.Deleted, &r.Error)
		return r, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	next := ""
	if len(out) > pageSize {
		out = out[:pageSize]
		last := out[pageSize-1]
		next = encodeCursor(last.CreatedAt, last.ID)
	}
	return out, next, nil
}
