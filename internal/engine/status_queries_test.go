package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The summary a mirrored run's status shows: finished entries only, the one
// that finished last, and the children.
func TestSummarizeSteps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "summary.a.v1"})
	s, err := b.eng.SummarizeSteps(b.ctx, id)
	if err != nil || s != (engine.StepSummary{}) {
		t.Fatalf("fresh run: %+v %v", s, err)
	}
	c := b.claimOne(t, "w", "summary.a.")
	b.record(t, "w",
		engine.StepWrite{LeaseRef: c.Ref(), Name: "one", Position: 0, Output: json.RawMessage(`1`)},
		engine.StepWrite{LeaseRef: c.Ref(), Name: "two", Position: 1, Output: json.RawMessage(`2`)})
	ch, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: c.Ref(), WorkerID: "w", Step: "kid", Position: 2, Type: "summary.child.v1"})
	if err != nil || ch.Status != engine.WriteStarted {
		t.Fatalf("start child: %+v %v", ch, err)
	}
	if res := b.park(t, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "w", Kind: engine.StepKindSignal, Step: "wait", Position: 3, Signal: "go", Delay: dur(time.Hour)}); res.Status != engine.WriteParked {
		t.Fatalf("park: %+v", res)
	}
	s, err = b.eng.SummarizeSteps(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The child's entry and the wait are open.
	if want := (engine.StepSummary{StepsDone: 2, LastStep: "two", Children: 1}); s != want {
		t.Fatalf("summary %+v, want %+v", s, want)
	}
	if _, err := b.eng.SendSignal(b.ctx, engine.SignalParams{RunID: id, Name: "go"}); err != nil {
		t.Fatal(err)
	}
	s, err = b.eng.SummarizeSteps(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if want := (engine.StepSummary{StepsDone: 3, LastStep: "wait", Children: 1}); s != want {
		t.Fatalf("summary after the signal %+v, want %+v", s, want)
	}
	s, err = b.eng.SummarizeSteps(b.ctx, "00000000-0000-0000-0000-000000000000")
	if err != nil || s != (engine.StepSummary{}) {
		t.Fatalf("unknown run: %+v %v", s, err)
	}
}
