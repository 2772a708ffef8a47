-- name: StepRecord :many
select idx, status, output, message
from workflow.record_steps(@worker_id, @ids, @tokens, @names, @positions, @outputs);

-- name: StepPark :one
select status, outcome, output, error, wake_at, message
from workflow.park_run(@worker_id, @id, @token, @kind, @step, @position, sqlc.narg(wake_at)::timestamptz,
                       sqlc.narg(delay_ms)::bigint, sqlc.narg(signal)::text);

-- name: StepStartChild :one
select status, child_id, outcome, output, error, message
from workflow.start_child(@worker_id, @id, @token, @step, @position, @type, sqlc.narg(payload)::jsonb,
                          sqlc.narg(priority)::integer,
                          sqlc.narg(max_attempts)::integer, sqlc.narg(deadline_ms)::bigint);

-- name: StepList :many
-- A run's journal in position order.
select name, position, kind, outcome, output, error, attempt, child_id, wake_at, started_at, finished_at
from workflow.run_steps(@run_id);

-- name: SignalSend :one
select signal_id, duplicate, delivered
from workflow.send_signal(@run_id, @name, @payload, sqlc.narg(idempotency_key)::text, sqlc.narg(by)::text);

-- name: SignalList :many
-- A run's signals, oldest first.
select id, name, payload, idempotency_key, created_at, consumed_at, consumed_by
from workflow.run_signals(@run_id);

-- name: RunChildren :many
-- A run's child runs in creation order, at most @max_rows.
select id, parent_step, type, status, attempt, last_error from workflow.run_children(@parent_id, @max_rows);
