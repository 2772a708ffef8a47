package controller

import (
	"context"
	"time"
)

// retentionBatch is how many finished runs one statement deletes.
const retentionBatch = 1000

// maxRetentionPause bounds the pause after one batch.
const maxRetentionPause = time.Second

// retainLoop keeps the audit trail's partitions (history.go) and deletes
// finished runs past their retention every RetentionInterval, in batches of
// retentionBatch, until none is left; then it drops the partitions of the
// audit trail whose runs are gone. While
// the pass is within the first half of its interval, it pauses after each
// full batch for as long as the batch took (at most maxRetentionPause), so
// that a backlog of deletions (an interval's finished runs) leaves the
// database at least half the time between batches
// instead of running through it in one burst. A pass that has used half its
// interval is behind and deletes without pausing; a pass longer than the
// interval is logged. With no retention, it only prepares partitions.
func (m *Maintenance) retainLoop(ctx context.Context) {
	interval := orDefault(m.RetentionInterval, time.Minute)
	m.prepareHistory(ctx)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if m.down() {
			continue
		}
		m.prepareHistory(ctx)
		if m.Retention <= 0 {
			continue
		}
		start := time.Now()
		var total int64
		for ctx.Err() == nil {
			t0 := time.Now()
			n, err := m.Engine.DeleteFinishedRuns(ctx, m.Retention, retentionBatch)
			if err != nil {
				if ctx.Err() == nil {
					m.Log.Error(err, "Deleting finished runs past retention failed")
				}
				break
			}
			total += n
			if n < retentionBatch {
				break
			}
			if time.Since(start) >= interval/2 {
				continue // behind: no pause
			}
			select {
			case <-ctx.Done():
			case <-time.After(min(time.Since(t0), maxRetentionPause)):
			}
		}
		took := time.Since(start)
		if total > 0 {
			m.Log.Info("Deleted finished runs past retention", "runs", total, "retention", m.Retention, "took", took)
		}
		m.dropHistory(ctx)
		if took > interval {
			m.Log.Info("Retention took longer than its interval; finished runs are deleted as fast as they can be",
				"took", took, "interval", interval)
		}
	}
}
