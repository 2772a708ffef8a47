-- name: StatsRunsByPrefix
-- Runs by first type segment and status.
select segment, status, runs, namespace from workflow.run_counts();

-- name: StatsOldestRunnable
-- Age in seconds of the oldest runnable pending run, by first type segment.
select segment, age_seconds, namespace from workflow.oldest_runnable();

-- name: StatsFinishedSince
-- Durations of runs that finished after a point in time.
select segment, status, seconds, finished_at, namespace from workflow.finished_since(@since);
