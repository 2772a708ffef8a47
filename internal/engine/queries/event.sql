-- name: EventList
select id, workflow_id, event_type, data, created_at
from workflow.workflow_event
where workflow_id = @workflow_id
order by id;

-- name: EventListAfter
select id, workflow_id, event_type, data, created_at
from workflow.workflow_event
where workflow_id = @workflow_id and id > @after_id
order by id;

-- name: EventCountsAfter
-- Transitions since an event id, by type, for the metrics.
select event_type, count(*), max(id)
from workflow.workflow_event
where id > @after_id
group by event_type;

-- name: EventLatestID
-- The latest id drawn for an event (its transaction may not have committed).
select case when is_called then last_value else 0 end from workflow.workflow_event_id_seq;
