package simpleworkflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// CreateMany: one result per run in order, idempotency per run (a key taken
// before or earlier in the batch), and a bad run named in the error with
// nothing written.
func TestCreateMany(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before, err := b.client.Create(b.ctx, "many.a.v1", nil, &simpleworkflow.CreateOptions{IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	prio := 5
	res, err := b.client.CreateMany(b.ctx, []simpleworkflow.NewRun{
		{Type: "many.a.v1", Payload: map[string]any{"n": 1}},
		{Type: "many.a.v1", Options: &simpleworkflow.CreateOptions{IdempotencyKey: "k1"}},
		{Type: "many.b.v1", Payload: []byte(`{"n":2}`), Options: &simpleworkflow.CreateOptions{IdempotencyKey: "k2", Priority: &prio, MaxAttempts: 7}},
		{Type: "many.b.v1", Options: &simpleworkflow.CreateOptions{IdempotencyKey: "k2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 || !res[0].Created || res[1].Created || res[1].ID != before.ID || !res[2].Created ||
		res[3].Created || res[3].ID != res[2].ID {
		t.Fatalf("results %+v", res)
	}
	run, err := b.client.Get(b.ctx, res[2].ID)
	if err != nil || run.Priority != 5 || run.MaxAttempts != 7 || string(run.Payload) != `{"n": 2}` {
		t.Fatalf("run %+v %v", run, err)
	}

	for _, c := range []struct {
		name string
		runs []simpleworkflow.NewRun
		want string
	}{
		{"bad type", []simpleworkflow.NewRun{{Type: "many.a.v1"}, {Type: "Many"}}, "row 2"},
		{"array payload", []simpleworkflow.NewRun{{Type: "many.a.v1", Payload: []int{1}}}, "row 1"},
		{"NUL escape", []simpleworkflow.NewRun{{Type: "many.a.v1"}, {Type: "many.a.v1"}, {Type: "many.a.v1", Payload: `{"a":"\u0000"}`}}, "row 3"},
		{"too many", make([]simpleworkflow.NewRun, simpleworkflow.MaxCreateMany+1), "at most"},
	} {
		_, err := b.client.CreateMany(b.ctx, c.runs)
		if !errors.Is(err, simpleworkflow.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %q", c.name, err, c.want)
		}
	}
	page, err := b.client.List(b.ctx, simpleworkflow.ListOptions{})
	if err != nil || len(page.Runs) != 3 {
		t.Fatalf("%d runs after refused batches, want 3 (%v)", len(page.Runs), err)
	}
}

// CreateManyIn writes in the caller's transaction: rolled back, nothing
// stays.
func TestCreateManyInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx, err := b.client.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.client.CreateManyIn(b.ctx, tx, []simpleworkflow.NewRun{{Type: "many.tx.v1"}, {Type: "many.tx.v1"}})
	if err != nil || len(res) != 2 {
		t.Fatalf("create in tx: %+v %v", res, err)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Get(b.ctx, res[0].ID); !errors.Is(err, simpleworkflow.ErrNotFound) {
		t.Fatalf("run after rollback: %v, want not found", err)
	}
}
