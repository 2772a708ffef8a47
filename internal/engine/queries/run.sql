-- name: RunInsert :one
-- Records one intent, or finds the run that holds its idempotency key.
select id, created
from workflow.create_run(@type, @payload, sqlc.narg(priority)::integer, sqlc.narg(run_at)::timestamptz,
                         sqlc.narg(idempotency_key)::text, sqlc.narg(max_attempts)::integer,
                         sqlc.narg(deadline_ms)::bigint, sqlc.narg(deadline_at)::timestamptz,
                         sqlc.narg(retry_base_ms)::bigint, sqlc.narg(retry_max_ms)::bigint,
                         sqlc.narg(traceparent)::text, sqlc.narg(source_namespace)::text,
                         sqlc.narg(source_name)::text, sqlc.narg(source_uid)::text,
                         sqlc.narg(concurrency_key)::text, sqlc.narg(namespace)::text,
                         sqlc.narg(type_namespace)::text);

-- name: RunIDByIdempotencyKey :one
select id from workflow.run_by_key(@idempotency_key) id where id is not null;

-- name: RunGet :one
-- A run: the columns of workflow.run_view (RunList selects the same).
select id, type, payload, status, priority, run_at, idempotency_key, attempt, max_attempts, leased_by,
       lease_until, last_error, result, retry_base_ms, retry_max_ms, source_namespace, source_name,
       source_uid, started_at, finished_at, created_at, updated_at, deleted_at, lease_token, parent_id,
       parent_step, deadline_at, wait_kind, wait_step, wait_signal, traceparent, concurrency_key,
       namespace, type_namespace
from workflow.get_run(@id);

-- name: RunList :many
-- Keyset pagination in creation order; the cursor is the last row's
-- (created_at, id). The columns of RunGet.
select id, type, payload, status, priority, run_at, idempotency_key, attempt, max_attempts, leased_by,
       lease_until, last_error, result, retry_base_ms, retry_max_ms, source_namespace, source_name,
       source_uid, started_at, finished_at, created_at, updated_at, deleted_at, lease_token, parent_id,
       parent_step, deadline_at, wait_kind, wait_step, wait_signal, traceparent, concurrency_key,
       namespace, type_namespace
from workflow.list_runs(sqlc.narg(type_prefix)::text, @statuses::text[],
                        sqlc.narg(after_created_at)::timestamptz, sqlc.narg(after_id)::uuid, @max_rows);

-- name: RunRetry :one
select r.status, r.message from workflow.retry_run(@id, sqlc.narg(attempts)::integer, @by::text) r;

-- name: RunCancel :one
-- The setting is read by the cancel trigger (the event's "by"); the subquery
-- runs before the call.
select workflow.cancel_run(@id)
from (select set_config('workflow.cancelled_by', @by::text, true)) s;

-- name: RunSources :many
-- Where runs came from (the object that created each), for the runs given.
select id, source_namespace, source_name, source_uid from workflow.run_sources(@ids);
