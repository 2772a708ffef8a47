package engine_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// workflow.queue_depth gives, for one pool, the numbers the autoscaler
// scales by: literal prefixes, counted once however many match; runnable
// only when due and claimable by the runtime; parked runs left out.
func TestQueueDepthFunction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	future := time.Now().Add(time.Hour)
	for range 3 {
		b.create(t, engine.CreateParams{Type: "qd.a.v1"})
	}
	b.create(t, engine.CreateParams{Type: "qd.b.v1"})
	b.create(t, engine.CreateParams{Type: "qd.a.v1", RunAt: &future}) // not due
	b.create(t, engine.CreateParams{Type: "qd.py.v1"})                // python only
	b.create(t, engine.CreateParams{Type: "qd.off.v1"})               // disabled
	b.create(t, engine.CreateParams{Type: "qdx.a.v1"})                // other prefix
	b.create(t, engine.CreateParams{Type: "q_d.a.v1"})
	b.create(t, engine.CreateParams{Type: "qxd.a.v1"}) // '_' is literal
	deleted := b.create(t, engine.CreateParams{Type: "qd.a.v1"})
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_run set deleted_at = now(), status = 'cancelled'
		where id = $1`, deleted); err != nil {
		t.Fatal(err)
	}
	for _, e := range []engine.RegistryEntry{
		{WorkflowName: "qd.py.v1", Runtime: "python", Enabled: true},
		{WorkflowName: "qd.off.v1", Runtime: "go", Enabled: false},
	} {
		if err := b.eng.UpsertRegistryEntry(b.ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	b.claim(t, "w", []string{"qd.a."}, 1) // one leased
	// A parked run (waiting for a signal) is pending with run_at far away.
	parked := b.claim(t, "w", []string{"qd.b."}, 1)[0]
	if _, err := b.eng.ParkRun(b.ctx, engine.ParkParams{LeaseRef: engine.LeaseRef{ID: parked.ID, Token: parked.LeaseToken},
		WorkerID: "w", Kind: engine.StepKindSignal, Step: "wait", Position: 0, Signal: "go"}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		prefixes         []string
		runtime          *string
		runnable, leased int64
	}{
		{[]string{"qd."}, ptr("go"), 2, 1},
		{[]string{"qd.%"}, ptr("go"), 2, 1},                    // a trailing % means the same
		{[]string{"qd.", "qd.a.", "qd.a.v1"}, ptr("go"), 2, 1}, // counted once
		{[]string{"qd."}, ptr("python"), 3, 1},
		{[]string{"qd."}, nil, 3, 1}, // any runtime; still not the disabled type
		{[]string{"q_"}, ptr("go"), 1, 0},
		{[]string{"q%d."}, ptr("go"), 0, 0}, // "%" inside is literal too
		{[]string{"nothing."}, ptr("go"), 0, 0},
		{[]string{}, ptr("go"), 0, 0},
	} {
		var runnable, leased int64
		if err := b.pool.QueryRow(b.ctx, `select runnable, leased from workflow.queue_depth($1, $2)`,
			c.prefixes, c.runtime).Scan(&runnable, &leased); err != nil {
			t.Fatal(err)
		}
		if runnable != c.runnable || leased != c.leased {
			t.Errorf("queue_depth(%q, %v) = %d runnable, %d leased; want %d, %d",
				c.prefixes, orNull(c.runtime), runnable, leased, c.runnable, c.leased)
		}
	}
}

func orNull(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

// A claim reads the runs of its own types only: thousands of older runs of
// other types ahead in the queue are not visited, and claim order (priority,
// then age) holds across the pool's types.
func TestClaimReadsOnlyItsOwnTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, priority, created_at)
		select 'other.t' || (i % 10) || '.v1', 1, now() - interval '1 hour'
		from generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, "analyze workflow.workflow_run"); err != nil {
		t.Fatal(err)
	}
	prio := func(n int) *int { return &n }
	a1 := b.create(t, engine.CreateParams{Type: "mine.a.v1", Priority: prio(50)})
	b1 := b.create(t, engine.CreateParams{Type: "mine.b.v1", Priority: prio(10)})
	a2 := b.create(t, engine.CreateParams{Type: "mine.a.v1", Priority: prio(10)})
	b2 := b.create(t, engine.CreateParams{Type: "mine.b.v1", Priority: prio(50)})
	b.create(t, engine.CreateParams{Type: "mine_x.a.v1", Priority: prio(1)}) // not under "mine."

	for _, types := range [][]string{nil, {"mine.a.v1", "mine.b.v1", "other.t1.v1"}} {
		var got []string
		read := rowsRead(t, b, func(tx pgx.Tx) error {
			rows, err := tx.Query(b.ctx, `select id from workflow.claim_runs('w', '{mine.}', 'go', 3, 30000, $1)`, types)
			if err != nil {
				return err
			}
			got, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if len(got) != 3 || got[0] != b1 || got[1] != a2 || got[2] != a1 {
			t.Errorf("types %v: claimed %v, want %v (priority, then age, across types)", types, got, []string{b1, a2, a1})
		}
		if read > 100 {
			t.Errorf("types %v: the claim read %d rows of workflow_run; it should read only its own types' runs", types, read)
		}
	}
	_ = b2

	// The depth of the pool reads its own types' runs only, not the 20,000
	// others.
	var runnable, leased int64
	read := rowsRead(t, b, func(tx pgx.Tx) error {
		return tx.QueryRow(b.ctx, `select runnable, leased from workflow.queue_depth('{mine.}', 'go')`).Scan(&runnable, &leased)
	})
	if runnable != 4 || leased != 0 || read > 100 {
		t.Errorf("queue_depth(mine.) = %d runnable, %d leased, reading %d rows of workflow_run; want 4, 0, a few rows", runnable, leased, read)
	}
}

// rowsRead runs do in a transaction (rolled back) on a connection of its
// own, whose statistics start from nothing, and returns how many rows of
// workflow_run it read (by sequential scans, and fetched through indexes).
func rowsRead(t *testing.T, b *bundle, do func(pgx.Tx) error) int64 {
	t.Helper()
	conn, err := pgx.Connect(b.ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(b.ctx)
	tx, err := conn.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	if err := do(tx); err != nil {
		t.Fatal(err)
	}
	var read int64
	if err := tx.QueryRow(b.ctx, `select pg_stat_get_xact_tuples_returned('workflow.workflow_run'::regclass)
		+ pg_stat_get_xact_tuples_fetched('workflow.workflow_run'::regclass)`).Scan(&read); err != nil {
		t.Fatal(err)
	}
	return read
}
