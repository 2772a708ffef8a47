package engine_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// claimOne claims the single runnable run of typ or fails the test.
func (b *bundle) claimOne(t *testing.T, worker, typ string) engine.ClaimedRun {
	t.Helper()
	got := b.claim(t, worker, []string{typ}, 1)
	if len(got) != 1 {
		t.Fatalf("claim %s: got %d runs, want 1", typ, len(got))
	}
	return got[0]
}

func (b *bundle) record(t *testing.T, worker string, ws ...engine.StepWrite) []engine.StepWriteResult {
	t.Helper()
	res, err := b.eng.RecordSteps(b.ctx, worker, ws)
	if err != nil {
		t.Fatalf("record steps: %v", err)
	}
	return res
}

func (b *bundle) park(t *testing.T, p engine.ParkParams) engine.ParkResult {
	t.Helper()
	res, err := b.eng.ParkRun(b.ctx, p)
	if err != nil {
		t.Fatalf("park: %v", err)
	}
	return res
}

func dur(d time.Duration) *time.Duration { return &d }

// Every claim draws a new token, and a token once replaced
// guards nothing, even for the same worker at the same attempt number.
func TestLeaseTokenFenceNeverRepeats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "fence.a.v1"})
	first := b.claimOne(t, "w", "fence.")
	if done, err := b.eng.ReleaseRuns(b.ctx, "w", []engine.LeaseRef{first.Ref()}); err != nil || len(done) != 1 {
		t.Fatalf("release: %v %v", done, err)
	}
	second := b.claimOne(t, "w", "fence.")
	if second.Attempt != first.Attempt {
		t.Fatalf("attempt %d after a release, want %d (a release does not count)", second.Attempt, first.Attempt)
	}
	if second.LeaseToken == first.LeaseToken {
		t.Fatalf("token %d drawn twice: every claim draws a new one", second.LeaseToken)
	}
	old := first.Ref()
	if hb, _ := b.eng.HeartbeatRuns(b.ctx, "w", []engine.LeaseRef{old}, time.Minute); len(hb) != 1 || hb[0].Owned {
		t.Fatalf("heartbeat with the old token: %+v", hb)
	}
	if done, _ := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: old}}); len(done) != 0 {
		t.Fatal("complete with the old token was accepted")
	}
	if res, _ := b.eng.FailRuns(b.ctx, "w", []engine.Failure{{LeaseRef: old, Error: "x"}}); len(res) != 0 {
		t.Fatal("fail with the old token was accepted")
	}
	if done, _ := b.eng.ReleaseRuns(b.ctx, "w", []engine.LeaseRef{old}); len(done) != 0 {
		t.Fatal("release with the old token was accepted")
	}
	if res := b.record(t, "w", engine.StepWrite{LeaseRef: old, Name: "a", Position: 0}); res[0].Status != engine.WriteLeaseLost {
		t.Fatalf("step with the old token: %+v", res[0])
	}
	if res := b.park(t, engine.ParkParams{LeaseRef: old, WorkerID: "w", Kind: engine.StepKindSleep, Step: "nap", Delay: dur(time.Hour)}); res.Status != engine.WriteLeaseLost {
		t.Fatalf("park with the old token: %+v", res)
	}
	if res, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: old, WorkerID: "w", Step: "c", Type: "fence.child.v1"}); err != nil || res.Status != engine.WriteLeaseLost {
		t.Fatalf("child with the old token: %+v %v", res, err)
	}
	if steps, _ := b.eng.ListSteps(b.ctx, id); len(steps) != 0 {
		t.Fatalf("old token wrote the journal: %+v", steps)
	}
	if done, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: second.Ref()}}); err != nil || len(done) != 1 {
		t.Fatalf("complete with the current token: %v %v", done, err)
	}
}

// A step is journaled once: the first writer wins and every writer sees
// its value; the next attempt gets the journal at claim.
func TestRecordStepFirstWriterWins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "step.a.v1"})
	c := b.claimOne(t, "w", "step.")
	// Two writers race for the same step.
	var wg sync.WaitGroup
	results := make([]engine.StepWriteResult, 2)
	for i := range 2 {
		wg.Go(func() {
			res, err := b.eng.RecordSteps(b.ctx, "w", []engine.StepWrite{{LeaseRef: c.Ref(), Name: "charge", Position: 0,
				Output: json.RawMessage(`{"writer":` + string(rune('0'+i)) + `}`)}})
			if err != nil {
				t.Errorf("writer %d: %v", i, err)
				return
			}
			results[i] = res[0]
		})
	}
	wg.Wait()
	statuses := results[0].Status + "," + results[1].Status
	if statuses != "recorded,duplicate" && statuses != "duplicate,recorded" {
		t.Fatalf("statuses %s, want one recorded and one duplicate", statuses)
	}
	steps, err := b.eng.ListSteps(b.ctx, id)
	if err != nil || len(steps) != 1 {
		t.Fatalf("journal %+v %v", steps, err)
	}
	for i, r := range results {
		if r.Status == engine.WriteDuplicate && string(r.Output) != string(steps[0].Output) {
			t.Fatalf("writer %d saw %s, stored %s", i, r.Output, steps[0].Output)
		}
	}
	// The next attempt loads the journal at claim.
	if _, err := b.eng.FailRuns(b.ctx, "w", []engine.Failure{{LeaseRef: c.Ref(), Error: "boom", Retryable: true}}); err != nil {
		t.Fatal(err)
	}
	b.advanceClock(t, 10*time.Minute) // the retry comes due
	c2 := b.claimOne(t, "w2", "step.")
	if len(c2.Journal) != 1 || c2.Journal[0].Name != "charge" || c2.Journal[0].Outcome != engine.OutcomeOK ||
		string(c2.Journal[0].Output) != string(steps[0].Output) {
		t.Fatalf("journal at claim %+v", c2.Journal)
	}
}

// A worker whose lease was lost (expired, reclaimed) records nothing.
func TestRecordStepAfterLeaseLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, engine.CreateParams{Type: "lost.a.v1"})
	c := b.claimOne(t, "w1", "lost.")
	b.advanceClock(t, time.Minute) // the 30 s lease expires
	if _, err := b.eng.ReapExpiredLeases(b.ctx, 10); err != nil {
		t.Fatal(err)
	}
	res := b.record(t, "w1", engine.StepWrite{LeaseRef: c.Ref(), Name: "a", Position: 0, Output: json.RawMessage(`1`)})
	if res[0].Status != engine.WriteLeaseLost {
		t.Fatalf("write after the lease expired: %+v", res[0])
	}
	c2 := b.claimOne(t, "w2", "lost.")
	if len(c2.Journal) != 0 {
		t.Fatalf("journal %+v, want empty", c2.Journal)
	}
	res = b.record(t, "w1", engine.StepWrite{LeaseRef: c.Ref(), Name: "a", Position: 0, Output: json.RawMessage(`1`)})
	if res[0].Status != engine.WriteLeaseLost {
		t.Fatalf("write by the old holder after a reclaim: %+v", res[0])
	}
}

// A different step at a known position is non-determinism, reported in
// words; a name reached twice is too.
func TestRecordStepNondeterminism(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, engine.CreateParams{Type: "nd.a.v1"})
	c := b.claimOne(t, "w", "nd.")
	b.record(t, "w",
		engine.StepWrite{LeaseRef: c.Ref(), Name: "reserve", Position: 0, Output: json.RawMessage(`1`)},
		engine.StepWrite{LeaseRef: c.Ref(), Name: "charge", Position: 1, Output: json.RawMessage(`2`)})
	res := b.record(t, "w",
		engine.StepWrite{LeaseRef: c.Ref(), Name: "refund", Position: 1},
		engine.StepWrite{LeaseRef: c.Ref(), Name: "reserve", Position: 2},
		engine.StepWrite{LeaseRef: c.Ref(), Name: "charge", Position: 1, Output: json.RawMessage(`99`)})
	if res[0].Status != engine.WriteNondeterministic ||
		res[0].Message != `non-deterministic: expected step "charge" at position 1, got "refund"` {
		t.Fatalf("other name at a position: %+v", res[0])
	}
	if res[1].Status != engine.WriteNondeterministic ||
		res[1].Message != `non-deterministic: step "reserve" is recorded at position 0, reached again at position 2` {
		t.Fatalf("name reached twice: %+v", res[1])
	}
	if res[2].Status != engine.WriteDuplicate || string(res[2].Output) != "2" {
		t.Fatalf("replayed step: %+v", res[2])
	}
	// A wait at a step's position names both kinds.
	p := b.park(t, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "w", Kind: engine.StepKindSleep, Step: "nap", Position: 0, Delay: dur(time.Second)})
	if p.Status != engine.WriteNondeterministic ||
		p.Message != `non-deterministic: expected step "reserve" at position 0, got sleep "nap"` {
		t.Fatalf("sleep at a step's position: %+v", p)
	}
}

// The journal's limits give clear errors and never fail the neighbours in
// a batch.
func TestRecordStepLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, engine.CreateParams{Type: "lim.a.v1"})
	c := b.claimOne(t, "w", "lim.")
	big := json.RawMessage(`"` + strings.Repeat("x", engine.MaxStepOutputBytes) + `"`)
	res := b.record(t, "w",
		engine.StepWrite{LeaseRef: c.Ref(), Name: strings.Repeat("n", 129), Position: 0},
		engine.StepWrite{LeaseRef: c.Ref(), Name: "bad name", Position: 0},
		engine.StepWrite{LeaseRef: c.Ref(), Name: "", Position: 0},
		engine.StepWrite{LeaseRef: c.Ref(), Name: "big", Position: 0, Output: big},
		engine.StepWrite{LeaseRef: c.Ref(), Name: "late", Position: 1000},
		engine.StepWrite{LeaseRef: c.Ref(), Name: "fine", Position: 0, Output: json.RawMessage(`{"ok":true}`)})
	wants := []string{"step name must be 1 to 128 characters", "may contain only letters, digits",
		"step name must be 1 to 128 characters", "the limit is 1048576", "at most 1000 steps"}
	for i, w := range wants {
		if res[i].Status != engine.WriteInvalid || !strings.Contains(res[i].Message, w) {
			t.Errorf("request %d: %+v, want invalid with %q", i, res[i], w)
		}
	}
	if res[5].Status != engine.WriteRecorded {
		t.Fatalf("the valid neighbour: %+v", res[5])
	}
	// A NUL cannot be stored in jsonb: the database refuses the batch with
	// a clear error, and nothing is half-written.
	_, err := b.eng.RecordSteps(b.ctx, "w", []engine.StepWrite{{LeaseRef: c.Ref(), Name: "nul", Position: 1, Output: json.RawMessage(`"a\u0000b"`)}})
	if !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("NUL in output: %v, want ErrInvalid", err)
	}
	// 1,000 steps fit; the 1,001st does not.
	ws := make([]engine.StepWrite, 0, 999)
	for i := 1; i < 1000; i++ {
		ws = append(ws, engine.StepWrite{LeaseRef: c.Ref(), Name: "s-" + strconv.Itoa(i), Position: i})
	}
	for _, r := range b.record(t, "w", ws...) {
		if r.Status != engine.WriteRecorded {
			t.Fatalf("step within the limit: %+v", r)
		}
	}
	if r := b.record(t, "w", engine.StepWrite{LeaseRef: c.Ref(), Name: "one-too-many", Position: 1000}); r[0].Status != engine.WriteInvalid {
		t.Fatalf("step 1001: %+v", r[0])
	}
}

// A sleep parks the run: pending, lease and attempt given back, not
// claimable and not counted by the autoscaler until its time (the database
// clock, moved forward here); the claim at that time writes the sleep's
// entry and a woken event.
func TestSleepParksAndTheTimerWakes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "nap.a.v1", MaxAttempts: 1})
	c := b.claimOne(t, "w", "nap.")
	res := b.park(t, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "w", Kind: engine.StepKindSleep, Step: "nap", Position: 0, Delay: dur(time.Hour)})
	if res.Status != engine.WriteParked || res.WakeAt == nil {
		t.Fatalf("park: %+v", res)
	}
	r := b.get(t, id)
	if r.Status != engine.StatusPending || r.Attempt != 0 || r.LeasedBy != "" || r.Wait == nil ||
		r.Wait.Kind != engine.StepKindSleep || r.Wait.Step != "nap" || r.Wait.Until == nil {
		t.Fatalf("parked run %+v wait %+v", r, r.Wait)
	}
	if got := b.claim(t, "w", []string{"nap."}, 1); len(got) != 0 {
		t.Fatal("a sleeping run was claimed before its time")
	}
	depth, err := b.eng.QueueDepths(b.ctx, []engine.PoolQuery{{TypePrefixes: []string{"nap."}, Runtime: "go"}})
	if err != nil || depth[0].Runnable != 0 || depth[0].Leased != 0 {
		t.Fatalf("queue depth of a parked run: %+v %v", depth, err)
	}
	b.advanceClock(t, res.WakeAt.Sub(b.clockNow(t))-time.Second)
	if got := b.claim(t, "w", []string{"nap."}, 1); len(got) != 0 {
		t.Fatal("a sleeping run was claimed a second before its time")
	}
	b.advanceClock(t, time.Second)
	c2 := b.claim(t, "w", []string{"nap."}, 1)
	if len(c2) != 1 || c2[0].Attempt != 1 {
		t.Fatalf("claim after the sleep: %+v (max_attempts 1: a park must not use up the attempt)", c2)
	}
	if j := c2[0].Journal; len(j) != 1 || j[0].Name != "nap" || j[0].Outcome != engine.OutcomeOK {
		t.Fatalf("journal after the sleep: %+v", j)
	}
	assertEvents(t, b.eventTypes(t, id), engine.EventCreated, engine.EventStarted,
		engine.EventWaiting, engine.EventWoken, engine.EventStarted)
	// Replaying the sleep resolves it without parking.
	if again := b.park(t, engine.ParkParams{LeaseRef: c2[0].Ref(), WorkerID: "w", Kind: engine.StepKindSleep, Step: "nap", Position: 0, Delay: dur(time.Hour)}); again.Status != engine.WriteResolved {
		t.Fatalf("replayed sleep: %+v", again)
	}
}

// The seed's plain-SQL cancel reaches a sleeping run.
func TestSeedCancelReachesASleepingRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "nap.b.v1"})
	c := b.claimOne(t, "w", "nap.")
	b.park(t, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "w", Kind: engine.StepKindSleep, Step: "nap", Position: 0, Delay: dur(time.Hour)})
	tag, err := b.pool.Exec(b.ctx, `update workflow.workflow_run set status = 'cancelled', updated_at = now()
        where id = $1 and status in ('pending', 'leased')`, id)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("seed cancel: %v %v", tag, err)
	}
	r := b.get(t, id)
	if r.Status != engine.StatusCancelled || r.Wait != nil || r.FinishedAt == nil {
		t.Fatalf("cancelled sleeper %+v", r)
	}
}

// Signals are buffered, deduplicated by key, delivered to the oldest-first
// wait, wake a parked waiter, and time out into an entry (not an error).
func TestSignals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "sig.a.v1"})
	send := func(name, payload, key string) engine.SignalResult {
		t.Helper()
		res, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: id, Name: name, Payload: json.RawMessage(payload), IdempotencyKey: key})
		if err != nil {
			t.Fatalf("send %s: %v", name, err)
		}
		return res
	}
	// Sent before anyone waits: buffered.
	first := send("approve", `{"by":"alice"}`, "k1")
	if first.Duplicate || first.Delivered {
		t.Fatalf("first signal %+v", first)
	}
	if dup := send("approve", `{"by":"mallory"}`, "k1"); !dup.Duplicate || dup.SignalID != first.SignalID {
		t.Fatalf("duplicate signal %+v", dup)
	}
	c := b.claimOne(t, "w", "sig.")
	got := b.park(t, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "w", Kind: engine.StepKindSignal, Step: "approve", Position: 0, Signal: "approve"})
	if got.Status != engine.WriteResolved || got.Outcome != engine.OutcomeOK || string(got.Output) != `{"by": "alice"}` {
		t.Fatalf("wait after a buffered signal: %+v (%s)", got, got.Output)
	}
	// The duplicate was never stored: the next wait parks.
	second := b.park(t, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "w", Kind: engine.StepKindSignal, Step: "approve:2", Position: 1, Signal: "approve"})
	if second.Status != engine.WriteParked {
		t.Fatalf("second wait: %+v", second)
	}
	if r := b.get(t, id); r.Wait == nil || r.Wait.Signal != "approve" || r.Wait.Until != nil || !r.RunAt.Equal(engine.FarFuture) {
		t.Fatalf("open wait %+v", r)
	}
	// The sender wakes the waiter and writes its entry.
	if res := send("approve", `"second"`, ""); !res.Delivered {
		t.Fatalf("signal to a waiter: %+v", res)
	}
	c2 := b.claimOne(t, "w", "sig.")
	if len(c2.Journal) != 2 || c2.Journal[1].Name != "approve:2" || string(c2.Journal[1].Output) != `"second"` {
		t.Fatalf("journal %+v", c2.Journal)
	}
	// A wait with a timeout ends in a timeout entry when nothing comes by
	// then (the database clock, moved forward here).
	timed := b.park(t, engine.ParkParams{LeaseRef: c2.Ref(), WorkerID: "w", Kind: engine.StepKindSignal, Step: "approve:3", Position: 2, Signal: "approve", Delay: dur(time.Hour)})
	if timed.Status != engine.WriteParked || timed.WakeAt == nil {
		t.Fatalf("timed wait %+v", timed)
	}
	b.advanceClock(t, timed.WakeAt.Sub(b.clockNow(t))-time.Second)
	if got := b.claim(t, "w", []string{"sig."}, 1); len(got) != 0 {
		t.Fatalf("a timed wait timed out a second before its time: %+v", got)
	}
	b.advanceClock(t, time.Second)
	c3 := b.claim(t, "w", []string{"sig."}, 1)
	if len(c3) != 1 || len(c3[0].Journal) != 3 || c3[0].Journal[2].Outcome != engine.OutcomeTimeout {
		t.Fatalf("after the timeout: %+v", c3)
	}
	if types := b.eventTypes(t, id); countOf(types, engine.EventSignalReceived) != 2 || countOf(types, engine.EventWoken) != 2 {
		t.Fatalf("events %v: want 2 signal_received (the duplicate is not one) and 2 woken", types)
	}
	// Errors: unknown run, bad name, NUL payload, finished run.
	if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: "00000000-0000-0000-0000-000000000000", Name: "x"}); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("unknown run: %v", err)
	}
	if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: id, Name: "no spaces"}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("bad name: %v", err)
	}
	if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: id, Name: "x", Payload: json.RawMessage(`"\u0000"`)}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("NUL payload: %v", err)
	}
	if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: id, Name: "x", Payload: json.RawMessage(`"` + strings.Repeat("x", engine.MaxSignalPayloadBytes) + `"`)}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("oversized payload: %v", err)
	}
	if _, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: c3[0].Ref()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: id, Name: "approve"}); !errors.Is(err, engine.ErrRunFinished) {
		t.Errorf("finished run: %v", err)
	}
}

func countOf(types []engine.EventType, want engine.EventType) int {
	n := 0
	for _, t := range types {
		if t == want {
			n++
		}
	}
	return n
}

// A child starts once per step, writes its end into the parent's journal,
// wakes a parent waiting for it, and is cancelled with its parent.
func TestChildRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deadline := time.Now().Add(time.Hour)
	parent := b.create(t, engine.CreateParams{Type: "par.a.v1", DeadlineAt: &deadline})
	c := b.claimOne(t, "w", "par.")
	start := func(step string, pos int) engine.ChildResult {
		t.Helper()
		res, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: c.Ref(), WorkerID: "w", Step: step, Position: pos,
			Type: "kid.a.v1", Payload: json.RawMessage(`{"n":1}`), Deadline: 48 * time.Hour})
		if err != nil {
			t.Fatalf("start child %s: %v", step, err)
		}
		return res
	}
	one := start("kid", 0)
	again := start("kid", 0)
	if one.Status != engine.WriteStarted || again.Status != engine.WriteDuplicate || again.ChildID != one.ChildID {
		t.Fatalf("started %+v then %+v", one, again)
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, "select count(*) from workflow.workflow_run where parent_id = $1", parent).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d children (%v), want 1", n, err)
	}
	child := b.get(t, one.ChildID)
	if child.ParentID != parent || child.DeadlineAt == nil || child.DeadlineAt.After(deadline.Add(time.Millisecond)) {
		t.Fatalf("child %+v: its deadline must not pass the parent's %s", child, deadline)
	}
	// The parent awaits; the child's success wakes it with the result.
	if p := b.park(t, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "w", Kind: engine.StepKindChild, Step: "kid", Position: 0}); p.Status != engine.WriteParked {
		t.Fatalf("await: %+v", p)
	}
	kc := b.claimOne(t, "kw", "kid.")
	if _, err := b.eng.CompleteRuns(b.ctx, "kw", []engine.Completion{{LeaseRef: kc.Ref(), Result: json.RawMessage(`{"done":true}`)}}); err != nil {
		t.Fatal(err)
	}
	c2 := b.claimOne(t, "w", "par.")
	if j := c2.Journal; len(j) != 1 || j[0].Kind != engine.StepKindChild || j[0].Outcome != engine.OutcomeOK ||
		string(j[0].Output) != `{"done": true}` || j[0].ChildID != one.ChildID {
		t.Fatalf("journal after the child's end: %+v", j)
	}
	// A failing child reports its error; cancelling the parent cancels an
	// unfinished child.
	c = c2
	failing := start("kid2", 1)
	kc2 := b.claimOne(t, "kw", "kid.")
	if _, err := b.eng.FailRuns(b.ctx, "kw", []engine.Failure{{LeaseRef: kc2.Ref(), Error: "out of stock"}}); err != nil {
		t.Fatal(err)
	}
	if p := b.park(t, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "w", Kind: engine.StepKindChild, Step: "kid2", Position: 1}); p.Status != engine.WriteResolved || p.Outcome != engine.OutcomeError || p.Error != "out of stock" {
		t.Fatalf("failed child: %+v", p)
	}
	running := start("kid3", 2)
	if _, err := b.eng.CancelRun(b.ctx, parent); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, running.ChildID); r.Status != engine.StatusCancelled {
		t.Fatalf("child of a cancelled parent: %s", r.Status)
	}
	if r := b.get(t, failing.ChildID); r.Status != engine.StatusFailed {
		t.Fatalf("finished child changed: %s", r.Status)
	}
}

// Deadlines fail a run wherever it is: pending, parked, leased; a claim
// never hands out a run past its deadline. The deadlines pass on the
// database clock, moved forward here.
func TestDeadlines(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// 10 s: the deadlines pass before the 30 s lease of the leased run does.
	const deadline = 10 * time.Second
	pending := b.create(t, engine.CreateParams{Type: "dl.p.v1", Deadline: deadline})
	parked := b.create(t, engine.CreateParams{Type: "dl.s.v1", Deadline: deadline})
	leased := b.create(t, engine.CreateParams{Type: "dl.l.v1", Deadline: deadline})
	cs := b.claimOne(t, "w", "dl.s.")
	b.park(t, engine.ParkParams{LeaseRef: cs.Ref(), WorkerID: "w", Kind: engine.StepKindSleep, Step: "nap", Position: 0, Delay: dur(time.Hour)})
	cl := b.claimOne(t, "w", "dl.l.")
	// Before the deadline nothing is failed.
	if expired, err := b.eng.ExpireDeadlines(b.ctx, 100); err != nil || len(expired) != 0 {
		t.Fatalf("expired before the deadline: %v %v", expired, err)
	}
	hb, err := b.eng.HeartbeatRuns(b.ctx, "w", []engine.LeaseRef{cl.Ref()}, time.Minute)
	if err != nil || len(hb) != 1 || !hb[0].Owned || hb[0].DeadlineExceeded {
		t.Fatalf("heartbeat before the deadline: %+v %v", hb, err)
	}
	b.advanceClock(t, deadline+time.Second)
	if got := b.claim(t, "w", []string{"dl.p."}, 1); len(got) != 0 {
		t.Fatal("a run past its deadline was claimed")
	}
	hb, err = b.eng.HeartbeatRuns(b.ctx, "w", []engine.LeaseRef{cl.Ref()}, time.Minute)
	if err != nil || len(hb) != 1 || hb[0].Owned || !hb[0].DeadlineExceeded || hb[0].Status != engine.StatusFailed {
		t.Fatalf("heartbeat past the deadline: %+v %v", hb, err)
	}
	expired, err := b.eng.ExpireDeadlines(b.ctx, 100)
	if err != nil || len(expired) != 2 {
		t.Fatalf("expired %v %v, want the pending and the parked run", expired, err)
	}
	for _, id := range []string{pending, parked, leased} {
		r := b.get(t, id)
		if r.Status != engine.StatusFailed || r.LastError != "deadline exceeded" || r.Wait != nil {
			t.Fatalf("run %s: %s %q", id, r.Status, r.LastError)
		}
	}
	evs, err := b.eng.ListEvents(b.ctx, parked)
	if err != nil || !strings.Contains(string(evs[len(evs)-1].Data), `"deadline_exceeded"`) {
		t.Fatalf("last event of the parked run: %+v %v", evs[len(evs)-1], err)
	}
}

// Retention removes a run's journal and signals with it.
func TestRetentionRemovesJournalAndSignals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "ret.a.v1"})
	if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: id, Name: "s"}); err != nil {
		t.Fatal(err)
	}
	c := b.claimOne(t, "w", "ret.")
	b.record(t, "w", engine.StepWrite{LeaseRef: c.Ref(), Name: "a", Position: 0})
	if _, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: c.Ref()}}); err != nil {
		t.Fatal(err)
	}
	b.advanceClock(t, time.Hour) // everything finished is an hour old
	if n, err := b.eng.DeleteFinishedRuns(b.ctx, 30*time.Minute, 10); err != nil || n != 1 {
		t.Fatalf("deleted %d %v", n, err)
	}
	var steps, signals int
	if err := b.pool.QueryRow(b.ctx, `select (select count(*) from workflow.workflow_step where run_id = $1),
        (select count(*) from workflow.workflow_signal where run_id = $1)`, id).Scan(&steps, &signals); err != nil {
		t.Fatal(err)
	}
	if steps != 0 || signals != 0 {
		t.Fatalf("left %d steps and %d signals", steps, signals)
	}
}

// A child's end and its parent's await never miss each other, whichever
// commits first: the await either sees the end or is woken by it.
func TestChildEndAndAwaitNeverMissEachOther(t *testing.T) {
	t.Parallel()
	for _, childFirst := range []bool{true, false} {
		b := setup(t)
		parent := b.create(t, engine.CreateParams{Type: "race.parent.v1"})
		c := b.claimOne(t, "w", "race.parent.")
		if _, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: c.Ref(), WorkerID: "w", Step: "kid", Position: 0, Type: "race.kid.v1"}); err != nil {
			t.Fatal(err)
		}
		kc := b.claimOne(t, "k", "race.kid.")
		first, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The first transaction does its part and holds its locks.
		if childFirst {
			_, err = first.Exec(b.ctx, `select * from workflow.complete_runs('k', array[$1::uuid], array[$2::bigint], array['{"v":1}'::jsonb])`, kc.ID, kc.LeaseToken)
		} else {
			_, err = first.Exec(b.ctx, `select * from workflow.park_run('w', $1, $2, 'child', 'kid', 0, null, null, null)`, parent, c.LeaseToken)
		}
		if err != nil {
			t.Fatal(err)
		}
		second := make(chan error, 1)
		var park engine.ParkResult
		go func() {
			if childFirst {
				var err error
				park, err = b.eng.ParkRun(b.ctx, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "w", Kind: engine.StepKindChild, Step: "kid", Position: 0})
				second <- err
				return
			}
			_, err := b.eng.CompleteRuns(b.ctx, "k", []engine.Completion{{LeaseRef: kc.Ref(), Result: json.RawMessage(`{"v":1}`)}})
			second <- err
		}()
		select {
		case err := <-second:
			t.Fatalf("childFirst=%v: the second transaction did not wait for the first (%v)", childFirst, err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := first.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		if childFirst {
			if park.Status != engine.WriteResolved || park.Outcome != engine.OutcomeOK {
				t.Fatalf("await after the child's end: %+v", park)
			}
			continue
		}
		r := b.get(t, parent)
		if r.Status != engine.StatusPending || r.Wait != nil || r.RunAt.After(time.Now().Add(time.Minute)) {
			t.Fatalf("parked parent after its child's end: %+v wait %+v", r, r.Wait)
		}
		if again := b.claimOne(t, "w", "race.parent."); len(again.Journal) != 1 || again.Journal[0].Outcome != engine.OutcomeOK {
			t.Fatalf("journal of the woken parent: %+v", again.Journal)
		}
	}
}
