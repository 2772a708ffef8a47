package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// dagThroughput measures DAG workflows orchestrated by the database: a
// 10-step chain and a 100-wide fan-out whose steps are no-op runs, worked by
// the same pollers as the burn-down. It prints
//
//	engine dag chain: N runs x 10 steps in T s = X steps/s; one chain alone: Y ms per step
//	engine dag fan-out: N runs x 100 steps in T s = X steps/s
//
// "One chain alone" is the latency of a step of a lone chain, from the end of
// its dependency to its own end: the orchestration's overhead per step plus
// a worker's pickup.
// It returns the figures it printed.
func dagThroughput(ctx context.Context, pool *pgxpool.Pool, client *simpleworkflow.Client, cfg config) (dagResult, error) {
	var out dagResult
	eng, err := engine.New(pool)
	if err != nil {
		return out, err
	}
	chain := make([]engine.DAGStepDefinition, 10)
	for i := range chain {
		chain[i] = engine.DAGStepDefinition{Name: fmt.Sprintf("s%d", i), Type: "bench.dagstep.v1"}
		if i > 0 {
			chain[i].DependsOn = []string{chain[i-1].Name}
		}
	}
	fan := make([]engine.DAGStepDefinition, 100)
	for i := range fan {
		fan[i] = engine.DAGStepDefinition{Name: fmt.Sprintf("f%d", i), Type: "bench.dagstep.v1"}
	}
	for name, steps := range map[string][]engine.DAGStepDefinition{"bench.dag.chain.v1": chain, "bench.dag.fan.v1": fan} {
		if err := eng.UpsertRegistryEntry(ctx, engine.RegistryEntry{WorkflowName: name, Enabled: true,
			Definition: &engine.DAGDefinition{Steps: steps}}); err != nil {
			return out, err
		}
	}
	// Steps handled, watched before the database is asked whether the
	// DAGs ended, so that measuring does not compete with the workers for
	// the database (as in the burn-down).
	var handled atomic.Int64
	noop := func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
		handled.Add(1)
		return nil, nil
	}
	stop, err := startPollers(ctx, client, cfg, "bench.dagstep.", noop, "bench.dagstep.v1")
	if err != nil {
		return out, err
	}
	defer stop()

	// One chain alone, for the per-step latency: the median of five lone
	// chains, each started once the one before ended, after a first one
	// that is not counted, so that the pollers' connections have planned
	// the statements a step runs (a worker's connections have, once it has
	// run a while; a chain on fresh connections measures the planning).
	var lone []float64
	for i := range 6 {
		want := handled.Load() + 10
		res, err := client.Create(ctx, "bench.dag.chain.v1", nil, nil)
		if err != nil {
			return out, err
		}
		if err := waitDAGs(ctx, pool, []string{"bench.dag.chain.v1"}, &handled, want); err != nil {
			return out, err
		}
		var ms float64
		if err := pool.QueryRow(ctx, `select extract(epoch from (p.finished_at - min(c.created_at))) * 1000 / count(*)
			from workflow.workflow_run p join workflow.workflow_run c on c.parent_id = p.id
			where p.id = $1 group by p.finished_at`, res.ID).Scan(&ms); err != nil {
			return out, err
		}
		if i > 0 {
			lone = append(lone, ms)
		}
	}
	slices.Sort(lone)
	perStep := lone[len(lone)/2]

	for _, b := range []struct {
		typ, label  string
		runs, steps int
	}{
		{"bench.dag.chain.v1", "chain", cfg.dagRuns, 10},
		{"bench.dag.fan.v1", "fan-out", max(1, cfg.dagRuns/10), 100},
	} {
		start := time.Now()
		want := handled.Load() + int64(b.runs*b.steps)
		if _, err := pool.Exec(ctx, `insert into workflow.workflow_run (type)
			select $1 from generate_series(1, $2)`, b.typ, b.runs); err != nil {
			return out, fmt.Errorf("create %s runs: %w", b.typ, err)
		}
		if err := waitDAGs(ctx, pool, []string{b.typ}, &handled, want); err != nil {
			return out, err
		}
		elapsed := time.Since(start)
		total := b.runs * b.steps
		line := fmt.Sprintf("engine dag %s: %d runs x %d steps in %.2f s = %.0f steps/s", b.label, b.runs, b.steps,
			elapsed.Seconds(), float64(total)/elapsed.Seconds())
		if b.label == "chain" {
			line += fmt.Sprintf("; one chain alone: %.1f ms per step", perStep)
			out.chain, out.perStepMs = float64(total)/elapsed.Seconds(), perStep
		} else {
			out.fanout = float64(total) / elapsed.Seconds()
		}
		fmt.Println(line)
	}
	return out, nil
}

// dagResult is what one DAG measurement found: steps per second of the
// concurrent chains and of the fan-outs, and the lone chain's ms per step.
type dagResult struct {
	chain, perStepMs, fanout float64
}

// waitDAGs waits until no run of the given types is unfinished, and fails
// if one did not succeed. Until handled counts want steps it asks the
// database only every 250 ms (a DAG that failed ends the wait); then every
// 2 ms, for the last completions.
func waitDAGs(ctx context.Context, pool *pgxpool.Pool, types []string, handled *atomic.Int64, want int64) error {
	deadline := time.Now().Add(10 * time.Minute)
	lastAsked := time.Now()
	for handled.Load() < want {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Since(lastAsked) >= 250*time.Millisecond {
			lastAsked = time.Now()
			var bad int
			// (dag is not null: through idx_workflow_run_dag, the DAG runs
			// alone, so that a history of other runs costs the check nothing)
			if err := pool.QueryRow(ctx, `select count(*) from workflow.workflow_run
				where dag is not null and type = any ($1) and status in ('failed', 'cancelled')`, types).Scan(&bad); err != nil {
				return err
			}
			if bad > 0 {
				return fmt.Errorf("%d DAG runs of %v did not succeed", bad, types)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("DAG runs of %v: %d of their steps ran in 10 minutes, want %d", types, handled.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
	for {
		var open, bad int
		if err := pool.QueryRow(ctx, `select count(*) filter (where status in ('pending', 'leased')),
			count(*) filter (where status in ('failed', 'cancelled'))
			from workflow.workflow_run where dag is not null and type = any ($1)`, types).Scan(&open, &bad); err != nil {
			return err
		}
		if bad > 0 {
			return fmt.Errorf("%d DAG runs of %v did not succeed", bad, types)
		}
		if open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("DAG runs of %v did not finish in 10 minutes (%d left)", types, open)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
