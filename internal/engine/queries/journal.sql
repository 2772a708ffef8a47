-- name: StepRecord
select idx, status, output, message
from workflow.record_steps(@worker_id, @ids, @tokens, @names, @positions, @outputs);

-- name: StepPark
select status, outcome, output, error, wake_at, message
from workflow.park_run(@worker_id, @id, @token, @kind, @step, @position, @wake_at, @delay_ms, @signal);

-- name: StepStartChild
select status, child_id, outcome, output, error, message
from workflow.start_child(@worker_id, @id, @token, @step, @position, @type, @payload, @priority,
                          @max_attempts, @deadline_ms);

-- name: StepList
-- A run's journal in position order.
select name, position, kind, outcome, output, error, attempt, child_id, wake_at, started_at, finished_at
from workflow.run_steps(@run_id);

-- name: SignalSend
select signal_id, duplicate, delivered
from workflow.send_signal(@run_id, @name, @payload, @idempotency_key, @by);

-- name: SignalList
-- A run's signals, oldest first.
select id, name, payload, idempotency_key, created_at, consumed_at, consumed_by
from workflow.run_signals(@run_id);

-- name: RunChildren
-- A run's child runs in creation order, at most @limit.
select id, parent_step, type, status, attempt, last_error from workflow.run_children(@parent_id, @limit);
