-- The narrow design's run table: the indexes that name what a claim or a
-- completion changes (status, lease_until, finished_at) leave it; their
-- work moves to the narrow tables (the claim's and the depth's to
-- proto_queue, the reaper's to proto_lease) or to columns written once.
-- Without them a completion's update of the run row is HOT. Applied to
-- the prototype's database only.
drop index workflow.idx_workflow_run_claim_type, workflow.idx_workflow_run_claim, workflow.idx_workflow_run_depth,
    workflow.idx_workflow_run_lease_until, workflow.idx_workflow_run_deadline, workflow.idx_workflow_run_child,
    workflow.idx_workflow_run_type_created, workflow.idx_workflow_run_ended_badly, workflow.idx_workflow_run_flow_key,
    workflow.idx_workflow_run_finished_at, workflow.idx_workflow_run_schedule_key;
