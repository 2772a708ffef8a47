// Command bench measures the inbox: burn-down throughput (N no-op runs worked
// by W concurrent handlers) and pickup latency (one insert on an idle queue to
// handler start). It uses DATABASE_URL when set, else a throwaway Postgres
// started with hack/pg.sh, and prints these lines:
//
//	engine burn-down: N runs in S s = X runs/s (workers=W)
//	engine steps: N runs x S steps in T s = X steps/s (workers=W)
//	engine dag chain: N runs x 10 steps in T s = X steps/s; one chain alone: Y ms per step
//	engine dag fan-out: N runs x 100 steps in T s = X steps/s
//	engine pickup latency: p50=... p90=... p99=... (n=K)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type config struct {
	runs        int
	pollers     int
	concurrency int
	batch       int
	latencyN    int
	stepRuns    int
	steps       int
	dagRuns     int
}

func run() error {
	var cfg config
	flag.IntVar(&cfg.runs, "runs", 50000, "runs to burn down")
	flag.IntVar(&cfg.pollers, "pollers", 4, "pollers (each with its own listen connection)")
	flag.IntVar(&cfg.concurrency, "concurrency", 512, "handlers per poller")
	flag.IntVar(&cfg.batch, "claim-batch", 500, "runs claimed per call")
	flag.IntVar(&cfg.latencyN, "latency-samples", 200, "single inserts timed for pickup latency")
	flag.IntVar(&cfg.stepRuns, "step-runs", 5000, "runs of the step workflow")
	flag.IntVar(&cfg.steps, "steps", 10, "no-op steps per run of the step workflow")
	flag.IntVar(&cfg.dagRuns, "dag-runs", 300, "runs of the 10-step DAG chain (a tenth as many 100-step fan-outs)")
	flag.Parse()

	ctx := context.Background()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		os.Setenv("PG_FSYNC", "on") // measure with durable commits
		u, stop, err := pgtest.StartServer(ctx)
		if err != nil {
			return err
		}
		defer stop()
		url = u
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(4 + 2*cfg.pollers)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := engine.Migrate(ctx, pool); err != nil {
		return err
	}
	// Start from an empty inbox so earlier runs do not skew the numbers.
	if _, err := pool.Exec(ctx, "delete from workflow.workflow_run where type like 'bench.%'"); err != nil {
		return err
	}
	client, err := simpleworkflow.NewClient(pool)
	if err != nil {
		return err
	}
	if err := burnDown(ctx, pool, client, cfg); err != nil {
		return err
	}
	if err := stepThroughput(ctx, pool, client, cfg); err != nil {
		return err
	}
	if err := dagThroughput(ctx, pool, client, cfg); err != nil {
		return err
	}
	return pickupLatency(ctx, client, cfg)
}

// startPollers runs cfg.pollers pollers with handler until the returned stop
// function is called.
func startPollers(ctx context.Context, client *simpleworkflow.Client, cfg config, prefix string, h simpleworkflow.HandlerFunc, typ string) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range cfg.pollers {
		p, err := simpleworkflow.NewPoller(client, simpleworkflow.PollerConfig{
			TypePrefixes:   []string{prefix},
			WorkerID:       fmt.Sprintf("bench-%d", i),
			Concurrency:    cfg.concurrency,
			ClaimBatchSize: min(cfg.batch, cfg.concurrency),
			Logger:         slog.New(slog.DiscardHandler),
		})
		if err != nil {
			cancel()
			return nil, err
		}
		if err := p.Handle(typ, h); err != nil {
			cancel()
			return nil, err
		}
		wg.Go(func() { _ = p.Run(ctx) })
	}
	return func() { cancel(); wg.Wait() }, nil
}

func burnDown(ctx context.Context, pool *pgxpool.Pool, client *simpleworkflow.Client, cfg config) error {
	if _, err := pool.Exec(ctx, `insert into workflow.workflow_run (type, payload)
		select 'bench.noop.v1', '{}'::jsonb from generate_series(1, $1)`, cfg.runs); err != nil {
		return fmt.Errorf("create runs: %w", err)
	}
	if _, err := pool.Exec(ctx, "vacuum analyze workflow.workflow_run"); err != nil {
		return err
	}
	var handled atomic.Int64
	noop := func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
		handled.Add(1)
		return nil, nil
	}
	start := time.Now()
	stop, err := startPollers(ctx, client, cfg, "bench.noop.", noop, "bench.noop.v1")
	if err != nil {
		return err
	}
	defer stop()
	// Watch the handler counter first, so that measuring does not compete
	// with the workers for the database; then wait for the last writes.
	for handled.Load() < int64(cfg.runs) && time.Since(start) < 10*time.Minute {
		time.Sleep(time.Millisecond)
	}
	for {
		var left int
		if err := pool.QueryRow(ctx, `select count(*) from workflow.workflow_run
			where type = 'bench.noop.v1' and status <> 'succeeded'`).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return fmt.Errorf("burn-down did not finish in 10 minutes (%d left)", left)
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	fmt.Printf("engine burn-down: %d runs in %.2f s = %.0f runs/s (workers=%d)\n",
		cfg.runs, elapsed.Seconds(), float64(cfg.runs)/elapsed.Seconds(), cfg.pollers*cfg.concurrency)
	return nil
}

func pickupLatency(ctx context.Context, client *simpleworkflow.Client, cfg config) error {
	var mu sync.Mutex
	startedAt := map[string]time.Time{}
	h := func(_ context.Context, t *simpleworkflow.Task) (json.RawMessage, error) {
		now := time.Now()
		mu.Lock()
		startedAt[t.ID] = now
		mu.Unlock()
		return nil, nil
	}
	lcfg := cfg
	lcfg.pollers = 1
	stop, err := startPollers(ctx, client, lcfg, "bench.latency.", h, "bench.latency.v1")
	if err != nil {
		return err
	}
	defer stop()
	time.Sleep(500 * time.Millisecond) // let the poller connect and go idle
	var samples []time.Duration
	for i := range cfg.latencyN {
		t0 := time.Now()
		res, err := client.Create(ctx, "bench.latency.v1", nil, nil)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			at, ok := startedAt[res.ID]
			mu.Unlock()
			if ok {
				samples = append(samples, at.Sub(t0))
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("sample %d: run not started within 5s", i)
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(10 * time.Millisecond) // idle queue between samples
	}
	slices.Sort(samples)
	q := func(p float64) time.Duration {
		return samples[min(len(samples)-1, int(p*float64(len(samples))))].Round(10 * time.Microsecond)
	}
	fmt.Printf("engine pickup latency: p50=%s p90=%s p99=%s (n=%d)\n", q(0.50), q(0.90), q(0.99), len(samples))
	return nil
}
