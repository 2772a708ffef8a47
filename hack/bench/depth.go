package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Shape of the depth benchmark's queue.
const (
	depthTypes = 100
	depthPools = 20
	// The pools' scaling: each may grow to 50 replicas of 100 runs, so the
	// autoscaler counts each pool's queue up to 5,000.
	depthMaxReplicas    = 50
	depthRunsPerReplica = 100
)

// depthBench measures the queue at depth: cfg.depthRuns pending runs over
// 100 types, served by 20 pools of 5 types each. It prints
//
//	engine depth: queue_depth X ms (one pool of N runnable), all 20 pools Y ms (counted up to C each, as the autoscaler does; exactly: E ms), with R pending over 100 types / 20 pools; claim behind R other runs Z ms (prefix only: W ms)
//
// queue_depth is one pool's exact count by workflow.queue_depth; "all 20
// pools" is the autoscaler's evaluation (engine.QueueDepths, each pool
// counted up to maxReplicas × runsPerReplica), then the same exactly (as
// the console's overview counts); the claim takes one run
// of a type whose runs are all younger than the R others (median of 20
// claims, as a poller makes them: its prefix and its handled types; then by
// the prefix alone). The
// runs live in a database of their own when the server lets the benchmark
// create one, so they do not weigh on the other measurements.
func depthBench(ctx context.Context, pool *pgxpool.Pool, cfg config) error {
	if cfg.depthRuns <= 0 {
		return nil
	}
	db, cleanup, err := benchDatabase(ctx, pool, "depth")
	if err != nil {
		return err
	}
	defer cleanup()
	eng, err := engine.New(db)
	if err != nil {
		return err
	}
	// Populate fast: one set-based insert. Skipping the triggers (and so the
	// created events) needs a superuser; without one the insert is slower.
	conn, err := db.Acquire(ctx)
	if err != nil {
		return err
	}
	_, replicaErr := conn.Exec(ctx, "set session_replication_role = replica")
	// Every run with its own creation and run_at, as runs inserted one by
	// one over an hour would have.
	// (Named with their namespace: with the triggers off, nothing sets it.)
	_, err = conn.Exec(ctx, `insert into workflow.workflow_run (type, payload, created_at, run_at, namespace, type_namespace)
		select format('depth.p%s.t%s.v1', (i % $2) / ($2 / $3), i % $2), '{}'::jsonb, t, t, 'default', 'default'
		from generate_series(1, $1) i,
		     lateral (select now() - interval '1 hour' + i * interval '1 millisecond' as t) c`,
		cfg.depthRuns, depthTypes, depthPools)
	if replicaErr == nil {
		_, _ = conn.Exec(ctx, "reset session_replication_role")
	}
	conn.Release()
	if err != nil {
		return fmt.Errorf("populate the depth queue: %w", err)
	}
	if _, err := db.Exec(ctx, `insert into workflow.workflow_run (type, payload)
		select 'depthmatch.a.v1', '{}'::jsonb from generate_series(1, 100)`); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, "vacuum analyze workflow.workflow_run"); err != nil {
		return err
	}

	var onePool []time.Duration
	var runnable int64
	for range 7 {
		t0 := time.Now()
		if err := db.QueryRow(ctx, `select runnable from workflow.queue_depth(array['depth.p1.'], 'go')`).Scan(&runnable); err != nil {
			return fmt.Errorf("queue_depth: %w", err)
		}
		onePool = append(onePool, time.Since(t0))
	}
	pools := make([]engine.PoolQuery, depthPools)
	for i := range pools {
		pools[i] = engine.PoolQuery{TypePrefixes: []string{fmt.Sprintf("depth.p%d.", i)}, Runtime: "go"}
	}
	capped := slices.Clone(pools)
	const depthCap = depthMaxReplicas * depthRunsPerReplica
	for i := range capped {
		capped[i].Cap = depthCap
	}
	// Each evaluation 5 times (the median is printed); every answer checked
	// against want.
	evaluate := func(pools []engine.PoolQuery, want func(i int, d engine.QueueDepth) bool) (time.Duration, []engine.QueueDepth, error) {
		var took []time.Duration
		var last []engine.QueueDepth
		for range 5 {
			t0 := time.Now()
			d, err := eng.QueueDepths(ctx, pools)
			if err != nil {
				return 0, nil, err
			}
			took = append(took, time.Since(t0))
			for i := range d {
				if !want(i, d[i]) {
					return 0, nil, fmt.Errorf("pool %d (cap %d): %+v runnable and leased, not what the exact count implies", i, pools[i].Cap, d[i])
				}
			}
			last = d
		}
		return median(took), last, nil
	}
	allExact, exact, err := evaluate(pools, func(int, engine.QueueDepth) bool { return true })
	if err != nil {
		return err
	}
	var sum int64
	for _, d := range exact {
		sum += d.Runnable
	}
	if sum != int64(cfg.depthRuns) {
		return fmt.Errorf("queue depths add up to %d runnable, want %d", sum, cfg.depthRuns)
	}
	allCapped, _, err := evaluate(capped, func(i int, d engine.QueueDepth) bool {
		return d.Runnable == min(exact[i].Runnable, depthCap) && d.Leased == min(exact[i].Leased, depthCap)
	})
	if err != nil {
		return err
	}

	// As a poller claims (its prefix and its handled types), then with the
	// prefix alone (as plain SQL callers may).
	claimBehind := func(types []string) (time.Duration, error) {
		var claims []time.Duration
		for i := range 21 {
			t0 := time.Now()
			got, err := eng.ClaimRuns(ctx, engine.ClaimParams{WorkerID: "bench-depth", TypePrefixes: []string{"depthmatch."},
				Runtime: "go", Limit: 1, LeaseDuration: time.Minute, Types: types})
			if err != nil {
				return 0, err
			}
			if len(got) != 1 {
				return 0, fmt.Errorf("claim behind the queue: got %d runs, want 1", len(got))
			}
			if i > 0 { // the first claim plans the function
				claims = append(claims, time.Since(t0))
			}
		}
		return median(claims), nil
	}
	withTypes, err := claimBehind([]string{"depthmatch.a.v1"})
	if err != nil {
		return err
	}
	prefixOnly, err := claimBehind(nil)
	if err != nil {
		return err
	}
	fmt.Printf("engine depth: queue_depth %s (one pool of %d runnable), all %d pools %s (counted up to %d each, as the autoscaler does; exactly: %s), with %d pending over %d types / %d pools; claim behind %d other runs %s (prefix only: %s)\n",
		ms(median(onePool[1:])), runnable, depthPools, ms(allCapped), depthCap, ms(allExact), cfg.depthRuns, depthTypes, depthPools,
		cfg.depthRuns, ms(withTypes), ms(prefixOnly))
	return nil
}

// benchDatabase returns a pool on a fresh, migrated database of the same
// server, and a function that drops it; when the server refuses, it falls
// back to pool itself and, at the end, deletes the runs whose type starts
// with prefix.
func benchDatabase(ctx context.Context, pool *pgxpool.Pool, prefix string) (*pgxpool.Pool, func(), error) {
	name := fmt.Sprintf("bench_%s_%d", prefix, time.Now().UnixNano())
	if _, err := pool.Exec(ctx, "create database "+pgx.Identifier{name}.Sanitize()); err != nil {
		return pool, func() {
			_, _ = pool.Exec(context.WithoutCancel(ctx), `delete from workflow.workflow_run where starts_with(type, $1)`, prefix)
		}, nil
	}
	drop := func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "drop database if exists "+pgx.Identifier{name}.Sanitize()+" with (force)")
	}
	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		drop()
		return nil, nil, err
	}
	cfg.ConnConfig.Database = name
	cfg.MaxConns = 16
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, nil, err
	}
	if _, err := engine.Migrate(ctx, db); err != nil {
		db.Close()
		drop()
		return nil, nil, err
	}
	return db, func() { db.Close(); drop() }, nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}
