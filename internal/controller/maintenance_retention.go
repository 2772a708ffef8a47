package controller

import (
	"context"
	"time"
)

// retentionBatch is how many finished runs one statement deletes.
const retentionBatch = 1000

// maxRetentionPause bounds the pause after one batch.
const maxRetentionPause = time.Second

// retainLoop deletes finished runs past their retention every
// RetentionInterval, in batches of retentionBatch, until none is left. After
// each full batch it pauses for as long as the batch took: a backlog of
// deletions (a whole interval's finished runs, with their events) takes at
// most half of one connection's time instead of bursting through the
// database at once, where it would hold up the claims and completions of
// the runs still flowing (their pickup latency rose with every burst).
// Deleting is still faster than any inbox fills: a batch of 1,000 runs takes
// tens of milliseconds.
func (m *Maintenance) retainLoop(ctx context.Context) {
	if m.Retention <= 0 {
		return
	}
	tick := time.NewTicker(orDefault(m.RetentionInterval, time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		before := time.Now().Add(-m.Retention)
		var total int64
		for ctx.Err() == nil {
			t0 := time.Now()
			n, err := m.Engine.DeleteFinishedRuns(ctx, before, retentionBatch)
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
			select {
			case <-ctx.Done():
			case <-time.After(min(time.Since(t0), maxRetentionPause)):
			}
		}
		if total > 0 {
			m.Log.Info("Deleted finished runs past retention", "runs", total, "finishedBefore", before)
		}
	}
}
