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

// A worker process SIGKILLed after step 2 of demo.order.v1: the next attempt,
// in another process, skips reserve and charge (each step body counts its
// executions in a table; every count is 1), sleeps durably, takes the
// approve signal sent with plain SQL, ships and finishes.
func TestOrderResumesAfterSIGKILLWithoutRerunningSteps(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	url := pgtest.NewDatabase(t)
	client := connect(t, url)
	ctx := context.Background()

	first := startWorker(t, bin, url, "order-a")
	res, err := client.Create(ctx, "demo.order.v1", map[string]any{
		"orderId": "o-7", "amount": 42, "sleepSeconds": 1, "approveTimeoutSeconds": 120,
		"counters": true, "holdAfterChargeSeconds": 60,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "order-a to record reserve and charge", func() bool {
		steps, err := client.Steps(ctx, res.ID)
		return err == nil && len(steps) == 2
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	// The approval is sent with plain SQL while no worker runs: buffered.
	if _, err := client.Pool().Exec(ctx, `select * from workflow.send_signal($1, 'approve', '{"by":"psql"}', 'approve-1')`, res.ID); err != nil {
		t.Fatal(err)
	}
	startWorker(t, bin, url, "order-b")
	var run *simpleworkflow.Run
	waitFor(t, 40*time.Second, "the order to succeed", func() bool {
		r, err := client.Get(ctx, res.ID)
		run = r
		return err == nil && r.Status == simpleworkflow.StatusSucceeded
	})
	if run.LeasedBy != "order-b" || run.Attempt != 2 {
		t.Fatalf("finished by %s at attempt %d, want order-b at attempt 2", run.LeasedBy, run.Attempt)
	}
	rows, err := client.Pool().Query(ctx, "select step, n from public.demo_step_counter where run_id = $1 order by step", res.ID)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for rows.Next() {
		var step string
		var n int
		if err := rows.Scan(&step, &n); err != nil {
			t.Fatal(err)
		}
		counts[step] = n
	}
	if counts["reserve"] != 1 || counts["charge"] != 1 || counts["ship"] != 1 || len(counts) != 3 {
		t.Fatalf("step executions %v, want each step once", counts)
	}
	var result struct {
		Reserve  map[string]any `json:"reserve"`
		Approval map[string]any `json:"approval"`
		Ship     map[string]any `json:"ship"`
	}
	if err := json.Unmarshal(run.Result, &result); err != nil || result.Approval["by"] != "psql" || result.Ship["shipped"] != true {
		t.Fatalf("result %s (%v)", run.Result, err)
	}
	steps, err := client.Steps(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range steps {
		names = append(names, s.Name+"/"+string(s.Kind))
	}
	want := []string{"reserve/step", "charge/step", "cool-off/sleep", "approve/signal", "ship/step"}
	if len(names) != len(want) {
		t.Fatalf("journal %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("journal %v, want %v", names, want)
		}
	}
}
