package engine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// A DAG step's end, made by complete_runs (generic plans, nested loops
// off, which children_finished and dags_advance inherit), reads the DAG's steps by
// their parent's index, never by a scan of every run: each plan of every
// statement it runs is read from auto_explain. The premise is asserted too:
// with statistics taken while a few workflows had many steps, the same read,
// planned generically with nested loops off, scans the table.
func TestDAGStepEndsReadTheirDAGByIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var chain []engine.DAGStepDefinition
	for i := range 10 {
		s := step(fmt.Sprintf("s%d", i), "dagplanstep.s.v1")
		if i > 0 {
			s.DependsOn = []string{fmt.Sprintf("s%d", i-1)}
		}
		chain = append(chain, s)
	}
	b.register(t, "dagplan.chain.v1", chain...)
	var wide []engine.DAGStepDefinition
	for i := range 100 {
		wide = append(wide, step(fmt.Sprintf("w%d", i), "dagplanwide.w.v1"))
	}
	b.register(t, "dagplan.wide.v1", wide...)
	_, exec := session(t, b.ctx, b.pool)
	// Statistics taken while two wide workflows held every step (two
	// parents, 100 steps each), kept (no autovacuum in this test's
	// database): a generic plan then expects a parent to have 100 steps.
	exec(`alter table workflow.workflow_run set (autovacuum_enabled = false)`)
	exec(`insert into workflow.workflow_run (type) select 'dagplan.wide.v1' from generate_series(1, 2)`)
	exec(`analyze workflow.workflow_run`)
	exec(`insert into workflow.workflow_run (type) select 'dagplan.chain.v1' from generate_series(1, 40)`)
	// Eight steps of each chain done: 360 steps' runs under 40 workflows.
	for range 8 {
		if got := b.work(t, "dagplanstep."); len(got) != 40 {
			t.Fatalf("a round worked %d steps, want 40", len(got))
		}
	}

	conn, notices, set := b.noticeConn(t)

	// The premise.
	set(`set plan_cache_mode = force_generic_plan`, `set enable_nestloop = off`)
	var parent string
	if err := conn.QueryRow(b.ctx, `select id from workflow.workflow_run where type = 'dagplan.chain.v1' limit 1`).Scan(&parent); err != nil {
		t.Fatal(err)
	}
	if p := genericPlan(t, b.ctx, conn, "by_parent", `select c.id from workflow.workflow_run c
		where c.parent_id = $1 and c.status in ('pending', 'leased')`, parent); !strings.Contains(p, "Seq Scan on workflow_run") {
		t.Fatalf("these statistics no longer make a generic read by parent scan the table, so the functions are not put to the test:\n%s", p)
	}
	set(`reset plan_cache_mode`, `reset enable_nestloop`)

	set(`load 'auto_explain'`, `set auto_explain.log_min_duration = 0`,
		`set auto_explain.log_nested_statements = on`, `set auto_explain.log_level = notice`)
	// The ninth steps (each starts the tenth), then the tenth (each ends its
	// workflow), ten of each in one call, twice (a plan is cached from the
	// sixth call on).
	for _, round := range []string{"ninth", "tenth"} {
		steps := b.claim(t, "w1", []string{"dagplanstep."}, 100)
		if len(steps) != 40 {
			t.Fatalf("%s steps: claimed %d, want 40", round, len(steps))
		}
		for i := 0; i < len(steps); i += 10 {
			notices()
			ids, tokens, results := make([]string, 10), make([]int64, 10), make([]string, 10)
			for j, c := range steps[i : i+10] {
				ids[j], tokens[j], results[j] = c.ID, c.LeaseToken, `{"ok": true}`
			}
			var n int
			if err := conn.QueryRow(b.ctx, `select count(*) from workflow.complete_runs('w1', $1::uuid[], $2, $3::jsonb[])`,
				ids, tokens, results).Scan(&n); err != nil || n != 10 {
				t.Fatalf("%s steps %d-%d: completed %d (%v)", round, i, i+9, n, err)
			}
			all := notices()
			if !strings.Contains(all, "dags_advance") && !strings.Contains(all, "dag_ready_steps") && round == "ninth" {
				t.Fatalf("no plan of dags_advance's statements was logged:\n%s", all)
			}
			if strings.Contains(all, "Seq Scan on workflow_run") {
				t.Fatalf("ending %s steps read every run:\n%s", round, all)
			}
		}
	}
	var open int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run
		where type = 'dagplan.chain.v1' and status <> 'succeeded'`).Scan(&open); err != nil || open != 0 {
		t.Fatalf("%d workflows did not succeed (%v)", open, err)
	}
}
