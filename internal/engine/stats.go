package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
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
	rows, err := e.pool.Query(ctx, e.q[qStatsRunsByPrefix])
	if err != nil {
		return nil, translate("count runs", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PrefixCount, error) {
		var c PrefixCount
		var s string
		err := row.Scan(&c.Prefix, &s, &c.Count, &c.Namespace)
		c.Status = Status(s)
		return c, err
	})
	return out, translate("count runs", err)
}

// OldestRunnableAge returns, per namespace and first type segment, how
// long the oldest runnable pending run has waited.
func (e *Engine) OldestRunnableAge(ctx context.Context) ([]PrefixAge, error) {
	rows, err := e.pool.Query(ctx, e.q[qStatsOldestRunnable])
	if err != nil {
		return nil, translate("oldest runnable run", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PrefixAge, error) {
		var a PrefixAge
		var secs float64
		err := row.Scan(&a.Prefix, &secs, &a.Namespace)
		a.Age = time.Duration(secs * float64(time.Second))
		return a, err
	})
	return out, translate("oldest runnable run", err)
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
// oldest first.
func (e *Engine) RunsFinishedSince(ctx context.Context, since time.Time) ([]FinishedRun, error) {
	rows, err := e.pool.Query(ctx, e.q[qStatsFinishedSince], pgx.NamedArgs{"since": since})
	if err != nil {
		return nil, translate("finished runs", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FinishedRun, error) {
		var f FinishedRun
		var s string
		var secs float64
		err := row.Scan(&f.Prefix, &s, &secs, &f.FinishedAt, &f.Namespace)
		f.Status, f.Duration = Status(s), time.Duration(secs*float64(time.Second))
		return f, err
	})
	return out, translate("finished runs", err)
}
