package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The writes that check a worker's lease (journaled steps, heartbeats,
// failures, hand-backs) find a batch's runs by primary key, whatever the
// statistics say. Here they are those of a table analyzed while no run was
// leased, as when a queue fills up and is then worked: the partial index of
// leased runs then looks nearly empty, and a plan through it read every
// leased run of every worker and compared each with the whole batch; and a
// join of the batch with the whole table (nested loops off) read every
// run of it.
func TestLeaseChecksFindTheirRunsByPrimaryKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, exec := session(t, b.ctx, b.pool)
	exec(`insert into workflow.workflow_run (type) select 'plan.lease.v1' from generate_series(1, 20000)`)
	exec(`vacuum analyze workflow.workflow_run`)
	runs, err := b.eng.ClaimRuns(b.ctx, engine.ClaimParams{WorkerID: "plan-worker", Types: []string{"plan.lease.v1"},
		Runtime: engine.RuntimeGo, Limit: 1000, LeaseDuration: time.Minute})
	if err != nil || len(runs) != 1000 {
		t.Fatalf("claimed %d runs (%v), want 1000", len(runs), err)
	}

	// Every statement the functions run, with its plan, as a notice.
	conn, notices, setAll := b.noticeConn(t)
	setAll(`load 'auto_explain'`, `set auto_explain.log_min_duration = 0`,
		`set auto_explain.log_nested_statements = on`, `set auto_explain.log_level = notice`)
	ids := make([]string, 300)
	tokens := make([]int64, len(ids))
	for i := range ids {
		ids[i], tokens[i] = runs[i].ID, runs[i].LeaseToken
	}
	names, positions, outputs := make([]string, len(ids)), make([]int32, len(ids)), make([]string, len(ids))
	errs, retryable := make([]string, 100), make([]bool, 100)
	for i := range ids {
		names[i], outputs[i] = "s", "{}"
	}
	for i := range errs {
		errs[i], retryable[i] = "boom", true
	}
	calls := []struct {
		name string
		sql  string
		args []any
	}{
		{"record_steps", `select count(*) from workflow.record_steps($1, $2::uuid[], $3, $4, $5, $6::jsonb[])`,
			[]any{"plan-worker", ids, tokens, names, positions, outputs}},
		{"heartbeat_runs", `select count(*) from workflow.heartbeat_runs($1, $2::uuid[], $3, 60000)`,
			[]any{"plan-worker", ids, tokens}},
		{"fail_runs", `select count(*) from workflow.fail_runs($1, $2::uuid[], $3, $4, $5)`,
			[]any{"plan-worker", ids[:100], tokens[:100], errs, retryable}},
		{"release_runs", `select count(*) from workflow.release_runs($1, $2::uuid[], $3)`,
			[]any{"plan-worker", ids[100:200], tokens[100:200]}},
	}
	for _, c := range calls {
		notices()
		var n int
		if err := conn.QueryRow(b.ctx, c.sql, c.args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n == 0 {
			t.Fatalf("%s answered nothing", c.name)
		}
		all := notices()
		if strings.Contains(all, "idx_workflow_run_lease_until") {
			t.Errorf("%s reads its runs through the index of every leased run:\n%s", c.name, all)
		}
		if !strings.Contains(all, "workflow_run_pkey") {
			t.Errorf("%s does not read its runs by primary key:\n%s", c.name, all)
		}
		if strings.Contains(all, "Seq Scan on workflow_run") {
			t.Errorf("%s reads every run:\n%s", c.name, all)
		}
	}

	// The premise: the same read written with the plain status test is
	// planned through the leased runs' index. Were it not, the checks above
	// would pass whatever the functions said.
	setAll(`set auto_explain.log_min_duration = -1`, `set plan_cache_mode = force_generic_plan`,
		`set enable_nestloop = off`)
	p := genericPlan(t, b.ctx, conn, "plain_status", `select r.id from workflow.workflow_run r
		where r.id = any ($1::uuid[]) and r.status = 'leased' and r.leased_by = $2 for share of r`,
		"{"+strings.Join(ids[200:], ",")+"}", "plan-worker")
	if !strings.Contains(p, "idx_workflow_run_lease_until") {
		t.Errorf("these statistics no longer mislead the planner, so the functions' reads are not put to the test:\n%s", p)
	}
}
