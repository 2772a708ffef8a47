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

// stampedArgs is the soak's job: it carries when it was inserted, so the
// worker can tell its pickup latency.
type stampedArgs struct {
	InsertedAt int64 `json:"t"` // Unix nanoseconds
}

// Kind names the job kind.
func (stampedArgs) Kind() string { return "soak_noop" }

// stampedWorker counts the jobs it starts and keeps their pickup latencies
// until they are taken.
type stampedWorker struct {
	river.WorkerDefaults[stampedArgs]
	started   atomic.Int64
	mu        sync.Mutex
	latencies []time.Duration
}

// Work records the job's pickup latency and returns at once.
func (w *stampedWorker) Work(_ context.Context, job *river.Job[stampedArgs]) error {
	lat := time.Since(time.Unix(0, job.Args.InsertedAt))
	w.started.Add(1)
	w.mu.Lock()
	w.latencies = append(w.latencies, lat)
	w.mu.Unlock()
	return nil
}

// take returns the latencies recorded since the last call, sorted.
func (w *stampedWorker) take() []time.Duration {
	w.mu.Lock()
	l := w.latencies
	w.latencies = nil
	w.mu.Unlock()
	slices.Sort(l)
	return l
}

// soakMinute is one reporting interval of the soak.
type soakMinute struct {
	perSecond  float64
	p50, p99   time.Duration
	bytes      int64
	live, dead int64
	elapsed    time.Duration
}

// soak inserts stamped jobs at cfg.rate per second for cfg.duration, in a
// batch every 10 ms as hack/soak does for the engine, with cfg.clients
// clients of cfg.workers each, River's job cleaner deleting completed jobs
// older than cfg.retention, and prints a line every cfg.interval:
//
//	river soak 1m0s: X jobs/s, pickup p50=... p99=..., river_job T+I MiB (live L, dead D)
//
// then the verdict line hack/soak reads:
//
//	river soak verdict: throughput last/first 1.00x, pickup p99 first=...  worst minute 1.20x first, river_job last/settled 1.01x
func soak(ctx context.Context, pool *pgxpool.Pool, cfg config) error {
	w := &stampedWorker{}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, w); err != nil {
		return fmt.Errorf("add worker: %w", err)
	}
	clients := make([]*river.Client[pgx.Tx], cfg.clients)
	for i := range clients {
		c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			Queues:                      map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.workers}},
			FetchCooldown:               cfg.fetchCooldown,
			FetchPollInterval:           cfg.fetchPoll,
			CompletedJobRetentionPeriod: cfg.retention,
			Workers:                     workers,
			Logger:                      slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return fmt.Errorf("river client: %w", err)
		}
		if err := c.Start(ctx); err != nil {
			return fmt.Errorf("start client: %w", err)
		}
		defer stopClient(c)
		clients[i] = c
	}
	fmt.Printf("river soak: %.0f jobs/s for %s, completed jobs kept %s (River's job cleaner, every 30s), %d clients of %d workers, a line every %s\n",
		cfg.rate, cfg.duration, cfg.retention, cfg.clients, cfg.workers, cfg.interval)

	lctx, stop := context.WithTimeout(ctx, cfg.duration)
	defer stop()
	produced := make(chan error, 1)
	go func() { produced <- produceJobs(lctx, clients[0], cfg.rate) }()

	var minutes []soakMinute
	begin := time.Now()
	last, lastAt := w.started.Load(), begin
	tick := time.NewTicker(cfg.interval)
	defer tick.Stop()
	for lctx.Err() == nil {
		select {
		case <-lctx.Done():
		case <-tick.C:
		}
		now, at := w.started.Load(), time.Now()
		lat := w.take()
		m := soakMinute{elapsed: at.Sub(begin).Round(time.Second), perSecond: float64(now-last) / at.Sub(lastAt).Seconds(),
			p50: quantile(lat, 0.5), p99: quantile(lat, 0.99)}
		last, lastAt = now, at
		var table, indexes int64
		if err := pool.QueryRow(ctx, `select pg_table_size('river_job'), pg_indexes_size('river_job'),
			coalesce((select n_live_tup from pg_stat_user_tables where relid = 'river_job'::regclass), 0),
			coalesce((select n_dead_tup from pg_stat_user_tables where relid = 'river_job'::regclass), 0)`).
			Scan(&table, &indexes, &m.live, &m.dead); err != nil {
			return fmt.Errorf("read river_job's size: %w", err)
		}
		m.bytes = table + indexes
		minutes = append(minutes, m)
		fmt.Printf("river soak %s: %.0f jobs/s, pickup p50=%s p99=%s, river_job %.1f+%.1f MiB (live %d, dead %d)\n",
			m.elapsed, m.perSecond, m.p50, m.p99, float64(table)/(1<<20), float64(indexes)/(1<<20), m.live, m.dead)
	}
	if err := <-produced; err != nil {
		return err
	}
	printSoakVerdict(minutes, cfg.retention+30*time.Second+2*time.Minute)
	return nil
}

// printSoakVerdict prints how the last interval compares with the first
// (throughput), how the worst interval's p99 compares with the first's, and
// the table's mean size over the last intervals against the first ones
// after the retention window, a cleaner pass and two autovacuum rounds.
func printSoakVerdict(ms []soakMinute, settle time.Duration) {
	if len(ms) < 2 {
		fmt.Println("river soak verdict: too short to compare")
		return
	}
	first, final := ms[0], ms[len(ms)-1]
	worst := first.p99
	for _, m := range ms {
		worst = max(worst, m.p99)
	}
	// As hack/soak does for the engine: the mean of the last intervals
	// (ten, or half of those after settling) against as many first ones.
	sizes := "n/a"
	var settled []soakMinute
	for _, m := range ms {
		if m.elapsed > settle && m.bytes > 0 {
			settled = append(settled, m)
		}
	}
	if len(settled) >= 2 {
		k := min(10, len(settled)/2)
		sizes = fmt.Sprintf("%.2fx", meanBytes(settled[len(settled)-k:])/meanBytes(settled[:k]))
	}
	fmt.Printf("river soak verdict: throughput last/first %.2fx, pickup p99 first=%s worst minute %.2fx first, river_job last/settled %s\n",
		final.perSecond/first.perSecond, first.p99, worst.Seconds()/first.p99.Seconds(), sizes)
}

// meanBytes is the mean size of river_job over ms.
func meanBytes(ms []soakMinute) float64 {
	var sum float64
	for _, m := range ms {
		sum += float64(m.bytes)
	}
	return sum / float64(len(ms))
}

// produceJobs inserts stamped jobs at rate per second, in a batch every
// 10 ms, until ctx ends; a producer that falls behind catches up.
func produceJobs(ctx context.Context, c *river.Client[pgx.Tx], rate float64) error {
	start := time.Now()
	sent := 0
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	params := make([]river.InsertManyParams, 0, 1024)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		due := int(rate * time.Since(start).Seconds())
		if due <= sent {
			continue
		}
		now := time.Now().UnixNano()
		params = params[:0]
		for range due - sent {
			params = append(params, river.InsertManyParams{Args: stampedArgs{InsertedAt: now}})
		}
		if _, err := c.InsertManyFast(ctx, params); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("insert jobs: %w", err)
		}
		sent = due
	}
}

// quantile returns the q-quantile of sorted durations (0 when none),
// rounded to 10 µs; both measurements print it.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))].Round(10 * time.Microsecond)
}
