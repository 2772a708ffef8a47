// Command dbosbench measures DBOS Transact for Go
// (github.com/dbos-inc/dbos-transact-golang), a peer the engine is compared
// with in make bench, in the shapes hack/bench measures the engine: durable
// steps, a chain of child workflows, a fan-out of child workflows, and pickup
// latency. It resets DBOS's system database named by DATABASE_URL (drops the
// "dbos" schema, which DBOS then migrates afresh), runs one measurement
// (-mode) and prints one of these lines on stdout, everything else going to
// stderr:
//
//	dbos steps: N workflows x S steps in T s = X steps/s
//	dbos chain: N chains x L steps in T s = X steps/s; one chain alone: Y ms per step
//	dbos fan-out: N workflows x W steps in T s = X steps/s
//	dbos pickup latency: p50=... p90=... p99=... (n=K)
//
// Every workflow is started through one DBOS queue (RunWorkflow with
// WithQueue), top-level workflows and child workflows alike, and run by the
// queue runner of this process:
//
//   - steps: N workflows are enqueued at once (by -enqueuers goroutines, each
//     enqueue its own transaction), each running S no-op steps (RunAsStep,
//     every step checkpointed in operation_outputs); timed from the first
//     enqueue until all N are SUCCESS in the system database. With -backlog,
//     the N workflows are enqueued by name (Enqueue) before DBOS is launched
//     and the time runs from the launch instead: a backlog burned down, as
//     hack/bench measures the engine's steps.
//   - chain: N parent workflows are enqueued at once; each enqueues L child
//     workflows one after the other on the same queue, awaiting each child's
//     result (GetResult on its handle) before enqueueing the next. Then one
//     chain alone: the time from a child's end (as its parent sees it, when
//     GetResult returns; for the first child, the parent's start) to the next
//     child's end, median over the chain.
//   - fan-out: N parent workflows are enqueued at once; each enqueues W child
//     workflows in a row and then awaits all of them.
//   - pickup: K times, one at a time on an idle queue, from the start of the
//     RunWorkflow call that enqueues a no-op workflow to the moment its
//     function begins.
//
// Settings, the same in every mode (printed on stderr):
//
//   - one queue registered with RegisterQueue and WithWorkerConcurrency(1000):
//     at most 1,000 workflows of the queue run at once in this process. A
//     worker concurrency without a global concurrency or rate limit is also
//     what DBOS advises for queue throughput ("Making Postgres Queues Scale",
//     dbos.dev): the dequeue then runs at READ COMMITTED with FOR UPDATE SKIP
//     LOCKED instead of REPEATABLE READ. Parent workflows hold a slot while
//     they await their children, so -chains and -workflows (fan-out) must
//     stay below the concurrency.
//   - WithQueueBasePollingInterval(5ms): the queue runner polls the queue
//     every 5 ms (jittered by ±5%) instead of the default 1 s. v1.8.0 has no
//     LISTEN/NOTIFY wake-up for queues: polling is the only way work is found.
//     The interval only grows (doubling) on contention errors and decays back.
//   - WithHandlePollingInterval(10ms) on every GetResult: a handle awaits a
//     workflow's result by polling its status row, every 1 s by default. v1.8.0
//     has no context- or config-wide setting for it, so it is passed on each
//     call (child results in parents, the verification of results).
//   - DBOS's default connection pool: 20 connections (pgxpool MaxConns, set by
//     DBOS when DATABASE_URL carries no pool_max_conns), one of which its
//     notification listener holds.
//
// DBOS's queue runner also reconciles its set of queues and promotes delayed
// workflows once a second; v1.8.0 does not expose that interval.
//
// hack/bench builds and runs it against a database of its own beside the
// engine's; it lives in a module of its own so that the project's go.mod does
// not carry DBOS.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
)

type config struct {
	mode        string
	workflows   int
	steps       int
	chains      int
	length      int
	width       int
	samples     int
	concurrency int
	queuePoll   time.Duration
	resultPoll  time.Duration
	enqueuers   int
	backlog     bool
	verbose     bool
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dbosbench:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg config
	flag.StringVar(&cfg.mode, "mode", "steps", "what to measure: steps, chain, fanout or pickup")
	flag.IntVar(&cfg.workflows, "workflows", 0, "workflows to run (steps: default 5000; fanout: parent workflows, default 30)")
	flag.IntVar(&cfg.steps, "steps", 10, "no-op steps per workflow (steps)")
	flag.IntVar(&cfg.chains, "chains", 300, "parent workflows running a chain of children at once (chain)")
	flag.IntVar(&cfg.length, "length", 10, "child workflows per chain, one after the other (chain)")
	flag.IntVar(&cfg.width, "width", 100, "child workflows per parent, all at once (fanout)")
	flag.IntVar(&cfg.samples, "latency-samples", 200, "single enqueues timed for pickup latency (pickup)")
	flag.IntVar(&cfg.concurrency, "concurrency", 1000, "worker concurrency of the queue")
	flag.DurationVar(&cfg.queuePoll, "queue-poll", 5*time.Millisecond, "base polling interval of the queue")
	flag.DurationVar(&cfg.resultPoll, "result-poll", 10*time.Millisecond, "polling interval of GetResult")
	flag.IntVar(&cfg.enqueuers, "enqueuers", 8, "goroutines enqueueing the top-level workflows")
	flag.BoolVar(&cfg.backlog, "backlog", false, "steps: enqueue the workflows before DBOS is launched and time from the launch instead")
	flag.BoolVar(&cfg.verbose, "v", false, "log DBOS's info messages (on stderr)")
	flag.Parse()
	if cfg.workflows == 0 {
		cfg.workflows = map[string]int{"fanout": 30}[cfg.mode]
		if cfg.workflows == 0 {
			cfg.workflows = 5000
		}
	}
	for name, v := range map[string]int{"-workflows": cfg.workflows, "-steps": cfg.steps, "-chains": cfg.chains,
		"-length": cfg.length, "-width": cfg.width, "-latency-samples": cfg.samples, "-concurrency": cfg.concurrency,
		"-enqueuers": cfg.enqueuers} {
		if v < 1 {
			return fmt.Errorf("%s must be at least 1", name)
		}
	}

	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL must name the database DBOS may use as its system database (hack/bench creates one)")
	}
	ctx := context.Background()
	if err := resetSystemDatabase(ctx, url); err != nil {
		return err
	}

	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelInfo
	}
	dctx, err := dbos.NewContext(ctx, dbos.Config{
		AppName:     "dbosbench",
		DatabaseURL: url,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		return fmt.Errorf("dbos context: %w", err)
	}
	defer func() {
		if err := dbos.Shutdown(dctx, 10*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "dbosbench: shutdown:", err)
		}
	}()
	b, err := newBench(dctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dbosbench: DBOS Transact v1.8.0; one queue, worker concurrency %d, queue polling %s, GetResult polling %s, "+
		"DBOS's default pool (20 connections); %d enqueuers\n",
		cfg.concurrency, cfg.queuePoll, cfg.resultPoll, cfg.enqueuers)
	switch cfg.mode {
	case "steps":
		return b.steps(cfg.workflows, cfg.steps)
	case "chain":
		return b.chain(cfg.chains, cfg.length)
	case "fanout":
		return b.fanout(cfg.workflows, cfg.width)
	case "pickup":
		return b.pickup(cfg.samples)
	default:
		return fmt.Errorf("unknown -mode %q (steps, chain, fanout or pickup)", cfg.mode)
	}
}

// resetSystemDatabase drops DBOS's schema, so that the run starts from an
// empty system database (NewContext creates and migrates it again).
func resetSystemDatabase(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to reset the system database: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "drop schema if exists dbos cascade"); err != nil {
		return fmt.Errorf("reset the system database: %w", err)
	}
	return nil
}
