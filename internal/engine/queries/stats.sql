-- name: StatsRunsByPrefix
-- Runs by first type segment and status.
select split_part(type, '.', 1), status, count(*)
from workflow.workflow_run
where deleted_at is null
group by 1, 2;

-- name: StatsOldestRunnable
-- Age in seconds of the oldest runnable pending run, by first type segment.
select split_part(type, '.', 1), extract(epoch from workflow.now() - min(run_at))::double precision
from workflow.workflow_run
where status = 'pending' and deleted_at is null and run_at <= workflow.now()
group by 1;

-- name: StatsFinishedSince
-- Durations of runs that finished after a point in time.
select split_part(type, '.', 1), status,
       extract(epoch from finished_at - coalesce(started_at, created_at))::double precision,
       finished_at
from workflow.workflow_run
where finished_at > @since
order by finished_at
limit 10000;
