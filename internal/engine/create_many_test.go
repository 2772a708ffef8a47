package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// create_runs records a batch in one call: per-row idempotency (a key taken
// before, or earlier in the batch, returns the run that holds it), defaults
// and options per row, a created event per new run.
func TestCreateRunsBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.create(t, engine.CreateParams{Type: "cm.a.v1", IdempotencyKey: "taken"})
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	got, err := b.eng.CreateRuns(b.ctx, []engine.CreateParams{
		{Type: "cm.a.v1", Payload: json.RawMessage(`{"n":1}`)},
		{Type: "cm.a.v1", IdempotencyKey: "taken"},
		{Type: "cm.b.v1", IdempotencyKey: "new", Priority: ptr(7), RunAt: &at, MaxAttempts: 5,
			Deadline: 2 * time.Hour, RetryPolicy: &engine.RetryPolicy{BaseDelay: time.Second, MaxDelay: time.Minute}},
		{Type: "cm.b.v1", IdempotencyKey: "new"}, // repeated in the batch
		{Type: "cm.c.v1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("%d results for 5 runs", len(got))
	}
	if !got[0].Created || got[1].Created || got[1].ID != before || !got[2].Created ||
		got[3].Created || got[3].ID != got[2].ID || !got[4].Created || got[0].ID == got[4].ID {
		t.Fatalf("results %+v (the taken key's run is %s)", got, before)
	}
	r := b.get(t, got[2].ID)
	if r.Type != "cm.b.v1" || r.Priority != 7 || !r.RunAt.Equal(at) || r.MaxAttempts != 5 || r.DeadlineAt == nil ||
		r.RetryPolicy == nil || r.RetryPolicy.BaseDelay != time.Second || r.RetryPolicy.MaxDelay != time.Minute {
		t.Fatalf("options not recorded: %+v", r)
	}
	if r := b.get(t, got[0].ID); string(r.Payload) != `{"n": 1}` || r.Priority != engine.DefaultPriority ||
		r.MaxAttempts != engine.DefaultMaxAttempts || r.Status != engine.StatusPending {
		t.Fatalf("defaults not taken: %+v", r)
	}
	for _, i := range []int{0, 2, 4} {
		if evs := b.eventTypes(t, got[i].ID); len(evs) != 1 || evs[0] != engine.EventCreated {
			t.Fatalf("run %d events %v, want created", i, evs)
		}
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("%d runs in the inbox, want 4 (%v)", n, err)
	}
}

// A bad row fails the whole batch with an error naming it, and writes
// nothing; an oversized batch is refused.
func TestCreateRunsRefusesBadRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		name, sql, want string
		args            []any
	}{
		{"type", `select * from workflow.create_runs('{cm.ok.v1,Bad}', '{"{}","{}"}')`, "row 2: type 'Bad'", nil},
		{"NUL escape", `select * from workflow.create_runs('{cm.ok.v1,cm.ok.v1}', $1)`, "row 2: payload is not valid JSON",
			[]any{[]string{`{}`, `{"a":"x\u0000y"}`}}},
		{"not JSON", `select * from workflow.create_runs('{cm.ok.v1,cm.ok.v1,cm.ok.v1}', $1)`, "row 3: payload is not valid JSON",
			[]any{[]string{`{}`, `{}`, `{"a":`}}},
		{"not an object", `select * from workflow.create_runs('{cm.ok.v1,cm.ok.v1}', '{"{}","[1]"}')`, "row 2: payload must be a JSON object", nil},
		{"attempts", `select * from workflow.create_runs('{cm.ok.v1}', '{"{}"}', p_max_attempts => '{0}')`, "row 1: max attempts", nil},
		{"reserved key", `select * from workflow.create_runs('{cm.ok.v1}', '{"{}"}', p_idempotency_keys => '{k8s-uid:x}')`, "row 1: idempotency keys starting with k8s:", nil},
		{"lengths", `select * from workflow.create_runs('{cm.ok.v1,cm.ok.v1}', '{"{}"}')`, "payloads has 1 elements, types has 2", nil},
		{"too many", `select * from workflow.create_runs(array_fill('cm.ok.v1'::text, '{10001}'), null)`, "at most 10000 runs per call", nil},
	} {
		_, err := b.pool.Exec(b.ctx, c.sql, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d runs written by refused batches (%v)", n, err)
	}

	// The Go side names the row too, before the database sees it.
	_, err := b.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "cm.ok.v1"}, {Type: "cm.ok.v1", Payload: json.RawMessage("{\"a\":\"\x00\"}")}})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "row 2") {
		t.Errorf("NUL in a payload: %v, want invalid, row 2", err)
	}
	_, err = b.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "cm.ok.v1", IdempotencyKey: "a\x00b"}})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "row 1") {
		t.Errorf("NUL in a key: %v, want invalid, row 1", err)
	}
	_, err = b.eng.CreateRuns(b.ctx, make([]engine.CreateParams, engine.MaxCreateMany+1))
	if !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("oversized batch: %v, want invalid", err)
	}
	if res, err := b.eng.CreateRuns(b.ctx, nil); err != nil || len(res) != 0 {
		t.Errorf("empty batch: %v %v", res, err)
	}
}
