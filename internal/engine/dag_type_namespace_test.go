package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// shareType declares typ in namespace owner's registry, shared with the
// namespaces listed (none: shared with no one).
func (b *bundle) shareType(t *testing.T, owner, typ string, with ...string) {
	t.Helper()
	if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: typ, Runtime: "go", Enabled: true,
		OwnerNamespace: owner, OwnerName: "reg", SharedWith: with}); err != nil {
		t.Fatalf("share %s of %s with %v: %v", typ, owner, with, err)
	}
}

// failureReason is the reason of a run's failed event, or "".
func (b *bundle) failureReason(t *testing.T, id string) string {
	t.Helper()
	var reason string
	if err := b.pool.QueryRow(b.ctx, `select coalesce(max(data->>'reason'), '') from workflow.workflow_event
		where workflow_id = $1 and event_type = 'failed'`, id).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	return reason
}

// A DAG step with typeNamespace runs another namespace's type when that
// namespace shares it with the run's: the step's run stays the workflow's
// namespace's and is claimed by the owner's workers only, fan-out elements
// and the final step alike. A workflow of a namespace the type is not
// shared with fails before the step starts (reason type_not_shared, naming
// nothing of the owner's registry), and the owner's workers never see its
// payload; revoking the share fails the workflows that have not started
// the step yet. The owner's own run, beside them, finishes unharmed.
func TestDAGStepOfASharedType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.shareType(t, "payments", "pay.refund.v1", "team-a")
	b.shareType(t, "payments", "pay.audit.v1", "team-a")
	bystander := b.teamRun(t, "payments", "pay.refund.v1")
	steps := []engine.DAGStepDefinition{
		step("prep", "flow.prep.v1"),
		{Name: "refund", Type: "pay.refund.v1", TypeNamespace: "payments", DependsOn: []string{"prep"}},
		{Name: "each", Type: "pay.refund.v1", TypeNamespace: "payments", DependsOn: []string{"prep"},
			ForEach: "$.payload.items"},
		{Name: "audit", Type: "pay.audit.v1", TypeNamespace: "payments", Final: true},
	}
	b.registerIn(t, "team-a", "flow.refund.v1", steps...)
	b.registerIn(t, "team-b", "flow.refund.v1", steps...)

	shared := b.create(t, engine.CreateParams{Type: "flow.refund.v1", Namespace: "team-a",
		Payload: []byte(`{"items": [1, 2]}`)})
	unshared := b.create(t, engine.CreateParams{Type: "flow.refund.v1", Namespace: "team-b",
		Payload: []byte(`{"items": [1, 2], "secret": "team-b's"}`)})

	if r := b.get(t, unshared); r.Status != engine.StatusFailed || b.failureReason(t, unshared) != "type_not_shared" ||
		!strings.HasPrefix(r.LastError, `step "refund" runs a type that is not shared with namespace team-b`) {
		t.Fatalf("team-b's workflow: %s (%s, reason %q), want failed as type_not_shared",
			r.Status, r.LastError, b.failureReason(t, unshared))
	}
	if got := b.stepRuns(t, unshared); got != "" {
		t.Fatalf("team-b's workflow started steps: %s", got)
	}

	// prep runs among team-a's workers; refund and the elements among
	// payments', as team-a's runs.
	prep := b.claimIn(t, "team-a", "wa", []string{"flow."}, 10)
	if len(prep) != 1 {
		t.Fatalf("team-a's worker claimed %+v, want prep", prep)
	}
	b.completeAll(t, "wa", prep)
	if got := b.claimIn(t, "team-a", "wa", []string{"pay."}, 10); len(got) != 0 {
		t.Fatalf("team-a's worker claimed payments' step runs: %+v", got)
	}
	got := b.claimIn(t, "payments", "wp", []string{"pay."}, 10)
	if len(got) != 4 {
		t.Fatalf("payments' worker claimed %d runs, want the bystander, refund and two elements", len(got))
	}
	for _, c := range got {
		r := b.get(t, c.ID)
		if c.ID == bystander {
			continue
		}
		if r.ParentID != shared || r.Namespace != "team-a" || r.TypeNamespace != "payments" {
			t.Fatalf("a step run: parent %s, namespace %q, type namespace %q", r.ParentID, r.Namespace, r.TypeNamespace)
		}
		if strings.Contains(string(c.Payload), "team-b") {
			t.Fatalf("payments' worker saw team-b's payload: %s", c.Payload)
		}
	}
	b.completeAll(t, "wp", got)
	final := b.claimIn(t, "payments", "wp", []string{"pay.audit."}, 10)
	if len(final) != 1 {
		t.Fatalf("payments' worker claimed %+v, want the final step", final)
	}
	b.completeAll(t, "wp", final)
	if r := b.get(t, shared); r.Status != engine.StatusSucceeded {
		t.Fatalf("team-a's workflow: %s (%s)", r.Status, r.LastError)
	}
	if r := b.get(t, bystander); r.Status != engine.StatusSucceeded {
		t.Fatalf("payments' own run: %s", r.Status)
	}

	// Revoked after prep started: the workflow fails when prep ends, and
	// its final step (of a type still shared) runs with the outcome.
	started := b.create(t, engine.CreateParams{Type: "flow.refund.v1", Namespace: "team-a",
		Payload: []byte(`{"items": []}`)})
	prep = b.claimIn(t, "team-a", "wa", []string{"flow."}, 10)
	b.shareType(t, "payments", "pay.refund.v1")
	b.completeAll(t, "wa", prep)
	if got := b.stepRuns(t, started); got != "prep=succeeded audit=pending" {
		t.Fatalf("after the revoke: %q, want prep and the final step only", got)
	}
	final = b.claimIn(t, "payments", "wp", []string{"pay."}, 10)
	if len(final) != 1 {
		t.Fatalf("payments' worker claimed %+v, want the final step", final)
	}
	b.completeAll(t, "wp", final)
	if r := b.get(t, started); r.Status != engine.StatusFailed || b.failureReason(t, started) != "type_not_shared" {
		t.Fatalf("the workflow after the revoke: %s (%s, reason %q)", r.Status, r.LastError, b.failureReason(t, started))
	}

	// A final step of a type not shared never starts: the workflow fails
	// as it starts, and nothing reaches payments' workers.
	b.shareType(t, "payments", "pay.refund.v1", "team-a")
	b.shareType(t, "payments", "pay.audit.v1")
	noFinal := b.create(t, engine.CreateParams{Type: "flow.refund.v1", Namespace: "team-a",
		Payload: []byte(`{"items": []}`)})
	if r := b.get(t, noFinal); r.Status != engine.StatusFailed || b.failureReason(t, noFinal) != "type_not_shared" ||
		!strings.Contains(r.LastError, `step "audit"`) {
		t.Fatalf("a workflow whose final step is not shared: %s (%s)", r.Status, r.LastError)
	}
	if got := b.claimIn(t, "payments", "wp", []string{"pay."}, 10); len(got) != 0 {
		t.Fatalf("payments' worker claimed %+v after every workflow ended", got)
	}
}

// A step's typeNamespace is a namespace name, or the definition is
// refused when the registry is written; a step naming another namespace's
// DAG type is refused at run time as a step with steps of its own.
func TestDAGStepTypeNamespaceIsValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, bad := range []string{"Payments", "pay_ments", "-payments", strings.Repeat("a", 64), "a\x00b", "pay ments"} {
		err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "flow.bad.v1", Enabled: true,
			OwnerNamespace: "team-a", OwnerName: "reg", Definition: &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{
				{Name: "s", Type: "pay.refund.v1", TypeNamespace: bad}}}})
		// (JSON cannot hold a NUL: that one is refused before the check.)
		if !errors.Is(err, engine.ErrInvalid) ||
			!strings.Contains(err.Error(), "typeNamespace must be a namespace name") && !strings.Contains(bad, "\x00") {
			t.Errorf("typeNamespace %q: %v", bad, err)
		}
	}
	_, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_registry (namespace, workflow_name, runtime, definition)
		values ('team-a', 'flow.num.v1', 'go', '{"steps": [{"name": "s", "type": "pay.refund.v1", "typeNamespace": 7}]}')`)
	if sqlState(err) != "SW001" {
		t.Errorf("a numeric typeNamespace: %v", err)
	}

	// payments' pay.flow.v1 has steps: a step of team-a naming it runs
	// nothing of it.
	b.registerIn(t, "payments", "pay.flow.v1", step("x", "pay.x.v1"))
	b.shareType(t, "payments", "pay.x.v1", "team-a")
	if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "pay.flow.v1", Enabled: true,
		OwnerNamespace: "payments", OwnerName: "registry", SharedWith: []string{"team-a"},
		Definition: &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{step("x", "pay.x.v1")}}}); err != nil {
		t.Fatal(err)
	}
	err = b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "flow.nested.v1", Enabled: true,
		OwnerNamespace: "team-a", OwnerName: "reg", Definition: &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{
			{Name: "s", Type: "pay.flow.v1", TypeNamespace: "payments"}}}})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "has steps of its own") {
		t.Fatalf("a step naming another namespace's DAG type: %v", err)
	}
}
