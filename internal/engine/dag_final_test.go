package engine_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func finalStep(name, typ string) engine.DAGStepDefinition {
	return engine.DAGStepDefinition{Name: name, Type: typ, Final: true}
}

// finalOutcome claims the final step's run and returns its payload's
// outcome and steps.
func (b *bundle) finalInput(t *testing.T, prefix string) (engine.ClaimedRun, map[string]any) {
	t.Helper()
	got := b.claim(t, "w1", []string{prefix}, 10)
	if len(got) != 1 {
		t.Fatalf("claimed %d runs of %s, want the final step alone", len(got), prefix)
	}
	var in map[string]any
	if err := json.Unmarshal(got[0].Payload, &in); err != nil {
		t.Fatal(err)
	}
	return got[0], in
}

// A final step runs after the others succeeded, with the outcome and their
// results in its input; the workflow ends when it does, with every result.
func TestDAGFinalStepRunsAfterSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "fin.ok.v1", step("a", "finok.a.v1"), finalStep("report", "finokr.report.v1"))
	id := b.insertSQL(t, "fin.ok.v1", `{"order": 7}`)
	if got := b.work(t, "finok."); fmt.Sprint(got) != "[finok.a.v1]" {
		t.Fatalf("ran %v", got)
	}
	c, in := b.finalInput(t, "finokr.")
	if in["outcome"].(map[string]any)["status"] != "succeeded" || in["order"] != float64(7) {
		t.Fatalf("final input %v", in)
	}
	if _, ok := in["steps"].(map[string]any)["a"]; !ok {
		t.Fatalf("final input lacks a's result: %v", in)
	}
	if r := b.get(t, id); r.Status != engine.StatusPending {
		t.Fatalf("workflow %s while its final step runs, want pending", r.Status)
	}
	b.completeAll(t, "w1", []engine.ClaimedRun{c})
	r := b.get(t, id)
	if r.Status != engine.StatusSucceeded || !strings.Contains(string(r.Result), `"report"`) || !strings.Contains(string(r.Result), `"a"`) {
		t.Fatalf("workflow %s result %s", r.Status, r.Result)
	}
}

// A step failing starts the final step with the failure as its outcome and
// cancels the steps still unfinished; the workflow fails with the first
// failure's reason once the final step ended (even when it succeeded).
func TestDAGFinalStepRunsAfterFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "fin.bad.v1", step("a", "finbad.a.v1"), step("b", "finbad.b.v1"), finalStep("cleanup", "finbadc.cleanup.v1"))
	id := b.insertSQL(t, "fin.bad.v1", `{}`)
	a := b.claim(t, "w1", []string{"finbad.a."}, 1)
	if _, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: a[0].Ref(), Error: "disk full"}}); err != nil {
		t.Fatal(err)
	}
	if got := b.stepRuns(t, id); got != "a=failed b=cancelled cleanup=pending" {
		t.Fatalf("after a failed: %q", got)
	}
	c, in := b.finalInput(t, "finbadc.")
	out := in["outcome"].(map[string]any)
	if out["status"] != "failed" || !strings.Contains(fmt.Sprint(out["error"]), "disk full") || out["step"] != "a" {
		t.Fatalf("final outcome %v", out)
	}
	if r := b.get(t, id); r.Status != engine.StatusPending {
		t.Fatalf("workflow %s while cleaning up, want pending", r.Status)
	}
	b.completeAll(t, "w1", []engine.ClaimedRun{c})
	r := b.get(t, id)
	if r.Status != engine.StatusFailed || !strings.Contains(r.LastError, `step "a" (finbad.a.v1) failed: disk full`) {
		t.Fatalf("workflow %s (%s), want failed naming a", r.Status, r.LastError)
	}
}

// A final step that fails fails a workflow whose other steps succeeded.
func TestDAGFinalStepFailureFailsTheWorkflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "fin.last.v1", step("a", "finlast.a.v1"), engine.DAGStepDefinition{Name: "z", Type: "finlastz.z.v1", Final: true, MaxAttempts: 1})
	id := b.insertSQL(t, "fin.last.v1", `{}`)
	b.work(t, "finlast.")
	c, _ := b.finalInput(t, "finlastz.")
	if _, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: c.Ref(), Error: "mail server down"}}); err != nil {
		t.Fatal(err)
	}
	r := b.get(t, id)
	if r.Status != engine.StatusFailed || !strings.Contains(r.LastError, `final step "z" (finlastz.z.v1) failed: mail server down`) {
		t.Fatalf("workflow %s (%s)", r.Status, r.LastError)
	}
}

// A workflow cancelled from outside ends at once; its final step runs
// after it, told so, with no deadline; the workflow stays cancelled.
func TestDAGFinalStepRunsAfterACancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "fin.cancel.v1", step("a", "fincan.a.v1"), finalStep("cleanup", "fincanc.cleanup.v1"))
	id := b.create(t, engine.CreateParams{Type: "fin.cancel.v1", Deadline: time.Hour})
	running := b.claim(t, "w1", []string{"fincan.a."}, 1)
	if ok, err := b.eng.CancelRun(b.ctx, id); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if got := b.stepRuns(t, id); got != "a=cancelled cleanup=pending" {
		t.Fatalf("after cancel: %q", got)
	}
	c, in := b.finalInput(t, "fincanc.")
	if in["outcome"].(map[string]any)["status"] != "cancelled" || c.DeadlineAt != nil {
		t.Fatalf("final outcome %v deadline %v", in["outcome"], c.DeadlineAt)
	}
	b.completeAll(t, "w1", []engine.ClaimedRun{c})
	if r := b.get(t, id); r.Status != engine.StatusCancelled {
		t.Fatalf("workflow %s, want cancelled", r.Status)
	}
	if r := b.get(t, running[0].ID); r.Status != engine.StatusCancelled {
		t.Fatalf("step a %s, want cancelled", r.Status)
	}
}

// Retrying a failed workflow with a final step runs the final step again
// at the end, with the new outcome; its earlier run is kept, detached.
func TestRetryRunRunsTheFinalStepAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "fin.retry.v1", engine.DAGStepDefinition{Name: "a", Type: "finre.a.v1", MaxAttempts: 1}, finalStep("report", "finrer.report.v1"))
	id := b.insertSQL(t, "fin.retry.v1", `{}`)
	a := b.claim(t, "w1", []string{"finre.a."}, 1)
	if _, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: a[0].Ref(), Error: "flaky"}}); err != nil {
		t.Fatal(err)
	}
	first, _ := b.finalInput(t, "finrer.")
	b.completeAll(t, "w1", []engine.ClaimedRun{first})
	if r := b.get(t, id); r.Status != engine.StatusFailed {
		t.Fatalf("workflow %s, want failed", r.Status)
	}
	if err := b.eng.RetryRun(b.ctx, engine.RetryParams{ID: id}); err != nil {
		t.Fatal(err)
	}
	if got := b.stepRuns(t, id); got != "a=pending" {
		t.Fatalf("after retry: %q, want a pending and the final step not started", got)
	}
	b.work(t, "finre.")
	again, in := b.finalInput(t, "finrer.")
	if again.ID == first.ID || in["outcome"].(map[string]any)["status"] != "succeeded" {
		t.Fatalf("final step ran again as %s with %v", again.ID, in["outcome"])
	}
	b.completeAll(t, "w1", []engine.ClaimedRun{again})
	if r := b.get(t, id); r.Status != engine.StatusSucceeded {
		t.Fatalf("workflow %s (%s), want succeeded", r.Status, r.LastError)
	}
	if r := b.get(t, first.ID); r.Status != engine.StatusSucceeded || r.ParentID != "" {
		t.Fatalf("the earlier final run: %s parent %q, want kept and detached", r.Status, r.ParentID)
	}
	if ev := b.retriedEvents(t, id); len(ev) != 1 || ev[0]["previous_final_run_id"] != first.ID {
		t.Fatalf("retried events %v", ev)
	}
}

// Definitions with a final step are checked: one at most, no dependencies
// either way, and at least one other step.
func TestDAGFinalStepDefinitionsAreChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		steps []engine.DAGStepDefinition
		want  string
	}{
		{[]engine.DAGStepDefinition{step("a", "x.a.v1"), finalStep("f", "x.f.v1"), finalStep("g", "x.g.v1")}, "at most one final step"},
		{[]engine.DAGStepDefinition{step("a", "x.a.v1"), {Name: "f", Type: "x.f.v1", Final: true, DependsOn: []string{"a"}}}, "depends on none"},
		{[]engine.DAGStepDefinition{step("a", "x.a.v1", "f"), finalStep("f", "x.f.v1")}, `depends on "f", the final step`},
		{[]engine.DAGStepDefinition{finalStep("f", "x.f.v1")}, "needs a step besides its final step"},
	}
	for i, tc := range cases {
		err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{
			WorkflowName: fmt.Sprintf("fin.bad%d.v1", i), Enabled: true, Definition: &engine.DAGDefinition{Steps: tc.steps}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("case %d: %v, want an error saying %q", i, err, tc.want)
		}
	}
}

// A payload near the limit never stops what ends a workflow: the final
// step starts with the outcome alone, and cancels, failures and the
// reaper go through.
func TestDAGFinalStepPayloadNeverBlocksTheEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_settings set max_payload_bytes = 10000`); err != nil {
		t.Fatal(err)
	}
	b.register(t, "fin.big.v1", step("a", "finbig.a.v1"), finalStep("fin", "finbigf.fin.v1"))
	big := fmt.Sprintf(`{"blob": %q}`, strings.Repeat("x", 9950))
	cancelled := b.insertSQL(t, "fin.big.v1", big)
	if ok, err := b.eng.CancelRun(b.ctx, cancelled); err != nil || !ok {
		t.Fatalf("cancel a workflow with a payload near the limit: %v %v", ok, err)
	}
	failing := b.insertSQL(t, "fin.big.v1", big)
	a := b.claim(t, "w1", []string{"finbig.a."}, 10)
	if len(a) != 1 {
		t.Fatalf("claimed %d", len(a))
	}
	if _, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: a[0].Ref(), Error: strings.Repeat("e", 3000)}}); err != nil {
		t.Fatalf("fail the step of a workflow with a payload near the limit: %v", err)
	}
	fins := b.claim(t, "w1", []string{"finbigf."}, 10)
	if len(fins) != 2 {
		t.Fatalf("claimed %d final steps, want both workflows'", len(fins))
	}
	for _, f := range fins {
		var in struct {
			Outcome map[string]any `json:"outcome"`
		}
		if err := json.Unmarshal(f.Payload, &in); err != nil || in.Outcome["status"] == nil {
			t.Fatalf("final step's payload %s (%v), want the outcome", f.Payload, err)
		}
	}
	b.completeAll(t, "w1", fins)
	if r := b.get(t, failing); r.Status != engine.StatusFailed {
		t.Fatalf("workflow %s, want failed", r.Status)
	}
}

// The workflow's deadline passing ends it at once; its final step then runs
// with no deadline, and keeps running to its end.
func TestDAGFinalStepRunsAfterTheDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "fin.late.v1", step("a", "finlate.a.v1"), finalStep("fin", "finlatef.fin.v1"))
	id := b.create(t, engine.CreateParams{Type: "fin.late.v1", Deadline: time.Minute})
	a := b.claim(t, "w1", []string{"finlate.a."}, 1)
	b.advanceClock(t, 2*time.Minute)
	// The step's own worker sees the deadline first (its heartbeat expires
	// its runs), then the maintenance's pass.
	if _, err := b.pool.Exec(b.ctx, `select * from workflow.expire_deadlines(array[$1::uuid], 100)`, a[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `select * from workflow.expire_deadlines(null, 100)`); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, id); r.Status != engine.StatusFailed {
		t.Fatalf("workflow %s, want failed at its deadline", r.Status)
	}
	f := b.claim(t, "w1", []string{"finlatef."}, 1)
	if len(f) != 1 || f[0].DeadlineAt != nil {
		t.Fatalf("final step claimed %+v, want it runnable with no deadline", f)
	}
	b.completeAll(t, "w1", f)
	if r := b.get(t, f[0].ID); r.Status != engine.StatusSucceeded {
		t.Fatalf("final step %s, want succeeded", r.Status)
	}
}

// Results too large to be the workflow's fail it before the final step
// starts, which is told so; a retry is refused while a final step runs.
func TestDAGFinalStepHearsOfResultsOverTheLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "fin.deep.v1", step("a", "findeep.a.v1"), finalStep("fin", "findeepf.fin.v1"))
	id := b.insertSQL(t, "fin.deep.v1", `{}`)
	a := b.claim(t, "w1", []string{"findeep.a."}, 1)
	deep := strings.Repeat(`{"x":`, 63) + "1" + strings.Repeat("}", 63)
	b.completeWith(t, a[0], deep)
	f, in := b.finalInput(t, "findeepf.")
	if in["outcome"].(map[string]any)["status"] != "failed" {
		t.Fatalf("final outcome %v, want failed", in["outcome"])
	}
	if err := b.eng.RetryRun(b.ctx, engine.RetryParams{ID: id}); err == nil {
		t.Fatal("a workflow whose final step runs was retried")
	}
	b.completeAll(t, "w1", []engine.ClaimedRun{f})
	if r := b.get(t, id); r.Status != engine.StatusFailed {
		t.Fatalf("workflow %s, want failed", r.Status)
	}
}
