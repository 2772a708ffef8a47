package simpleworkflow

import (
	"context"
	"time"
)

// reapLoop returns runs whose lease expired to the queue.
func (s *session) reapLoop(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.ReapInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		res, err := s.eng.ReapExpiredLeases(ctx, 500)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("Reaping expired leases failed", "error", err)
			}
			continue
		}
		for _, r := range res {
			s.log.Info("Lease expired; run reclaimed", "run_id", r.ID, "status", r.Status)
		}
		if len(res) > 0 {
			signal(s.wake)
		}
		expired, err := s.eng.ExpireDeadlines(ctx, 500)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("Expiring deadlines failed", "error", err)
			}
			continue
		}
		if len(expired) > 0 {
			// One line a batch: a flood of overdue runs is not a flood of logs.
			s.log.Info("Runs failed: deadline exceeded", "runs", len(expired), "run_ids", firstIDs(expired, 10))
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
