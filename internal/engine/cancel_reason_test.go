package engine_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// cancelledEvent returns the data of the run's cancelled event.
func (b *bundle) cancelledEvent(t *testing.T, id string) map[string]any {
	t.Helper()
	evs, err := b.eng.ListEvents(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == engine.EventCancelled {
			var d map[string]any
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			return d
		}
	}
	t.Fatalf("run %s has no cancelled event: %v", id, b.eventTypes(t, id))
	return nil
}

// A cancelled run's event says how it was cancelled, and by whom when the
// canceller said so; the label is bounded and cleaned, and does not linger
// into later statements.
func TestCancelledEventSaysHow(t *testing.T) {
	t.Parallel()
	b := setup(t)

	byFunction := b.create(t, engine.CreateParams{Type: "cxl.a.v1"})
	if ok, err := b.eng.CancelRunAs(b.ctx, byFunction, "WorkflowRun team-a/order-1 (spec.cancel)"); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if d := b.cancelledEvent(t, byFunction); d["reason"] != "requested" || d["by"] != "WorkflowRun team-a/order-1 (spec.cancel)" {
		t.Fatalf("cancel_run with a label: %v", d)
	}

	anonymous := b.create(t, engine.CreateParams{Type: "cxl.a.v1"})
	if ok, err := b.eng.CancelRun(b.ctx, anonymous); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if d := b.cancelledEvent(t, anonymous); d["reason"] != "requested" || d["by"] != nil {
		t.Fatalf("cancel_run without a label: %v", d)
	}

	// The seed's UPDATE, with and without a label set by the caller.
	plain := b.create(t, engine.CreateParams{Type: "cxl.a.v1"})
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_run set status = 'cancelled' where id = $1", plain); err != nil {
		t.Fatal(err)
	}
	if d := b.cancelledEvent(t, plain); d["reason"] != "plain_sql" || d["by"] != nil {
		t.Fatalf("plain SQL: %v", d)
	}
	labelled := b.create(t, engine.CreateParams{Type: "cxl.a.v1"})
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "set local workflow.cancelled_by = 'billing-api'"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "update workflow.workflow_run set status = 'cancelled' where id = $1", labelled); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if d := b.cancelledEvent(t, labelled); d["reason"] != "plain_sql" || d["by"] != "billing-api" {
		t.Fatalf("plain SQL with a label: %v", d)
	}

	// A plain UPDATE in the same transaction after cancel_run is not taken
	// for a cancel_run.
	first := b.create(t, engine.CreateParams{Type: "cxl.a.v1"})
	second := b.create(t, engine.CreateParams{Type: "cxl.a.v1"})
	tx, err = b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "select workflow.cancel_run($1)", first); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "update workflow.workflow_run set status = 'cancelled' where id = $1", second); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if d := b.cancelledEvent(t, second); d["reason"] != "plain_sql" {
		t.Fatalf("plain SQL after cancel_run in one transaction: %v", d)
	}

	// A hostile label: NUL, invalid UTF-8, far too long.
	hostile := b.create(t, engine.CreateParams{Type: "cxl.a.v1"})
	label := "evil\x00\xff" + strings.Repeat("x", 10_000)
	if ok, err := b.eng.CancelRunAs(b.ctx, hostile, label); err != nil || !ok {
		t.Fatalf("cancel with a hostile label: %v %v", ok, err)
	}
	if by, _ := b.cancelledEvent(t, hostile)["by"].(string); !strings.HasPrefix(by, "evilxxx") || len(by) > engine.MaxCancelledByBytes {
		t.Fatalf("hostile label recorded as %q (%d bytes)", by[:min(len(by), 20)], len(by))
	}

	// A child is cancelled because its parent ended, whatever ended the
	// parent.
	parent := b.create(t, engine.CreateParams{Type: "cxl.p.v1"})
	c := b.claimOne(t, "w", "cxl.p.")
	kid, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: c.Ref(), WorkerID: "w", Step: "kid", Type: "cxl.k.v1"})
	if err != nil || kid.Status != engine.WriteStarted {
		t.Fatalf("start child: %+v %v", kid, err)
	}
	if ok, err := b.eng.CancelRunAs(b.ctx, parent, "ops"); err != nil || !ok {
		t.Fatalf("cancel parent: %v %v", ok, err)
	}
	if d := b.cancelledEvent(t, kid.ChildID); d["reason"] != "parent_ended" || d["parent_id"] != parent || d["by"] != "ops" {
		t.Fatalf("child of a cancelled parent: %v", d)
	}
	if d := b.cancelledEvent(t, parent); d["reason"] != "requested" || d["previous_status"] != "leased" || d["worker_id"] != "w" {
		t.Fatalf("the parent: %v", d)
	}

	// A soft delete says so, with the label when one is set.
	deleted := b.create(t, engine.CreateParams{Type: "cxl.a.v1"})
	tx, err = b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "set local workflow.cancelled_by = 'cleanup-job'"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "update workflow.workflow_run set deleted_at = now() where id = $1", deleted); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if d := b.cancelledEvent(t, deleted); d["reason"] != "deleted" || d["by"] != "cleanup-job" {
		t.Fatalf("soft delete: %v", d)
	}

	// A plain UPDATE cannot pass for a parent's end (no parent has ended)
	// nor invent a reason.
	for _, forged := range []string{"parent_ended", "deleted", "anything"} {
		id := b.create(t, engine.CreateParams{Type: "cxl.a.v1"})
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(b.ctx, "select set_config('workflow.cancel_reason', $1, true)", forged); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(b.ctx, "update workflow.workflow_run set status = 'cancelled' where id = $1", id); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		if d := b.cancelledEvent(t, id); d["reason"] != "plain_sql" {
			t.Fatalf("a plain UPDATE claiming %q: %v", forged, d)
		}
	}
}
