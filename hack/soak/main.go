// Command soak runs the inbox under steady load for a long time and reports,
// every minute, what degrades a durable queue over time: throughput, p99
// pickup latency, the sizes of workflow_run and workflow_event (table and
// indexes; the audit trail summed over its partitions) and their dead
// tuples. Finished runs are deleted by the manager's own retention loop
// (controller.Maintenance) once they are older than -retention, which also
// keeps the audit trail's partitions (spans of -history-partition) and
// drops those it emptied.
//
// The load is half the measured burn-down unless -rate is given: the soak
// first burns down -calibrate runs with the same pollers to measure it. It
// uses DATABASE_URL when set, else a throwaway Postgres (fsync on) started
// with hack/pg.sh. Every -interval it prints
//
//	soak 1m0s: X runs/s, pickup p50=... p99=..., workflow_run T+I MiB (live L, dead D), workflow_event T+I MiB (live L, dead D)
//
// and at the end how the last minute compares with the first, then pickup
// latency by what the server was doing in the second each run started
// (autovacuum of either table, a checkpoint, retention, or none of these)
// and the worst seconds. Then (unless -peer none) River runs the same load
// on the same server, in a database of its own, alone (hack/riverbench
// -mode soak: as many clients as pollers, as many workers as handlers, its
// job cleaner keeping completed jobs for -retention), and a last line sets
// the two verdicts side by side.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/hack/internal/cpu"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

type config struct {
	duration          time.Duration
	interval          time.Duration
	rate              float64
	calibrate         int
	retention         time.Duration
	retentionInterval time.Duration
	pollers           int
	concurrency       int
	batch             int
	historyPartition  time.Duration
	peer              string
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 10*time.Minute, "how long the steady load runs")
	flag.DurationVar(&cfg.interval, "interval", time.Minute, "how often a line is printed")
	flag.Float64Var(&cfg.rate, "rate", 0, "runs per second to insert (0: half the measured burn-down)")
	flag.IntVar(&cfg.calibrate, "calibrate", 30000, "runs burnt down first to measure the rate")
	flag.DurationVar(&cfg.retention, "retention", time.Minute, "finished runs older than this are deleted")
	flag.DurationVar(&cfg.retentionInterval, "retention-interval", 10*time.Second, "how often retention runs")
	flag.IntVar(&cfg.pollers, "pollers", 4, "pollers (each with its own listen connection)")
	flag.IntVar(&cfg.concurrency, "concurrency", 512, "handlers per poller")
	flag.IntVar(&cfg.batch, "claim-batch", 500, "runs claimed per call")
	flag.StringVar(&cfg.peer, "peer", "river", "after the engine, soak River under the same load on the same server (\"none\": skip)")
	flag.DurationVar(&cfg.historyPartition, "history-partition", 2*time.Minute,
		"the span of run creation times one partition of the audit trail holds (workflow_settings.history_partition)")
	flag.Parse()
	if cfg.duration <= 0 || cfg.interval <= 0 || cfg.retention <= 0 || cfg.retentionInterval <= 0 {
		return fmt.Errorf("-duration, -interval, -retention and -retention-interval must be positive")
	}
	if cfg.peer != "river" && cfg.peer != "none" {
		return fmt.Errorf("-peer must be river or none, got %q", cfg.peer)
	}
	if cfg.historyPartition < time.Minute {
		return fmt.Errorf("-history-partition must be at least 1m, got %s", cfg.historyPartition)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		os.Setenv("PG_FSYNC", "on") // measure with durable commits
		u, stopServer, err := pgtest.StartServer(ctx)
		if err != nil {
			return err
		}
		defer stopServer()
		url = u
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = int32(8 + 2*cfg.pollers)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if _, err := engine.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := pool.Exec(ctx, "delete from workflow.workflow_run where type like 'soak.%'"); err != nil {
		return fmt.Errorf("delete earlier soak runs: %w", err)
	}
	if _, err := pool.Exec(ctx, `update workflow.workflow_settings
		set history_partition = $1::bigint * interval '1 millisecond'`, cfg.historyPartition.Milliseconds()); err != nil {
		return fmt.Errorf("set the span of a history partition: %w", err)
	}
	client, err := simpleworkflow.NewClient(pool)
	if err != nil {
		return err
	}
	eng, err := engine.New(pool)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}

	// The manager's maintenance would: the calibration's runs too get
	// their trails in a time partition.
	if _, err := eng.PrepareHistoryPartitions(ctx, 2); err != nil {
		return err
	}

	w := newWorkers(client, cfg)
	stopWorkers, err := w.start(ctx)
	if err != nil {
		return err
	}
	var stopOnce sync.Once
	stopEngine := func() { stopOnce.Do(stopWorkers) }
	defer stopEngine()

	if cfg.rate <= 0 {
		perSec, err := calibrate(ctx, pool, w, cfg.calibrate)
		if err != nil {
			return err
		}
		cfg.rate = perSec / 2
		fmt.Printf("soak burn-down: %d runs at %.0f runs/s; steady load at half: %.0f runs/s\n", cfg.calibrate, perSec, cfg.rate)
	}

	maint := &controller.Maintenance{Engine: eng, Log: logr.Discard(),
		Retention: cfg.retention, RetentionInterval: cfg.retentionInterval}
	mctx, stopMaint := context.WithCancel(ctx)
	defer stopMaint()
	go func() { _ = maint.Start(mctx) }()

	fmt.Printf("soak: %.0f runs/s for %s, retention %s (every %s), history partitions of %s, a line every %s\n",
		cfg.rate, cfg.duration, cfg.retention, cfg.retentionInterval, cfg.historyPartition, cfg.interval)
	meter := cpu.ForServer(ctx, pool)
	engineVerdict, err := soak(ctx, pool, w, meter, cfg)
	if err != nil || cfg.peer == "none" {
		return err
	}
	// River runs alone: the engine's workers and maintenance stop first.
	stopMaint()
	stopEngine()
	before, err := meter.Read()
	if err != nil {
		return err
	}
	riverVerdict, err := soakRiver(ctx, url, cfg)
	if err != nil {
		return err
	}
	after, err := meter.Read()
	if err != nil {
		return err
	}
	// River's workers and producer run in its own process: the rest of
	// the machine.
	riverVerdict.cpu = after.Since(before)
	printSideBySide(engineVerdict, riverVerdict)
	return nil
}
