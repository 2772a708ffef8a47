package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// endOneByOne completes each run in its own complete_runs call, in one
// transaction of one connection that counts the calls of every function,
// and returns how many times a DAG was moved on (dags_advance, through
// which every step's end goes: called for one DAG here). between, when set, is called
// (inside the transaction) after each completion with the number done.
func (b *bundle) endOneByOne(t *testing.T, runs []engine.ClaimedRun, between func(tx pgx.Tx, done int)) int {
	t.Helper()
	tx := b.countingTx(t)
	before := b.advanceCallsIn(t, tx)
	for i, c := range runs {
		var n int
		if err := tx.QueryRow(b.ctx, `select count(*) from workflow.complete_runs('w1', array[$1::uuid], array[$2::bigint], array['{"ok": true}'::jsonb])`,
			c.ID, c.LeaseToken).Scan(&n); err != nil || n != 1 {
			t.Fatalf("complete %s (%d of %d): %d runs, %v", c.ID, i+1, len(runs), n, err)
		}
		if between != nil {
			between(tx, i+1)
		}
	}
	calls := b.advanceCallsIn(t, tx).since(before).together
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	return calls
}

// The steps of a wide fan-out that end one at a time (in separate calls,
// in any order) leave the workflow alone until the last: its advance, which
// reads every step of the DAG, runs once, when the last step ends, and the
// workflow then succeeds with every step's result. (Called on every step's
// end, it made a 100-wide fan-out read its steps 10,000 times.)
func TestDAGFanOutStepsEndingApartAdvanceOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const width = 30
	var steps []engine.DAGStepDefinition
	for i := range width {
		steps = append(steps, step(fmt.Sprintf("f%02d", i), "dagapart.f.v1"))
	}
	b.register(t, "dagapart.flow.v1", steps...)
	id := b.insertSQL(t, "dagapart.flow.v1", `{}`)
	runs := b.claim(t, "w1", []string{"dagapart.f."}, 100)
	if len(runs) != width {
		t.Fatalf("claimed %d steps, want %d", len(runs), width)
	}
	rand.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
	calls := b.endOneByOne(t, runs, func(tx pgx.Tx, done int) {
		var status string
		if err := tx.QueryRow(b.ctx, `select status from workflow.workflow_run where id = $1`, id).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{true: "succeeded", false: "pending"}[done == width]; status != want {
			t.Fatalf("after %d of %d steps the workflow is %s, want %s", done, width, status, want)
		}
	})
	if calls != 1 {
		t.Fatalf("dags_advance ran %d times for %d steps ending one by one, want 1", calls, width)
	}
	run := b.get(t, id)
	var result struct {
		Steps map[string]json.RawMessage `json:"steps"`
	}
	if err := json.Unmarshal(run.Result, &result); err != nil || run.Status != engine.StatusSucceeded || len(result.Steps) != width {
		t.Fatalf("workflow %s with %d step results, want succeeded with %d (%v)", run.Status, len(result.Steps), width, err)
	}
}

// A step that something depends on advances its DAG when it ends, one that
// nothing depends on does not while other steps run, and the elements of a
// fan-out (forEach) advance it only with the last of them: the step after
// them starts then, with every element's result.
func TestDAGStepEndsAdvanceOnlyWhenSomethingCanStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dagdep.flow.v1",
		step("a", "dagdepa.a.v1"),
		step("b", "dagdepb.b.v1"),
		forEachStep("each", "dagdepe.each.v1", "$.payload.items", "", "a"),
		step("join", "dagdepj.join.v1", "each"))
	id := b.insertSQL(t, "dagdep.flow.v1", `{"items": [1, 2, 3, 4]}`)
	a := b.claim(t, "w1", []string{"dagdepa."}, 1)
	bb := b.claim(t, "w1", []string{"dagdepb."}, 1)
	if len(a) != 1 || len(bb) != 1 {
		t.Fatalf("claimed %d a and %d b", len(a), len(bb))
	}
	// b (nothing depends on it) while a runs: nothing to do.
	if calls := b.endOneByOne(t, bb, nil); calls != 0 {
		t.Fatalf("b's end ran dags_advance %d times, want 0", calls)
	}
	if got := b.stepRuns(t, id); got != "a=leased b=succeeded" {
		t.Fatalf("after b: %q", got)
	}
	// a (each depends on it): each fans out.
	if calls := b.endOneByOne(t, a, nil); calls != 1 {
		t.Fatalf("a's end ran dags_advance %d times, want 1", calls)
	}
	elems := b.claimElements(t, "dagdepe.", 4)
	order := []engine.ClaimedRun{elems[2], elems[0], elems[3], elems[1]}
	calls := b.endOneByOne(t, order, func(tx pgx.Tx, done int) {
		var join int
		if err := tx.QueryRow(b.ctx, `select count(*) from workflow.workflow_run where parent_id = $1 and parent_step = 'join'`,
			id).Scan(&join); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 1, false: 0}[done == len(order)]; join != want {
			t.Fatalf("after %d of %d elements, join started %d times, want %d", done, len(order), join, want)
		}
	})
	if calls != 1 {
		t.Fatalf("the elements' ends ran dags_advance %d times, want 1 (the last)", calls)
	}
	j := b.claim(t, "w1", []string{"dagdepj."}, 1)
	if len(j) != 1 || string(j[0].Payload) == "" {
		t.Fatalf("join: %d claimed", len(j))
	}
	var in struct {
		Steps map[string][]any `json:"steps"`
	}
	if err := json.Unmarshal(j[0].Payload, &in); err != nil || len(in.Steps["each"]) != 4 {
		t.Fatalf("join's input %s: %v", j[0].Payload, err)
	}
	if calls := b.endOneByOne(t, j, nil); calls != 1 {
		t.Fatalf("join's end ran dags_advance %d times, want 1", calls)
	}
	if run := b.get(t, id); run.Status != engine.StatusSucceeded {
		t.Fatalf("workflow %s", run.Status)
	}
}

// The last two steps of a DAG ended together by plain SQL, which locks no
// workflow first: the first to end waits for nothing, the second waits for
// the first's transaction on the workflow's row and then sees it ended, so
// the workflow ends. (Had the second not waited, each would have seen the
// other still running and the workflow would never end.)
func TestDAGLastStepsEndedTogetherByPlainSQLEndTheWorkflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dagsql.flow.v1", step("a", "dagsql.a.v1"), step("b", "dagsql.b.v1"))
	id := b.insertSQL(t, "dagsql.flow.v1", `{}`)
	runs := b.claim(t, "w1", []string{"dagsql.a.", "dagsql.b."}, 2)
	if len(runs) != 2 {
		t.Fatalf("claimed %d steps, want 2", len(runs))
	}
	end := `update workflow.workflow_run set status = 'succeeded', result = '{}', lease_until = null,
		leased_by = null, finished_at = now() where id = $1`
	first, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback(context.Background()) }()
	if _, err := first.Exec(b.ctx, end, runs[0].ID); err != nil {
		t.Fatal(err)
	}
	second, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = second.Rollback(context.Background()) }()
	var pid int
	if err := second.QueryRow(b.ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := second.Exec(b.ctx, end, runs[1].ID)
		ended <- err
	}()
	// The second end waits on a lock while the first is open.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := b.pool.QueryRow(b.ctx, `select coalesce(wait_event_type = 'Lock', false)
			from pg_stat_activity where pid = $1`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-ended:
			t.Fatalf("the second step's end did not wait for the first's transaction (err %v)", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the second step's end is not waiting on a lock after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
	if err := second.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if run := b.get(t, id); run.Status != engine.StatusSucceeded {
		t.Fatalf("workflow %s after both steps ended, want succeeded", run.Status)
	}
}

// Another team's fan-out ends step by step in the same calls as a hostile
// workflow's elements (a step name as long as a fanned-out step's may be,
// a result over 1 MiB, one nested 70 levels deep): the hostile workflow
// fails on its own refused result, and the other team's workflow starts
// its join with the last step the join waits for (while another of its
// steps still runs), then succeeds with every result.
func TestDAGStepEndsBesideAnotherTeamsHostileSteps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := strings.Repeat("e", 57)
	b.register(t, "dagteam.hostile.v1",
		forEachStep(long, "dagteamh.each.v1", "$.payload.items", ""),
		step("after", "dagteamh.after.v1", long))
	b.registerIn(t, "team-b", "dagteam.other.v1",
		step("b0", "dagteamo.step.v1"), step("b1", "dagteamo.step.v1"),
		step("b2", "dagteamo.step.v1"), step("b3", "dagteamo.step.v1"),
		step("join", "dagteamo.join.v1", "b0", "b1", "b2", "b3"),
		step("slow", "dagteamo.slow.v1"))
	other := b.create(t, engine.CreateParams{Type: "dagteam.other.v1",
		Source: &engine.Source{Namespace: "team-b", Name: "keep-me", UID: "u-keep"}})
	hostile := b.insertSQL(t, "dagteam.hostile.v1", `{"items": [1, 2, 3, 4]}`)
	elems := b.claimElements(t, "dagteamh.", 4)
	steps := b.claimIn(t, "team-b", "w1", []string{"dagteamo.step."}, 10)
	if len(steps) != 4 {
		t.Fatalf("claimed %d of the other team's steps, want 4", len(steps))
	}
	deep := strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70)
	hostileResults := []string{`{"ok": 1}`, `"` + strings.Repeat("x", 1<<20) + `"`, deep, `{"ok": 2}`}
	for i := range 4 {
		res, err := b.eng.CompleteRuns(b.ctx, "w1", []engine.Completion{
			{LeaseRef: elems[i].Ref(), Result: json.RawMessage(hostileResults[i])},
			{LeaseRef: steps[i].Ref(), Result: json.RawMessage(fmt.Sprintf(`{"b": %d}`, i))},
		})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		byID := map[string]string{}
		for _, r := range res {
			byID[r.ID] = string(r.Status)
		}
		if byID[steps[i].ID] != string(engine.StatusSucceeded) {
			t.Fatalf("call %d: the other team's step is %q", i, byID[steps[i].ID])
		}
		var joins int
		if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run where parent_id = $1 and parent_step = 'join'`,
			other).Scan(&joins); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 1, false: 0}[i == 3]; joins != want {
			t.Fatalf("after %d of the other team's steps its join started %d times, want %d", i+1, joins, want)
		}
	}
	if r := b.get(t, hostile); r.Status != engine.StatusFailed || !strings.Contains(r.LastError, long) {
		t.Fatalf("the hostile workflow is %s (%s), want failed on its step", r.Status, r.LastError)
	}
	join := b.claimIn(t, "team-b", "w1", []string{"dagteamo.join."}, 1)
	slow := b.claimIn(t, "team-b", "w1", []string{"dagteamo.slow."}, 1)
	if len(join) != 1 || len(slow) != 1 {
		t.Fatalf("claimed %d joins and %d slow steps, want 1 and 1", len(join), len(slow))
	}
	b.completeWith(t, join[0], `{"joined": true}`)
	if r := b.get(t, other); r.Status != engine.StatusPending {
		t.Fatalf("the other team's workflow is %s while a step runs, want pending", r.Status)
	}
	b.completeWith(t, slow[0], `{"slow": true}`)
	run := b.get(t, other)
	var result struct {
		Steps map[string]json.RawMessage `json:"steps"`
	}
	if err := json.Unmarshal(run.Result, &result); err != nil || run.Status != engine.StatusSucceeded || len(result.Steps) != 6 ||
		string(result.Steps["b2"]) != `{"b": 2}` {
		t.Fatalf("the other team's workflow is %s with %s (%v), want succeeded with its 6 results", run.Status, run.Result, err)
	}
}
