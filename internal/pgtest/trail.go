package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// StartedWith reports whether run next's latest started event was written
// by the transaction that wrote run prev's latest succeeded event (the two
// rows have one xmin): next was handed off by prev's completion. Batch rows
// (workflow_event.run_ids) count for every run they name.
func StartedWith(ctx context.Context, t *testing.T, pool *pgxpool.Pool, prev, next string) bool {
	t.Helper()
	var same bool
	if err := pool.QueryRow(ctx, `select
		(select max(e.xmin::text::bigint) from workflow.workflow_event e
		 where (e.workflow_id = $1 or $1 = any (e.run_ids)) and e.event_type = 'succeeded')
		= (select max(e.xmin::text::bigint) from workflow.workflow_event e
		   where (e.workflow_id = $2 or $2 = any (e.run_ids)) and e.event_type = 'started')`,
		prev, next).Scan(&same); err != nil {
		t.Fatalf("the transactions of %s's end and %s's start: %v", prev, next, err)
	}
	return same
}
