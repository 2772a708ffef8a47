-- name: LogAppend :many
-- Keeps log lines of attempts a worker holds.
select id::text, kept
from workflow.append_run_logs(@worker_id, @ids::uuid[], @tokens, @dropped, @line_runs::uuid[], @line_ats,
                              @line_levels, @line_messages);

-- name: LogList :many
-- A run's log lines after a line, in order.
select attempt, seq, logged_at, level, message
from workflow.run_logs(@id::uuid, @after_attempt, @after_seq, @max_rows);

-- name: LogAttempts :many
-- Per attempt of a run that logged: lines kept, their octets, lines dropped.
select attempt, lines, bytes, dropped, first_seq from workflow.run_log_attempts(@id::uuid);
