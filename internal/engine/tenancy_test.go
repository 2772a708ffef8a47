package engine_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// nested returns a JSON object whose innermost value sits under depth
// containers: {"a":{"a":…{"a":1}…}}.
func nested(depth int) string {
	return strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
}

// nestedArray is nested made of arrays: [[…[1]…]].
func nestedArray(depth int) string {
	return strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth)
}

// Every path that stores a value a client
// decodes refuses JSON nested deeper than engine.MaxJSONDepth, with a clear
// error, and takes a value exactly at the bound. Bystanders (runs of
// another team, created before and after) are unharmed.
func TestDeepJSONRefusedOnEveryPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bystander := b.create(t, engine.CreateParams{Type: "other.team.v1", Payload: json.RawMessage(`{"n":1}`)})
	ok := `{"v":` + nested(engine.MaxJSONDepth-1) + `}`
	deep := `{"v":` + nested(engine.MaxJSONDepth) + `}`
	deepArr := `{"v":` + nestedArray(engine.MaxJSONDepth) + `}`

	// Payloads: the Go client, create_runs, a plain INSERT.
	b.create(t, engine.CreateParams{Type: "deep.ok.v1", Payload: json.RawMessage(ok)})
	for _, p := range []string{deep, deepArr, `{"v":` + nested(10000) + `}`} {
		// (10,000 levels are past what Go's decoder reads: the client says
		// so before asking the database.)
		if _, err := b.eng.CreateRun(b.ctx, engine.CreateParams{Type: "deep.a.v1", Payload: json.RawMessage(p)}); !errors.Is(err, engine.ErrInvalid) ||
			!strings.Contains(err.Error(), "nests deeper than 64 levels") && !strings.Contains(err.Error(), "not valid JSON") {
			t.Fatalf("create with a payload %d bytes deep: %v", len(p), err)
		}
		if _, err := b.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "deep.a.v1"}, {Type: "deep.a.v1", Payload: json.RawMessage(p)}}); !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("create_runs with a deep payload: %v", err)
		}
		if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, payload) values ('deep.a.v1', $1)`, p); err == nil ||
			!strings.Contains(err.Error(), "nests deeper than 64 levels") {
			t.Fatalf("plain insert of a deep payload: %v", err)
		}
	}
	var stored int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run where type = 'deep.a.v1'`).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("%d deep runs stored (%v)", stored, err)
	}

	// Results, step outputs, children's payloads.
	b.create(t, engine.CreateParams{Type: "deep.w.v1"})
	b.create(t, engine.CreateParams{Type: "deep.w.v1"})
	held := b.claim(t, "w", []string{"deep.w."}, 2)
	if len(held) != 2 {
		t.Fatalf("claimed %d", len(held))
	}
	res := b.record(t, "w",
		engine.StepWrite{LeaseRef: held[0].Ref(), Name: "deep", Position: 0, Output: json.RawMessage(deep)},
		engine.StepWrite{LeaseRef: held[0].Ref(), Name: "fine", Position: 0, Output: json.RawMessage(ok)})
	if res[0].Status != engine.WriteInvalid || !strings.Contains(res[0].Message, "nests deeper than 64 levels") ||
		res[1].Status != engine.WriteRecorded {
		t.Fatalf("record steps: %+v", res)
	}
	child, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: held[0].Ref(), WorkerID: "w", Step: "kid", Position: 1,
		Type: "deep.kid.v1", Payload: json.RawMessage(deep)})
	if err != nil || child.Status != engine.WriteInvalid || !strings.Contains(child.Message, "nests deeper than 64 levels") {
		t.Fatalf("start a child with a deep payload: %+v, %v", child, err)
	}
	done, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{
		{LeaseRef: held[0].Ref(), Result: json.RawMessage(deep)},
		{LeaseRef: held[1].Ref(), Result: json.RawMessage(ok)}})
	if err != nil || len(done) != 2 {
		t.Fatalf("complete: %+v, %v", done, err)
	}
	if r := b.get(t, held[0].ID); r.Status != engine.StatusFailed || r.Attempt != 1 || !strings.Contains(r.LastError, "result nests deeper than 64 levels") {
		t.Fatalf("the run with a deep result: %s at attempt %d, %q", r.Status, r.Attempt, r.LastError)
	}
	if r := b.get(t, held[1].ID); r.Status != engine.StatusSucceeded {
		t.Fatalf("its neighbour in the batch: %s %q", r.Status, r.LastError)
	}

	// Signal payloads (a namespace editor reaches them through spec.signals).
	target := b.create(t, engine.CreateParams{Type: "deep.s.v1"})
	if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: target, Name: "go", Payload: json.RawMessage(`{"v":` + nested(10000) + `}`)}); !errors.Is(err, engine.ErrInvalid) ||
		!strings.Contains(err.Error(), "signal payload nests deeper than 64 levels") {
		t.Fatalf("a deep signal: %v", err)
	}
	if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: target, Name: "go", Payload: json.RawMessage(ok)}); err != nil {
		t.Fatalf("a signal at the bound: %v", err)
	}

	// Definitions: a registry entry's, with a constant step payload too deep.
	def := &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{{Name: "a", Type: "deep.step.v1", Payload: json.RawMessage(deep)}}}
	if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "deep.flow.v1", Enabled: true, Definition: def}); !errors.Is(err, engine.ErrInvalid) ||
		!strings.Contains(err.Error(), "nests deeper than 64 levels") {
		t.Fatalf("a deep definition: %v", err)
	}

	if r := b.get(t, bystander); r.Status != engine.StatusPending {
		t.Fatalf("bystander %s", r.Status)
	}
}

// A DAG step whose payload would be built
// deeper than the bound (its dependency's result nested under "steps") fails
// its workflow alone with the reason, and the step's own completion stands.
func TestDAGComposedTooDeepFailsTheWorkflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dagdeep.flow.v1", step("a", "dagdeep.a.v1"), step("b", "dagdeep.b.v1", "a"))
	id := b.insertSQL(t, "dagdeep.flow.v1", `{}`)
	claimed := b.claim(t, "w", []string{"dagdeep.a."}, 1)
	// At the bound itself: fine as a result, too deep once nested in b's
	// payload under "steps" → "a".
	done, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: claimed[0].Ref(), Result: json.RawMessage(nested(engine.MaxJSONDepth))}})
	if err != nil || len(done) != 1 || done[0].Status != engine.StatusSucceeded {
		t.Fatalf("the step's completion: %+v, %v", done, err)
	}
	run := b.get(t, id)
	if run.Status != engine.StatusFailed || !strings.Contains(run.LastError, `the payload of step "b" would nest deeper than 64 levels`) {
		t.Fatalf("workflow %s: %q", run.Status, run.LastError)
	}
}

// A run whose journal this client cannot decode
// (stored before the bound existed, or by hand) is handed over with its
// DecodeError; the runs claimed with it are whole. Before, the whole claim
// batch failed and every neighbour went through lease expiry.
func TestUndecodableJournalFailsOnlyItsRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []string
	for range 5 {
		ids = append(ids, b.create(t, engine.CreateParams{Type: "undec.a.v1"}))
	}
	// A signal payload 10,001 levels deep in the journal of the third run,
	// written as the owner around the checks (as a row from before them).
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_step (run_id, name, position, kind, outcome, output, attempt, started_at, finished_at)
		values ($1, 'approve', 0, 'signal', 'ok', $2::jsonb, 1, now(), now())`, ids[2], nestedArray(10001)); err != nil {
		t.Fatal(err)
	}
	claimed := b.claim(t, "w", []string{"undec."}, 10)
	if len(claimed) != 5 {
		t.Fatalf("claimed %d of 5", len(claimed))
	}
	for _, c := range claimed {
		if c.ID == ids[2] {
			if c.DecodeError == nil || !strings.Contains(c.DecodeError.Error(), "cannot be decoded") {
				t.Fatalf("the bad run's decode error: %v", c.DecodeError)
			}
			continue
		}
		if c.DecodeError != nil {
			t.Fatalf("neighbour %s: %v", c.ID, c.DecodeError)
		}
	}
}

// Limits are the owner's. A producer that raises
// workflow.max_payload_bytes in its own session (the old setting) still
// meets the owner's limit, and cannot change workflow_settings.
func TestProducerCannotRaiseLimits(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	p := b.loginAs(t, "workflow_producer")
	conn, err := p.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(b.ctx, "set workflow.max_payload_bytes = '400000000'"); err != nil {
		t.Fatal(err)
	}
	big := `{"x":"` + strings.Repeat("a", 2<<20) + `"}`
	if _, err := conn.Exec(b.ctx, `insert into workflow.workflow_run (type, payload) values ('limit.a.v1', $1)`, big); err == nil ||
		!strings.Contains(err.Error(), "the limit is 1048576") {
		t.Fatalf("a 2 MiB payload with the session's limit raised: %v", err)
	}
	if _, err := conn.Exec(b.ctx, `select * from workflow.create_runs(array['limit.a.v1'], array[$1])`, big); err == nil ||
		!strings.Contains(err.Error(), "the limit is 1048576") {
		t.Fatalf("create_runs with the session's limit raised: %v", err)
	}
	p.requireDenied(t, b.ctx, "update workflow.workflow_settings set max_payload_bytes = 67108864")
	var limit int
	if err := p.pool.QueryRow(b.ctx, "select max_payload_bytes from workflow.workflow_settings").Scan(&limit); err != nil || limit != 1<<20 {
		t.Fatalf("the producer reads limit %d (%v)", limit, err)
	}
	// The owner changes it, within its bounds.
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set max_payload_bytes = 4194304"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(b.ctx, `insert into workflow.workflow_run (type, payload) values ('limit.a.v1', $1)`, big); err != nil {
		t.Fatalf("a 2 MiB payload under the owner's 4 MiB: %v", err)
	}
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set max_payload_bytes = 1000000000"); err == nil {
		t.Fatal("a limit of 1 GB was accepted")
	}
}

// A child's result travels into its parent's journal under
// the same limit as a run's result. A child returning 300 KiB (and one
// returning 1 MiB less a little) completes in a batch with neighbours, and
// its parent's journal holds the result.
func TestChildResultFitsParentJournal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parentID := b.create(t, engine.CreateParams{Type: "fit.parent.v1"})
	pc := b.claimOne(t, "p", "fit.parent.")
	for i, typ := range []string{"fit.kid.v1", "fit.kid.v1"} {
		if r, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: pc.Ref(), WorkerID: "p", Step: fmt.Sprintf("kid%d", i), Position: i, Type: typ}); err != nil || r.Status != engine.WriteStarted {
			t.Fatalf("start child %d: %+v, %v", i, r, err)
		}
	}
	if r := b.park(t, engine.ParkParams{LeaseRef: pc.Ref(), WorkerID: "p", Kind: engine.StepKindChild, Step: "kid0", Position: 0}); r.Status != engine.WriteParked {
		t.Fatalf("park: %+v", r)
	}
	for range 3 {
		b.create(t, engine.CreateParams{Type: "fit.kid.v1"})
	}
	kids := b.claim(t, "k", []string{"fit.kid."}, 10)
	if len(kids) != 5 {
		t.Fatalf("claimed %d kids", len(kids))
	}
	sizes := map[string]string{}
	var cs []engine.Completion
	for _, k := range kids {
		res := `{"small":true}`
		var kidStep string
		if err := b.pool.QueryRow(b.ctx, "select coalesce(parent_step, '') from workflow.workflow_run where id = $1", k.ID).Scan(&kidStep); err != nil {
			t.Fatal(err)
		}
		switch kidStep {
		case "kid0":
			res = `{"x":"` + strings.Repeat("a", 300<<10) + `"}`
		case "kid1":
			res = `{"x":"` + strings.Repeat("b", 1<<20-16) + `"}`
		}
		sizes[k.ID] = res
		cs = append(cs, engine.Completion{LeaseRef: k.Ref(), Result: json.RawMessage(res)})
	}
	done, err := b.eng.CompleteRuns(b.ctx, "k", cs)
	if err != nil || len(done) != 5 {
		t.Fatalf("completing the batch: %d done, %v", len(done), err)
	}
	for _, d := range done {
		if d.Status != engine.StatusSucceeded {
			t.Fatalf("run %s: %s %q", d.ID, d.Status, d.Error)
		}
	}
	steps, err := b.eng.ListSteps(b.ctx, parentID)
	if err != nil || len(steps) != 2 {
		t.Fatalf("parent journal: %+v, %v", steps, err)
	}
	for _, s := range steps {
		if s.Outcome != engine.OutcomeOK || len(s.Output) < 300<<10 {
			t.Fatalf("journal entry %s: %s, %d bytes", s.Name, s.Outcome, len(s.Output))
		}
	}
}

// A thousand junk signals to a parked run do not
// stop the signal it waits for, nor one of another name sent before it
// parks; junk of one name is capped.
func TestSignalFloodNeverBlocksTheAwaitedName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "flood.a.v1"})
	c := b.claimOne(t, "w", "flood.a.")
	if r := b.park(t, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "w", Kind: engine.StepKindSignal, Step: "approve", Position: 0, Signal: "approve"}); r.Status != engine.WriteParked {
		t.Fatalf("park: %+v", r)
	}
	if _, err := b.pool.Exec(b.ctx, `select workflow.send_signal($1, 'junk', null, null) from generate_series(1, 1000)`, id); err != nil {
		t.Fatalf("1000 junk signals: %v", err)
	}
	if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: id, Name: "junk"}); !errors.Is(err, engine.ErrInvalid) && err == nil {
		t.Fatal("the 1001st junk signal was accepted")
	}
	if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: id, Name: "other"}); err != nil {
		t.Fatalf("a signal of another name: %v", err)
	}
	res, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: id, Name: "approve", Payload: json.RawMessage(`{"ok":true}`)})
	if err != nil || !res.Delivered {
		t.Fatalf("the awaited signal: %+v, %v", res, err)
	}
}

// Runs with deadlines decades in the past do not
// hold back another type's expiry: one batch takes every type's most
// overdue run.
func TestDeadlineFloodExpiresFairly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, payload, deadline_at)
		select 'junk.old.v1', '{}', now() - interval '40 years' - g * interval '1 second' from generate_series(1, 2000) g`); err != nil {
		t.Fatal(err)
	}
	victim := b.create(t, engine.CreateParams{Type: "fair.victim.v1", Deadline: 10 * time.Millisecond})
	b.advanceClock(t, time.Second) // the victim's deadline passes (10 ms)
	expired, err := b.eng.ExpireDeadlines(b.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, id := range expired {
		found = found || id == victim
	}
	if len(expired) != 100 || !found {
		t.Fatalf("a batch of %d expired runs, the victim among them: %v", len(expired), found)
	}
}

// A priority outside 0..1000000 (the CRD's
// range) is refused on every path, so no producer jumps every shared queue.
func TestPriorityBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range []int{-2147483648, -1, 1000001} {
		if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, payload, priority) values ('prio.a.v1', '{}', $1)`, p); err == nil {
			t.Fatalf("plain insert with priority %d accepted", p)
		}
		pr := p
		if _, err := b.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "prio.a.v1", Priority: &pr}}); !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("create_runs with priority %d: %v", p, err)
		}
	}
	// Past an integer's range the value reaches the database saturated, and
	// is refused there: never wrapped around into a valid priority.
	for _, p := range []int{1<<32 + 5, -(1 << 32)} {
		pr := p
		if _, err := b.eng.CreateRun(b.ctx, engine.CreateParams{Type: "prio.a.v1", Priority: &pr}); !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("create_run with priority %d: %v", p, err)
		}
		if _, err := b.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "prio.a.v1", Priority: &pr}}); !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("create_runs with priority %d: %v", p, err)
		}
	}
	if runs, err := b.eng.ListRuns(b.ctx, engine.ListParams{TypePrefix: "prio.a."}); err != nil || len(runs.Runs) != 0 {
		t.Fatalf("runs recorded with a refused priority: %+v (%v)", runs.Runs, err)
	}
	b.create(t, engine.CreateParams{Type: "prio.p.v1"})
	c := b.claimOne(t, "w", "prio.p.")
	low := -5
	huge := 1<<32 + 5
	for _, p := range []*int{&low, &huge} {
		if r, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: c.Ref(), WorkerID: "w", Step: "kid", Position: 0, Type: "prio.kid.v1", Priority: p}); err != nil ||
			r.Status != engine.WriteInvalid || !strings.Contains(r.Message, "priority must be between 0 and 1000000") {
			t.Fatalf("a child with priority %d: %+v, %v", *p, r, err)
		}
	}
}

// A registry definition over 256 KiB is
// refused at once, before the registry's lock, with the reason.
func TestRegistryDefinitionBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	def := &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{{Name: "a", Type: "big.step.v1",
		Payload: json.RawMessage(`{"x":"` + strings.Repeat("a", 300<<10) + `"}`)}}}
	err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "big.flow.v1", Enabled: true, Definition: def})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "a definition is at most 262144") {
		t.Fatalf("a 300 KiB definition: %v", err)
	}
	// The lock is not taken for it: a writer holding it does not delay the
	// refusal.
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	if _, err := tx.Exec(b.ctx, "select 1 from workflow.workflow_lock where id = 0 for update"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "big.flow.v1", Enabled: true, Definition: def}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("with the lock held elsewhere: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the refusal waited %s for the lock", d)
	}
}

// A producer cannot restore a soft-deleted run
// nor move its updated_at back; the seed's cancel still works.
func TestProducerCannotRewriteHistory(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	p := b.loginAs(t, "workflow_producer")
	id := b.create(t, engine.CreateParams{Type: "hist.a.v1"})
	p.requireAllowed(t, b.ctx, seedCancel, id)
	p.requireAllowed(t, b.ctx, `update workflow.workflow_run set deleted_at = now() where id = $1`, id)
	before := b.get(t, id)
	if _, err := p.pool.Exec(b.ctx, `update workflow.workflow_run set deleted_at = null where id = $1`, id); err == nil ||
		!strings.Contains(err.Error(), "a soft delete is final") {
		t.Fatalf("restoring a deleted run: %v", err)
	}
	p.requireAllowed(t, b.ctx, `update workflow.workflow_run set updated_at = '2001-01-01' where id = $1`, id)
	after := b.get(t, id)
	if after.DeletedAt == nil || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("after the producer's rewrite: deleted_at %v, updated_at %s (was %s)", after.DeletedAt, after.UpdatedAt, before.UpdatedAt)
	}
}

// A DAG run started as a
// child carries its steps' results to its parent's journal; a step result of
// 300 KiB (over the old 256 KiB journal limit) reaches the parent, and the
// step's completion stands with its neighbours'.
func TestDAGResultFitsParentJournal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "dagfit.flow.v1", step("a", "dagfit.a.v1"))
	parentID := b.create(t, engine.CreateParams{Type: "dagfit.parent.v1"})
	pc := b.claimOne(t, "p", "dagfit.parent.")
	if r, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: pc.Ref(), WorkerID: "p", Step: "flow", Position: 0, Type: "dagfit.flow.v1"}); err != nil || r.Status != engine.WriteStarted {
		t.Fatalf("start the DAG child: %+v, %v", r, err)
	}
	if r := b.park(t, engine.ParkParams{LeaseRef: pc.Ref(), WorkerID: "p", Kind: engine.StepKindChild, Step: "flow", Position: 0}); r.Status != engine.WriteParked {
		t.Fatalf("park: %+v", r)
	}
	neighbour := b.create(t, engine.CreateParams{Type: "dagfit.a.v1"})
	claimed := b.claim(t, "w", []string{"dagfit.a."}, 10)
	if len(claimed) != 2 {
		t.Fatalf("claimed %d", len(claimed))
	}
	big := json.RawMessage(`{"x":"` + strings.Repeat("a", 300<<10) + `"}`)
	done, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: claimed[0].Ref(), Result: big}, {LeaseRef: claimed[1].Ref(), Result: big}})
	if err != nil || len(done) != 2 || done[0].Status != engine.StatusSucceeded || done[1].Status != engine.StatusSucceeded {
		t.Fatalf("completing the step and its neighbour: %+v, %v", done, err)
	}
	if r := b.get(t, neighbour); r.Status != engine.StatusSucceeded {
		t.Fatalf("neighbour %s", r.Status)
	}
	steps, err := b.eng.ListSteps(b.ctx, parentID)
	if err != nil || len(steps) != 1 || steps[0].Outcome != engine.OutcomeOK || len(steps[0].Output) < 300<<10 {
		t.Fatalf("the parent's journal: %+v, %v", steps, err)
	}
}

// A run whose step outputs
// add up past workflow_settings.max_journal_bytes is handed over with the
// reason instead of its journal, so the claim batch holding it stands
// (aggregating it could pass jsonb's 255 MB limit and fail every claim of
// its pool); its neighbours are claimed whole.
func TestOversizedJournalFailsOnlyItsRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set max_journal_bytes = 1048576"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 4 {
		ids = append(ids, b.create(t, engine.CreateParams{Type: "bigj.a.v1"}))
	}
	held := b.claim(t, "w", []string{"bigj."}, 10)
	var bad engine.ClaimedRun
	for _, c := range held {
		if c.ID == ids[1] {
			bad = c
		}
	}
	out := json.RawMessage(`"` + strings.Repeat("x", 400<<10) + `"`)
	for i := range 3 {
		if res := b.record(t, "w", engine.StepWrite{LeaseRef: bad.Ref(), Name: fmt.Sprintf("s%d", i), Position: i, Output: out}); res[0].Status != engine.WriteRecorded {
			t.Fatalf("step %d: %+v", i, res[0])
		}
	}
	var refs []engine.LeaseRef
	for _, c := range held {
		refs = append(refs, c.Ref())
	}
	if _, err := b.eng.ReleaseRuns(b.ctx, "w", refs); err != nil {
		t.Fatal(err)
	}
	again := b.claim(t, "w2", []string{"bigj."}, 10)
	if len(again) != 4 {
		t.Fatalf("claimed %d of 4", len(again))
	}
	for _, c := range again {
		if c.ID == bad.ID {
			if c.DecodeError == nil || !strings.Contains(c.DecodeError.Error(), "a claim loads at most 1048576") {
				t.Fatalf("the oversized journal: %v", c.DecodeError)
			}
			continue
		}
		if c.DecodeError != nil {
			t.Fatalf("neighbour %s: %v", c.ID, c.DecodeError)
		}
	}
}
