package engine_test

import (
	"strings"
	"testing"
)

// The reads of one parent's children (a DAG's advance, its step states)
// use an index keyed by the parent, whatever the statistics say, and only
// lock_parents reads idx_workflow_run_child. The statistics here are those
// of a table analyzed before any child existed, as in a database that
// starts running DAGs: the lock index then looked as cheap to read whole as
// the parent index to probe, and the advance of each step read every child
// of every DAG.
func TestChildrenOfAParentAreReadByTheirParent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn, exec := session(t, b.ctx, b.pool)
	exec(`insert into workflow.workflow_run (type) select 'plan.parent.v1' from generate_series(1, 500)`)
	exec(`vacuum analyze workflow.workflow_run`)
	// Children written after the statistics, without the triggers (they
	// would start DAG steps and write the trail row by row).
	exec(`set session_replication_role = replica`)
	exec(`insert into workflow.workflow_run (type, namespace, type_namespace, parent_id, parent_step, status, started_at, finished_at)
		select 'plan.child.v1', 'default', 'default', p.id, 's' || i, case when i % 3 = 0 then 'pending' else 'succeeded' end,
		       now(), case when i % 3 <> 0 then now() end
		from workflow.workflow_run p cross join generate_series(1, 20) i
		where p.type = 'plan.parent.v1'`)
	exec(`reset session_replication_role`)
	var parent string
	if err := conn.QueryRow(b.ctx, `select id::text from workflow.workflow_run where type = 'plan.parent.v1' limit 1`).Scan(&parent); err != nil {
		t.Fatal(err)
	}
	// As the paths that end runs plan them: generic plans, nested loops off.
	exec(`set plan_cache_mode = force_generic_plan`)
	exec(`set enable_nestloop = off`)
	plan := func(name, query, arg string) string {
		t.Helper()
		return genericPlan(t, b.ctx, conn, name, query, arg)
	}
	// The statements of a DAG's advance that filter its steps by status,
	// as dag_advance writes them, and the step states of a fanned-out DAG.
	for name, query := range map[string]string{
		"failed_step": `select c.id from workflow.child_runs($1::uuid) c
			where c.status in ('failed', 'cancelled') order by c.finished_at, c.parent_step limit 1`,
		"results": `select jsonb_object_agg(c.parent_step, c.result) from workflow.child_runs($1::uuid) c
			where c.status = 'succeeded'`,
		"step_states": `select st.name from workflow.workflow_run p
			cross join lateral workflow.dag_step_states(p) st where p.id = $1::uuid`,
	} {
		p := plan(name, query, parent)
		for _, index := range []string{"idx_workflow_run_child", "idx_workflow_run_type_created",
			"idx_workflow_run_ended_badly", "idx_workflow_run_finished_at"} {
			if strings.Contains(p, index) {
				t.Errorf("%s reads a parent's children through %s:\n%s", name, index, p)
			}
		}
		if !strings.Contains(p, "Index Cond: (parent_id = ") {
			t.Errorf("%s does not read a parent's children by their parent:\n%s", name, p)
		}
	}
	// The premise: without the fence, the same read of succeeded steps is
	// planned as a whole read of a partial index on status. Were it not,
	// the checks above would pass whatever child_runs did.
	if p := plan("unfenced", `select jsonb_object_agg(c.parent_step, c.result) from workflow.workflow_run c
		where c.parent_id = $1::uuid and c.status = 'succeeded'`, parent); strings.Contains(p, "Index Cond: (parent_id = $1)") {
		t.Errorf("these statistics no longer mislead the planner, so the fence is not put to the test:\n%s", p)
	}
	if p := plan("lock", `select c.parent_id from workflow.workflow_run c
		where c.id = any ($1::uuid[]) and coalesce(c.parent_id::text, '') <> ''
		  and coalesce(c.status, '') in ('pending', 'leased')`,
		"{"+parent+"}"); !strings.Contains(p, "idx_workflow_run_child") {
		t.Errorf("lock_parents's read does not use its index:\n%s", p)
	}
}
