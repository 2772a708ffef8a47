package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// A worker that completes a DAG step starts the next one itself, in the
// completion's transaction, and a durable parent woken by its child's end
// resumes on the worker that ended the child, the same way; a worker that
// polls once an hour finishes both at once. The steps run in order, each
// once.
func TestChainStepsHandOffToTheWorkerThatEndedTheStepBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	eng, err := engine.New(b.client.Pool())
	if err != nil {
		t.Fatal(err)
	}
	const steps = 6
	chain := make([]engine.DAGStepDefinition, steps)
	for i := range chain {
		chain[i] = engine.DAGStepDefinition{Name: fmt.Sprintf("s%d", i), Type: "ho.step.v1"}
		if i > 0 {
			chain[i].DependsOn = []string{chain[i-1].Name}
		}
	}
	if err := eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "ho.chain.v1", Enabled: true,
		Definition: &engine.DAGDefinition{Steps: chain}}); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	stop := b.startPoller(t, simpleworkflow.PollerConfig{WorkerID: "ho-worker", TypePrefixes: []string{"ho."},
		PollInterval: time.Hour}, map[string]simpleworkflow.HandlerFunc{
		"ho.step.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			calls.Add(1)
			return json.RawMessage(`{"ok": true}`), nil
		},
		"ho.parent.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			if _, err := task.StartChild(ctx, "child", "ho.child.v1", nil); err != nil {
				return nil, err
			}
			return task.AwaitChild(ctx, "child")
		},
		"ho.child.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			// Ends once its parent waits for it, so that the parent resumes.
			for {
				var waits bool
				if err := b.client.Pool().QueryRow(ctx, `select coalesce(bool_or(p.wait_kind = 'child'), false)
					from workflow.workflow_run c join workflow.workflow_run p on p.id = c.parent_id
					where c.id = $1`, task.ID).Scan(&waits); err != nil || waits {
					return json.RawMessage(`"from the child"`), err
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
		},
	})
	defer stop()

	dag, err := b.client.Create(b.ctx, "ho.chain.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := b.client.Create(b.ctx, "ho.parent.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, dag.ID, simpleworkflow.StatusSucceeded, 30*time.Second)
	b.waitStatus(t, parent.ID, simpleworkflow.StatusSucceeded, 30*time.Second)
	if got := calls.Load(); got != steps {
		t.Fatalf("the step handler ran %d times, want %d", got, steps)
	}

	var ids []string
	rows, err := b.client.Pool().Query(b.ctx, `select id::text from workflow.workflow_run
		where parent_id = $1 order by created_at, id`, dag.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil || len(ids) != steps {
		t.Fatalf("step runs %v (%v), want %d", ids, err, steps)
	}
	for i := 1; i < steps; i++ {
		if !pgtest.StartedWith(b.ctx, t, b.client.Pool(), ids[i-1], ids[i]) {
			t.Errorf("step s%d was not started by the transaction that ended s%d", i, i-1)
		}
	}
	var child string
	if err := b.client.Pool().QueryRow(b.ctx, `select id::text from workflow.workflow_run where parent_id = $1`,
		parent.ID).Scan(&child); err != nil {
		t.Fatal(err)
	}
	if !pgtest.StartedWith(b.ctx, t, b.client.Pool(), child, parent.ID) {
		t.Error("the parent did not resume in the transaction that ended its child")
	}
}
