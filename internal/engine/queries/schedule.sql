-- name: SchedulePut :one
select id::text
from workflow.put_schedule(
    p_name => @name::text, p_cron => @cron::text, p_type => @type::text, p_payload => @payload::jsonb,
    p_time_zone => @time_zone::text, p_priority => @priority::integer, p_max_attempts => @max_attempts::integer,
    p_deadline => sqlc.narg(deadline_us)::bigint * interval '1 microsecond',
    p_concurrency_policy => @concurrency_policy::text,
    p_starting_deadline_seconds => sqlc.narg(starting_deadline_seconds)::integer,
    p_suspend => @suspend::boolean, p_source_namespace => sqlc.narg(namespace)::text,
    p_source_uid => sqlc.narg(uid)::text,
    p_retry_base_delay => sqlc.narg(retry_base_ms)::bigint * interval '1 millisecond',
    p_retry_max_delay => sqlc.narg(retry_max_ms)::bigint * interval '1 millisecond',
    p_concurrency_key => sqlc.narg(concurrency_key)::text);

-- name: ScheduleDelete :one
select workflow.delete_schedule(@name, sqlc.narg(namespace)::text);

-- name: ScheduleFire :many
select schedule_id::text, tick, run_id::text, outcome from workflow.fire_due_schedules(@max_rows);

-- name: ScheduleList :many
-- Durations as whole microseconds (deadline) and milliseconds (retry delays).
select id::text, name, source_namespace, source_uid, cron, time_zone, type, payload, priority, max_attempts,
       (extract(epoch from deadline) * 1000000)::bigint as deadline_us, concurrency_policy,
       starting_deadline_seconds, suspend, next_tick_at, last_tick_at, last_outcome, last_error,
       last_fired_run::text, unfinished_runs, created_by, created_at, updated_at,
       (extract(epoch from retry_base_delay) * 1000)::bigint as retry_base_ms,
       (extract(epoch from retry_max_delay) * 1000)::bigint as retry_max_ms, concurrency_key
from workflow.list_schedules(sqlc.narg(namespace)::text, sqlc.narg(name)::text, sqlc.narg(namespaces)::text[]);

-- name: ScheduleLatestRuns :many
-- A schedule's latest runs, newest first.
select id::text, status, created_at, finished_at, idempotency_key
from workflow.schedule_latest_runs(sqlc.narg(namespace)::text, @name::text, @max_rows::integer);
