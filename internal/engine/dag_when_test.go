package engine_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func whenStep(name, typ, when string, deps ...string) engine.DAGStepDefinition {
	return engine.DAGStepDefinition{Name: name, Type: typ, DependsOn: deps, When: when}
}

// Conditions choose a branch from an earlier step's result: the branch
// whose condition holds runs, the other is skipped (it counts as done), a
// step after both gets the skipped one as null, and the workflow's result
// has no entry for it.
func TestDAGConditionsChooseABranch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "when.branch.v1",
		step("check", "whenb.check.v1"),
		whenStep("approve", "whenb.approve.v1", `$.steps.check.result.score > 10`, "check"),
		whenStep("reject", "whenb.reject.v1", `$.steps.check.result.score <= 10`, "check"),
		step("notify", "whenb.notify.v1", "approve", "reject"))
	id := b.insertSQL(t, "when.branch.v1", `{}`)
	c := b.claim(t, "w1", []string{"whenb."}, 10)
	if len(c) != 1 || c[0].Type != "whenb.check.v1" {
		t.Fatalf("claimed %+v, want check", c)
	}
	if _, err := b.eng.CompleteRuns(b.ctx, "w1", []engine.Completion{{LeaseRef: c[0].Ref(), Result: json.RawMessage(`{"score": 42}`)}}); err != nil {
		t.Fatal(err)
	}
	if got := b.stepRuns(t, id); got != "check=succeeded approve=pending reject=skipped" {
		t.Fatalf("after check: %q", got)
	}
	if got := b.work(t, "whenb."); fmt.Sprint(got) != "[whenb.approve.v1]" {
		t.Fatalf("ran %v, want approve alone", got)
	}
	n := b.claim(t, "w1", []string{"whenb."}, 10)
	if len(n) != 1 || n[0].Type != "whenb.notify.v1" {
		t.Fatalf("claimed %+v, want notify", n)
	}
	var in struct {
		Steps map[string]json.RawMessage `json:"steps"`
	}
	if err := json.Unmarshal(n[0].Payload, &in); err != nil || string(in.Steps["reject"]) != "null" || in.Steps["approve"] == nil {
		t.Fatalf("notify's input %s (%v), want approve's result and reject null", n[0].Payload, err)
	}
	b.completeAll(t, "w1", n)
	r := b.get(t, id)
	if r.Status != engine.StatusSucceeded || strings.Contains(string(r.Result), `"reject"`) || !strings.Contains(string(r.Result), `"notify"`) {
		t.Fatalf("workflow %s result %s", r.Status, r.Result)
	}
	if got := b.stepRuns(t, id); got != "check=succeeded approve=succeeded reject=skipped notify=succeeded" {
		t.Fatalf("at the end: %q", got)
	}
}

// A condition on the workflow's payload decides a first step at once; a
// workflow whose every step is skipped succeeds; a value of the wrong type
// (no boolean) skips, as false does.
func TestDAGConditionsOnThePayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "when.payload.v1",
		whenStep("express", "whenp.express.v1", `$.payload.express == true`),
		whenStep("weight", "whenp.weight.v1", `$.payload.kg > 20`))
	fast := b.insertSQL(t, "when.payload.v1", `{"express": true, "kg": 5}`)
	if got := b.stepRuns(t, fast); got != "express=pending weight=skipped" {
		t.Fatalf("express order: %q", got)
	}
	none := b.insertSQL(t, "when.payload.v1", `{"express": "yes", "kg": "heavy"}`)
	if got := b.stepRuns(t, none); got != "express=skipped weight=skipped" {
		t.Fatalf("no step: %q", got)
	}
	if r := b.get(t, none); r.Status != engine.StatusSucceeded || string(r.Result) != `{"steps": {}}` {
		t.Fatalf("a workflow whose steps were all skipped: %s %s", r.Status, r.Result)
	}
}

// A condition that fails to evaluate (a comparison of a date with a
// time that has a zone, which silent mode does not excuse) fails its
// workflow with the reason and the step named, never the completion that
// made the step ready. Beside it, workflows of the same definition whose
// condition meets no date (a number; a date nested 60 arrays deep beside
// half a megabyte of text) skip the step and succeed, and another team's
// run recorded first is untouched.
func TestDAGConditionThatFailsToEvaluateFailsItsWorkflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bystander := b.create(t, engine.CreateParams{Type: "whenother.team.v1",
		Source: &engine.Source{Namespace: "team-b", Name: "keep-me", UID: "u-1"}})
	b.register(t, "when.err.v1",
		step("check", "whene.check.v1"),
		whenStep("late", "whene.late.v1", `$.steps.check.result.d.datetime() < "2024-01-01 00:00:00+00".datetime()`, "check"))
	broken := b.insertSQL(t, "when.err.v1", `{}`)
	number := b.insertSQL(t, "when.err.v1", `{}`)
	deep := b.insertSQL(t, "when.err.v1", `{}`)
	results := map[string]json.RawMessage{
		broken: json.RawMessage(`{"d": "2023-05-01"}`),
		number: json.RawMessage(`{"d": 7}`),
		deep: json.RawMessage(`{"d": ` + strings.Repeat("[", 60) + `"2023-05-01"` + strings.Repeat("]", 60) +
			`, "pad": "` + strings.Repeat("x", 500000) + `"}`),
	}
	c := b.claim(t, "w1", []string{"whene."}, 10)
	if len(c) != 3 {
		t.Fatalf("claimed %+v, want the three checks", c)
	}
	var done []engine.Completion
	for _, l := range c {
		r := b.get(t, l.ID)
		done = append(done, engine.Completion{LeaseRef: l.Ref(), Result: results[r.ParentID]})
	}
	if _, err := b.eng.CompleteRuns(b.ctx, "w1", done); err != nil {
		t.Fatalf("the completion failed with its workflow's condition: %v", err)
	}
	for _, l := range c {
		if r := b.get(t, l.ID); r.Status != engine.StatusSucceeded {
			t.Fatalf("the step whose completion evaluated the condition is %s", r.Status)
		}
	}
	r := b.get(t, broken)
	if r.Status != engine.StatusFailed || !strings.Contains(r.LastError, `the condition of step "late" could not be evaluated: `) {
		t.Fatalf("workflow %s (%s), want failed naming the condition of late", r.Status, r.LastError)
	}
	for name, id := range map[string]string{"a number": number, "a date deep in arrays": deep} {
		if got := b.stepRuns(t, id); got != "check=succeeded late=skipped" {
			t.Errorf("%s: the workflow's steps %q, want late skipped", name, got)
		}
		if r := b.get(t, id); r.Status != engine.StatusSucceeded {
			t.Errorf("%s: the workflow is %s (%s)", name, r.Status, r.LastError)
		}
	}
	got := b.claimIn(t, "team-b", "w9", []string{"whenother.team."}, 10)
	if len(got) != 1 || got[0].ID != bystander || got[0].Attempt != 1 {
		t.Fatalf("the other team's run was not claimable as before: %+v", got)
	}
}

// Conditions are checked when a definition is stored.
func TestDAGConditionsAreChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		steps []engine.DAGStepDefinition
		want  string
	}{
		{[]engine.DAGStepDefinition{whenStep("a", "x.a.v1", `$.payload.(`)}, `step "a": when is not an SQL/JSON path expression`},
		{[]engine.DAGStepDefinition{whenStep("a", "x.a.v1", strings.Repeat("x", 1025))}, "1 to 1024 characters"},
		{[]engine.DAGStepDefinition{step("a", "x.a.v1"), {Name: "f", Type: "x.f.v1", Final: true, When: "$.x == 1"}}, "a final step always runs"},
	}
	for i, tc := range cases {
		err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{
			WorkflowName: fmt.Sprintf("when.bad%d.v1", i), Enabled: true, Definition: &engine.DAGDefinition{Steps: tc.steps}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("case %d: %v, want an error saying %q", i, err, tc.want)
		}
	}
}

// A definition whose "final" is not a boolean is refused with that reason,
// whatever else the step has: it is checked before anything reads it as
// one (a string beside when or forEach failed the check with a cast error).
func TestDAGFinalThatIsNoBooleanIsRefusedWithItsReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, def := range []string{
		`{"steps": [{"name": "a", "type": "x.a.v1", "when": "$.x == 1", "final": "x"}]}`,
		`{"steps": [{"name": "a", "type": "x.a.v1", "forEach": "$.xs", "final": "yes"}]}`,
		`{"steps": [{"name": "a", "type": "x.a.v1", "final": 1}]}`,
		`{"steps": [{"name": "a", "type": "x.a.v1", "final": null, "when": "$.x"}]}`,
	} {
		var problem *string
		if err := b.pool.QueryRow(b.ctx, `select workflow.definition_problem($1::jsonb)`, def).Scan(&problem); err != nil {
			t.Fatalf("%s: %v", def, err)
		}
		if problem == nil || !strings.Contains(*problem, `step "a": final must be true or false`) {
			t.Errorf("%s: problem %v, want final must be true or false", def, problem)
		}
	}
}
