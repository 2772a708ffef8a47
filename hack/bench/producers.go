package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// Wake-up modes the producer benchmark alternates between.
const (
	wakeOn  = iota // the schema as migrated
	wakeOff        // the notification removed (workflow_run_wake disabled)
	wakeOld        // NOTIFY in every inserting transaction, as before 0015
	wakeModes
)

// producerBench measures single-row INSERTs from cfg.producers clients for
// cfg.producerSeconds in each wake-up mode, alternating the modes in short
// rounds so that they share the machine's ups and downs, in a database of
// its own, with a listener on the channel. It prints
//
//	engine producers: C clients x S s single-row inserts: X/s with wake-ups (N notifications), Y/s without = R; Z/s notifying every insert
func producerBench(ctx context.Context, pool *pgxpool.Pool, cfg config) error {
	if cfg.producerSeconds <= 0 {
		return nil
	}
	db, cleanup, err := benchDatabase(ctx, pool, "producer")
	if err != nil {
		return err
	}
	defer cleanup()
	// The old behaviour, for comparison: a statement trigger that notifies
	// every inserting transaction (disabled unless measured).
	for _, sql := range []string{
		`create or replace function public.bench_notify_each() returns trigger language plpgsql as $$
		 begin perform pg_notify('workflow_run_created', t.type) from (select distinct n.type from new_runs n) t; return null; end $$`,
		`drop trigger if exists bench_notify_each on workflow.workflow_run`,
		`create trigger bench_notify_each after insert on workflow.workflow_run referencing new table as new_runs
		 for each statement execute function public.bench_notify_each()`,
		`alter table workflow.workflow_run disable trigger bench_notify_each`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			return fmt.Errorf("prepare the producer benchmark: %w", err)
		}
	}
	defer func() {
		for _, sql := range []string{
			`drop trigger if exists bench_notify_each on workflow.workflow_run`,
			`drop function if exists public.bench_notify_each()`,
			`alter table workflow.workflow_run enable trigger workflow_run_wake`,
		} {
			_, _ = db.Exec(context.WithoutCancel(ctx), sql)
		}
	}()
	setMode := func(m int) error {
		on, old := "enable", "disable"
		switch m {
		case wakeOff:
			on = "disable"
		case wakeOld:
			on, old = "disable", "enable"
		}
		_, err := db.Exec(ctx, fmt.Sprintf(`alter table workflow.workflow_run %s trigger workflow_run_wake, %s trigger bench_notify_each`, on, old))
		return err
	}

	// A listener, as workers have, counting notifications.
	lconn, err := pgx.ConnectConfig(ctx, db.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer lconn.Close(context.WithoutCancel(ctx))
	if _, err := lconn.Exec(ctx, "listen workflow_run_created"); err != nil {
		return err
	}
	var notified [wakeModes]atomic.Int64
	var mode atomic.Int64
	lctx, stopListen := context.WithCancel(ctx)
	var lwg sync.WaitGroup
	lwg.Go(func() {
		for {
			if _, err := lconn.WaitForNotification(lctx); err != nil {
				return
			}
			notified[mode.Load()].Add(1)
		}
	})
	defer func() { stopListen(); lwg.Wait() }()

	conns := make([]*pgxpool.Conn, cfg.producers)
	for i := range conns {
		if conns[i], err = db.Acquire(ctx); err != nil {
			return err
		}
		defer conns[i].Release()
	}
	const rounds = 5
	round := time.Duration(cfg.producerSeconds) * time.Second / rounds
	var inserts [wakeModes]int64
	var elapsed [wakeModes]time.Duration
	for range rounds {
		for m := range wakeModes {
			if err := setMode(m); err != nil {
				return err
			}
			mode.Store(int64(m))
			var n atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, len(conns))
			start := time.Now()
			for _, c := range conns {
				wg.Go(func() {
					for time.Since(start) < round {
						if _, err := c.Exec(ctx, `insert into workflow.workflow_run (type, payload) values ('producer.a.v1', '{}')`); err != nil {
							errs <- err
							return
						}
						n.Add(1)
					}
				})
			}
			wg.Wait()
			elapsed[m] += time.Since(start)
			inserts[m] += n.Load()
			select {
			case err := <-errs:
				return fmt.Errorf("insert: %w", err)
			default:
			}
		}
	}
	rate := func(m int) float64 { return float64(inserts[m]) / elapsed[m].Seconds() }
	fmt.Printf("engine producers: %d clients x %d s single-row inserts: %.0f/s with wake-ups (%d notifications), %.0f/s without = %.2f; %.0f/s notifying every insert (%d notifications)\n",
		cfg.producers, cfg.producerSeconds, rate(wakeOn), notified[wakeOn].Load(), rate(wakeOff),
		rate(wakeOn)/rate(wakeOff), rate(wakeOld), notified[wakeOld].Load())
	return nil
}

// createManyBench records cfg.createManyRuns runs with Client.CreateMany from
// 4 clients in batches of cfg.createManyBatch, then as many with plain
// INSERT ... SELECT statements of the same size, for comparison, in a
// database of its own. It prints
//
//	engine create-many: N runs in S s = X runs/s (batches of B, 4 clients); INSERT ... SELECT: Y runs/s
func createManyBench(ctx context.Context, pool *pgxpool.Pool, cfg config) error {
	if cfg.createManyRuns <= 0 {
		return nil
	}
	db, cleanup, err := benchDatabase(ctx, pool, "createmany")
	if err != nil {
		return err
	}
	defer cleanup()
	client, err := simpleworkflow.NewClient(db)
	if err != nil {
		return err
	}
	batch := make([]simpleworkflow.NewRun, cfg.createManyBatch)
	for i := range batch {
		batch[i] = simpleworkflow.NewRun{Type: "createmany.a.v1", Payload: map[string]any{"n": i}}
	}
	many, manyTime, err := inBatches(ctx, cfg, func() error {
		_, err := client.CreateMany(ctx, batch)
		return err
	})
	if err != nil {
		return err
	}
	plain, plainTime, err := inBatches(ctx, cfg, func() error {
		_, err := db.Exec(ctx, `insert into workflow.workflow_run (type, payload)
			select 'createmany.b.v1', jsonb_build_object('n', i) from generate_series(1, $1) i`, cfg.createManyBatch)
		return err
	})
	if err != nil {
		return err
	}
	var n int64
	if err := db.QueryRow(ctx, `select count(*) from workflow.workflow_run where type = 'createmany.a.v1'`).Scan(&n); err != nil {
		return err
	}
	if n != many {
		return fmt.Errorf("create-many: %d runs recorded, want %d", n, many)
	}
	fmt.Printf("engine create-many: %d runs in %.2f s = %.0f runs/s (batches of %d, %d clients); INSERT ... SELECT: %.0f runs/s\n",
		many, manyTime.Seconds(), float64(many)/manyTime.Seconds(), cfg.createManyBatch, createManyClients,
		float64(plain)/plainTime.Seconds())
	return nil
}

// createManyClients is how many clients record batches at once.
const createManyClients = 4

// inBatches calls record from createManyClients goroutines until
// cfg.createManyRuns runs (in batches of cfg.createManyBatch) are recorded,
// and returns how many were and how long it took.
func inBatches(ctx context.Context, cfg config, record func() error) (int64, time.Duration, error) {
	var next, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, createManyClients)
	start := time.Now()
	for range createManyClients {
		wg.Go(func() {
			for ctx.Err() == nil && next.Add(int64(cfg.createManyBatch)) <= int64(cfg.createManyRuns) {
				if err := record(); err != nil {
					errs <- err
					return
				}
				done.Add(int64(cfg.createManyBatch))
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	select {
	case err := <-errs:
		return 0, 0, err
	default:
	}
	return done.Load(), d, nil
}
