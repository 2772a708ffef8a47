-- name: RunStepSummary :one
-- What a mirrored run's status shows of its journal and its children.
select steps_done, last_step, children from workflow.run_step_summary(@run_id);
