package engine_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func forEachStep(name, typ, forEach, failure string, deps ...string) engine.DAGStepDefinition {
	return engine.DAGStepDefinition{Name: name, Type: typ, DependsOn: deps, ForEach: forEach, ForEachFailure: failure}
}

// claimElements claims the runs of a fanned-out step's type and returns
// them by index (from their payload).
func (b *bundle) claimElements(t *testing.T, prefix string, want int) map[int]engine.ClaimedRun {
	t.Helper()
	got := b.claim(t, "w1", []string{prefix}, 2000)
	if len(got) != want {
		t.Fatalf("claimed %d elements of %s, want %d", len(got), prefix, want)
	}
	out := map[int]engine.ClaimedRun{}
	for _, c := range got {
		var in struct {
			Index int `json:"index"`
		}
		if err := json.Unmarshal(c.Payload, &in); err != nil {
			t.Fatal(err)
		}
		out[in.Index] = c
	}
	return out
}

func (b *bundle) completeWith(t *testing.T, c engine.ClaimedRun, result string) {
	t.Helper()
	if _, err := b.eng.CompleteRuns(b.ctx, "w1", []engine.Completion{{LeaseRef: c.Ref(), Result: json.RawMessage(result)}}); err != nil {
		t.Fatal(err)
	}
}

// A step fans out over a list from an earlier step's result: one run per
// element with the item and its index, the step's result the list of
// theirs in index order (whatever order they finished in), handed to the
// step after it.
func TestDAGForEachFansOutOverAnEarlierResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "each.list.v1",
		step("list", "eachl.list.v1"),
		forEachStep("resize", "eachr.resize.v1", "$.steps.list.result.images", "", "list"),
		step("publish", "eachp.publish.v1", "resize"))
	id := b.insertSQL(t, "each.list.v1", `{"album": "summer"}`)
	l := b.claim(t, "w1", []string{"eachl."}, 1)
	b.completeWith(t, l[0], `{"images": ["a.png", "b.png", "c.png"]}`)
	if got := b.stepRuns(t, id); got != "list=succeeded resize=leased" {
		t.Fatalf("after list: %q", got)
	}
	els := b.claimElements(t, "eachr.", 3)
	var in struct {
		Album string `json:"album"`
		Item  string `json:"item"`
		Index int    `json:"index"`
	}
	if err := json.Unmarshal(els[1].Payload, &in); err != nil || in.Item != "b.png" || in.Album != "summer" {
		t.Fatalf("element 1's payload %s (%v)", els[1].Payload, err)
	}
	for _, i := range []int{2, 0, 1} {
		b.completeWith(t, els[i], fmt.Sprintf(`{"thumb": "t%d"}`, i))
	}
	p := b.claim(t, "w1", []string{"eachp."}, 1)
	var pin struct {
		Steps struct {
			Resize []struct {
				Thumb string `json:"thumb"`
			} `json:"resize"`
		} `json:"steps"`
	}
	if len(p) != 1 || json.Unmarshal(p[0].Payload, &pin) != nil || len(pin.Steps.Resize) != 3 || pin.Steps.Resize[2].Thumb != "t2" {
		t.Fatalf("publish's input %s", p[0].Payload)
	}
	b.completeAll(t, "w1", p)
	if r := b.get(t, id); r.Status != engine.StatusSucceeded || !strings.Contains(string(r.Result), `"resize": [{"thumb": "t0"}, {"thumb": "t1"}, {"thumb": "t2"}]`) {
		t.Fatalf("workflow %s result %s", r.Status, r.Result)
	}
}

// An empty list makes the step succeed at once with []; a list from the
// payload fans out from the start.
func TestDAGForEachEmptyAndFromThePayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "each.empty.v1", forEachStep("each", "eache.each.v1", "$.payload.items", ""), step("after", "eachea.after.v1", "each"))
	none := b.insertSQL(t, "each.empty.v1", `{"items": []}`)
	if got := b.stepRuns(t, none); got != "each=succeeded after=pending" {
		t.Fatalf("empty list: %q", got)
	}
	two := b.insertSQL(t, "each.empty.v1", `{"items": [{"n": 1}, {"n": 2}]}`)
	if got := b.stepRuns(t, two); got != "each=leased" {
		t.Fatalf("two items: %q", got)
	}
	b.claimElements(t, "eache.", 2)
}

// With failStep (the default) an element that fails for good fails the
// step and the workflow, naming the element, and the other elements are
// cancelled; retrying the workflow runs the failed and cancelled elements
// again and keeps the ones that succeeded.
func TestDAGForEachFailStepAndRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "each.fail.v1", engine.DAGStepDefinition{Name: "ship", Type: "eachf.ship.v1", ForEach: "$.payload.parcels", MaxAttempts: 1})
	id := b.insertSQL(t, "each.fail.v1", `{"parcels": ["p0", "p1", "p2"]}`)
	els := b.claimElements(t, "eachf.", 3)
	b.completeWith(t, els[0], `"sent"`)
	if _, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: els[1].Ref(), Error: "no such address"}}); err != nil {
		t.Fatal(err)
	}
	r := b.get(t, id)
	if r.Status != engine.StatusFailed || !strings.Contains(r.LastError, `step "ship" element 1 (eachf.ship.v1) failed: no such address`) {
		t.Fatalf("workflow %s (%s)", r.Status, r.LastError)
	}
	if s := b.get(t, els[2].ID); s.Status != engine.StatusCancelled {
		t.Fatalf("element 2 is %s, want cancelled", s.Status)
	}
	if err := b.eng.RetryRun(b.ctx, engine.RetryParams{ID: id}); err != nil {
		t.Fatal(err)
	}
	again := b.claim(t, "w1", []string{"eachf."}, 10)
	var ids []string
	for _, c := range again {
		ids = append(ids, c.ID)
	}
	sort.Strings(ids)
	want := []string{els[1].ID, els[2].ID}
	sort.Strings(want)
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("retried elements %v, want 1 and 2 (0 succeeded)", ids)
	}
	b.completeAll(t, "w1", again)
	if r := b.get(t, id); r.Status != engine.StatusSucceeded {
		t.Fatalf("workflow %s (%s) after the retry", r.Status, r.LastError)
	}
}

// With continue, a failed element leaves null in the step's result and the
// workflow goes on.
func TestDAGForEachContinue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "each.cont.v1", engine.DAGStepDefinition{Name: "ping", Type: "eachc.ping.v1", ForEach: "$.payload.hosts",
		ForEachFailure: "continue", MaxAttempts: 1})
	id := b.insertSQL(t, "each.cont.v1", `{"hosts": ["a", "b"]}`)
	els := b.claimElements(t, "eachc.", 2)
	if _, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: els[0].Ref(), Error: "timeout"}}); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, id); r.Status != engine.StatusPending {
		t.Fatalf("workflow %s after one element failed, want pending", r.Status)
	}
	b.completeWith(t, els[1], `"up"`)
	if r := b.get(t, id); r.Status != engine.StatusSucceeded || string(r.Result) != `{"steps": {"ping": [null, "up"]}}` {
		t.Fatalf("workflow %s result %s", r.Status, r.Result)
	}
}

// A forEach that selects no list, or more than 1,000 elements, fails the
// workflow with the reason; bad definitions are refused when stored.
func TestDAGForEachRefusesWhatItCannotFanOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "each.bad.v1", forEachStep("each", "eachb.each.v1", "$.payload.items", ""))
	notList := b.insertSQL(t, "each.bad.v1", `{"items": {"a": 1}}`)
	if r := b.get(t, notList); r.Status != engine.StatusFailed || !strings.Contains(r.LastError, `forEach of step "each" ($.payload.items) selected object, not a list`) {
		t.Fatalf("an object: %s (%s)", r.Status, r.LastError)
	}
	big := make([]int, 1001)
	raw, _ := json.Marshal(map[string]any{"items": big})
	tooMany := b.insertSQL(t, "each.bad.v1", string(raw))
	if r := b.get(t, tooMany); r.Status != engine.StatusFailed || !strings.Contains(r.LastError, "selected 1001 elements; a step fans out to at most 1000") {
		t.Fatalf("1001 elements: %s (%s)", r.Status, r.LastError)
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run where parent_id = $1`, tooMany).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d element runs of a refused fan-out (%v)", n, err)
	}
	cases := []struct {
		steps []engine.DAGStepDefinition
		want  string
	}{
		{[]engine.DAGStepDefinition{forEachStep("a", "x.a.v1", "$.(", "")}, "forEach is not an SQL/JSON path expression"},
		{[]engine.DAGStepDefinition{{Name: "a", Type: "x.a.v1", ForEachFailure: "continue"}}, "forEachFailure is failStep or continue, on a step with forEach"},
		{[]engine.DAGStepDefinition{forEachStep("a", "x.a.v1", "$.x", "sometimes")}, "forEachFailure is failStep or continue"},
		{[]engine.DAGStepDefinition{forEachStep(strings.Repeat("a", 58), "x.a.v1", "$.x", "")}, "at most 57 characters"},
		{[]engine.DAGStepDefinition{step("a", "x.a.v1"), {Name: "f", Type: "x.f.v1", Final: true, ForEach: "$.x"}}, "a final step runs once"},
	}
	for i, tc := range cases {
		err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{
			WorkflowName: fmt.Sprintf("each.bad%d.v1", i), Enabled: true, Definition: &engine.DAGDefinition{Steps: tc.steps}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("case %d: %v, want an error saying %q", i, err, tc.want)
		}
	}
}

// A forEach that fails to evaluate fails the workflow with the reason,
// never the completion that triggered it; path variables are refused; a
// fan-out cannot multiply a payload past 16 payloads' worth.
func TestDAGForEachErrorsAndAmplification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Another team's run, recorded first, must be unharmed by all of it.
	bystander := b.create(t, engine.CreateParams{Type: "other.team.v1", Source: &engine.Source{Namespace: "team-b", Name: "keep-me", UID: "u-1"}})
	b.register(t, "each.err.v1", step("list", "eacherr.list.v1"),
		forEachStep("each", "eacherre.each.v1", `$.steps.list.result.items ? (@.d.datetime() < "2024-01-01 00:00:00+00".datetime())`, "", "list"))
	id := b.insertSQL(t, "each.err.v1", `{}`)
	l := b.claim(t, "w1", []string{"eacherr."}, 1)
	if _, err := b.eng.CompleteRuns(b.ctx, "w1", []engine.Completion{{LeaseRef: l[0].Ref(),
		Result: json.RawMessage(`{"items": [{"d": "2023-05-01"}]}`)}}); err != nil {
		t.Fatalf("the completion failed with its workflow's forEach: %v", err)
	}
	if r := b.get(t, l[0].ID); r.Status != engine.StatusSucceeded {
		t.Fatalf("the step whose completion evaluated the forEach is %s", r.Status)
	}
	if r := b.get(t, id); r.Status != engine.StatusFailed || !strings.Contains(r.LastError, `forEach of step "each" could not be evaluated`) {
		t.Fatalf("workflow %s (%s)", r.Status, r.LastError)
	}
	err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "each.var.v1", Enabled: true,
		Definition: &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{forEachStep("a", "x.a.v1", "$.payload.items[$i]", "")}}})
	if err == nil || !strings.Contains(err.Error(), "path variable") {
		t.Fatalf("a path variable: %v", err)
	}
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_settings set max_payload_bytes = 20000`); err != nil {
		t.Fatal(err)
	}
	b.register(t, "each.amp.v1", forEachStep("each", "eachamp.each.v1", "$.payload.items", ""))
	items := make([]int, 100)
	raw, _ := json.Marshal(map[string]any{"items": items, "blob": strings.Repeat("x", 5000)})
	amp := b.insertSQL(t, "each.amp.v1", string(raw))
	if r := b.get(t, amp); r.Status != engine.StatusFailed || !strings.Contains(r.LastError, "fan-outs carry at most") {
		t.Fatalf("amplified fan-out: %s (%s)", r.Status, r.LastError)
	}
	var elements int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run where parent_id = $1`, amp).Scan(&elements); err != nil || elements != 0 {
		t.Fatalf("%d element runs of the refused fan-out (%v)", elements, err)
	}
	got := b.claimIn(t, "team-b", "w9", []string{"other.team."}, 10)
	if len(got) != 1 || got[0].ID != bystander {
		t.Fatalf("the other team's run was not claimable as before: %+v", got)
	}
}

// Retrying a workflow whose continue fan-out succeeded past a failed
// element keeps that step whole: only the step that failed after it runs
// again, with the same input.
func TestRetryRunKeepsAContinueFanOutThatSucceeded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "each.keep.v1",
		engine.DAGStepDefinition{Name: "each", Type: "eachk.each.v1", ForEach: "$.payload.items", ForEachFailure: "continue", MaxAttempts: 1},
		engine.DAGStepDefinition{Name: "next", Type: "eachkn.next.v1", DependsOn: []string{"each"}, MaxAttempts: 1})
	id := b.insertSQL(t, "each.keep.v1", `{"items": [0, 1]}`)
	els := b.claimElements(t, "eachk.", 2)
	if _, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: els[0].Ref(), Error: "flaky"}}); err != nil {
		t.Fatal(err)
	}
	b.completeWith(t, els[1], `"r1"`)
	n := b.claim(t, "w1", []string{"eachkn."}, 1)
	if _, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: n[0].Ref(), Error: "downstream"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.eng.RetryRun(b.ctx, engine.RetryParams{ID: id}); err != nil {
		t.Fatal(err)
	}
	if got := b.claim(t, "w1", []string{"eachk."}, 10); len(got) != 0 {
		t.Fatalf("the retry reran %d elements of a step that had succeeded", len(got))
	}
	again := b.claim(t, "w1", []string{"eachkn."}, 1)
	if len(again) != 1 || again[0].ID != n[0].ID || !strings.Contains(string(again[0].Payload), `"each": [null, "r1"]`) {
		t.Fatalf("retried %+v, want next again with each's result", again)
	}
	b.completeAll(t, "w1", again)
	if r := b.get(t, id); r.Status != engine.StatusSucceeded || !strings.Contains(string(r.Result), `"each": [null, "r1"]`) {
		t.Fatalf("workflow %s result %s", r.Status, r.Result)
	}
}

// One small insert of a definition with many fanned-out steps creates at
// most 1000 element runs in all: the step that would pass the bound fails
// the workflow (reason for_each_invalid), and the elements already
// started are cancelled with it.
func TestDAGFanOutIsBoundedPerWorkflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var steps []string
	for i := range 20 {
		steps = append(steps, fmt.Sprintf(`{"name": "s%d", "type": "fanb.s.v1", "forEach": "$.payload.items"}`, i))
	}
	items := make([]int, 1000)
	raw, _ := json.Marshal(map[string]any{"items": items})
	var id string
	if err := b.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (type, payload, dag)
		values ('fanb.flow.v1', $1, $2) returning id`, string(raw), `{"steps": [`+strings.Join(steps, ", ")+`]}`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	r := b.get(t, id)
	if r.Status != engine.StatusFailed || !strings.Contains(r.LastError, "a workflow fans out to at most 1000 runs in all") {
		t.Fatalf("the workflow: %s (%s)", r.Status, r.LastError)
	}
	var runs, unfinished int
	if err := b.pool.QueryRow(b.ctx, `select count(*), count(*) filter (where status in ('pending', 'leased'))
		from workflow.workflow_run where parent_id = $1`, id).Scan(&runs, &unfinished); err != nil {
		t.Fatal(err)
	}
	if runs > 1000 || unfinished != 0 {
		t.Fatalf("%d element runs, %d unfinished; want at most 1000, none unfinished", runs, unfinished)
	}
}
