// Command bench measures the inbox: burn-down throughput (N no-op runs worked
// by W concurrent handlers) and pickup latency (one insert on an idle queue to
// handler start), each side by side with River, the peer (hack/riverbench, run
// on a database of its own in the same server right before the engine). It
// uses DATABASE_URL when set, else a throwaway Postgres started with
// hack/pg.sh, and prints these lines (burn-down and pickup lines are each the
// median of -rounds runs, River and the engine alternating):
//
//	river burn-down: N jobs in S s = X jobs/s (workers=W)
//	engine burn-down: N runs in S s = X runs/s (workers=W)
//	river (P clients) burn-down: N jobs in S s = X jobs/s (workers=W)
//	engine (P pollers) burn-down: N runs in S s = X runs/s (workers=W)
//	engine steps: N runs x S steps in T s = X steps/s (workers=W)
//	engine dag chain: N runs x 10 steps in T s = X steps/s; one chain alone: Y ms per step
//	engine dag fan-out: N runs x 100 steps in T s = X steps/s
//	river pickup latency: p50=... p90=... p99=... (n=K)
//	engine pickup latency: p50=... p90=... p99=... (n=K)
//	engine/river: burn-down X.XXx, pickup p50 X.XXx
//	engine (P pollers)/river (P clients): burn-down X.XXx
//	engine producers: C clients x S s single-row inserts: X/s with wake-ups (...), Y/s without = R; ...
//	engine create-many: N runs in S s = X runs/s (batches of B, 4 clients)
//	engine depth: queue_depth X ms (...), all 20 pools Y ms (counted up to C each, ...; exactly: E ms), ...; claim behind N other runs Z ms
//
// The ratio lines divide the engine's figure by River's in the same shape (one
// client of 1,000 workers, as one poller of 1,000 handlers; then P clients as
// P pollers, as several worker processes share a queue): a burn-down above
// 1.00x is faster than River, a pickup p50 below 1.00x is quicker.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/hack/internal/cpu"
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
	rounds      int
	river       bool
	dbos        bool
	depthRuns   int
	flowRuns    int
	pgStats     bool
	// the second burn-down: the same queue claimed by several pollers
	spreadPollers, spreadConcurrency int

	producers       int
	producerSeconds int
	createManyRuns  int
	createManyBatch int

	// only names the measurement groups to run (empty: all of them).
	only map[string]bool
	// meter reads the processor time of the server and of this process
	// (set once connected).
	meter cpu.Meter
}

// groups are the measurement groups -only may name, in the order they run.
var groups = []string{"burn", "steps", "dag", "pickup", "producers", "create-many", "flow", "depth"}

// measures reports whether the group named name is to run.
func (c config) measures(name string) bool {
	return len(c.only) == 0 || c.only[name]
}

// spreadLabel names the engine in the lines of a burn-down by several
// pollers.
func (c config) spreadLabel() string {
	return fmt.Sprintf("engine (%d pollers)", c.pollers)
}

// riverSpreadLabel names River in the lines of the same burn-down: as many
// River clients, each with as many workers as a poller has handlers.
func (c config) riverSpreadLabel() string {
	return fmt.Sprintf("river (%d clients)", c.pollers)
}

func run() error {
	var cfg config
	flag.IntVar(&cfg.runs, "runs", 200000, "runs to burn down (a backlog large enough for the steady state: each round takes seconds, not a moment)")
	flag.IntVar(&cfg.pollers, "pollers", 1, "pollers (each with its own listen connection); one of 1,000 handlers is River's shape")
	flag.IntVar(&cfg.concurrency, "concurrency", 1000, "handlers per poller")
	flag.IntVar(&cfg.spreadPollers, "spread-pollers", 4, "pollers of the second burn-down, as several worker processes claim one queue (0 skips it)")
	flag.IntVar(&cfg.spreadConcurrency, "spread-concurrency", 512, "handlers per poller of the second burn-down")
	flag.IntVar(&cfg.batch, "claim-batch", 500, "runs claimed per call")
	flag.IntVar(&cfg.latencyN, "latency-samples", 200, "single inserts timed for pickup latency")
	flag.IntVar(&cfg.stepRuns, "step-runs", 5000, "runs of the step workflow")
	flag.IntVar(&cfg.steps, "steps", 10, "no-op steps per run of the step workflow")
	flag.IntVar(&cfg.dagRuns, "dag-runs", 300, "runs of the 10-step DAG chain (a tenth as many 100-step fan-outs)")
	flag.IntVar(&cfg.rounds, "rounds", 3, "runs of each burn-down and pickup measurement (the median is printed)")
	flag.BoolVar(&cfg.river, "river", true, "measure River side by side (hack/riverbench)")
	flag.BoolVar(&cfg.dbos, "dbos", true, "measure DBOS Transact side by side for durable steps, DAG chains and fan-outs, and pickup (hack/dbosbench)")
	flag.IntVar(&cfg.flowRuns, "flow-runs", 20000, "runs of each type of the flow-limit claim measurement, per round (0 skips it)")
	flag.IntVar(&cfg.depthRuns, "depth-runs", 1000000, "pending runs behind the depth and claim measurements (0 skips them)")
	flag.BoolVar(&cfg.pgStats, "pg-stats", false, "print the statements each engine burn-down spent its time in (pg_stat_statements; preloaded in the throwaway server)")
	flag.IntVar(&cfg.producers, "producers", 8, "clients of the single-row insert measurement")
	flag.IntVar(&cfg.producerSeconds, "producer-seconds", 10, "seconds of single-row inserts per wake-up mode (0 skips them)")
	flag.IntVar(&cfg.createManyRuns, "create-many-runs", 200000, "runs recorded with CreateMany (0 skips them)")
	flag.IntVar(&cfg.createManyBatch, "create-many-batch", 5000, "runs per CreateMany call")
	only := flag.String("only", "", "comma-separated measurement groups to run, of "+strings.Join(groups, ",")+" (empty: all)")
	flag.Parse()
	if *only != "" {
		cfg.only = map[string]bool{}
		for _, g := range strings.Split(*only, ",") {
			if !slices.Contains(groups, g) {
				return fmt.Errorf("-only: unknown group %q (groups: %s)", g, strings.Join(groups, ","))
			}
			cfg.only[g] = true
		}
	}
	if cfg.rounds < 1 {
		return fmt.Errorf("-rounds must be at least 1")
	}

	ctx := context.Background()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		os.Setenv("PG_FSYNC", "on") // measure with durable commits
		if cfg.pgStats {
			os.Setenv("PG_EXTRA_OPTS", "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all")
		}
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
	pcfg.MaxConns = int32(4 + 2*max(cfg.pollers, cfg.spreadPollers))
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg.meter = cpu.ForServer(ctx, pool)
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
	if cfg.pgStats {
		if cfg.pgStats, err = statStatements(ctx, pool); err != nil {
			return err
		}
		if !cfg.pgStats {
			fmt.Fprintln(os.Stderr, "bench: -pg-stats needs pg_stat_statements in shared_preload_libraries; not printing statements")
		}
	}
	var peer *river
	if cfg.river && (cfg.measures("burn") || cfg.measures("pickup")) {
		if peer, err = newRiver(ctx, url, cfg.meter); err != nil {
			return err
		}
		defer peer.close()
	}
	var riverBurn, riverSpreadBurn, engineBurn, spreadBurn []burnResult
	spread := cfg
	spread.pollers, spread.concurrency = cfg.spreadPollers, cfg.spreadConcurrency
	conns := int(pcfg.MaxConns) // River's pool is the size of the engine's
	for i := range cfg.rounds {
		if !cfg.measures("burn") {
			break
		}
		if peer != nil {
			r, err := peer.burnDown(ctx, cfg.runs, cfg.pollers, cfg.concurrency, conns)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "round %d: %s; WAL %d bytes/job\n", i+1, r.line("river", "jobs"), r.walPerRun())
			riverBurn = append(riverBurn, r)
		}
		if peer != nil && spread.pollers > 0 {
			r, err := peer.burnDown(ctx, cfg.runs, spread.pollers, spread.concurrency, conns)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "round %d: %s; WAL %d bytes/job\n", i+1, r.line(spread.riverSpreadLabel(), "jobs"), r.walPerRun())
			riverSpreadBurn = append(riverSpreadBurn, r)
		}
		r, err := burnDown(ctx, pool, client, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "round %d: %s; WAL %d bytes/run\n", i+1, r.line("engine", "runs"), r.walPerRun())
		engineBurn = append(engineBurn, r)
		if spread.pollers > 0 {
			r, err := burnDown(ctx, pool, client, spread)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "round %d: %s; WAL %d bytes/run\n", i+1, r.line(spread.spreadLabel(), "runs"), r.walPerRun())
			spreadBurn = append(spreadBurn, r)
		}
	}
	if peer != nil && len(riverBurn) > 0 {
		fmt.Println(medianBurn(riverBurn).line("river", "jobs"))
	}
	if len(engineBurn) > 0 {
		fmt.Println(medianBurn(engineBurn).line("engine", "runs"))
	}
	if len(riverSpreadBurn) > 0 {
		fmt.Println(medianBurn(riverSpreadBurn).line(spread.riverSpreadLabel(), "jobs"))
	}
	if len(spreadBurn) > 0 {
		fmt.Println(medianBurn(spreadBurn).line(spread.spreadLabel(), "runs"))
	}
	if len(riverBurn) > 0 && len(engineBurn) > 0 {
		printBurnCPU(medianBurn(engineBurn), medianBurn(riverBurn))
	}
	var dbosPeer *dbos
	if cfg.dbos && (cfg.measures("steps") || cfg.measures("dag") || cfg.measures("pickup")) {
		if dbosPeer, err = newDBOS(ctx, url); err != nil {
			return err
		}
		defer dbosPeer.close()
	}
	peers, err := durablePeers(ctx, pool, client, cfg, dbosPeer)
	if err != nil {
		return err
	}
	var riverPickup, enginePickup []pickupResult
	for i := range cfg.rounds {
		if !cfg.measures("pickup") {
			break
		}
		if peer != nil {
			r, err := peer.pickup(ctx, cfg.latencyN)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "round %d: %s\n", i+1, r.line("river"))
			riverPickup = append(riverPickup, r)
		}
		r, err := pickupLatency(ctx, client, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "round %d: %s\n", i+1, r.line("engine"))
		enginePickup = append(enginePickup, r)
		if dbosPeer != nil {
			d, err := dbosPeer.pickup(ctx, cfg.latencyN)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "round %d: %s\n", i+1, d.line("dbos"))
			peers.dbosPickup = append(peers.dbosPickup, d)
		}
	}
	if len(enginePickup) > 0 {
		if peer != nil {
			fmt.Println(medianPickup(riverPickup).line("river"))
		}
		if len(peers.dbosPickup) > 0 {
			fmt.Println(medianPickup(peers.dbosPickup).line("dbos"))
		}
		fmt.Println(medianPickup(enginePickup).line("engine"))
	}
	peers.print(enginePickup)
	if peer != nil && len(engineBurn) > 0 && len(enginePickup) > 0 {
		ep := medianPickup(enginePickup)
		rb, eb, rp := medianBurn(riverBurn), medianBurn(engineBurn), medianPickup(riverPickup)
		fmt.Printf("engine/river: burn-down %.2fx, pickup p50 %.2fx\n",
			eb.perSecond()/rb.perSecond(), ep.p50.Seconds()/rp.p50.Seconds())
		if len(spreadBurn) > 0 {
			fmt.Printf("%s/%s: burn-down %.2fx\n", spread.spreadLabel(), spread.riverSpreadLabel(),
				medianBurn(spreadBurn).perSecond()/medianBurn(riverSpreadBurn).perSecond())
		}
		fmt.Printf("WAL per burnt-down run: engine %d bytes, river %d bytes\n",
			eb.walPerRun(), rb.walPerRun())
	}
	if cfg.measures("producers") {
		if err := producerBench(ctx, pool, cfg); err != nil {
			return err
		}
	}
	if cfg.measures("create-many") {
		if err := createManyBench(ctx, pool, cfg); err != nil {
			return err
		}
	}
	if cfg.measures("flow") {
		if err := flowBench(ctx, pool, cfg); err != nil {
			return err
		}
	}
	if !cfg.measures("depth") {
		return nil
	}
	return depthBench(ctx, pool, cfg)
}

// printBurnCPU prints what one run of the median burn-down rounds cost the
// server and the workers, the engine's beside River's, when both were read.
func printBurnCPU(engine, river burnResult) {
	es, ew, eok := engine.cpuPerRun()
	rs, rw, rok := river.cpuPerRun()
	if !eok || !rok {
		return
	}
	em, _, _ := engine.cpu.Busy()
	rm, _, _ := river.cpu.Busy()
	fmt.Printf("CPU per burnt-down run (median rounds): engine server %.0f µs, workers %.0f µs; river server %.0f µs, workers %.0f µs; server %.2fx, workers %.2fx; machine busy %.0f%% and %.0f%%\n",
		es, ew, rs, rw, es/rs, ew/rw, 100*em, 100*rm)
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

// burnDown times cfg.runs no-op runs, inserted at once, from the pollers'
// start until the last one is succeeded in the database. The previous
// round's runs are deleted first, so every round starts from the same table.
func burnDown(ctx context.Context, pool *pgxpool.Pool, client *simpleworkflow.Client, cfg config) (burnResult, error) {
	if _, err := pool.Exec(ctx, "delete from workflow.workflow_run where type = 'bench.noop.v1'"); err != nil {
		return burnResult{}, fmt.Errorf("delete the previous round's runs: %w", err)
	}
	if _, err := pool.Exec(ctx, `insert into workflow.workflow_run (type, payload)
		select 'bench.noop.v1', '{}'::jsonb from generate_series(1, $1)`, cfg.runs); err != nil {
		return burnResult{}, fmt.Errorf("create runs: %w", err)
	}
	for _, t := range []string{"workflow.workflow_run", "workflow.workflow_event"} {
		if _, err := pool.Exec(ctx, "vacuum analyze "+t); err != nil {
			return burnResult{}, fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	var handled atomic.Int64
	noop := func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
		handled.Add(1)
		return nil, nil
	}
	if cfg.pgStats {
		if err := resetStatements(ctx, pool); err != nil {
			return burnResult{}, err
		}
	}
	wal0, err := walPosition(ctx, pool)
	if err != nil {
		return burnResult{}, err
	}
	cpu0, err := cfg.meter.Read()
	if err != nil {
		return burnResult{}, err
	}
	start := time.Now()
	stop, err := startPollers(ctx, client, cfg, "bench.noop.", noop, "bench.noop.v1")
	if err != nil {
		return burnResult{}, err
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
			return burnResult{}, fmt.Errorf("count unfinished runs: %w", err)
		}
		if left == 0 {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return burnResult{}, fmt.Errorf("burn-down did not finish in 10 minutes (%d left)", left)
		}
		time.Sleep(2 * time.Millisecond)
	}
	res := burnResult{n: cfg.runs, elapsed: time.Since(start), workers: cfg.pollers * cfg.concurrency}
	if end, err := cfg.meter.Read(); err == nil {
		res.cpu = end.Since(cpu0)
	}
	wal1, err := walPosition(ctx, pool)
	if err != nil {
		return burnResult{}, err
	}
	res.walBytes = wal1 - wal0
	if cfg.pgStats {
		fmt.Fprintf(os.Stderr, "WAL from %X/%X to %X/%X (pg_waldump --stats=record -s ... -e ... shows what it holds)\n",
			wal0>>32, uint32(wal0), wal1>>32, uint32(wal1))
		if err := printStatements(ctx, pool, os.Stderr, cfg.runs); err != nil {
			return burnResult{}, err
		}
	}
	return res, nil
}

// pickupLatency times cfg.latencyN single inserts on an idle queue, each to
// its handler's start.
func pickupLatency(ctx context.Context, client *simpleworkflow.Client, cfg config) (pickupResult, error) {
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
		return pickupResult{}, err
	}
	defer stop()
	time.Sleep(500 * time.Millisecond) // let the poller connect and go idle
	var samples, inserts []time.Duration
	for i := range cfg.latencyN {
		t0 := time.Now()
		res, err := client.Create(ctx, "bench.latency.v1", nil, nil)
		if err != nil {
			return pickupResult{}, fmt.Errorf("create run: %w", err)
		}
		inserts = append(inserts, time.Since(t0))
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
				return pickupResult{}, fmt.Errorf("sample %d: run not started within 5s", i)
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(10 * time.Millisecond) // idle queue between samples
	}
	slices.Sort(samples)
	slices.Sort(inserts)
	q := func(ds []time.Duration, p float64) time.Duration {
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(10 * time.Microsecond)
	}
	// Where the time goes: the insert's round trip (its commit included),
	// then the wake-up, the claim and its commit.
	fmt.Fprintf(os.Stderr, "engine pickup: insert p50=%s of p50=%s\n", q(inserts, 0.5), q(samples, 0.5))
	return pickupResult{p50: q(samples, 0.50), p90: q(samples, 0.90), p99: q(samples, 0.99), n: len(samples)}, nil
}
