-- Version 16: the schema's bookkeeping moves into SQL. The file opens with
-- workflow.begin_schema(16) and closes with workflow.finish_schema(), which
-- record a fresh install's version and drop the routines the file no
-- longer defines; every migration records its own version (as this one
-- does, last); workflow.schema_version() answers any client. The hot
-- calls' planner settings stand at each function's definition instead of
-- being set again after the file. The rules a caller can break raise the
-- project's own SQLSTATE (SW001) with their sentence: each is dropped here
-- and the file adds it again in that form, which validates it once more:
-- workflow_run is read once for each of its twelve domain rules and its
-- two table rules (a result's size reads every result as text), and
-- workflow_registry, workflow_step and workflow_signal once per rule, all
-- under the upgrade's ACCESS EXCLUSIVE lock, which workers wait behind
-- until the upgrade commits: on a large inbox, upgrade in a quiet window.
-- No index is rebuilt.
-- from: version 15 at 5b209598f17de6f936b5b160aafaa40363a1622b

-- Only over version 15: an earlier database runs the migrations before
-- this one first.
do $$ begin
    if (select max(v.version) from workflow.schema_version v) is distinct from 15 then
        raise exception 'migration 0016 upgrades version 15; this database is at version %',
            (select max(v.version) from workflow.schema_version v) using errcode = 'SW007';
    end if;
end $$;

alter domain workflow.namespace_name drop constraint if exists namespace_name_format;
alter domain workflow.run_type drop constraint if exists workflow_run_type_format;
alter domain workflow.run_payload drop constraint if exists workflow_run_payload_object;
alter domain workflow.run_priority drop constraint if exists workflow_run_priority_range;
alter domain workflow.run_idempotency_key drop constraint if exists workflow_run_idempotency_key_length;
alter domain workflow.run_concurrency_key drop constraint if exists workflow_run_concurrency_key_length;
alter domain workflow.run_result drop constraint if exists workflow_run_result_size;
alter domain workflow.run_traceparent drop constraint if exists workflow_run_traceparent_format;
alter domain workflow.run_source_namespace drop constraint if exists workflow_run_source_bounded;
alter domain workflow.run_source_name drop constraint if exists workflow_run_source_bounded;
alter domain workflow.run_source_uid drop constraint if exists workflow_run_source_bounded;
alter domain workflow.run_time drop constraint if exists workflow_run_times_finite;
alter table workflow.workflow_run
    drop constraint if exists workflow_run_max_attempts_range,
    drop constraint if exists workflow_run_status_valid;
alter table workflow.workflow_registry
    drop constraint if exists workflow_registry_name_format,
    drop constraint if exists workflow_registry_runtime_or_steps,
    drop constraint if exists workflow_registry_runtime_valid,
    drop constraint if exists workflow_registry_definition_size,
    drop constraint if exists workflow_registry_flow_limits_valid,
    drop constraint if exists workflow_registry_rate_complete,
    drop constraint if exists workflow_registry_flow_limits_need_runtime,
    drop constraint if exists workflow_registry_shared_with_valid;
alter table workflow.workflow_step
    drop constraint if exists workflow_step_error_length,
    drop constraint if exists workflow_step_name_format,
    drop constraint if exists workflow_step_position_range,
    drop constraint if exists workflow_step_output_size;
alter table workflow.workflow_signal
    drop constraint if exists workflow_signal_idempotency_key_length,
    drop constraint if exists workflow_signal_name_format,
    drop constraint if exists workflow_signal_payload_size;

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (16);
