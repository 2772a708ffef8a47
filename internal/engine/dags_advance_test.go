package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// advanceCalls counts the calls of dags_advance (together) and of
// dag_advance (one by one).
type advanceCalls struct{ together, oneByOne int }

// countingTx begins a transaction that counts the calls of every function
// (pg_stat_xact_user_functions); the caller rolls it back or commits it.
func (b *bundle) countingTx(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(b.ctx, "set local track_functions = 'all'"); err != nil {
		t.Fatal(err)
	}
	return tx
}

// advanceCallsIn is what tx has counted of the DAG advance so far. The view
// also holds what earlier transactions of the connection counted and the
// server has not filed yet: callers take the difference of two readings.
func (b *bundle) advanceCallsIn(t *testing.T, tx pgx.Tx) advanceCalls {
	t.Helper()
	var c advanceCalls
	if err := tx.QueryRow(b.ctx, `select coalesce(sum(calls) filter (where funcname = 'dags_advance'), 0),
		       coalesce(sum(calls) filter (where funcname = 'dag_advance'), 0)
		from pg_stat_xact_user_functions where schemaname = 'workflow'`).Scan(&c.together, &c.oneByOne); err != nil {
		t.Fatal(err)
	}
	return c
}

// since is c less an earlier reading.
func (c advanceCalls) since(before advanceCalls) advanceCalls {
	return advanceCalls{c.together - before.together, c.oneByOne - before.oneByOne}
}

// completeTogether completes runs in one complete_runs call and returns the
// calls of the DAG advance it made.
func (b *bundle) completeTogether(t *testing.T, worker string, runs []engine.ClaimedRun, result func(engine.ClaimedRun) string) advanceCalls {
	t.Helper()
	tx := b.countingTx(t)
	before := b.advanceCallsIn(t, tx)
	ids, tokens, results := make([]string, len(runs)), make([]int64, len(runs)), make([]string, len(runs))
	for i, r := range runs {
		ids[i], tokens[i], results[i] = r.ID, r.LeaseToken, result(r)
	}
	var n int
	if err := tx.QueryRow(b.ctx, `select count(*) from workflow.complete_runs($1, $2::uuid[], $3, $4::jsonb[])`,
		worker, ids, tokens, results).Scan(&n); err != nil || n != len(runs) {
		t.Fatalf("complete %d runs together: %d completed, %v", len(runs), n, err)
	}
	calls := b.advanceCallsIn(t, tx).since(before)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	return calls
}

// The steps of many DAGs ended by one completion move every DAG on in one
// call of dags_advance, without dag_advance: chains start their next step,
// joins start theirs with both dependencies' results, and DAGs whose steps
// all succeeded end with every result and one event each; a chain whose
// step failed for good fails alone. Another team's DAG, whose step is
// leased throughout, is left as it was, and moves on when its own worker
// ends its step.
func TestDAGsOfOneCompletionMoveOnTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.registerIn(t, "team-a", "mv.chain.v1", step("a", "mv.a.v1"), step("b", "mv.b.v1", "a"), step("c", "mv.c.v1", "b"))
	b.registerIn(t, "team-a", "mv.join.v1", step("x", "mv.x.v1"), step("y", "mv.y.v1"), step("z", "mv.z.v1", "x", "y"))
	b.registerIn(t, "team-b", "mv.chain.v1", step("a", "mv.a.v1"), step("b", "mv.b.v1", "a"), step("c", "mv.c.v1", "b"))
	const chains, joins = 20, 5
	chain := map[string]bool{}
	for i := range chains {
		chain[b.create(t, engine.CreateParams{Type: "mv.chain.v1", Namespace: "team-a", Payload: json.RawMessage(fmt.Sprintf(`{"n": %d}`, i))})] = true
	}
	join := map[string]bool{}
	for range joins {
		join[b.create(t, engine.CreateParams{Type: "mv.join.v1", Namespace: "team-a"})] = true
	}
	other := b.create(t, engine.CreateParams{Type: "mv.chain.v1", Namespace: "team-b"})
	otherA := b.claimIn(t, "team-b", "wb", []string{"mv."}, 10)
	if len(otherA) != 1 || otherA[0].ParentID != other {
		t.Fatalf("team-b claimed %+v, want its step a", otherA)
	}
	echo := func(r engine.ClaimedRun) string { return fmt.Sprintf(`{"step": %q}`, r.Type) }

	first := b.claimIn(t, "team-a", "wa", []string{"mv."}, 1000)
	if len(first) != chains+2*joins {
		t.Fatalf("team-a claimed %d first steps, want %d", len(first), chains+2*joins)
	}
	if c := b.completeTogether(t, "wa", first, echo); c != (advanceCalls{together: 1}) {
		t.Fatalf("ending %d first steps together: %+v, want one dags_advance and no dag_advance", len(first), c)
	}
	for id := range chain {
		if got := b.stepRuns(t, id); got != "a=succeeded b=pending" {
			t.Errorf("chain %s after its first step: %s", id, got)
		}
	}
	for id := range join {
		if got := b.stepRuns(t, id); got != "x=succeeded y=succeeded z=pending" {
			t.Errorf("join %s after its first steps: %s", id, got)
		}
	}
	if got := b.stepRuns(t, other); got != "a=leased" {
		t.Fatalf("team-b's chain after team-a's batch: %s, want its step a leased and nothing else", got)
	}

	second := b.claimIn(t, "team-a", "wa", []string{"mv."}, 1000)
	if len(second) != chains+joins {
		t.Fatalf("claimed %d second steps, want %d", len(second), chains+joins)
	}
	var failing engine.ClaimedRun
	var rest []engine.ClaimedRun
	for _, r := range second {
		if r.Type == "mv.z.v1" {
			var in struct {
				Steps map[string]map[string]string `json:"steps"`
			}
			if err := json.Unmarshal(r.Payload, &in); err != nil || in.Steps["x"]["step"] != "mv.x.v1" || in.Steps["y"]["step"] != "mv.y.v1" {
				t.Fatalf("a join's step z has payload %s (%v), want both dependencies' results", r.Payload, err)
			}
		}
		if r.Type == "mv.b.v1" && failing.ID == "" {
			failing = r
			continue
		}
		rest = append(rest, r)
	}
	if _, err := b.eng.FailRuns(b.ctx, "wa", []engine.Failure{{LeaseRef: failing.Ref(), Error: "boom"}}); err != nil {
		t.Fatal(err)
	}
	if c := b.completeTogether(t, "wa", rest, echo); c != (advanceCalls{together: 1}) {
		t.Fatalf("ending %d steps together: %+v, want one dags_advance and no dag_advance", len(rest), c)
	}
	if r := b.get(t, failing.ParentID); r.Status != engine.StatusFailed || !strings.Contains(r.LastError, `step "b" (mv.b.v1) failed: boom`) {
		t.Fatalf("the chain whose step b failed: %s %q", r.Status, r.LastError)
	}
	for id := range join {
		if r := b.get(t, id); r.Status != engine.StatusSucceeded {
			t.Errorf("join %s: %s, want succeeded", id, r.Status)
		}
	}

	third := b.claimIn(t, "team-a", "wa", []string{"mv."}, 1000)
	if len(third) != chains-1 {
		t.Fatalf("claimed %d third steps, want %d", len(third), chains-1)
	}
	if c := b.completeTogether(t, "wa", third, echo); c != (advanceCalls{together: 1}) {
		t.Fatalf("ending the last steps together: %+v, want one dags_advance and no dag_advance", c)
	}
	for id := range chain {
		if id == failing.ParentID {
			continue
		}
		var result, events string
		if err := b.pool.QueryRow(b.ctx, `select r.result::text,
			       (select string_agg(e.data::text, ' ') from workflow.workflow_event e
			        where e.workflow_id = r.id and e.event_type = 'succeeded')
			from workflow.workflow_run r where r.id = $1 and r.status = 'succeeded'`, id).Scan(&result, &events); err != nil {
			t.Fatalf("chain %s did not succeed: %v", id, err)
		}
		if want := `{"steps": {"a": {"step": "mv.a.v1"}, "b": {"step": "mv.b.v1"}, "c": {"step": "mv.c.v1"}}}`; result != want {
			t.Errorf("chain %s result %s, want %s", id, result, want)
		}
		if events != `{"steps": 3}` {
			t.Errorf("chain %s succeeded events: %s, want one with its 3 steps", id, events)
		}
	}

	// team-b's chain goes on from where it was.
	if c := b.completeTogether(t, "wb", otherA, echo); c != (advanceCalls{together: 1}) {
		t.Fatalf("team-b's step: %+v", c)
	}
	if got := b.stepRuns(t, other); got != "a=succeeded b=pending" {
		t.Fatalf("team-b's chain after its own step: %s", got)
	}
}

// A DAG whose move would break a limit fails alone, by dag_advance, while
// the DAGs ended beside it in the same call move on together: a result that
// would make the next step's payload too large, one nested so deep the
// next step's payload would pass 64 levels, and results that together pass
// the 1 MiB of a result. Another team's DAG is unharmed.
func TestDAGsMovingOnTogetherFailOnlyTheOneOverALimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_settings set max_payload_bytes = 10000`); err != nil {
		t.Fatal(err)
	}
	b.registerIn(t, "team-a", "lim.chain.v1", step("a", "lim.a.v1"), step("b", "lim.b.v1", "a"))
	b.registerIn(t, "team-a", "lim.wide.v1", step("p", "lim.p.v1"), step("q", "lim.q.v1"), step("r", "lim.r.v1"))
	b.registerIn(t, "team-b", "lim.chain.v1", step("a", "lim.a.v1"), step("b", "lim.b.v1", "a"))
	big := b.create(t, engine.CreateParams{Type: "lim.chain.v1", Namespace: "team-a"})
	deep := b.create(t, engine.CreateParams{Type: "lim.chain.v1", Namespace: "team-a"})
	fine := b.create(t, engine.CreateParams{Type: "lim.chain.v1", Namespace: "team-a"})
	wide := b.create(t, engine.CreateParams{Type: "lim.wide.v1", Namespace: "team-a"})
	small := b.create(t, engine.CreateParams{Type: "lim.wide.v1", Namespace: "team-a"})
	other := b.create(t, engine.CreateParams{Type: "lim.chain.v1", Namespace: "team-b"})

	nested := strings.Repeat(`{"d": `, 63) + `1` + strings.Repeat(`}`, 63)
	steps := b.claimIn(t, "team-a", "wa", []string{"lim."}, 1000)
	if len(steps) != 9 {
		t.Fatalf("claimed %d steps, want 9", len(steps))
	}
	result := func(r engine.ClaimedRun) string {
		switch r.ParentID {
		case big:
			return fmt.Sprintf(`{"blob": %q}`, strings.Repeat("x", 9990))
		case deep:
			return nested
		case wide:
			return fmt.Sprintf(`{"blob": %q}`, strings.Repeat("w", 400_000))
		}
		return `{"ok": true}`
	}
	c := b.completeTogether(t, "wa", steps, result)
	if c.together != 1 || c.oneByOne != 3 {
		t.Fatalf("ending the steps together: %+v, want one dags_advance and dag_advance for the three over a limit", c)
	}
	for _, tc := range []struct{ id, reason string }{
		{big, "payload_too_large"}, {deep, "payload_too_deep"}, {wide, "result_too_large"},
	} {
		var status, reason string
		if err := b.pool.QueryRow(b.ctx, `select r.status,
			       (select e.data->>'reason' from workflow.workflow_event e
			        where e.workflow_id = r.id and e.event_type = 'failed')
			from workflow.workflow_run r where r.id = $1`, tc.id).Scan(&status, &reason); err != nil {
			t.Fatal(err)
		}
		if status != "failed" || reason != tc.reason {
			t.Errorf("DAG over a limit (%s): %s with reason %q", tc.reason, status, reason)
		}
	}
	if got := b.stepRuns(t, fine); got != "a=succeeded b=pending" {
		t.Errorf("the chain beside them: %s", got)
	}
	if r := b.get(t, small); r.Status != engine.StatusSucceeded {
		t.Errorf("the wide DAG with small results: %s", r.Status)
	}
	if got := b.stepRuns(t, other); got != "a=pending" {
		t.Errorf("team-b's chain: %s, want untouched", got)
	}
}

// One INSERT of many DAG runs starts every DAG's first steps in one call of
// dags_advance: 200 runs of a plain chain and a join start theirs, and one
// run whose payload would make its first step's payload too large fails
// alone (by dag_advance) without failing the statement or its neighbours.
func TestDAGsInsertedTogetherStartTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_settings set max_payload_bytes = 10000`); err != nil {
		t.Fatal(err)
	}
	b.register(t, "start.chain.v1", step("a", "starta.a.v1"), step("b", "starta.b.v1", "a"))
	b.register(t, "start.join.v1", step("x", "startx.x.v1"), step("y", "startx.y.v1"), step("z", "startx.z.v1", "x", "y"))
	if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{
		WorkflowName: "start.padded.v1", Enabled: true, Definition: &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{{
			Name: "p", Type: "startp.p.v1", Payload: json.RawMessage(fmt.Sprintf(`{"pad": %q}`, strings.Repeat("p", 5000))),
		}}},
	}); err != nil {
		t.Fatal(err)
	}
	tx := b.countingTx(t)
	before := b.advanceCallsIn(t, tx)
	var inserted int
	if err := tx.QueryRow(b.ctx, `with i as (
		insert into workflow.workflow_run (type, payload)
		select case when g % 2 = 0 then 'start.chain.v1' else 'start.join.v1' end, jsonb_build_object('n', g)
		from generate_series(1, 200) g
		union all
		select 'start.padded.v1', jsonb_build_object('blob', repeat('x', 6000))
		returning 1) select count(*) from i`).Scan(&inserted); err != nil || inserted != 201 {
		t.Fatalf("insert: %d, %v", inserted, err)
	}
	calls := b.advanceCallsIn(t, tx).since(before)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if calls != (advanceCalls{together: 1, oneByOne: 1}) {
		t.Fatalf("starting 201 DAGs: %+v, want one dags_advance and one dag_advance (the padded one)", calls)
	}
	var chains, joins, padded int
	if err := b.pool.QueryRow(b.ctx, `select
		(select count(*) from workflow.workflow_run p where p.type = 'start.chain.v1' and p.status = 'pending'
		   and (select string_agg(c.parent_step || '=' || c.status, ' ' order by c.parent_step)
		        from workflow.workflow_run c where c.parent_id = p.id) = 'a=pending'),
		(select count(*) from workflow.workflow_run p where p.type = 'start.join.v1' and p.status = 'pending'
		   and (select string_agg(c.parent_step || '=' || c.status, ' ' order by c.parent_step)
		        from workflow.workflow_run c where c.parent_id = p.id) = 'x=pending y=pending'),
		(select count(*) from workflow.workflow_run p where p.type = 'start.padded.v1' and p.status = 'failed'
		   and p.last_error like 'the payload of step "p" would be%')`).Scan(&chains, &joins, &padded); err != nil {
		t.Fatal(err)
	}
	if chains != 100 || joins != 100 || padded != 1 {
		t.Fatalf("started chains %d, joins %d (want 100 each); padded run failed: %d (want 1)", chains, joins, padded)
	}
}

// A DAG with a final step moves its other steps together with the rest of
// the batch; once they are done, its final step starts (and, when it ends,
// decides the end) by dag_advance, one DAG at a time, with the outcome in
// its payload.
func TestDAGsWithAFinalStepMoveTogetherUntilTheFinalStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "fmv.chain.v1", step("a", "fmv.a.v1"), step("b", "fmv.b.v1", "a"), finalStep("fin", "fmvf.fin.v1"))
	const n = 10
	ids := map[string]bool{}
	for range n {
		ids[b.insertSQL(t, "fmv.chain.v1", `{}`)] = true
	}
	echo := func(r engine.ClaimedRun) string { return fmt.Sprintf(`{"step": %q}`, r.Type) }
	a := b.claim(t, "w1", []string{"fmv."}, 100)
	if len(a) != n {
		t.Fatalf("claimed %d first steps, want %d", len(a), n)
	}
	if c := b.completeTogether(t, "w1", a, echo); c != (advanceCalls{together: 1}) {
		t.Fatalf("ending the first steps: %+v, want one dags_advance and no dag_advance", c)
	}
	bs := b.claim(t, "w1", []string{"fmv."}, 100)
	if len(bs) != n {
		t.Fatalf("claimed %d second steps, want %d", len(bs), n)
	}
	if c := b.completeTogether(t, "w1", bs, echo); c != (advanceCalls{together: 1, oneByOne: n}) {
		t.Fatalf("ending the last steps before the final one: %+v, want one dags_advance and %d dag_advance", c, n)
	}
	fins := b.claim(t, "w1", []string{"fmvf."}, 100)
	if len(fins) != n {
		t.Fatalf("claimed %d final steps, want %d", len(fins), n)
	}
	for _, f := range fins {
		var in struct {
			Steps   map[string]map[string]string `json:"steps"`
			Outcome map[string]string            `json:"outcome"`
		}
		if err := json.Unmarshal(f.Payload, &in); err != nil || in.Outcome["status"] != "succeeded" || in.Steps["b"]["step"] != "fmv.b.v1" {
			t.Fatalf("final step payload %s (%v), want the steps' results and outcome succeeded", f.Payload, err)
		}
	}
	if c := b.completeTogether(t, "w1", fins, echo); c != (advanceCalls{together: 1, oneByOne: n}) {
		t.Fatalf("ending the final steps: %+v", c)
	}
	for id := range ids {
		if r := b.get(t, id); r.Status != engine.StatusSucceeded {
			t.Errorf("DAG %s: %s, want succeeded", id, r.Status)
		}
	}
}

// A step failed for good and another retried in one fail_runs call: the
// DAG fails and cancels the retried step, whose trail reads retried, then
// cancelled (the batch's own events are written before its parents move).
func TestDAGFailingInsideABatchKeepsItsStepsTrailsInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "ord.pair.v1", step("a", "ord.a.v1"), step("b", "ord.b.v1"))
	dag := b.insertSQL(t, "ord.pair.v1", `{}`)
	steps := b.claim(t, "w1", []string{"ord."}, 10)
	if len(steps) != 2 {
		t.Fatalf("claimed %d steps, want 2", len(steps))
	}
	var retried string
	fs := make([]engine.Failure, 2)
	for i, s := range steps {
		fs[i] = engine.Failure{LeaseRef: s.Ref(), Error: "boom", Retryable: s.Type == "ord.b.v1"}
		if s.Type == "ord.b.v1" {
			retried = s.ID
		}
	}
	if _, err := b.eng.FailRuns(b.ctx, "w1", fs); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, dag); r.Status != engine.StatusFailed {
		t.Fatalf("DAG %s, want failed", r.Status)
	}
	var trail string
	if err := b.pool.QueryRow(b.ctx, `select string_agg(e.event_type, ' ' order by e.id) from workflow.run_events($1) e`,
		retried).Scan(&trail); err != nil {
		t.Fatal(err)
	}
	if trail != "created started retried cancelled" {
		t.Fatalf("the retried step's trail: %q, want created started retried cancelled", trail)
	}
}

// The mark with which complete_runs and fail_runs keep their own runs from
// the row trigger is a setting any session can set; set with it, a cancel
// and the reaper still move the ended steps' DAGs on (they fail).
func TestAForgedEndsChildrenMarkLeavesNoDAGUnmoved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "forge.one.v1", engine.DAGStepDefinition{Name: "a", Type: "forgea.a.v1", MaxAttempts: 1},
		step("b", "forgea.b.v1", "a"))
	cancelled := b.insertSQL(t, "forge.one.v1", `{}`)
	reaped := b.insertSQL(t, "forge.one.v1", `{}`)
	steps := b.claim(t, "w1", []string{"forgea.a."}, 10)
	if len(steps) != 2 {
		t.Fatalf("claimed %d steps, want 2", len(steps))
	}
	conn, exec := session(t, b.ctx, b.pool)
	exec(`set workflow.ends_children = 'on'`)
	for _, s := range steps {
		if s.ParentID == cancelled {
			var ok bool
			if err := conn.QueryRow(b.ctx, `select workflow.cancel_run($1)`, s.ID).Scan(&ok); err != nil || !ok {
				t.Fatalf("cancel the step: %v %v", ok, err)
			}
		}
	}
	b.advanceClock(t, time.Hour)
	var n int
	if err := conn.QueryRow(b.ctx, `select count(*) from workflow.reap_expired_leases(100)`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("reaped %d runs (%v), want the other step", n, err)
	}
	for _, id := range []string{cancelled, reaped} {
		if r := b.get(t, id); r.Status != engine.StatusFailed {
			t.Errorf("DAG %s after its step ended under a forged mark: %s, want failed", id, r.Status)
		}
	}
}
