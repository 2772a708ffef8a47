-- name: EventList
select id, workflow_id, event_type, data, created_at from workflow.run_events(@workflow_id, 0);

-- name: EventListAfter
select id, workflow_id, event_type, data, created_at from workflow.run_events(@workflow_id, @after_id);

-- name: EventCountsAfter
-- Transitions since an event id, by type, for the metrics.
select event_type, events, lease_expiries, last_id from workflow.event_counts_after(@after_id);

-- name: EventLatestID
-- The latest id drawn for an event (its transaction may not have committed).
select workflow.latest_event_id();
