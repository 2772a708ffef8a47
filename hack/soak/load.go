package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// insertRuns inserts n soak runs in one statement, stamped with the time the
// insert began.
func insertRuns(ctx context.Context, pool *pgxpool.Pool, n int) error {
	_, err := pool.Exec(ctx, `insert into workflow.workflow_run (type, payload)
		select $1, jsonb_build_object('t', $2::bigint) from generate_series(1, $3)`,
		soakType, time.Now().UnixNano(), n)
	if err != nil {
		return fmt.Errorf("insert soak runs: %w", err)
	}
	return nil
}

// calibrate burns down n runs with the running pollers and returns the runs
// per second, timed from the insert to the last handler start.
func calibrate(ctx context.Context, pool *pgxpool.Pool, w *workers, n int) (float64, error) {
	before := w.started.Load()
	start := time.Now()
	for left := n; left > 0; left -= 10000 {
		if err := insertRuns(ctx, pool, min(left, 10000)); err != nil {
			return 0, err
		}
	}
	for w.started.Load()-before < int64(n) {
		if ctx.Err() != nil || time.Since(start) > 10*time.Minute {
			return 0, fmt.Errorf("calibration burn-down did not finish (%d of %d started)", w.started.Load()-before, n)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	w.takeLatencies()
	return float64(n) / elapsed.Seconds(), nil
}

// produce inserts runs at rate per second, in a batch every 10 ms, until ctx
// ends. A producer that falls behind catches up in the next batches. Each
// insert's round trip is kept in took.
func produce(ctx context.Context, pool *pgxpool.Pool, rate float64, took *bySecond) error {
	const tick = 10 * time.Millisecond
	start := time.Now()
	sent := 0
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		due := int(rate * time.Since(start).Seconds())
		if n := due - sent; n > 0 {
			t0 := time.Now()
			err := insertRuns(ctx, pool, n)
			took.add(time.Now(), time.Since(t0))
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			sent = due
		}
	}
}
