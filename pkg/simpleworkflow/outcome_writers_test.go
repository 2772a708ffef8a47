package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// A batch of outcomes that waits on a locked parent (its child's
// completion locks the parent first) does not hold up the outcomes of the
// worker's other runs: another writer records them meanwhile.
func TestOutcomesOfOtherRunsPassABatchWaitingOnAParent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var parent, child string
	if err := b.client.Pool().QueryRow(b.ctx, `insert into workflow.workflow_run (type) values ('owr.parent.v1')
		returning id::text`).Scan(&parent); err != nil {
		t.Fatal(err)
	}
	if err := b.client.Pool().QueryRow(b.ctx, `insert into workflow.workflow_run (type, parent_id, parent_step)
		values ('owr.child.v1', $1, 's') returning id::text`, parent).Scan(&child); err != nil {
		t.Fatal(err)
	}
	// Someone holds the parent's row, as a long transaction would.
	lock, err := b.client.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(b.ctx) }()
	if _, err := lock.Exec(b.ctx, `select 1 from workflow.workflow_run where id = $1 for update`, parent); err != nil {
		t.Fatal(err)
	}
	done := func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
		return simpleworkflow.JSONResult(true)
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"owr.child.", "owr.plain."},
		PollInterval: 50 * time.Millisecond},
		map[string]simpleworkflow.HandlerFunc{"owr.child.v1": done, "owr.plain.v1": done})

	// The child's outcome is being written and waits for the parent.
	waitFor(t, 30*time.Second, "the child's completion to wait on the parent's lock", func() (bool, error) {
		var waiting bool
		err := b.client.Pool().QueryRow(b.ctx, `select exists (select 1 from pg_stat_activity
			where datname = current_database() and wait_event_type = 'Lock' and query like '%complete_runs%')`).Scan(&waiting)
		return waiting, err
	})
	var ids []string
	for range 5 {
		r, err := b.client.Create(b.ctx, "owr.plain.v1", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	for _, id := range ids {
		b.waitStatus(t, id, simpleworkflow.StatusSucceeded, 15*time.Second)
	}
	if r, err := b.client.Get(b.ctx, child); err != nil || r.Status != simpleworkflow.StatusLeased {
		t.Fatalf("the child is %v (%v) while its parent is locked, want still leased", r.Status, err)
	}
	if err := lock.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, child, simpleworkflow.StatusSucceeded, 30*time.Second)
}
