-- name: HistoryPrepare :one
-- Partitions of the audit trail for the span in progress and the next ones.
select workflow.prepare_history_partitions(@ahead);

-- name: HistoryDrop :one
-- Drops the partitions of the audit trail retention has emptied.
select workflow.drop_history_partitions(sqlc.arg(retention_ms)::bigint * interval '1 millisecond');

-- name: HistoryList :many
-- The time partitions of the audit trail, oldest first.
select partition_name, from_time, to_time, runs_left, bytes from workflow.history_partitions();
