package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// A condition or forEach whose cost would grow faster than its input is
// refused when the registry is written, naming why: nested **, $ in a
// filter, a comparison of two paths. Paths that read in proportion to the
// input register as before.
func TestDAGPathsOfUnboundedCostAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ when, want string }{
		{`$.** ? (@.** == 1)`, "uses ** inside a filter"},
		{`$.**.**.**.** ? (@ == 1)`, "uses ** more than once"},
		{`$.payload.items[*] ? (@.id == $.payload.wanted)`, "compares two paths"},
		{`$.payload.a[*] ? (@.x == @.y)`, "compares two paths"},
		{`$.payload.a == $.payload.b`, "compares two paths"},
		{`exists($.payload.a[*] ? (exists($.payload.b)))`, "uses $ inside a filter"},
		{`exists($.payload.x[$.payload.a ? (@.c[*] == @.d[*])])`, "uses $ inside a filter or a subscript"},
		{`exists($.payload.a[*][($ ? (@.payload.b[*] == -5000)).size() - 1])`, "uses $ inside a filter or a subscript"},
		{`exists($.payload.x[1 to 2] ? (@.c[*] == @.d[*]))`, "compares two paths"},
	} {
		err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "cost.bad.v1", Enabled: true,
			Definition: &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{
				step("a", "costw.a.v1"), whenStep("b", "costw.b.v1", c.when, "a")}}})
		if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), `step "b": when is refused: it `+c.want) {
			t.Errorf("when %s: %v, want refused as %q", c.when, err, c.want)
		}
	}
	for _, ok := range []string{
		`$.steps.a.result.score > 10`,
		`$.** ? (@.flag == true)`,
		`exists($.steps.a.result.items[*] ? (@.ok == true && @.name starts with "x")) && $.payload.n >= -1`,
		`"gold" == $.payload.tier`,
	} {
		if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "cost.ok.v1", Enabled: true,
			Definition: &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{
				step("a", "costw.a.v1"), whenStep("b", "costw.b.v1", ok, "a")}}}); err != nil {
			t.Errorf("when %s: %v", ok, err)
		}
	}
	_, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, dag) values ('cost.inline.v1',
		'{"steps": [{"name": "a", "type": "costw.a.v1", "forEach": "$.payload.a[*] ? (@ == $.payload.b)"}]}')`)
	if sqlState(err) != "SW001" || !strings.Contains(err.Error(), "forEach is refused") {
		t.Fatalf("an inline definition with a quadratic forEach: %v", err)
	}
}

// A definition stored before the check (here: written into the run by the
// owner) with four nested ** over a deep result fails its workflow at once
// when the condition comes due; the completion that made it due stands,
// and another workflow of the same definition, beside it, succeeds.
func TestDAGPathOfUnboundedCostFailsOnlyItsWorkflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "cost.flow.v1", step("a", "costr.a.v1"), whenStep("b", "costr.b.v1", `$.steps.a.result.x > 1`, "a"))
	hostile := b.insertSQL(t, "cost.flow.v1", `{}`)
	bystander := b.insertSQL(t, "cost.flow.v1", `{}`)
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_run
		set dag = jsonb_set(dag, '{steps,1,when}', '"$.** ? (@.** ? (@.** ? (@.** == 7) == 7) == 7)"')
		where id = $1`, hostile); err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat(`{"k": [1, 2, `, 25) + `7` + strings.Repeat(`]}`, 25)
	claimed := b.claim(t, "w1", []string{"costr.a."}, 10)
	if len(claimed) != 2 {
		t.Fatalf("claimed %+v", claimed)
	}
	var done []engine.Completion
	for _, c := range claimed {
		done = append(done, engine.Completion{LeaseRef: c.Ref(), Result: []byte(`{"x": 2, "deep": ` + deep + `}`)})
	}
	start := time.Now()
	if _, err := b.eng.CompleteRuns(b.ctx, "w1", done); err != nil {
		t.Fatalf("the completion: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the completion took %s", d)
	}
	for _, c := range claimed {
		if r := b.get(t, c.ID); r.Status != engine.StatusSucceeded {
			t.Fatalf("step run %s is %s (%s)", c.ID, r.Status, r.LastError)
		}
	}
	if r := b.get(t, hostile); r.Status != engine.StatusFailed || !strings.Contains(r.LastError, "refused: it uses ** inside a filter") {
		t.Fatalf("the hostile workflow: %s (%s)", r.Status, r.LastError)
	}
	b.work(t, "costr.b.")
	if r := b.get(t, bystander); r.Status != engine.StatusSucceeded {
		t.Fatalf("the bystander: %s (%s)", r.Status, r.LastError)
	}
}
