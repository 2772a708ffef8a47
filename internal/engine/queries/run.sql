-- name: RunInsert
-- Records one intent, or finds the run that holds its idempotency key.
select id, created
from workflow.create_run(@type, @payload, @priority::integer, @run_at::timestamptz, @idempotency_key,
                         @max_attempts::integer, @deadline_ms::bigint, @deadline_at::timestamptz,
                         @retry_base_ms::bigint, @retry_max_ms::bigint, @traceparent::text,
                         @source_namespace, @source_name, @source_uid, @concurrency_key::text,
                         @namespace::text, @type_namespace::text);

-- name: RunIDByIdempotencyKey
select id from workflow.run_by_key(@idempotency_key) id where id is not null;

-- name: RunGet
-- The columns of workflow.run_view, in its order (scanRun reads them).
select * from workflow.get_run(@id);

-- name: RunList
-- Keyset pagination in creation order; the cursor is the last row's
-- (created_at, id). The columns of workflow.run_view, as RunGet.
select *
from workflow.list_runs(@type_prefix::text, @statuses::text[], @after_created_at::timestamptz, @after_id::uuid,
                        @limit);

-- name: RunRetry
select r.status, r.message from workflow.retry_run(@id, @attempts::integer, @by::text) r;

-- name: RunCancel
-- The setting is read by the cancel trigger (the event's "by"); the subquery
-- runs before the call.
select workflow.cancel_run(@id)
from (select set_config('workflow.cancelled_by', @by::text, true)) s;
