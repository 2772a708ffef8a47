package engine

import (
	"context"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// PrefixCount is a number of runs of one namespace, first type segment
// and status.
type PrefixCount struct {
	Namespace string
	Prefix    string
	Status    Status
	Count     int64
}

// PrefixAge is how long the oldest runnable run of one namespace and first
// type segment has waited.
type PrefixAge struct {
	Namespace string
	Prefix    string
	Age       time.Duration
}

// RunsByPrefix counts runs by first type segment and status.
func (e *Engine) RunsByPrefix(ctx context.Context) ([]PrefixCount, error) {
	rows, err := e.q.StatsRunsByPrefix(ctx)
	if err != nil {
		return nil, translate("count runs", err)
	}
	out := make([]PrefixCount, len(rows))
	for i, row := range rows {
		out[i] = PrefixCount{Prefix: deref(row.Segment), Status: Status(deref(row.Status)), Count: deref(row.Runs),
			Namespace: deref(row.Namespace)}
	}
	return out, nil
}

// OldestRunnableAge returns, per namespace and first type segment, how
// long the oldest runnable pending run has waited.
func (e *Engine) OldestRunnableAge(ctx context.Context) ([]PrefixAge, error) {
	rows, err := e.q.StatsOldestRunnable(ctx)
	if err != nil {
		return nil, translate("oldest runnable run", err)
	}
	out := make([]PrefixAge, len(rows))
	for i, row := range rows {
		out[i] = PrefixAge{Prefix: deref(row.Segment), Namespace: deref(row.Namespace),
			Age: time.Duration(deref(row.AgeSeconds) * float64(time.Second))}
	}
	return out, nil
}

// FinishedRun is the duration of a run that finished.
type FinishedRun struct {
	Namespace  string
	Prefix     string
	Status     Status
	Duration   time.Duration
	FinishedAt time.Time
}

// RunsFinishedSince returns up to 10,000 runs that finished after since,
// oldest first, and where to read from next. Runs are read by the
// database's clock (workflow.now()); when it is behind since (it moved
// back), the runs that finished within lookback of it are read instead, so
// that those finishing after the step are not skipped until the clock is
// back where it was. lookback is at least the time since the last read.
func (e *Engine) RunsFinishedSince(ctx context.Context, since time.Time, lookback time.Duration) ([]FinishedRun, time.Time, error) {
	rows, err := e.q.StatsFinishedSince(ctx, queries.StatsFinishedSinceParams{
		Since: since, LookbackMs: lookback.Milliseconds(),
	})
	if err != nil {
		return nil, since, translate("finished runs", err)
	}
	var out []FinishedRun
	next := since
	for _, row := range rows {
		if now := deref(row.Now); now.Before(next) {
			next = now
		}
		if row.FinishedAt == nil {
			continue // none finished
		}
		out = append(out, FinishedRun{Prefix: deref(row.Segment), Status: Status(deref(row.Status)),
			Namespace: deref(row.Namespace), Duration: time.Duration(deref(row.Seconds) * float64(time.Second)),
			FinishedAt: *row.FinishedAt})
		next = *row.FinishedAt
	}
	return out, next, nil
}
