package engine_test

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The calls a run makes on its way (a producer's create_run and plain
// INSERT, a woken claim, a heartbeat, a journaled step, a completion and a
// failure, and a DAG's step ending, which starts the next one under a
// condition, with a final step declared) call no
// SQL-language function that the server runs as a call of its own: such a
// function (one with a SET clause, or whose body reads a table) is parsed
// and planned again in every statement that calls it, which cost a one-run
// insert about 0.3 ms (caller_namespaces) and every statement about
// 50 µs (workflow.now()). An inlined SQL function is not a call and is not
// counted. Checked for the owner (who acts on every namespace) and for a
// login bound to its namespace as producer and worker, whose calls ask
// which namespaces it acts on; the premise, that the count sees a SQL
// function the server does call, is asserted with run_by_key.
func TestHotPathCallsNoSQLFunction(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	var super bool
	if err := b.pool.QueryRow(b.ctx, "select rolsuper from pg_roles where rolname = current_user").Scan(&super); err != nil {
		t.Fatal(err)
	}
	if !super {
		t.Skip("track_functions is a superuser's setting, and the test server's user is not one")
	}
	// No autovacuum or autoanalyze in this test's database: either would
	// make the sessions plan their statements again while they are counted.
	for _, table := range []string{"workflow_run", "workflow_step", "workflow_claimer"} {
		if _, err := b.pool.Exec(b.ctx, "alter table workflow."+table+" set (autovacuum_enabled = false)"); err != nil {
			t.Fatal(err)
		}
	}
	b.register(t, "hotsql.dag.v1", step("a", "hotsql.a.v1"),
		engine.DAGStepDefinition{Name: "b", Type: "hotsql.b.v1", DependsOn: []string{"a"}, When: "$.steps.a.result.ok == true"},
		engine.DAGStepDefinition{Name: "z", Type: "hotsql.z.v1", Final: true})
	l := b.loginAs(t, engine.RoleProducer, engine.RoleWorker)
	// track_functions is the superuser's to set: for the login's new
	// sessions, through its role.
	if _, err := b.pool.Exec(b.ctx, "alter role "+pgx.Identifier{l.name}.Sanitize()+" set track_functions = 'all'"); err != nil {
		t.Fatal(err)
	}
	l.pool.Reset()

	for _, who := range []struct {
		name string
		conn func(t *testing.T) (*pgx.Conn, func())
	}{
		{"owner", func(t *testing.T) (*pgx.Conn, func()) {
			c, err := b.pool.Acquire(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(b.ctx, "set track_functions = 'all'"); err != nil {
				t.Fatal(err)
			}
			return c.Conn(), c.Release
		}},
		{"bound login", func(t *testing.T) (*pgx.Conn, func()) {
			c, err := l.pool.Acquire(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			return c.Conn(), c.Release
		}},
	} {
		t.Run(who.name, func(t *testing.T) {
			conn, release := who.conn(t)
			defer release()
			// The way six times first, rolled back: a session plans a
			// statement anew for its first five runs before it may keep a
			// generic plan. Then counted.
			for range 6 {
				b.runTheWay(t, conn)
			}
			tx, err := conn.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(b.ctx) }()
			before := b.callsIn(t, tx)
			b.theWay(t, tx)
			after := b.callsIn(t, tx)
			var sqlFns []string
			for name, c := range after {
				// (An immutable function of no argument, far_future, is
				// evaluated once by each planning of a statement that
				// names it, not at each call of the statement.)
				if c.calls > before[name].calls && c.sql && !c.constant {
					sqlFns = append(sqlFns, name)
				}
			}
			for _, want := range []string{"create_run", "claim_runs", "complete_runs", "fail_runs", "heartbeat_runs",
				"record_steps", "dags_advance"} {
				if after[want].calls <= before[want].calls {
					t.Fatalf("the count of calls misses %s: is track_functions on?", want)
				}
			}
			slices.Sort(sqlFns)
			if len(sqlFns) > 0 {
				t.Errorf("the hot path called SQL functions the server plans at every call: %v", sqlFns)
			}
			// The premise: a SQL function with a SET clause is counted.
			if _, err := tx.Exec(b.ctx, `select workflow.run_by_key('hotsql-no-such-key')`); err != nil {
				t.Fatal(err)
			}
			if c := b.callsIn(t, tx)["run_by_key"]; !c.sql || c.calls <= before["run_by_key"].calls {
				t.Fatalf("run_by_key, a SQL function with a SET clause, was not counted (%+v)", c)
			}
		})
	}
}

// fnCalls is what a session has counted of one function.
type fnCalls struct {
	calls    int64
	sql      bool
	constant bool // immutable, of no argument
}

// callsIn reads the calls of the schema's functions counted so far by tx's
// session (this transaction's, and earlier ones' the server has not filed
// yet: callers take differences).
func (b *bundle) callsIn(t *testing.T, tx pgx.Tx) map[string]fnCalls {
	t.Helper()
	rows, err := tx.Query(b.ctx, `
		select p.proname::text, s.calls, l.lanname = 'sql', p.provolatile = 'i' and p.pronargs = 0
		from pg_stat_xact_user_functions s
		join pg_proc p on p.oid = s.funcid
		join pg_language l on l.oid = p.prolang
		where p.pronamespace = 'workflow'::regnamespace`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]fnCalls{}
	for rows.Next() {
		var name string
		var c fnCalls
		if err := rows.Scan(&name, &c.calls, &c.sql, &c.constant); err != nil {
			t.Fatal(err)
		}
		c.calls += got[name].calls // overloads
		got[name] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// runTheWay takes the way in a transaction of conn's that it rolls back.
func (b *bundle) runTheWay(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	tx, err := conn.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	b.theWay(t, tx)
}

// theWay records runs (create_run, a plain INSERT, a DAG's), claims the
// two plain ones woken, heartbeats them, journals a step, completes one
// and fails the other, then ends the DAG's first step so that its second
// starts, all in tx.
func (b *bundle) theWay(t *testing.T, tx pgx.Tx) {
	t.Helper()
	exec := func(what, sql string, args ...any) {
		t.Helper()
		if _, err := tx.Exec(b.ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	exec("create_run", `select * from workflow.create_run('hotsql.run.v1', '{"n": 1}')`)
	exec("plain insert", `insert into workflow.workflow_run (type, payload) values ('hotsql.run.v1', '{"n": 2}')`)
	exec("DAG insert", `insert into workflow.workflow_run (type, payload) values ('hotsql.dag.v1', '{"n": 3}')`)
	runs := b.claimLeases(t, tx, `select id::text, lease_token
		from workflow.claim_runs('hotsql-w', '{hotsql.run.}', null, 10, 30000, null, null, null, true)`)
	if len(runs) != 2 {
		t.Fatalf("claimed %d runs, want the 2 just recorded", len(runs))
	}
	ids, tokens := []string{runs[0].ID, runs[1].ID}, []int64{runs[0].Token, runs[1].Token}
	exec("heartbeat", `select * from workflow.heartbeat_runs('hotsql-w', $1::uuid[], $2, 30000)`, ids, tokens)
	exec("record steps", `select * from workflow.record_steps('hotsql-w', $1::uuid[], $2, $3, $4, $5::jsonb[])`,
		ids[:1], tokens[:1], []string{"s1"}, []int32{0}, []string{`{"n": 1}`})
	exec("complete", `select * from workflow.complete_runs('hotsql-w', $1::uuid[], $2, $3::jsonb[])`,
		ids[:1], tokens[:1], []string{`{"ok": true}`})
	exec("fail", `select * from workflow.fail_runs('hotsql-w', $1::uuid[], $2, $3, $4)`,
		ids[1:], tokens[1:], []string{"boom"}, []bool{true})
	// The DAG's first step ends; its condition lets the second start.
	var step, token string
	if err := tx.QueryRow(b.ctx, `select id::text, lease_token::text
		from workflow.claim_runs('hotsql-w', '{hotsql.a.}', null, 10, 30000)`).Scan(&step, &token); err != nil {
		t.Fatalf("claim the DAG's first step: %v", err)
	}
	exec("complete the DAG's step", `select * from workflow.complete_runs('hotsql-w', array[$1::uuid],
		array[$2::bigint], array['{"ok": true}'::jsonb])`, step, token)
	var next int
	if err := tx.QueryRow(b.ctx, `select count(*) from workflow.workflow_run
		where type = 'hotsql.b.v1' and status = 'pending'`).Scan(&next); err != nil || next != 1 {
		t.Fatalf("the DAG's second step: %d pending (%v), want 1", next, err)
	}
}
