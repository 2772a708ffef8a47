package engine_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// retriedEvents returns the data of a run's 'retried' events with reason
// retry_run.
func (b *bundle) retriedEvents(t *testing.T, id string) []map[string]any {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `select data from workflow.run_event
        where workflow_id = $1 and event_type = 'retried' and data->>'reason' = 'retry_run' order by id`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// A durable run that failed for good is retried from where it stopped: it
// is pending again with a fresh budget of attempts, its journal is handed
// to the next attempt (the step that succeeded is not redone), the audit
// trail says who retried it and from what, and a bystander run is untouched.
func TestRetryRunResumesAFailedDurableRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "retry.durable.v1", MaxAttempts: 2})
	bystander := b.create(t, engine.CreateParams{Type: "retry.other.v1", MaxAttempts: 1})
	c := b.claim(t, "w", []string{"retry.durable."}, 1)[0]
	if _, err := b.eng.RecordSteps(b.ctx, "w", []engine.StepWrite{{LeaseRef: c.Ref(), Name: "reserve", Position: 0, Output: json.RawMessage(`{"r":1}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.FailRuns(b.ctx, "w", []engine.Failure{{LeaseRef: c.Ref(), Error: "card declined"}}); err != nil {
		t.Fatal(err)
	}
	o := b.claim(t, "w", []string{"retry.other."}, 1)[0]
	if _, err := b.eng.FailRuns(b.ctx, "w", []engine.Failure{{LeaseRef: o.Ref(), Error: "bystander fails"}}); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, id); r.Status != engine.StatusFailed {
		t.Fatalf("status %s, want failed", r.Status)
	}

	if err := b.eng.RetryRun(b.ctx, engine.RetryParams{ID: id, By: "ops (kubectl)"}); err != nil {
		t.Fatal(err)
	}
	r := b.get(t, id)
	if r.Status != engine.StatusPending || r.Attempt != 1 || r.MaxAttempts != 3 || r.FinishedAt != nil {
		t.Fatalf("after retry: status %s attempt %d/%d finished %v, want pending 1/3 (two fresh attempts, as created)",
			r.Status, r.Attempt, r.MaxAttempts, r.FinishedAt)
	}
	ev := b.retriedEvents(t, id)
	if len(ev) != 1 || ev[0]["previous_status"] != "failed" || ev[0]["by"] != "ops (kubectl)" {
		t.Fatalf("retried events %v", ev)
	}
	again := b.claim(t, "w", []string{"retry.durable."}, 1)
	if len(again) != 1 || again[0].Attempt != 2 || len(again[0].Journal) != 1 || again[0].Journal[0].Name != "reserve" {
		t.Fatalf("claimed again %+v, want attempt 2 with the reserve step in its journal", again)
	}
	b.completeAll(t, "w", again)
	if r := b.get(t, id); r.Status != engine.StatusSucceeded {
		t.Fatalf("status %s, want succeeded", r.Status)
	}
	if r := b.get(t, bystander); r.Status != engine.StatusFailed || r.Attempt != 1 {
		t.Fatalf("the bystander is %s at attempt %d, want failed at 1", r.Status, r.Attempt)
	}
}

// What cannot be retried is refused with the reason, and nothing changes.
func TestRetryRunRefusesWhatItCannotRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pending := b.create(t, engine.CreateParams{Type: "retry.refuse.v1"})
	done := b.create(t, engine.CreateParams{Type: "retry.done.v1"})
	b.completeAll(t, "w", b.claim(t, "w", []string{"retry.done."}, 1))
	b.register(t, "retry.dag.v1", step("a", "retryw.a.v1"))
	dag := b.insertSQL(t, "retry.dag.v1", `{}`)
	stepID := strings.TrimPrefix(b.stepIDs(t, dag)[0], "a=")
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_run set status = 'cancelled' where id = $1`, dag); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		id       string
		attempts int
		want     error
		msg      string
	}{
		{pending, 0, engine.ErrInvalid, "is pending: only a failed or cancelled run is retried"},
		{done, 0, engine.ErrInvalid, "is succeeded"},
		{stepID, 0, engine.ErrInvalid, "is a step or child of run " + dag},
		{dag, 1001, engine.ErrInvalid, "attempts must be between 1 and 1000"},
		{"01a217c3-e0c6-7310-8d60-8e5c1d5d0e34", 0, engine.ErrNotFound, ""},
		{"not-a-uuid", 0, engine.ErrInvalid, ""},
	}
	for _, tc := range cases {
		err := b.eng.RetryRun(b.ctx, engine.RetryParams{ID: tc.id, Attempts: tc.attempts})
		if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.msg) {
			t.Errorf("retry %s (attempts %d): %v, want %v saying %q", tc.id, tc.attempts, err, tc.want, tc.msg)
		}
	}
	if r := b.get(t, pending); r.Status != engine.StatusPending || len(b.retriedEvents(t, pending)) != 0 {
		t.Errorf("the pending run changed: %s", r.Status)
	}
	if r := b.get(t, done); r.Status != engine.StatusSucceeded {
		t.Errorf("the succeeded run changed: %s", r.Status)
	}
	// Plain SQL cannot bring a finished run back, even with the setting
	// retry_run uses, unless it is the owner.
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_run set status = 'pending' where id = $1`, done); err == nil {
		t.Error("plain SQL made a succeeded run pending")
	}
}

// stepIDs returns "step=id" for every started step of a DAG run.
func (b *bundle) stepIDs(t *testing.T, id string) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `select parent_step || '=' || id from workflow.workflow_run where parent_id = $1 order by parent_step`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// A DAG that failed at its second step is retried from that step: the
// first step's run is kept as it was (not run again), the failed step runs
// again with fresh attempts, the step that never started starts after it,
// and the workflow succeeds with every step's result.
func TestRetryRunResumesADAGFromTheFailedStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "retry.chain.v1", step("a", "retryc.a.v1"), step("b", "retryc.b.v1", "a"), step("c", "retryc.c.v1", "b"))
	id := b.insertSQL(t, "retry.chain.v1", `{"order": 7}`)
	b.work(t, "retryc.")
	bRun := b.claim(t, "w1", []string{"retryc."}, 10)
	if len(bRun) != 1 || bRun[0].Type != "retryc.b.v1" {
		t.Fatalf("claimed %+v, want step b", bRun)
	}
	if _, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: bRun[0].Ref(), Error: "carrier down"}}); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, id); r.Status != engine.StatusFailed {
		t.Fatalf("workflow %s, want failed", r.Status)
	}
	before := b.get(t, strings.TrimPrefix(b.stepIDs(t, id)[0], "a="))

	if err := b.eng.RetryRun(b.ctx, engine.RetryParams{ID: id}); err != nil {
		t.Fatal(err)
	}
	if got := b.stepRuns(t, id); got != "a=succeeded b=pending" {
		t.Fatalf("after retry: %q, want a kept and b pending", got)
	}
	after := b.get(t, before.ID)
	if after.Attempt != before.Attempt || after.FinishedAt == nil || !after.FinishedAt.Equal(*before.FinishedAt) {
		t.Fatalf("step a changed: %+v, was %+v", after, before)
	}
	if r := b.get(t, id); r.Status != engine.StatusPending {
		t.Fatalf("workflow %s, want pending", r.Status)
	}
	if got := b.work(t, "retryc."); fmt.Sprint(got) != "[retryc.b.v1]" {
		t.Fatalf("ran %v, want b alone", got)
	}
	if got := b.work(t, "retryc."); fmt.Sprint(got) != "[retryc.c.v1]" {
		t.Fatalf("ran %v, want c", got)
	}
	r := b.get(t, id)
	if r.Status != engine.StatusSucceeded {
		t.Fatalf("workflow %s (%s), want succeeded", r.Status, r.LastError)
	}
	var res struct {
		Steps map[string]json.RawMessage `json:"steps"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil || len(res.Steps) != 3 {
		t.Fatalf("result %s (%v), want the three steps' results", r.Result, err)
	}
	bID := strings.TrimPrefix(b.stepIDs(t, id)[1], "b=")
	if ev := b.retriedEvents(t, bID); len(ev) != 1 || ev[0]["workflow_id"] != id {
		t.Fatalf("step b's retried events %v", ev)
	}
	if ev := b.retriedEvents(t, id); len(ev) != 1 || ev[0]["steps_retried"] != float64(1) {
		t.Fatalf("the workflow's retried events %v", ev)
	}
}

// A cancelled DAG is retried too: the steps its cancel stopped run again.
func TestRetryRunResumesACancelledDAG(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "retry.fan.v1", step("a", "retryf.a.v1"), step("b", "retryf.b.v1"))
	id := b.insertSQL(t, "retry.fan.v1", `{}`)
	got := b.claim(t, "w1", []string{"retryf.a."}, 10)
	b.completeAll(t, "w1", got)
	if ok, err := b.eng.CancelRun(b.ctx, id); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if s := b.stepRuns(t, id); s != "a=succeeded b=cancelled" {
		t.Fatalf("after cancel: %q", s)
	}
	if err := b.eng.RetryRun(b.ctx, engine.RetryParams{ID: id, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	if got := b.work(t, "retryf."); fmt.Sprint(got) != "[retryf.b.v1]" {
		t.Fatalf("ran %v, want b alone", got)
	}
	if r := b.get(t, id); r.Status != engine.StatusSucceeded {
		t.Fatalf("workflow %s, want succeeded", r.Status)
	}
}
