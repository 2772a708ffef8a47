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

// UnfinishedRuns counts the runs of namespace that are pending or leased,
// up to limit of each (it reads them newest first through the console's
// list function, which uses the namespace's index).
func (e *Engine) UnfinishedRuns(ctx context.Context, namespace string, limit int) (int, error) {
	const q = `select count(*) from workflow.list_runs_newest(null, $1, $2, null, null, null, null, null, $3)`
	n := 0
	for _, st := range []Status{StatusPending, StatusLeased} {
		var c int
		if err := e.pool.QueryRow(ctx, q, string(st), namespace, limit).Scan(&c); err != nil {
			return 0, translate("count unfinished runs of "+namespace, err)
		}
		n += c
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
