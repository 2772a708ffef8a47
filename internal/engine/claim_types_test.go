package engine_test

import (
	"slices"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The claim finds its types in the statement that leases their runs:
// prefixes that overlap, types named twice, a type both under a prefix and
// named, a disabled type, another runtime's type and another namespace's
// runs change nothing of what one claim returns: each run of the worker's
// types once, in claim order, and nothing else.
func TestClaimFindsEachTypeOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []string
	for range 3 {
		want = append(want, b.create(t, engine.CreateParams{Type: "ov.a.job.v1"}))
	}
	for range 2 {
		want = append(want, b.create(t, engine.CreateParams{Type: "ov.b.job.v1"}))
	}
	bystanders := []string{
		b.create(t, engine.CreateParams{Type: "other.job.v1"}),
		b.create(t, engine.CreateParams{Type: "ov.off.job.v1"}),
		b.create(t, engine.CreateParams{Type: "ov.py.job.v1"}),
		b.teamRun(t, "team-b", "ov.a.job.v1"),
	}
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_registry (workflow_name, runtime, is_enabled)
		values ('ov.off.job.v1', 'go', false), ('ov.py.job.v1', 'python', true)`); err != nil {
		t.Fatal(err)
	}
	claim := func(prefixes, types []string) []string {
		t.Helper()
		got, err := b.eng.ClaimRuns(b.ctx, engine.ClaimParams{
			WorkerID: "w1", TypePrefixes: prefixes, Types: types, Runtime: "go", Limit: 100,
			LeaseDuration: 30 * time.Second,
		})
		if err != nil {
			t.Fatalf("claim %v %v: %v", prefixes, types, err)
		}
		var ids []string
		for _, c := range got {
			ids = append(ids, c.ID)
		}
		return ids
	}
	release := func(ids []string) {
		t.Helper()
		if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_run
			set status = 'pending', attempt = 0, leased_by = null, lease_until = null
			where id = any ($1::uuid[])`, ids); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name            string
		prefixes, types []string
	}{
		{"overlapping prefixes", []string{"ov.", "ov.a.", "ov.a.job."}, nil},
		{"a type named twice and one more", []string{"ov."}, []string{"ov.b.job.v1", "ov.a.job.v1", "ov.b.job.v1", "ov.off.job.v1"}},
		{"types without prefixes", nil, []string{"ov.a.job.v1", "ov.a.job.v1", "ov.b.job.v1", "ov.py.job.v1"}},
	} {
		got := claim(c.prefixes, c.types)
		if !slices.Equal(got, want) {
			t.Errorf("%s: claimed %v, want %v in claim order", c.name, got, want)
		}
		release(got)
	}
	// Every type: the same runs and the bystander of the default namespace
	// the registry does not hold back.
	got := claim(nil, nil)
	if !slices.Equal(got, append(append([]string{}, want...), bystanders[0])) {
		t.Errorf("every type: claimed %v, want %v and %s", got, want, bystanders[0])
	}
	for _, id := range bystanders[1:] {
		var status string
		if err := b.pool.QueryRow(b.ctx, "select status from workflow.workflow_run where id = $1", id).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if status != "pending" {
			t.Errorf("bystander %s is %s, want pending", id, status)
		}
	}
}
