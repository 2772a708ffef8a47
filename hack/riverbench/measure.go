package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// noopArgs is the job of both measurements: no payload, no work.
type noopArgs struct{}

// Kind names the job kind.
func (noopArgs) Kind() string { return "bench_noop" }

// noopWorker counts the jobs it starts and records when each one started.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	handled   atomic.Int64
	mu        sync.Mutex
	startedAt map[int64]time.Time
}

// Work records the job's start and returns at once.
func (w *noopWorker) Work(_ context.Context, job *river.Job[noopArgs]) error {
	now := time.Now()
	w.handled.Add(1)
	if w.startedAt != nil {
		w.mu.Lock()
		w.startedAt[job.ID] = now
		w.mu.Unlock()
	}
	return nil
}

func newClient(pool *pgxpool.Pool, cfg config, w *noopWorker) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, w); err != nil {
		return nil, fmt.Errorf("add worker: %w", err)
	}
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.workers}},
		FetchCooldown:     cfg.fetchCooldown,
		FetchPollInterval: cfg.fetchPoll,
		Workers:           workers,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return c, nil
}

// The lines printed just before the burn-down's timed part begins and just
// after it ends.
const (
	timingBegins = "river burn-down: timing begins"
	timingEnds   = "river burn-down: timing ends"
)

func burnDown(ctx context.Context, pool *pgxpool.Pool, cfg config) error {
	w := &noopWorker{}
	clients := make([]*river.Client[pgx.Tx], cfg.clients)
	for i := range clients {
		c, err := newClient(pool, cfg, w)
		if err != nil {
			return err
		}
		clients[i] = c
	}
	params := make([]river.InsertManyParams, 0, 10000)
	for left := cfg.jobs; left > 0; left -= len(params) {
		params = params[:0]
		for range min(left, cap(params)) {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := clients[0].InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, "vacuum analyze river_job"); err != nil {
		return fmt.Errorf("vacuum river_job: %w", err)
	}
	wal0, err := walPosition(ctx, pool)
	if err != nil {
		return err
	}
	// The lines around the timed part let the parent read the processor
	// time the server and this process use in it.
	fmt.Println(timingBegins)
	start := time.Now()
	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			return fmt.Errorf("start client: %w", err)
		}
		defer stopClient(c)
	}
	// As for the engine: watch the handler counter first, so that measuring
	// does not compete with the workers for the database; then wait for the
	// last completions to be written.
	for w.handled.Load() < int64(cfg.jobs) && time.Since(start) < 10*time.Minute {
		time.Sleep(time.Millisecond)
	}
	for {
		var left int
		if err := pool.QueryRow(ctx, "select count(*) from river_job where state <> 'completed'").Scan(&left); err != nil {
			return fmt.Errorf("count unfinished jobs: %w", err)
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
	fmt.Println(timingEnds)
	wal1, err := walPosition(ctx, pool)
	if err != nil {
		return err
	}
	who := "river"
	if cfg.clients > 1 {
		who = fmt.Sprintf("river (%d clients)", cfg.clients)
	}
	fmt.Printf("%s burn-down: %d jobs in %.2f s = %.0f jobs/s (workers=%d)\n",
		who, cfg.jobs, elapsed.Seconds(), float64(cfg.jobs)/elapsed.Seconds(), cfg.clients*cfg.workers)
	fmt.Printf("river burn-down WAL: %d bytes in all\n", wal1-wal0)
	return nil
}

func pickupLatency(ctx context.Context, pool *pgxpool.Pool, cfg config) error {
	w := &noopWorker{startedAt: map[int64]time.Time{}}
	client, err := newClient(pool, cfg, w)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("start client: %w", err)
	}
	defer stopClient(client)
	time.Sleep(500 * time.Millisecond) // let the client connect and go idle
	var samples, inserts []time.Duration
	for i := range cfg.samples {
		t0 := time.Now()
		res, err := client.Insert(ctx, noopArgs{}, nil)
		if err != nil {
			return fmt.Errorf("insert job: %w", err)
		}
		inserts = append(inserts, time.Since(t0))
		deadline := time.Now().Add(5 * time.Second)
		for {
			w.mu.Lock()
			at, ok := w.startedAt[res.Job.ID]
			w.mu.Unlock()
			if ok {
				samples = append(samples, at.Sub(t0))
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("sample %d: job not started within 5s", i)
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(10 * time.Millisecond) // idle queue between samples
	}
	slices.Sort(samples)
	slices.Sort(inserts)
	// Where the time goes, as the engine's measurement prints it: the
	// insert's round trip (its commit included), then the rest.
	fmt.Printf("river pickup: insert p50=%s of p50=%s\n", quantile(inserts, 0.5), quantile(samples, 0.5))
	fmt.Printf("river pickup latency: p50=%s p90=%s p99=%s (n=%d)\n", quantile(samples, 0.50), quantile(samples, 0.90), quantile(samples, 0.99), len(samples))
	return nil
}

// walPosition returns the server's current WAL insert position in bytes.
func walPosition(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var lsn int64
	if err := pool.QueryRow(ctx, "select (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").Scan(&lsn); err != nil {
		return 0, fmt.Errorf("read the WAL position: %w", err)
	}
	return lsn, nil
}

func stopClient(c *river.Client[pgx.Tx]) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.Stop(ctx)
}
