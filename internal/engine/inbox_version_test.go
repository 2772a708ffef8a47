package engine_test

import (
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// workflow.inbox_version moves with every audited transition and every
// finish (a console looks again when it does), and stays put otherwise.
func TestInboxVersionMovesWithTransitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	version := func() string {
		t.Helper()
		var v string
		if err := b.pool.QueryRow(b.ctx, "select workflow.inbox_version()").Scan(&v); err != nil {
			t.Fatalf("inbox_version: %v", err)
		}
		return v
	}
	last := version()
	moved := func(what string) {
		t.Helper()
		v := version()
		if v == last {
			t.Fatalf("inbox_version did not move after %s: %s", what, v)
		}
		last = v
	}
	id := b.create(t, engine.CreateParams{Type: "version.a.v1"})
	moved("a create")
	if v := version(); v != last {
		t.Fatalf("inbox_version moved without a change: %s then %s", last, v)
	}
	got := b.claim(t, "w", []string{"version."}, 1)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("claimed %+v", got)
	}
	moved("a claim")
	if _, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: got[0].Ref()}}); err != nil {
		t.Fatal(err)
	}
	moved("a completion")
	other := b.create(t, engine.CreateParams{Type: "version.b.v1"})
	moved("another create")
	if ok, err := b.eng.CancelRun(b.ctx, other); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	moved("a cancel")
}
