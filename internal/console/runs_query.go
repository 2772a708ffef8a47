package console

import (
	"context"
	"fmt"
	"strings"
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

// runColumns are the columns of a runRow, of the run r.
const runColumns = `r.id::text, r.type, r.status, r.attempt, r.max_attempts,
       coalesce(r.source_namespace, ''), coalesce(r.source_name, ''),
       r.created_at, r.finished_at, coalesce(r.wait_kind, ''),
       r.deleted_at is not null, coalesce(left(r.last_error, 200), '')`

// statusCondition is the fixed condition of a status filter. A pending or
// leased run is never soft-deleted (a soft delete cancels it), so saying so
// lets the queue's indexes, which leave soft-deleted rows out, serve it.
func statusCondition(status string) (string, bool) {
	switch status {
	case "pending":
		return `r.status = 'pending' and r.deleted_at is null`, true
	case "leased":
		return `r.status = 'leased' and r.deleted_at is null`, true
	case "succeeded":
		return `r.status = 'succeeded'`, true
	case "failed":
		return `r.status = 'failed'`, true
	case "cancelled":
		return `r.status = 'cancelled'`, true
	}
	return "", false
}

// listRuns returns a page of runs matching f, newest first, and the cursor
// of the next page (empty on the last). The statement is put together from
// fixed fragments, one per filter that is set; every value is a parameter
// (the status filter is the fixed condition of a known status).
//
// A namespace or a status other than succeeded, without a type prefix, has
// an index in the list's order, or one that narrows it to a few rows:
// idx_workflow_run_namespace_created, idx_workflow_run_ended_badly (failed
// or cancelled) and the queue's own indexes (pending or leased). Otherwise
// the page merges three newest-first reads, each bounded by the page size
// (see migration 0021): the finished runs of each type under the prefix
// (every type without one) from idx_workflow_run_type_created, the types
// found one index probe each (a skip scan); the pending runs of each type
// and priority from the claim index, found the same way; and the leased
// runs, as many as workers hold.
//
// A viewer without the inbox-wide permission sees only runs of the
// namespaces it may read (a run with no Kubernetes source is not one).
func listRuns(ctx context.Context, db *pgxpool.Pool, f runFilter, a access) ([]runRow, string, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if !a.all {
		readable := a.list()
		if f.Namespace != "" && !a.may(f.Namespace) || len(readable) == 0 {
			return nil, "", nil
		}
		where = append(where, "r.source_namespace = any("+arg(readable)+"::text[])")
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
	status, _ := statusCondition(f.Status)
	limit := arg(pageSize + 1)
	and := func(conds ...string) string {
		var all []string
		for _, c := range conds {
			if c != "" {
				all = append(all, c)
			}
		}
		return strings.Join(append(all, where...), "\n      and ")
	}
	newest := "\n    order by r.created_at desc, r.id desc\n    limit " + limit
	var sql string
	if f.Prefix == "" && (f.Namespace != "" || (f.Status != "" && f.Status != "succeeded")) {
		sql = "select " + runColumns + "\nfrom workflow.workflow_run r\nwhere " + and(status) + newest
	} else {
		// Types hold only a-z, 0-9, '_' and '.': every type under the
		// prefix sorts (collation C) between it and it followed by DEL.
		lo, hi := arg(f.Prefix), arg(f.Prefix+"\x7f")
		under := `r.type collate "C" >= ` + lo + ` and r.type collate "C" < ` + hi
		const finished = `r.status in ('succeeded', 'failed', 'cancelled')`
		// The claim index's own predicate, so that it serves.
		const pending = `coalesce(r.status, '') = 'pending' and r.deleted_at is null`
		var parts []string
		if f.Status == "" || f.Status == "succeeded" || f.Status == "failed" || f.Status == "cancelled" {
			parts = append(parts, `select r.* from fin cross join lateral (
    select `+runColumns+`
    from workflow.workflow_run r
    where `+and(`r.type collate "C" = fin.type`, finished, status)+newest+`
) r where fin.type is not null`)
		}
		if f.Status == "" || f.Status == "pending" {
			parts = append(parts, `select r.* from pend cross join lateral (
    select `+runColumns+`
    from workflow.workflow_run r
    where `+and(`r.type collate "C" = pend.type and r.priority = pend.priority`, pending)+newest+`
) r`)
		}
		if f.Status == "" || f.Status == "leased" {
			parts = append(parts, `(select `+runColumns+`
    from workflow.workflow_run r
    where `+and(`r.status = 'leased' and r.deleted_at is null`, under)+newest+`)`)
		}
		sql = `with recursive fin as (
    (select r.type collate "C" as type from workflow.workflow_run r
     where ` + finished + ` and ` + under + `
     order by 1 limit 1)
    union all
    select (select r.type collate "C" from workflow.workflow_run r
            where ` + finished + ` and r.type collate "C" > fin.type and r.type collate "C" < ` + hi + `
            order by 1 limit 1)
    from fin where fin.type is not null
), pend as (
    (select r.type collate "C" as type, r.priority from workflow.workflow_run r
     where ` + pending + ` and ` + under + `
     order by 1, 2 limit 1)
    union all
    select x.type, x.priority from pend cross join lateral (
        select r.type collate "C" as type, r.priority from workflow.workflow_run r
        where ` + pending + ` and (r.type collate "C", r.priority) > (pend.type, pend.priority)
          and r.type collate "C" < ` + hi + `
        order by 1, 2 limit 1) x
)
select * from (
` + strings.Join(parts, "\nunion all\n") + `
) u
order by 8 desc, 1 desc
limit ` + limit
	}
	rows, err := db.Query(ctx, sql, args...)
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
