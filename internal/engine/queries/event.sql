-- name: EventList
select id, workflow_id, event_type, data, created_at
from workflow.workflow_event
where workflow_id = @workflow_id
order by id;
