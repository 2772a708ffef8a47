-- name: RunInsert
-- Records one intent; on an idempotency-key conflict nothing is inserted and no
-- row is returned.
insert into workflow.workflow_run (
    type, payload, priority, run_at, idempotency_key, max_attempts,
    retry_base_delay, retry_max_delay, source_namespace, source_name, source_uid, deadline_at, traceparent)
values (
    @type, @payload, coalesce(@priority::integer, 100), coalesce(@run_at::timestamptz, workflow.now()),
    @idempotency_key, coalesce(@max_attempts::integer, 3),
    @retry_base_ms::bigint * interval '1 millisecond',
    @retry_max_ms::bigint * interval '1 millisecond',
    @source_namespace, @source_name, @source_uid,
    coalesce(@deadline_at::timestamptz, workflow.now() + @deadline_ms::bigint * interval '1 millisecond'),
    @traceparent::text)
on conflict (idempotency_key) do nothing
returning id;

-- name: RunIDByIdempotencyKey
select id from workflow.workflow_run where idempotency_key = @idempotency_key;

-- name: RunGet
select id, type, payload, status, priority, run_at, idempotency_key, attempt, max_attempts,
       leased_by, lease_until, last_error, result,
       (extract(epoch from retry_base_delay) * 1000)::bigint,
       (extract(epoch from retry_max_delay) * 1000)::bigint,
       source_namespace, source_name, source_uid,
       started_at, finished_at, created_at, updated_at, deleted_at,
       lease_token, parent_id, parent_step, deadline_at, wait_kind, wait_step, wait_signal, traceparent
from workflow.workflow_run
where id = @id;

-- name: RunList
-- Keyset pagination in creation order; the cursor is the last row's
-- (created_at, id).
select id, type, payload, status, priority, run_at, idempotency_key, attempt, max_attempts,
       leased_by, lease_until, last_error, result,
       (extract(epoch from retry_base_delay) * 1000)::bigint,
       (extract(epoch from retry_max_delay) * 1000)::bigint,
       source_namespace, source_name, source_uid,
       started_at, finished_at, created_at, updated_at, deleted_at,
       lease_token, parent_id, parent_step, deadline_at, wait_kind, wait_step, wait_signal, traceparent
from workflow.workflow_run
where deleted_at is null
  and (@type_prefix::text is null or type like workflow.prefix_pattern(@type_prefix::text))
  and (cardinality(@statuses::text[]) = 0 or status = any (@statuses::text[]))
  and (@after_created_at::timestamptz is null
       or (created_at, id) > (@after_created_at::timestamptz, @after_id::uuid))
order by created_at, id
limit @limit;

-- name: RunCancel
-- The setting is read by the cancel trigger (the event's "by"); the subquery
-- runs before the call.
select workflow.cancel_run(@id)
from (select set_config('workflow.cancelled_by', @by::text, true)) s;
