package engine_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// workflow.queue_depth with a cap counts each of runnable and leased up to
// it and reads no further: a pool's evaluation costs what the pool can use,
// not its backlog. Without a cap (null, or the two-argument form) the count
// is exact; a cap below 1 is refused.
func TestQueueDepthCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type)
		select 'cap.t' || (i % 4) || '.v1' from generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	// Vacuumed: the counts are index-only, reading no table rows, so what
	// they read is measured on the index itself (depthEntriesRead).
	if _, err := b.pool.Exec(b.ctx, "vacuum analyze workflow.workflow_run"); err != nil {
		t.Fatal(err)
	}
	b.claim(t, "w", []string{"cap."}, 12)

	for _, c := range []struct {
		query            string
		args             []any
		runnable, leased int64
	}{
		{`select runnable, leased from workflow.queue_depth('{cap.}', 'go')`, nil, 19988, 12},
		{`select runnable, leased from workflow.queue_depth('{cap.}', 'go', null)`, nil, 19988, 12},
		{`select runnable, leased from workflow.queue_depth('{cap.}', 'go', $1)`, []any{int64(50)}, 50, 12},
		{`select runnable, leased from workflow.queue_depth('{cap.}', 'go', $1)`, []any{int64(10)}, 10, 10},
		{`select runnable, leased from workflow.queue_depth('{cap.}', 'go', $1)`, []any{int64(1)}, 1, 1},
		{`select runnable, leased from workflow.queue_depth('{cap.}', 'go', $1)`, []any{int64(1) << 62}, 19988, 12},
		{`select runnable, leased from workflow.queue_depth('{nothing.}', 'go', $1)`, []any{int64(5)}, 0, 0},
	} {
		var runnable, leased int64
		var rows, entries int64
		rows = rowsRead(t, b, func(tx pgx.Tx) error {
			err := tx.QueryRow(b.ctx, c.query, c.args...).Scan(&runnable, &leased)
			if err == nil {
				entries = depthEntriesRead(t, b, tx)
			}
			return err
		})
		if runnable != c.runnable || leased != c.leased {
			t.Errorf("%s %v = %d runnable, %d leased; want %d, %d", c.query, c.args, runnable, leased, c.runnable, c.leased)
		}
		// The types are found with a few probes; then at most the cap of
		// each count is read, from the index (an exact count reads them
		// all, which shows the measure works).
		if limit := c.runnable + c.leased + 50; entries > limit || entries < c.runnable+c.leased || rows > limit {
			t.Errorf("%s %v read %d entries of idx_workflow_run_depth and %d rows of workflow_run; want %d to %d entries, at most %d rows",
				c.query, c.args, entries, rows, c.runnable+c.leased, limit, limit)
		}
	}

	for _, bad := range []int64{0, -1, -1 << 63} {
		_, err := b.pool.Exec(b.ctx, `select * from workflow.queue_depth('{cap.}', 'go', $1)`, bad)
		if sqlState(err) != "SW001" {
			t.Errorf("queue_depth with cap %d: %v, want SQLSTATE SW001", bad, err)
		}
	}

	// The engine passes each pool's cap; 0 counts exactly.
	got, err := b.eng.QueueDepths(b.ctx, []engine.PoolQuery{
		{TypePrefixes: []string{"cap."}, Runtime: "go", Cap: 100},
		{TypePrefixes: []string{"cap."}, Runtime: "go"},
		{TypePrefixes: []string{"cap.t1.", "cap.t"}, Runtime: "go", Cap: 7},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.QueueDepth{{Runnable: 100, Leased: 12}, {Runnable: 19988, Leased: 12}, {Runnable: 7, Leased: 7}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("pool %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := b.eng.QueueDepths(b.ctx, []engine.PoolQuery{{TypePrefixes: []string{"cap."}, Cap: -1}}); err == nil {
		t.Error("QueueDepths with a negative cap: no error")
	}
}

// depthEntriesRead returns how many entries of idx_workflow_run_depth the
// transaction has read so far (on a connection whose statistics started
// from nothing, as rowsRead's).
func depthEntriesRead(t *testing.T, b *bundle, tx pgx.Tx) int64 {
	t.Helper()
	var n int64
	if err := tx.QueryRow(b.ctx, `select pg_stat_get_xact_tuples_returned('workflow.idx_workflow_run_depth'::regclass)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
