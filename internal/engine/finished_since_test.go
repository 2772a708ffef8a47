package engine_test

import (
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The finished runs the manager's duration histogram reads go on being read
// when the database's clock moves back (a test clock restored, a clock
// stepped back): the runs that finish after the step are read once, at the
// next look, not only once the clock is back where it was.
func TestRunsFinishedSinceFollowsAClockMovedBack(t *testing.T) {
	b := setup(t)
	finish := func(typ string) {
		t.Helper()
		b.create(t, engine.CreateParams{Type: typ})
		for _, r := range b.claim(t, "w", []string{typ}, 10) {
			if _, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: r.Ref()}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(since time.Time) ([]engine.FinishedRun, time.Time) {
		t.Helper()
		runs, next, err := b.eng.RunsFinishedSince(b.ctx, since, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return runs, next
	}

	since := b.clockNow(t)
	b.advanceClock(t, 20*time.Minute)
	finish("ahead.v1")
	runs, since := read(since)
	if len(runs) != 1 || runs[0].Prefix != "ahead" || !since.Equal(runs[0].FinishedAt) {
		t.Fatalf("ahead of the clock: read %+v, next %s", runs, since)
	}
	if runs, next := read(since); len(runs) != 0 || !next.Equal(since) {
		t.Fatalf("read again: %+v, next %s (want none, %s)", runs, next, since)
	}

	b.advanceClock(t, -10*time.Minute)
	back := b.clockNow(t)
	finish("back.v1")
	runs, next := read(since)
	if len(runs) != 1 || runs[0].Prefix != "back" {
		t.Fatalf("after the clock moved back 10 min: read %+v, want the run finished since", runs)
	}
	if !next.After(back) || !next.Before(since) {
		t.Fatalf("next %s: want after the clock moved back (%s), before the old cursor (%s)", next, back, since)
	}
	if runs, _ := read(next); len(runs) != 0 {
		t.Fatalf("read again: %+v, want none (each run once)", runs)
	}
	// Nothing finished: the cursor follows the clock back all the same.
	b.advanceClock(t, -time.Minute)
	_, moved := read(next)
	if !moved.Before(next) {
		t.Fatalf("nothing finished after the clock moved back 1 min: next %s, want before %s", moved, next)
	}
	finish("later.v1")
	if runs, _ := read(moved); len(runs) != 1 || runs[0].Prefix != "later" {
		t.Fatalf("read %+v, want the run finished after", runs)
	}
}
