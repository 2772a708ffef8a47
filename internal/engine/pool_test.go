package engine_test

import (
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The queue depth of a pool counts only runs its workers could claim.
func TestQueueDepths(t *testing.T) {
	t.Parallel()
	b := setup(t)
	future := time.Now().Add(time.Hour)
	for range 5 {
		b.create(t, engine.CreateParams{Type: "bill.invoice.v1"})
	}
	b.create(t, engine.CreateParams{Type: "bill.invoice.v1", RunAt: &future}) // not due
	b.create(t, engine.CreateParams{Type: "bill.py.v1"})                      // other runtime
	b.create(t, engine.CreateParams{Type: "bill.off.v1"})                     // disabled
	b.create(t, engine.CreateParams{Type: "billx.v1"})                        // other prefix
	b.create(t, engine.CreateParams{Type: "a_b.x.v1"})
	b.create(t, engine.CreateParams{Type: "axb.x.v1"}) // '_' is literal
	for _, e := range []engine.RegistryEntry{
		{WorkflowName: "bill.py.v1", Runtime: "python", Enabled: true},
		{WorkflowName: "bill.off.v1", Runtime: "go", Enabled: false},
	} {
		if err := b.eng.UpsertRegistryEntry(b.ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	b.claim(t, "w", []string{"bill.invoice."}, 2) // two leased
	got, err := b.eng.QueueDepths(b.ctx, []engine.PoolQuery{
		{TypePrefixes: []string{"bill."}, Runtime: "go"},
		{TypePrefixes: []string{"bill.", "bill.invoice."}, Runtime: "go"}, // overlapping prefixes count once
		{TypePrefixes: []string{"bill."}, Runtime: "python"},
		{TypePrefixes: []string{"a_"}, Runtime: "go"},
		{TypePrefixes: []string{"nothing."}, Runtime: "go"},
		{},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.QueueDepth{{Runnable: 3, Leased: 2}, {Runnable: 3, Leased: 2}, {Runnable: 4, Leased: 2}, {Runnable: 1}, {}, {}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("pool %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
