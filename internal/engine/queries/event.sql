-- name: EventListAfter :many
-- A run's audit trail after an event id (0: all of it), oldest first.
select id, workflow_id, event_type, data, created_at from workflow.run_events(@workflow_id, @after_id);

-- name: EventCountsAfter :many
-- Transitions since an event id, by type, for the metrics.
select event_type, events, lease_expiries, last_id from workflow.event_counts_after(@after_id);

-- name: EventLatestID :one
-- The latest id drawn for an event (its transaction may not have committed).
select workflow.latest_event_id();
