package simpleworkflow

import (
	"context"
	"log/slog"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// reaper returns runs whose lease expired to the queue, and fails runs
// past their deadline, every interval (PollerConfig.ReapInterval).
type reaper struct {
	loop
	eng      *engine.Engine
	interval time.Duration
	log      *slog.Logger
	// reclaimed is called when runs went back to the queue.
	reclaimed func()
}

// Start runs the reaper until Stop.
func (r *reaper) Start(ctx context.Context) { r.start(ctx, r.run) }

// Stop ends the reaper and waits for it.
func (r *reaper) Stop() { r.stop() }

func (r *reaper) run(ctx context.Context) {
	ticker := time.NewTicker(r.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		res, err := r.eng.ReapExpiredLeases(ctx, 500)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Error("Reaping expired leases failed", "error", err)
			}
			continue
		}
		for _, x := range res {
			r.log.Info("Lease expired; run reclaimed", "run_id", x.ID, "status", x.Status)
		}
		if len(res) > 0 {
			r.reclaimed()
		}
		expired, err := r.eng.ExpireDeadlines(ctx, 500)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Error("Expiring deadlines failed", "error", err)
			}
			continue
		}
		if len(expired) > 0 {
			// One line a batch: a flood of overdue runs is not a flood of logs.
			r.log.Info("Runs failed: deadline exceeded", "runs", len(expired), "run_ids", firstIDs(expired, 10))
		}
	}
}

// firstIDs returns at most n of ids, for a log line about a batch.
func firstIDs(ids []string, n int) []string {
	if len(ids) > n {
		return ids[:n]
	}
	return ids
}
