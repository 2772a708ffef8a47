package engine_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A worker's session keeps the generic plans of its calls (claim, heartbeat,
// journal, complete, fail, release, and the autoscaler's queue depth) until the run table's statistics
// change. Plans made while the table was small and never analyzed (a fresh
// install whose workers connected before the first runs) must still read it
// by index once it has grown: each plan of every statement those calls run
// is read from auto_explain, with no scan of the run or step table and no
// JIT compilation. The premise is asserted too: a generic read of runs by id
// planned in the same session at the same time scans the table.
func TestWorkerCallsKeepIndexPlansMadeWhileTheTableWasSmall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, exec := session(t, b.ctx, b.pool)
	// No autoanalyze in this test's database: the statistics stay those of
	// a table never analyzed.
	exec(`alter table workflow.workflow_run set (autovacuum_enabled = false)`)
	exec(`alter table workflow.workflow_step set (autovacuum_enabled = false)`)
	conn, notices, set := b.noticeConn(t)

	// cycle claims up to n runs on conn and puts them through every worker
	// call: a heartbeat, a journaled step each, then a third completed, a
	// third failed (to be retried) and the rest released.
	cycle := func(n int) int {
		t.Helper()
		runs := b.claimLeases(t, conn, `select id::text, lease_token from workflow.claim_runs('plan-w', '{plancache.}', null, $1, 30000)`, n)
		ids, tokens := make([]string, len(runs)), make([]int64, len(runs))
		names, positions, outputs := make([]string, len(runs)), make([]int32, len(runs)), make([]string, len(runs))
		for i, r := range runs {
			ids[i], tokens[i] = r.ID, r.Token
			names[i], positions[i], outputs[i] = "s1", 0, `{"n": 1}`
		}
		call := func(what, sql string, args ...any) {
			t.Helper()
			var got int
			if err := conn.QueryRow(b.ctx, sql, args...).Scan(&got); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		call("heartbeat", `select count(*) from workflow.heartbeat_runs('plan-w', $1::uuid[], $2, 30000)`, ids, tokens)
		call("record steps", `select count(*) from workflow.record_steps('plan-w', $1::uuid[], $2, $3, $4, $5::jsonb[])`,
			ids, tokens, names, positions, outputs)
		third := len(runs) / 3
		results := make([]string, third)
		for i := range results {
			results[i] = `{"ok": true}`
		}
		call("complete", `select count(*) from workflow.complete_runs('plan-w', $1::uuid[], $2, $3::jsonb[])`,
			ids[:third], tokens[:third], results)
		errs, retry := make([]string, third), make([]bool, third)
		for i := range errs {
			errs[i], retry[i] = "boom", true
		}
		call("fail", `select count(*) from workflow.fail_runs('plan-w', $1::uuid[], $2, $3, $4)`,
			ids[third:2*third], tokens[third:2*third], errs, retry)
		call("release", `select count(*) from workflow.release_runs('plan-w', $1::uuid[], $2)`,
			ids[2*third:], tokens[2*third:])
		call("queue depth", `select count(*) from workflow.queue_depth('{plancache.}')`)
		return len(runs)
	}

	exec(`insert into workflow.workflow_run (type) select 'plancache.a.v1' from generate_series(1, 9)`)
	// Twice: the second call of each uses the plans the first made.
	if got := cycle(9); got != 9 {
		t.Fatalf("first cycle claimed %d runs, want 9", got)
	}
	set(`set plan_cache_mode = force_generic_plan`, `set enable_nestloop = off`)
	// Planned now, with the table small.
	genericPlan(t, b.ctx, conn, "by_ids", `select r.id from workflow.workflow_run r
		where r.id = any ($1::uuid[]) and coalesce(r.status, '') = 'leased'`, "{}")
	cycle(9)

	exec(`insert into workflow.workflow_run (type) select 'plancache.a.v1' from generate_series(1, 20000)`)
	if p := explainPrepared(t, b.ctx, conn, "by_ids", "{}"); !strings.Contains(p, "Seq Scan on workflow_run") {
		t.Fatalf("a generic read by id planned while the table was small no longer scans it once grown, so the worker calls are not put to the test:\n%s", p)
	}
	set(`reset plan_cache_mode`, `reset enable_nestloop`)

	set(`load 'auto_explain'`, `set auto_explain.log_min_duration = 0`,
		`set auto_explain.log_nested_statements = on`, `set auto_explain.log_level = notice`)
	notices()
	for round := range 3 {
		if got := cycle(60); got != 60 {
			t.Fatalf("round %d claimed %d runs, want 60", round, got)
		}
		all := notices()
		for _, call := range []string{"claim_runs", "heartbeat_runs", "record_steps", "complete_runs", "fail_runs", "release_runs", "queue_depth"} {
			if !strings.Contains(all, call) {
				t.Fatalf("round %d: no plan of a %s call was logged", round, call)
			}
		}
		for _, bad := range []string{"Seq Scan on workflow_run", "Seq Scan on workflow_step", "JIT:"} {
			if strings.Contains(all, bad) {
				t.Fatalf("round %d: a worker call's plan holds %q:\n%s", round, bad, excerpt(all, bad))
			}
		}
	}
}

// excerpt returns the plan of all that holds what, with a few lines around.
func excerpt(all, what string) string {
	i := strings.Index(all, what)
	start := strings.LastIndex(all[:i], "Query Text:")
	if start < 0 {
		start = max(0, i-2000)
	}
	end := min(len(all), i+500)
	return fmt.Sprintf("...%s...", all[start:end])
}

// Every function that forces generic plans keeps them from depending on the
// statistics they were made with: sequential scans off, and JIT off (the
// scan of a table with no other path would otherwise cost enough to start
// the compiler on every call).
func TestGenericPlansNeverScanWholeTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rows, err := b.pool.Query(b.ctx, `
		select p.proname::text, coalesce(p.proconfig, '{}')
		from pg_proc p
		where p.pronamespace = 'workflow'::regnamespace
		  and 'plan_cache_mode=force_generic_plan' = any (p.proconfig)
		order by 1`)
	if err != nil {
		t.Fatal(err)
	}
	type fn struct {
		Name   string
		Config []string
	}
	fns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fn])
	if err != nil {
		t.Fatal(err)
	}
	// The hot calls of section 9 of the schema file, by name: a name
	// dropped from its list, or swapped for another, fails here.
	hot := []string{"active_types", "claim_runs", "complete_runs", "fail_runs", "heartbeat_runs",
		"lock_parents", "queue_depth", "record_steps", "release_runs"}
	var names []string
	for _, f := range fns {
		names = append(names, f.Name)
	}
	for _, h := range hot {
		if !slices.Contains(names, h) {
			t.Errorf("%s does not force generic plans (those that do: %v)", h, names)
		}
	}
	for _, f := range fns {
		for _, want := range []string{"enable_seqscan=off", "jit=off"} {
			if !slices.Contains(f.Config, want) {
				t.Errorf("%s forces generic plans without %s (its settings: %v)", f.Name, want, f.Config)
			}
		}
	}
}

// A planner method turned off is a cost so large that any plan paying it
// crosses jit_above_cost: without JIT off too, the statement would be
// compiled on every call (1.7 s for flow_admit's deciding statement when
// called with JIT on). Every function that turns a method off turns JIT off.
func TestFunctionsThatTurnAPlannerMethodOffTurnJITOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var checked int
	var missing []string
	if err := b.pool.QueryRow(b.ctx, `
		select count(*), coalesce(array_agg(p.proname::text order by p.proname)
		                          filter (where not 'jit=off' = any (p.proconfig)), '{}')
		from pg_proc p
		where p.pronamespace = 'workflow'::regnamespace
		  and exists (select 1 from unnest(p.proconfig) c where c ~ '^enable_[a-z_]+=(off|false|0)$')`).Scan(&checked, &missing); err != nil {
		t.Fatal(err)
	}
	if checked < 12 {
		t.Fatalf("%d functions turn a planner method off; want at least the 9 hot calls, flow_admit, dag_advance, dags_advance and children_finished", checked)
	}
	if len(missing) > 0 {
		t.Errorf("these functions turn a planner method off and leave JIT on: %v", missing)
	}
}
