package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// stepThroughput measures durable steps: cfg.stepRuns runs of a workflow of
// cfg.steps no-op steps, every step journaled, worked by the same pollers as
// the burn-down. It prints
//
//	engine steps: N runs x S steps in T s = X steps/s (workers=W)
//
// It returns the steps per second. The previous round's runs are deleted
// first.
func stepThroughput(ctx context.Context, pool *pgxpool.Pool, client *simpleworkflow.Client, cfg config) (float64, error) {
	if _, err := pool.Exec(ctx, "delete from workflow.workflow_run where type = 'bench.steps.v1'"); err != nil {
		return 0, fmt.Errorf("delete the previous round's runs: %w", err)
	}
	if _, err := pool.Exec(ctx, `insert into workflow.workflow_run (type, payload)
		select 'bench.steps.v1', '{}'::jsonb from generate_series(1, $1)`, cfg.stepRuns); err != nil {
		return 0, fmt.Errorf("create runs: %w", err)
	}
	if _, err := pool.Exec(ctx, "vacuum analyze workflow.workflow_run"); err != nil {
		return 0, err
	}
	names := make([]string, cfg.steps)
	for i := range names {
		names[i] = "step-" + strconv.Itoa(i)
	}
	var finished atomic.Int64
	workflow := func(ctx context.Context, t *simpleworkflow.Task) (json.RawMessage, error) {
		for _, name := range names {
			if _, err := t.Step(ctx, name, func(context.Context) (json.RawMessage, error) {
				return json.RawMessage(`{}`), nil
			}); err != nil {
				return nil, err
			}
		}
		finished.Add(1)
		return nil, nil
	}
	start := time.Now()
	stop, err := startPollers(ctx, client, cfg, "bench.steps.", workflow, "bench.steps.v1")
	if err != nil {
		return 0, err
	}
	defer stop()
	for finished.Load() < int64(cfg.stepRuns) && time.Since(start) < 10*time.Minute {
		time.Sleep(time.Millisecond)
	}
	for {
		var left int
		// The unfinished runs through idx_workflow_run_depth: the
		// burn-downs' runs, still in the table, cost the count nothing.
		if err := pool.QueryRow(ctx, `select count(*) from workflow.workflow_run
			where type_namespace = 'default' and type collate "C" = 'bench.steps.v1'
			  and status in ('pending', 'leased') and deleted_at is null`).Scan(&left); err != nil {
			return 0, err
		}
		if left == 0 {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return 0, fmt.Errorf("step benchmark did not finish in 10 minutes (%d runs left)", left)
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	var failed int
	if err := pool.QueryRow(ctx, `select count(*) from workflow.workflow_run
		where type = 'bench.steps.v1' and status <> 'succeeded'`).Scan(&failed); err != nil {
		return 0, err
	}
	if failed > 0 {
		return 0, fmt.Errorf("step benchmark: %d runs did not succeed", failed)
	}
	var journaled int
	if err := pool.QueryRow(ctx, `select count(*) from workflow.workflow_step s
		join workflow.workflow_run r on r.id = s.run_id where r.type = 'bench.steps.v1'`).Scan(&journaled); err != nil {
		return 0, err
	}
	if journaled != cfg.stepRuns*cfg.steps {
		return 0, fmt.Errorf("step benchmark: %d steps journaled, want %d", journaled, cfg.stepRuns*cfg.steps)
	}
	total := cfg.stepRuns * cfg.steps
	fmt.Printf("engine steps: %d runs x %d steps in %.2f s = %.0f steps/s (workers=%d)\n",
		cfg.stepRuns, cfg.steps, elapsed.Seconds(), float64(total)/elapsed.Seconds(), cfg.pollers*cfg.concurrency)
	return float64(total) / elapsed.Seconds(), nil
}
