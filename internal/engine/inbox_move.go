package engine

import (
	"context"
	"fmt"
)

// Ping checks that the inbox's database answers.
func (e *Engine) Ping(ctx context.Context) error {
	if err := e.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping the inbox: %w", err)
	}
	return nil
}

// UnfinishedRuns counts the runs of namespace that are pending or leased.
// It counts with the statistics function the metrics use, so it costs one
// pass over the runs by status.
func (e *Engine) UnfinishedRuns(ctx context.Context, namespace string) (int64, error) {
	counts, err := e.RunsByPrefix(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range counts {
		if c.Namespace == namespace && (c.Status == StatusPending || c.Status == StatusLeased) {
			n += c.Count
		}
	}
	return n, nil
}

// ForgetSchedules deletes every schedule of namespace, for a namespace that
// moved to another inbox (whose schedules the operator writes there), and
// returns how many it deleted. Their runs stay.
func (e *Engine) ForgetSchedules(ctx context.Context, namespace string) (int, error) {
	list, err := e.ListSchedules(ctx, ScheduleFilter{Namespace: namespace})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range list {
		ok, err := e.DeleteSchedule(ctx, namespace, s.Name)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}
