// Command riverbench measures River (github.com/riverqueue/river), the peer
// the engine is compared with in make bench, the same way hack/bench measures
// the engine: burn-down (N no-op jobs inserted at once, timed from the
// client's start until every job is completed in the database) and pickup
// latency (one insert on an idle queue to the handler's start). It migrates
// the database named by DATABASE_URL with rivermigrate, runs one measurement
// (-mode) and prints one of these lines:
//
//	river burn-down: N jobs in S s = X jobs/s (workers=W)
//	river (C clients) burn-down: N jobs in S s = X jobs/s (workers=W)
//	river burn-down WAL: B bytes in all
//	river pickup latency: p50=... p90=... p99=... (n=K)
//
// or, with -mode soak, a line a minute under a steady load and a verdict
// (soak.go), which hack/soak prints beside the engine's.
//
// hack/bench builds and runs it against a database of its own beside the
// engine's; it lives in a module of its own so that the project's go.mod does
// not carry River.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type config struct {
	mode          string
	jobs          int
	workers       int
	clients       int
	conns         int
	fetchCooldown time.Duration
	fetchPoll     time.Duration
	samples       int
	rate          float64
	duration      time.Duration
	interval      time.Duration
	retention     time.Duration
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg config
	flag.StringVar(&cfg.mode, "mode", "burn-down", "what to measure: burn-down, pickup or soak")
	flag.IntVar(&cfg.jobs, "jobs", 50000, "jobs to burn down")
	flag.IntVar(&cfg.workers, "workers", 1000, "River MaxWorkers of the queue, per client")
	flag.IntVar(&cfg.clients, "clients", 1, "River clients working the queue (burn-down), as several worker processes would; they share the pool")
	flag.IntVar(&cfg.conns, "conns", 12, "connections in the pool (hack/bench gives the engine 4 + 2 per poller)")
	flag.DurationVar(&cfg.fetchCooldown, "fetch-cooldown", 2*time.Millisecond, "River FetchCooldown")
	flag.DurationVar(&cfg.fetchPoll, "fetch-poll", 20*time.Millisecond, "River FetchPollInterval")
	flag.IntVar(&cfg.samples, "latency-samples", 200, "single inserts timed for pickup latency")
	flag.Float64Var(&cfg.rate, "rate", 1000, "soak: jobs inserted per second")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Minute, "soak: how long the steady load runs")
	flag.DurationVar(&cfg.interval, "interval", time.Minute, "soak: how often a line is printed")
	flag.DurationVar(&cfg.retention, "retention", time.Minute, "soak: River CompletedJobRetentionPeriod")
	flag.Parse()
	if cfg.clients < 1 {
		return errors.New("-clients must be at least 1")
	}

	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL must name the database River may use (hack/bench creates one)")
	}
	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = int32(cfg.conns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	// Start from an empty table so earlier runs do not skew the numbers.
	if _, err := pool.Exec(ctx, "truncate river_job"); err != nil {
		return fmt.Errorf("empty river_job: %w", err)
	}
	switch cfg.mode {
	case "burn-down":
		return burnDown(ctx, pool, cfg)
	case "pickup":
		return pickupLatency(ctx, pool, cfg)
	case "soak":
		if cfg.rate <= 0 || cfg.duration <= 0 || cfg.interval <= 0 || cfg.retention <= 0 {
			return errors.New("-rate, -duration, -interval and -retention must be positive")
		}
		return soak(ctx, pool, cfg)
	default:
		return fmt.Errorf("unknown -mode %q (burn-down, pickup or soak)", cfg.mode)
	}
}
