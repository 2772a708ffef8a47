-- name: StatsRunsByPrefix :many
-- Runs by first type segment and status.
select segment, status, runs, namespace from workflow.run_counts();

-- name: StatsOldestRunnable :many
-- Age in seconds of the oldest runnable pending run, by first type segment.
select segment, age_seconds, namespace from workflow.oldest_runnable();

-- name: StatsFinishedSince :many
-- Durations of runs that finished after a point in time, by the database's
-- clock: when it is behind that point (it moved back), those that finished
-- within a look-back of it. And that clock: one row of nulls and the clock
-- when none finished.
select f.segment, f.status, f.seconds, f.finished_at, f.namespace, c.now
from (select workflow.now() as now) c
left join lateral workflow.finished_since(case when sqlc.arg(since)::timestamptz > c.now
        then c.now - sqlc.arg(lookback_ms)::bigint * interval '1 millisecond' else sqlc.arg(since)::timestamptz end) f
    on f.finished_at <= c.now
order by f.finished_at;
