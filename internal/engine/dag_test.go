package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// register declares a DAG workflow type in the registry.
func (b *bundle) register(t *testing.T, name string, steps ...engine.DAGStepDefinition) {
	t.Helper()
	b.registerIn(t, "", name, steps...)
}

// registerIn is register in namespace ns's registry ("" for default).
func (b *bundle) registerIn(t *testing.T, ns, name string, steps ...engine.DAGStepDefinition) {
	t.Helper()
	owner := ""
	if ns != "" {
		owner = "registry"
	}
	if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{
		WorkflowName: name, Enabled: true, Definition: &engine.DAGDefinition{Steps: steps},
		OwnerNamespace: ns, OwnerName: owner,
	}); err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
}

func step(name, typ string, deps ...string) engine.DAGStepDefinition {
	return engine.DAGStepDefinition{Name: name, Type: typ, DependsOn: deps}
}

// insertSQL records a run the way a plain SQL producer does.
func (b *bundle) insertSQL(t *testing.T, typ, payload string) string {
	t.Helper()
	var id string
	if err := b.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (type, payload) values ($1, $2) returning id`,
		typ, payload).Scan(&id); err != nil {
		t.Fatalf("insert %s: %v", typ, err)
	}
	return id
}

// stepRuns returns "step=status" for every started step of a DAG run.
func (b *bundle) stepRuns(t *testing.T, id string) string {
	t.Helper()
	steps, err := b.eng.DAGSteps(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range steps {
		if s.Status != "" {
			out = append(out, s.Name+"="+s.Status)
		}
	}
	return strings.Join(out, " ")
}

// work claims every runnable run of the prefix and completes each with
// {"by": <step type>, "payload": <its payload>}; it returns the claimed types.
func (b *bundle) work(t *testing.T, prefix string) []string {
	t.Helper()
	claimed := b.claim(t, "w1", []string{prefix}, 1000)
	var cs []engine.Completion
	var types []string
	for _, c := range claimed {
		res, _ := json.Marshal(map[string]any{"by": c.Type, "payload": json.RawMessage(c.Payload)})
		cs = append(cs, engine.Completion{LeaseRef: c.Ref(), Result: res})
		types = append(types, c.Type)
	}
	if _, err := b.eng.CompleteRuns(b.ctx, "w1", cs); err != nil {
		t.Fatal(err)
	}
	sort.Strings(types)
	return types
}

// A diamond a → (b, c) → d inserted by plain SQL runs in dependency order
// with nothing but the database and a worker: b and c start together once a
// succeeded, d gets both results under "steps", the run's result holds every
// step's result, and the run itself is never handed to a worker.
func TestDAGDiamondRunsInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dag.diamond.v1",
		step("a", "dagw.a.v1"),
		engine.DAGStepDefinition{Name: "b", Type: "dagw.b.v1", DependsOn: []string{"a"}, Payload: json.RawMessage(`{"carrier":"ups","orderId":99}`)},
		step("c", "dagw.c.v1", "a"),
		step("d", "dagw.d.v1", "b", "c"))
	id := b.insertSQL(t, "dag.diamond.v1", `{"orderId": 7}`)

	if got := b.claim(t, "w0", []string{"dag."}, 10); len(got) != 0 {
		t.Fatalf("a worker claimed the DAG run itself: %+v", got)
	}
	if got := b.stepRuns(t, id); got != "a=pending" {
		t.Fatalf("after insert: %q, want only a started", got)
	}
	if got := b.work(t, "dagw."); fmt.Sprint(got) != "[dagw.a.v1]" {
		t.Fatalf("first round ran %v", got)
	}
	if got := b.stepRuns(t, id); got != "a=succeeded b=pending c=pending" {
		t.Fatalf("after a: %q", got)
	}
	if got := b.work(t, "dagw."); fmt.Sprint(got) != "[dagw.b.v1 dagw.c.v1]" {
		t.Fatalf("second round ran %v, want b and c together", got)
	}
	claimed := b.claim(t, "w1", []string{"dagw."}, 10)
	if len(claimed) != 1 || claimed[0].Type != "dagw.d.v1" {
		t.Fatalf("third round claimed %+v", claimed)
	}
	var dPayload struct {
		OrderID int `json:"orderId"`
		Steps   map[string]struct {
			By      string          `json:"by"`
			Payload json.RawMessage `json:"payload"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(claimed[0].Payload, &dPayload); err != nil {
		t.Fatal(err)
	}
	if dPayload.OrderID != 7 || len(dPayload.Steps) != 2 || dPayload.Steps["b"].By != "dagw.b.v1" || dPayload.Steps["c"].By != "dagw.c.v1" {
		t.Fatalf("d's payload: %s", claimed[0].Payload)
	}
	var bPayload map[string]any
	if err := json.Unmarshal(dPayload.Steps["b"].Payload, &bPayload); err != nil {
		t.Fatal(err)
	}
	if bPayload["carrier"] != "ups" || bPayload["orderId"] != float64(99) || fmt.Sprint(bPayload["steps"]) != "map[a:map[by:dagw.a.v1 payload:map[orderId:7 steps:map[]]]]" {
		t.Fatalf("b's payload (its own merged over the run's, a's result under steps): %v", bPayload)
	}
	if _, err := b.eng.CompleteRuns(b.ctx, "w1", []engine.Completion{{LeaseRef: claimed[0].Ref(), Result: json.RawMessage(`{"shipped":true}`)}}); err != nil {
		t.Fatal(err)
	}
	run := b.get(t, id)
	if run.Status != engine.StatusSucceeded {
		t.Fatalf("the workflow is %s (%s)", run.Status, run.LastError)
	}
	var result struct {
		Steps map[string]json.RawMessage `json:"steps"`
	}
	if err := json.Unmarshal(run.Result, &result); err != nil || len(result.Steps) != 4 || string(result.Steps["d"]) != `{"shipped": true}` {
		t.Fatalf("result %s", run.Result)
	}
	assertEvents(t, b.eventTypes(t, id), engine.EventCreated, engine.EventWaiting, engine.EventSucceeded)
}

// A step that fails for good fails the workflow: the running sibling is
// cancelled, the steps not started never start, and the error names the step.
func TestDAGStepFailureFailsTheWorkflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dagf.flow.v1",
		step("a", "dagfw.a.v1"),
		engine.DAGStepDefinition{Name: "b", Type: "dagfw.b.v1", DependsOn: []string{"a"}, MaxAttempts: 1},
		step("c", "dagfw.c.v1", "a"),
		step("d", "dagfw.d.v1", "b", "c"))
	id := b.insertSQL(t, "dagf.flow.v1", `{}`)
	b.work(t, "dagfw.")
	claimed := b.claim(t, "w1", []string{"dagfw.b."}, 10)
	if len(claimed) != 1 {
		t.Fatalf("claimed %d b runs", len(claimed))
	}
	if _, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: claimed[0].Ref(), Error: "card declined", Retryable: true}}); err != nil {
		t.Fatal(err)
	}
	run := b.get(t, id)
	if run.Status != engine.StatusFailed || run.LastError != `step "b" (dagfw.b.v1) failed: card declined` {
		t.Fatalf("workflow %s: %q", run.Status, run.LastError)
	}
	if got := b.stepRuns(t, id); got != "a=succeeded b=failed c=cancelled" {
		t.Fatalf("steps %q: c cancelled, d never started", got)
	}
	if got := b.work(t, "dagfw."); len(got) != 0 {
		t.Fatalf("steps ran after the workflow failed: %v", got)
	}
}

// Cancelling the workflow (the seed's UPDATE) cancels its unfinished steps,
// and nothing starts afterwards, even when a step finishes late.
func TestDAGCancelStopsEverything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dagc.flow.v1", step("a", "dagcw.a.v1"), step("b", "dagcw.b.v1"), step("c", "dagcw.c.v1", "a", "b"))
	id := b.insertSQL(t, "dagc.flow.v1", `{}`)
	held := b.claim(t, "w1", []string{"dagcw.a."}, 1)
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_run set status = 'cancelled' where id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if got := b.stepRuns(t, id); got != "a=cancelled b=cancelled" {
		t.Fatalf("steps after cancel: %q", got)
	}
	// The worker that held a finds out at its write; nothing else starts.
	if done, _ := b.eng.CompleteRuns(b.ctx, "w1", []engine.Completion{{LeaseRef: held[0].Ref()}}); len(done) != 0 {
		t.Fatal("a cancelled step was completed")
	}
	if got := b.work(t, "dagcw."); len(got) != 0 {
		t.Fatalf("steps ran after cancel: %v", got)
	}
	if run := b.get(t, id); run.Status != engine.StatusCancelled {
		t.Fatalf("workflow %s", run.Status)
	}
}

// A run follows the definition it started with: the registry edited in
// flight changes new runs only.
func TestDAGRunKeepsItsSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dags.flow.v1", step("a", "dagsw.a.v1"), step("b", "dagsw.b.v1", "a"))
	old := b.insertSQL(t, "dags.flow.v1", `{}`)
	b.register(t, "dags.flow.v1", step("x", "dagsw.x.v1"))
	fresh := b.insertSQL(t, "dags.flow.v1", `{}`)
	for range 3 {
		b.work(t, "dagsw.")
	}
	if got := b.stepRuns(t, old); got != "a=succeeded b=succeeded" {
		t.Fatalf("old run: %q", got)
	}
	if got := b.stepRuns(t, fresh); got != "x=succeeded" {
		t.Fatalf("new run: %q", got)
	}
}

// A 100-step fan-out/fan-in: one root, 98 steps after it, one step after
// all of them; the last receives all 98 results.
func TestDAGWideFanOutFanIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	steps := []engine.DAGStepDefinition{step("root", "dagwide.root.v1")}
	var mids []string
	for i := range 98 {
		name := fmt.Sprintf("m%02d", i)
		mids = append(mids, name)
		steps = append(steps, step(name, "dagwide.mid.v1", "root"))
	}
	steps = append(steps, step("join", "dagwide.join.v1", mids...))
	b.register(t, "dagwide.flow.v1", steps...)
	id := b.insertSQL(t, "dagwide.flow.v1", `{}`)
	rounds := [][]string{}
	for range 4 {
		got := b.work(t, "dagwide.")
		if len(got) > 0 {
			rounds = append(rounds, []string{fmt.Sprint(len(got)), got[0]})
		}
	}
	if fmt.Sprint(rounds) != "[[1 dagwide.root.v1] [98 dagwide.mid.v1] [1 dagwide.join.v1]]" {
		t.Fatalf("rounds %v", rounds)
	}
	run := b.get(t, id)
	var result struct {
		Steps map[string]struct {
			Payload struct {
				Steps map[string]json.RawMessage `json:"steps"`
			} `json:"payload"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(run.Result, &result); err != nil || run.Status != engine.StatusSucceeded ||
		len(result.Steps) != 100 || len(result.Steps["join"].Payload.Steps) != 98 {
		t.Fatalf("workflow %s, %d step results", run.Status, len(result.Steps))
	}
}

// What the database refuses in a definition, with a message naming the
// problem; the refused definition is not stored.
func TestDAGDefinitionsAreValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dagv.inner.v1", step("a", "dagvw.a.v1"))
	tooMany := make([]engine.DAGStepDefinition, 101)
	for i := range tooMany {
		tooMany[i] = step(fmt.Sprintf("s%d", i), "dagvw.a.v1")
	}
	for _, tc := range []struct {
		name  string
		steps []engine.DAGStepDefinition
		want  string
	}{
		{"cycle", []engine.DAGStepDefinition{step("a", "dagvw.a.v1", "c"), step("b", "dagvw.b.v1", "a"), step("c", "dagvw.c.v1", "b"), step("d", "dagvw.d.v1")},
			"cycle: a → c → b → a"},
		{"self", []engine.DAGStepDefinition{step("a", "dagvw.a.v1", "a")}, "cycle: a → a"},
		{"missing", []engine.DAGStepDefinition{step("a", "dagvw.a.v1", "nope")}, `step "a" depends on "nope", which is not a step of this workflow`},
		{"duplicate", []engine.DAGStepDefinition{step("a", "dagvw.a.v1"), step("a", "dagvw.b.v1")}, `step name "a" is used twice`},
		{"too many", tooMany, "a workflow has 1 to 100 steps, not 101"},
		{"empty", nil, `"steps" must be a list`},
		{"none", []engine.DAGStepDefinition{}, "a workflow has 1 to 100 steps, not 0"},
		{"bad name", []engine.DAGStepDefinition{step("a b", "dagvw.a.v1")}, "name must be 1 to 63 letters"},
		{"bad type", []engine.DAGStepDefinition{step("a", "Not A Type")}, "type must be a workflow type"},
		{"nested", []engine.DAGStepDefinition{step("a", "dagv.inner.v1")}, "which has steps of its own"},
		{"bad payload", []engine.DAGStepDefinition{{Name: "a", Type: "dagvw.a.v1", Payload: json.RawMessage(`[1]`)}}, "payload must be an object"},
		{"attempts", []engine.DAGStepDefinition{{Name: "a", Type: "dagvw.a.v1", MaxAttempts: 5000}}, "maxAttempts must be 1 to 1000"},
	} {
		err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "dagv.outer.v1", Enabled: true,
			Definition: &engine.DAGDefinition{Steps: tc.steps}})
		if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := b.eng.GetRegistryEntry(b.ctx, "", "dagv.outer.v1"); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("a refused definition was stored: %v", err)
	}
	// A type some workflow uses as a step cannot get steps itself.
	b.register(t, "dagv.user.v1", step("x", "dagvw.leaf.v1"))
	err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "dagvw.leaf.v1", Enabled: true,
		Definition: &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{step("y", "dagvw.a.v1")}}})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), `it is step "x" of dagv.user.v1`) {
		t.Fatalf("a step type got steps: %v", err)
	}
}

// Hostile and careless input: a producer cannot take a step's key first; a
// payload that outgrows the limit as results pile up fails the workflow
// with a clear error instead of failing the worker's completion.
func TestDAGRefusesHostileInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dagh.flow.v1", step("a", "daghw.a.v1"), step("b", "daghw.b.v1", "a"))
	half := strings.Repeat("x", 600_000) // the run's payload and a's result: each within 1 MiB, not both
	id := b.insertSQL(t, "dagh.flow.v1", `{"blob":"`+half+`"}`)
	_, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, idempotency_key) values ('daghw.b.v1', $1)`,
		"dag:"+id+":b")
	if brokenRule(err) != "workflow_run_dag_key" {
		t.Fatalf("a producer took a step's key: %v", err)
	}

	// Another team's DAG, whose first step completes in the same call.
	b.register(t, "daghb.flow.v1", step("a", "daghbw.a.v1"), step("b", "daghbw.b.v1", "a"))
	bystander := b.insertSQL(t, "daghb.flow.v1", `{}`)

	claimed := b.claim(t, "w1", []string{"daghw.a.", "daghbw.a."}, 2)
	if len(claimed) != 2 {
		t.Fatalf("claimed %d first steps, want both", len(claimed))
	}
	big := json.RawMessage(`{"other":"` + half + `"}`)
	var cs []engine.Completion
	for _, c := range claimed {
		result := json.RawMessage(`{"ok":true}`)
		if c.Type == "daghw.a.v1" {
			result = big
		}
		cs = append(cs, engine.Completion{LeaseRef: c.Ref(), Result: result})
	}
	done, err := b.eng.CompleteRuns(b.ctx, "w1", cs)
	if err != nil || len(done) != 2 {
		t.Fatalf("the steps' completion failed: %+v %v", done, err)
	}
	run := b.get(t, id)
	if run.Status != engine.StatusFailed || !strings.Contains(run.LastError, `the payload of step "b" would be`) {
		t.Fatalf("workflow %s: %q", run.Status, run.LastError)
	}
	// Neither its step b started, nor anything of the other team's DAG
	// but its own next step.
	steps := func(parent string) []string {
		t.Helper()
		rows, err := b.pool.Query(b.ctx, `select parent_step || ':' || status from workflow.workflow_run
			where parent_id = $1 order by parent_step`, parent)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := steps(id); !slices.Equal(got, []string{"a:succeeded"}) {
		t.Fatalf("the failed workflow's steps: %v, want only a", got)
	}
	if got := steps(bystander); !slices.Equal(got, []string{"a:succeeded", "b:pending"}) {
		t.Fatalf("the other team's steps: %v, want a done and b started", got)
	}
	if r := b.get(t, bystander); r.Status != engine.StatusPending {
		t.Fatalf("the other team's workflow is %s", r.Status)
	}
}

// Retention does not delete the finished steps of a DAG run still running
// (they would start again); it deletes them once the run has ended.
func TestDAGRetentionKeepsStepsOfARunningWorkflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dagr.flow.v1", step("a", "dagrw.a.v1"), step("b", "dagrw.b.v1", "a"))
	id := b.insertSQL(t, "dagr.flow.v1", `{}`)
	b.work(t, "dagrw.a.")
	b.advanceClock(t, time.Hour) // everything finished is an hour old
	if _, err := b.eng.DeleteFinishedRuns(b.ctx, 30*time.Minute, 100); err != nil {
		t.Fatal(err)
	}
	if got := b.stepRuns(t, id); got != "a=succeeded b=pending" {
		t.Fatalf("after retention: %q", got)
	}
	b.work(t, "dagrw.")
	if run := b.get(t, id); run.Status != engine.StatusSucceeded {
		t.Fatalf("workflow %s", run.Status)
	}
	b.advanceClock(t, time.Hour)
	// The workflow goes first, its steps at the next pass.
	for range 2 {
		if _, err := b.eng.DeleteFinishedRuns(b.ctx, 30*time.Minute, 100); err != nil {
			t.Fatal(err)
		}
	}
	var left int
	if err := b.pool.QueryRow(b.ctx, "select count(*) from workflow.workflow_run").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d runs left after the workflow ended (%v)", left, err)
	}
}

// A step's change announces its DAG run, by id (SourcesOf tells the
// operator its Kubernetes object), so the operator follows step progress
// without polling, and no other login that LISTENs learns object names.
func TestDAGStepChangesAnnounceTheWorkflowObject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.registerIn(t, "shop", "dagn.flow.v1", step("a", "dagnw.a.v1"), step("b", "dagnw.b.v1", "a"))
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(b.ctx, "listen workflow_run_changed"); err != nil {
		t.Fatal(err)
	}
	res, err := b.eng.CreateRun(b.ctx, engine.CreateParams{Type: "dagn.flow.v1",
		IdempotencyKey: "k8s:shop:order-1", Source: &engine.Source{Namespace: "shop", Name: "order-1", UID: "u-1"}})
	if err != nil {
		t.Fatal(err)
	}
	// Drain what the insert announced (the DAG run itself changed).
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 300*time.Millisecond)
		n, err := conn.Conn().WaitForNotification(ctx)
		cancel()
		if err != nil {
			break
		}
		if strings.Contains(n.Payload, "order-1") || strings.Contains(n.Payload, "shop") {
			t.Fatalf("a notification any login may LISTEN to names the object: %q", n.Payload)
		}
	}
	b.claimIn(t, "shop", "w1", []string{"dagnw."}, 1) // a's run becomes leased: only the step changed
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("no notification for the DAG run's object: %v", err)
		}
		if n.Payload == res.ID {
			got, err := b.eng.SourcesOf(b.ctx, []string{n.Payload, "not-an-id", "00000000-0000-0000-0000-000000000000"})
			if err != nil || len(got) != 1 || got[0].Source.Namespace != "shop" || got[0].Source.Name != "order-1" {
				t.Fatalf("the object of the announced run: %+v %v", got, err)
			}
			return
		}
	}
}

// Keys of the reserved shape are refused, other dag: keys are not (a key
// such as dag:nightly:… from before stays usable); a run of a DAG type
// cannot be scheduled for later; a step whose type got steps behind the
// registry's back fails its workflow instead of nesting without end.
func TestDAGEdges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var id string
	if err := b.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (type, idempotency_key)
        values ('legacy.job.v1', 'dag:nightly:2026-11-22') returning id`).Scan(&id); err != nil {
		t.Fatalf("a dag: key outside the reserved shape was refused: %v", err)
	}
	if got := b.claim(t, "w1", []string{"legacy."}, 1); len(got) != 1 {
		t.Fatal("the run with a legacy dag: key cannot be claimed")
	}

	b.register(t, "dage.flow.v1", step("a", "dagew.a.v1"))
	_, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, run_at) values ('dage.flow.v1', now() + interval '1 day')`)
	if err == nil || !strings.Contains(err.Error(), "run_at is not supported") {
		t.Fatalf("a DAG run scheduled for tomorrow: %v", err)
	}

	b.register(t, "dage.outer.v1", step("x", "dage.inner.v1"))
	if _, err := b.pool.Exec(b.ctx, `alter table workflow.workflow_registry disable trigger workflow_registry_written;
        insert into workflow.workflow_registry (workflow_name, definition) values
            ('dage.inner.v1', '{"steps": [{"name": "y", "type": "dage.outer.v1"}]}');
        alter table workflow.workflow_registry enable trigger workflow_registry_written`); err != nil {
		t.Fatal(err)
	}
	outer := b.insertSQL(t, "dage.outer.v1", `{}`)
	run := b.get(t, outer)
	if run.Status != engine.StatusFailed || !strings.Contains(run.LastError, "dage.inner.v1 has steps of its own") {
		t.Fatalf("nested workflow: %s %q", run.Status, run.LastError)
	}
}

// Two steps of one workflow ending at the same moment, one failing for good
// (which ends the workflow and cancels the other) and one completing, from
// two concurrent transactions: both lock the workflow first, so neither
// deadlocks (before, about one try in three did, each costing 1 s).
func TestDAGConcurrentStepEndsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dagd.flow.v1",
		engine.DAGStepDefinition{Name: "a", Type: "dagdw.a.v1", MaxAttempts: 1},
		engine.DAGStepDefinition{Name: "b", Type: "dagdw.b.v1", MaxAttempts: 1},
		step("c", "dagdw.c.v1", "a", "b"))
	for i := range 20 {
		id := b.insertSQL(t, "dagd.flow.v1", `{}`)
		a := b.claim(t, "w1", []string{"dagdw.a."}, 1)
		bb := b.claim(t, "w2", []string{"dagdw.b."}, 1)
		if len(a) != 1 || len(bb) != 1 {
			t.Fatalf("round %d: claimed %d and %d", i, len(a), len(bb))
		}
		errs := make(chan error, 2)
		go func() {
			_, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: a[0].Ref(), Error: "boom"}})
			errs <- err
		}()
		go func() {
			_, err := b.eng.CompleteRuns(b.ctx, "w2", []engine.Completion{{LeaseRef: bb[0].Ref()}})
			errs <- err
		}()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
		if run := b.get(t, id); run.Status != engine.StatusFailed {
			t.Fatalf("round %d: workflow %s", i, run.Status)
		}
	}
}

// Two reapers at once over the expired leases of two steps of one workflow
// (each step's last attempt, so each fails the workflow): both lock the
// workflow first and neither deadlocks.
func TestDAGConcurrentReapersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dagx.flow.v1",
		engine.DAGStepDefinition{Name: "a", Type: "dagxw.a.v1", MaxAttempts: 1},
		engine.DAGStepDefinition{Name: "b", Type: "dagxw.b.v1", MaxAttempts: 1},
		step("c", "dagxw.c.v1", "a", "b"))
	for i := range 10 {
		id := b.insertSQL(t, "dagx.flow.v1", `{}`)
		if got := b.claim(t, "w1", []string{"dagxw."}, 2); len(got) != 2 {
			t.Fatalf("round %d: claimed %d", i, len(got))
		}
		// Both leases expire (the worker died).
		b.advanceClock(t, time.Minute)
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := b.pool.Exec(b.ctx, "select * from workflow.reap_expired_leases(1)")
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
		if _, err := b.pool.Exec(b.ctx, "select * from workflow.reap_expired_leases(10)"); err != nil {
			t.Fatal(err)
		}
		if run := b.get(t, id); run.Status != engine.StatusFailed {
			t.Fatalf("round %d: workflow %s", i, run.Status)
		}
	}
}
