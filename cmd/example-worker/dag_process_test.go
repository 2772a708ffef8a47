package main

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// stepRun is what the test reads of one step's run.
type stepRun struct {
	status, leasedBy        string
	attempt, starts         int
	created, started, ended time.Time
	result                  json.RawMessage
}

func stepRuns(t *testing.T, client *simpleworkflow.Client, parent string) map[string]stepRun {
	t.Helper()
	rows, err := client.Pool().Query(context.Background(), `
        select c.parent_step, c.status, coalesce(c.leased_by, ''), c.attempt, c.created_at,
               coalesce(c.started_at, 'epoch'), coalesce(c.finished_at, 'epoch'), c.result,
               (select count(*) from workflow.run_event e where e.workflow_id = c.id and e.event_type = 'started')
        from workflow.workflow_run c where c.parent_id = $1`, parent)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]stepRun{}
	for rows.Next() {
		var name string
		var s stepRun
		if err := rows.Scan(&name, &s.status, &s.leasedBy, &s.attempt, &s.created, &s.started, &s.ended, &s.result, &s.starts); err != nil {
			t.Fatal(err)
		}
		out[name] = s
	}
	return out
}

// DAG workflows with no operator running, defined and started with plain
// SQL: a diamond a → (b, c) → d whose b runs on the Python worker and the
// others on the Go worker runs in order, b and c together, results passed
// along; then a chain whose middle step's worker is SIGKILLed mid-step: the
// step is retried by another worker, the finished step is not run again, and
// the workflow completes.
func TestDAGAcrossRuntimesAndAKill(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	url := pgtest.NewDatabase(t)
	client := connect(t, url)
	ctx := context.Background()
	if _, err := client.Pool().Exec(ctx, `
        insert into workflow.workflow_registry (workflow_name, runtime) values ('demo.echo.v1', 'go'), ('demo.sleep.v1', 'python');
        insert into workflow.workflow_registry (workflow_name, definition) values
          ('demo.diamond.v1', '{"steps": [
              {"name": "a", "type": "demo.echo.v1"},
              {"name": "b", "type": "demo.sleep.v1", "dependsOn": ["a"], "payload": {"seconds": 1}},
              {"name": "c", "type": "demo.echo.v1", "dependsOn": ["a"], "payload": {"tag": "c"}},
              {"name": "d", "type": "demo.echo.v1", "dependsOn": ["b", "c"]}]}'),
          ('demo.chain.v1', '{"steps": [
              {"name": "first", "type": "demo.echo.v1"},
              {"name": "slow", "type": "demo.sleep.v1", "dependsOn": ["first"], "payload": {"seconds": 4}, "maxAttempts": 3},
              {"name": "last", "type": "demo.echo.v1", "dependsOn": ["slow"]}]}')`); err != nil {
		t.Fatal(err)
	}
	startWorker(t, bin, url, "go-dag")
	py := startPythonWorker(t, url, "py-dag")

	var diamond string
	if err := client.Pool().QueryRow(ctx, `insert into workflow.workflow_run (type, payload)
        values ('demo.diamond.v1', '{"orderId": 7}') returning id`).Scan(&diamond); err != nil {
		t.Fatal(err)
	}
	var run *simpleworkflow.Run
	waitFor(t, 60*time.Second, "the diamond to succeed", func() bool {
		r, err := client.Get(ctx, diamond)
		run = r
		return err == nil && r.Status == simpleworkflow.StatusSucceeded
	})
	steps := stepRuns(t, client, diamond)
	for name, want := range map[string]string{"a": "go-dag", "b": "py-dag", "c": "go-dag", "d": "go-dag"} {
		if steps[name].leasedBy != want || steps[name].status != "succeeded" {
			t.Fatalf("step %s: %s by %q, want succeeded by %s", name, steps[name].status, steps[name].leasedBy, want)
		}
	}
	if !steps["b"].created.Equal(steps["c"].created) || !steps["c"].started.Before(steps["b"].ended) {
		t.Fatalf("b and c did not run together: b %v–%v, c %v–%v", steps["b"].started, steps["b"].ended, steps["c"].started, steps["c"].ended)
	}
	if !steps["a"].ended.Before(steps["b"].started) || steps["d"].started.Before(steps["b"].ended) {
		t.Fatal("dependency order broken")
	}
	var result struct {
		Steps map[string]struct {
			OrderID int                        `json:"orderId"`
			Steps   map[string]json.RawMessage `json:"steps"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(run.Result, &result); err != nil || len(result.Steps) != 4 {
		t.Fatalf("result %s", run.Result)
	}
	// d echoes its payload: the run's orderId and the results of b and c.
	if d := result.Steps["d"]; d.OrderID != 7 || len(d.Steps) != 2 || d.Steps["b"] == nil || d.Steps["c"] == nil {
		t.Fatalf("d's result %s", run.Result)
	}

	// A worker SIGKILLed mid-step.
	var chain string
	if err := client.Pool().QueryRow(ctx, `insert into workflow.workflow_run (type) values ('demo.chain.v1') returning id`).Scan(&chain); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the slow step to run on Python", func() bool {
		return stepRuns(t, client, chain)["slow"].status == "leased"
	})
	if err := py.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	startPythonWorker(t, url, "py-dag-2")
	waitFor(t, 60*time.Second, "the chain to succeed", func() bool {
		r, err := client.Get(ctx, chain)
		return err == nil && r.Status == simpleworkflow.StatusSucceeded
	})
	steps = stepRuns(t, client, chain)
	if s := steps["slow"]; s.attempt != 2 || s.leasedBy != "py-dag-2" || s.starts != 2 {
		t.Fatalf("slow step: attempt %d by %s after %d starts, want attempt 2 by py-dag-2", s.attempt, s.leasedBy, s.starts)
	}
	if s := steps["first"]; s.starts != 1 || s.attempt != 1 {
		t.Fatalf("the finished step ran again: %d starts", s.starts)
	}
}
