package engine_test

import (
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// handOff completes runs as worker and claims, in the same transaction,
// what their completion made runnable, with the worker's claim settings.
func (b *bundle) handOff(t *testing.T, worker string, runs []engine.ClaimedRun, p engine.ClaimParams) ([]engine.Completed, []engine.ClaimedRun) {
	t.Helper()
	cs := make([]engine.Completion, len(runs))
	for i, r := range runs {
		cs[i] = engine.Completion{LeaseRef: r.Ref()}
	}
	if p.LeaseDuration == 0 {
		p.LeaseDuration = 30 * time.Second
	}
	if p.Runtime == "" {
		p.Runtime = "go"
	}
	done, claimed, err := b.eng.CompleteRunsHandOff(b.ctx, worker, cs, p)
	if err != nil {
		t.Fatalf("complete and hand off: %v", err)
	}
	return done, claimed
}

// A completion hands the next step of its DAG to the worker that completed
// the step before it, in the same transaction, leased under a token of its
// own, with its parent named; a step of a type the worker does not handle
// stays in the queue for a claim. Other namespaces' runs of the same type,
// and other types' runs, are not touched.
func TestCompletionHandsOffTheChainsNextStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "hand.chain.v1", step("a", "hand.a.v1"), step("b", "hand.b.v1", "a"), step("c", "hand.c.v1", "b"))
	otherTeam := b.teamRun(t, "team-x", "hand.b.v1")
	otherType := b.create(t, engine.CreateParams{Type: "plain.job.v1"})
	dag := b.create(t, engine.CreateParams{Type: "hand.chain.v1"})

	a := b.claim(t, "w1", []string{"hand."}, 10)
	if len(a) != 1 || a[0].ParentID != dag {
		t.Fatalf("claimed %+v, want step a of %s with its parent", a, dag)
	}
	done, next := b.handOff(t, "w1", a, engine.ClaimParams{TypePrefixes: []string{"hand."}, Limit: 5})
	if len(done) != 1 || done[0].Status != engine.StatusSucceeded {
		t.Fatalf("completed %+v, want a succeeded", done)
	}
	if len(next) != 1 || next[0].Type != "hand.b.v1" || next[0].ParentID != dag || next[0].Attempt != 1 ||
		next[0].LeaseToken == 0 || next[0].LeaseToken == a[0].LeaseToken {
		t.Fatalf("handed off %+v, want step b of %s, attempt 1, a token of its own", next, dag)
	}
	if r := b.get(t, next[0].ID); r.Status != engine.StatusLeased || r.LeasedBy != "w1" {
		t.Fatalf("step b is %s by %q, want leased by w1", r.Status, r.LeasedBy)
	}
	if !pgtest.StartedWith(b.ctx, t, b.pool, a[0].ID, next[0].ID) {
		t.Fatal("step b was not started in the transaction that ended step a")
	}
	if got := b.stepRuns(t, dag); got != "a=succeeded b=leased" {
		t.Fatalf("steps: %s", got)
	}

	// A worker that handles only a's and b's types: c waits for a claim.
	_, next2 := b.handOff(t, "w1", next, engine.ClaimParams{Types: []string{"hand.a.v1", "hand.b.v1"}, Limit: 5})
	if len(next2) != 0 {
		t.Fatalf("handed off %+v to a worker without c's type", next2)
	}
	c := b.claim(t, "w2", []string{"hand.c."}, 10)
	if len(c) != 1 || c[0].Type != "hand.c.v1" {
		t.Fatalf("claimed %+v, want step c from the queue", c)
	}
	b.completeAll(t, "w2", c)
	if r := b.get(t, dag); r.Status != engine.StatusSucceeded {
		t.Fatalf("the DAG is %s, want succeeded", r.Status)
	}
	for _, id := range []string{otherTeam, otherType} {
		if r := b.get(t, id); r.Status != engine.StatusPending || r.Attempt != 0 {
			t.Fatalf("bystander %s (%s) is %s, attempt %d", id, r.Type, r.Status, r.Attempt)
		}
	}
}

// The hand-off leaves a run in the queue when a claim would not take it
// first: a runnable run of the worker's types with a better priority waits,
// or the type has a flow limit. Then a claim takes them in order.
func TestHandOffYieldsToPriorityAndFlowLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "yield.chain.v1", step("a", "yield.a.v1"), step("b", "yield.b.v1", "a"))
	b.register(t, "yield.limited.v1", step("a", "yield.a.v1"), step("b", "yield.lim.v1", "a"))
	b.registerFlow(t, "yield.lim.v1", engine.FlowLimits{MaxLeased: i32(5)})
	prefixes := []string{"yield."}

	// A better-priority run of another of the worker's types is waiting.
	dag := b.create(t, engine.CreateParams{Type: "yield.chain.v1"})
	a := b.claim(t, "w1", []string{"yield.a."}, 10)
	urgent := b.create(t, engine.CreateParams{Type: "yield.other.v1", Priority: ptr(1)})
	if _, next := b.handOff(t, "w1", a, engine.ClaimParams{TypePrefixes: prefixes, Limit: 5}); len(next) != 0 {
		t.Fatalf("handed off %+v past a run of priority 1", next)
	}
	got := b.claim(t, "w1", prefixes, 1)
	if len(got) != 1 || got[0].ID != urgent {
		t.Fatalf("claimed %+v, want the urgent run first", got)
	}
	b.completeAll(t, "w1", got)
	got = b.claim(t, "w1", prefixes, 1)
	if len(got) != 1 || got[0].ParentID != dag || got[0].Type != "yield.b.v1" {
		t.Fatalf("claimed %+v, want step b of %s", got, dag)
	}

	// A step of a flow-limited type goes through flow_admit.
	limited := b.create(t, engine.CreateParams{Type: "yield.limited.v1"})
	a = b.claim(t, "w1", []string{"yield.a."}, 10)
	if _, next := b.handOff(t, "w1", a, engine.ClaimParams{TypePrefixes: prefixes, Limit: 5}); len(next) != 0 {
		t.Fatalf("handed off %+v of a flow-limited type", next)
	}
	got = b.claim(t, "w1", []string{"yield.lim."}, 1)
	if len(got) != 1 || got[0].ParentID != limited {
		t.Fatalf("claimed %+v, want the limited step of %s", got, limited)
	}
}

// Only runs this worker ended in this transaction hand anything off: a
// completion refused by the lease fence (a stale token) completes nothing
// and hands nothing off; another worker naming the ended run gets nothing;
// a hand-off whose claim fails takes the completion back with it.
func TestHandOffStaysInsideTheLeaseFence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "fence.chain.v1", step("a", "fence.a.v1"), step("b", "fence.b.v1", "a"))
	dag := b.create(t, engine.CreateParams{Type: "fence.chain.v1"})
	a := b.claim(t, "w1", []string{"fence."}, 10)
	params := engine.ClaimParams{TypePrefixes: []string{"fence."}, Limit: 5}

	stale := a[0]
	stale.LeaseToken++
	if done, next := b.handOff(t, "w1", []engine.ClaimedRun{stale}, params); len(done) != 0 || len(next) != 0 {
		t.Fatalf("a stale token completed %+v and handed off %+v", done, next)
	}
	if _, next := b.handOff(t, "w2", a, params); len(next) != 0 {
		t.Fatalf("another worker was handed %+v", next)
	}

	// The claim refuses its lease: neither statement commits.
	cs := []engine.Completion{{LeaseRef: a[0].Ref()}}
	if _, _, err := b.eng.CompleteRunsHandOff(b.ctx, "w1", cs, engine.ClaimParams{
		TypePrefixes: params.TypePrefixes, Limit: 5, LeaseDuration: time.Millisecond}); err == nil {
		t.Fatal("a hand-off with a 1 ms lease was accepted")
	}
	if r := b.get(t, a[0].ID); r.Status != engine.StatusLeased {
		t.Fatalf("step a is %s after the failed hand-off, want still leased", r.Status)
	}
	if got := b.stepRuns(t, dag); got != "a=leased" {
		t.Fatalf("steps after the failed hand-off: %s", got)
	}

	// A run ended in an earlier transaction hands nothing off.
	b.completeAll(t, "w1", a)
	if _, next := b.handOff(t, "w1", a, params); len(next) != 0 {
		t.Fatalf("a run ended before was handed off from: %+v", next)
	}
	if got := b.claim(t, "w3", params.TypePrefixes, 5); len(got) != 1 || got[0].Type != "fence.b.v1" {
		t.Fatalf("claimed %+v, want step b from the queue", got)
	}
}
