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
// oldest first, and where to read from next. Runs are read by the
// database's clock (workflow.now()); when it is behind since (it moved
// back), the runs that finished within lookback of it are read instead, so
// that those finishing after the step are not skipped until the clock is
// back where it was. lookback is at least the time since the last read.
func (e *Engine) RunsFinishedSince(ctx context.Context, since time.Time, lookback time.Duration) ([]FinishedRun, time.Time, error) {
	rows, err := e.pool.Query(ctx, e.q[qStatsFinishedSince], pgx.NamedArgs{"since": since,
		"lookback_ms": lookback.Milliseconds()})
	if err != nil {
		return nil, since, translate("finished runs", err)
	}
	defer rows.Close()
	var out []FinishedRun
	next := since
	for rows.Next() {
		var (
			prefix, status, namespace *string
			secs                      *float64
			finished                  *time.Time
			now                       time.Time
		)
		if err := rows.Scan(&prefix, &status, &secs, &finished, &namespace, &now); err != nil {
			return nil, since, translate("finished runs", err)
		}
		if now.Before(next) {
			next = now
		}
		if finished == nil {
			continue // none finished
		}
		out = append(out, FinishedRun{Prefix: *prefix, Status: Status(*status), Namespace: *namespace,
			Duration: time.Duration(*secs * float64(time.Second)), FinishedAt: *finished})
		next = *finished
	}
	if err := rows.Err(); err != nil {
		return nil, since, translate("finished runs", err)
	}
	return out, next, nil
}
