-- Version 10: validation off the per-statement path. The run table's
-- rules on one column become domains (whose checks the server keeps
-- compiled and runs only for the columns a statement writes): type,
-- payload, priority, run_at and deadline_at, idempotency_key,
-- concurrency_key, result, traceparent, source_namespace, source_name and
-- source_uid are retyped to them, each domain's constraint named as the
-- CHECK it replaces. The rules on columns written once (parent_step_set,
-- retry_policy_valid, dag_key, reserved_key) leave the table: the file's
-- on_run_inserted checks them at insert, and its trigger
-- workflow_run_written_once refuses later writes of those columns.
-- from: version 9 at 2718c3dd2122e9bd381fa0df8e7a8751d36fae2f
--
-- Rebuilt while the upgrade holds workflow_run (workers wait): the table is
-- rewritten once (the new types are checked row by row) with every index.
-- Dropped here and made again by the file: the view run_view and the
-- functions returning its rows, the SQL-bodied functions bound to the
-- retyped columns, and the triggers naming them. The two insert policies
-- that name them are dropped and made again below, in this transaction;
-- the grants of what the file makes again come back with the roles script
-- (engine.CreateRoles, which the manager runs after every upgrade).

-- The domains, made by the same statements as the file's.
do $$ begin
    if to_regtype('workflow.run_type') is null then
        create domain workflow.run_type as text
            constraint workflow_run_type_format
            check (char_length(value) <= 253 and value ~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$');
    end if;
    if to_regtype('workflow.run_payload') is null then
        create domain workflow.run_payload as jsonb
            constraint workflow_run_payload_object check (jsonb_typeof(value) = 'object');
    end if;
    if to_regtype('workflow.run_priority') is null then
        create domain workflow.run_priority as integer
            constraint workflow_run_priority_range check (value >= 0 and value <= 1000000);
    end if;
    if to_regtype('workflow.run_idempotency_key') is null then
        create domain workflow.run_idempotency_key as text
            constraint workflow_run_idempotency_key_length check (char_length(value) >= 1 and char_length(value) <= 512);
    end if;
    if to_regtype('workflow.run_concurrency_key') is null then
        create domain workflow.run_concurrency_key as text
            constraint workflow_run_concurrency_key_length check (char_length(value) >= 1 and char_length(value) <= 255);
    end if;
    if to_regtype('workflow.run_result') is null then
        create domain workflow.run_result as jsonb
            constraint workflow_run_result_size check (octet_length(value::text) <= 1048576);
    end if;
    if to_regtype('workflow.run_traceparent') is null then
        create domain workflow.run_traceparent as text
            constraint workflow_run_traceparent_format
            check (octet_length(value) = 55 and value ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                   and substr(value, 4, 32) <> '00000000000000000000000000000000'
                   and substr(value, 37, 16) <> '0000000000000000');
    end if;
    -- A mirrored WorkflowRun's namespace, name and UID (one rule, three lengths).
    if to_regtype('workflow.run_source_namespace') is null then
        create domain workflow.run_source_namespace as text
            constraint workflow_run_source_bounded check (char_length(value) <= 63);
    end if;
    if to_regtype('workflow.run_source_name') is null then
        create domain workflow.run_source_name as text
            constraint workflow_run_source_bounded check (char_length(value) <= 253);
    end if;
    if to_regtype('workflow.run_source_uid') is null then
        create domain workflow.run_source_uid as text
            constraint workflow_run_source_bounded check (char_length(value) <= 128);
    end if;
    -- run_at and deadline_at: a real time, never infinity.
    if to_regtype('workflow.run_time') is null then
        create domain workflow.run_time as timestamptz
            constraint workflow_run_times_finite check (isfinite(value));
    end if;
end $$;

drop function if exists workflow.child_runs(uuid);
drop function if exists workflow.dag_ready_steps(workflow.workflow_run, jsonb);
drop function if exists workflow.dag_step_states(workflow.workflow_run);
drop view if exists workflow.run_view cascade;
drop trigger if exists workflow_run_flow_slot_freed on workflow.workflow_run;
drop trigger if exists workflow_run_wake on workflow.workflow_run;
drop trigger if exists workflow_source_run_changed on workflow.workflow_run;
drop trigger if exists workflow_run_written_once on workflow.workflow_run;
create temporary table run_insert_policies on commit drop as
select p.policyname::text as name from pg_catalog.pg_policies p
where p.schemaname = 'workflow' and p.tablename = 'workflow_run'
  and p.policyname in ('workflow_run_namespace_insert', 'workflow_run_producer_insert');
drop policy if exists workflow_run_namespace_insert on workflow.workflow_run;
drop policy if exists workflow_run_producer_insert on workflow.workflow_run;

alter table workflow.workflow_run
    drop constraint if exists workflow_run_type_format,
    drop constraint if exists workflow_run_payload_object,
    drop constraint if exists workflow_run_priority_range,
    drop constraint if exists workflow_run_idempotency_key_length,
    drop constraint if exists workflow_run_concurrency_key_length,
    drop constraint if exists workflow_run_result_size,
    drop constraint if exists workflow_run_traceparent_format,
    drop constraint if exists workflow_run_source_bounded,
    drop constraint if exists workflow_run_times_finite,
    drop constraint if exists workflow_run_parent_step_set,
    drop constraint if exists workflow_run_retry_policy_valid,
    drop constraint if exists workflow_run_dag_key,
    drop constraint if exists workflow_run_reserved_key;
alter table workflow.workflow_run
    alter column type type workflow.run_type,
    alter column payload type workflow.run_payload,
    alter column payload set default '{}',
    alter column priority type workflow.run_priority,
    alter column priority set default 100,
    alter column run_at type workflow.run_time,
    alter column run_at set default now(),
    alter column deadline_at type workflow.run_time,
    alter column idempotency_key type workflow.run_idempotency_key,
    alter column concurrency_key type workflow.run_concurrency_key,
    alter column result type workflow.run_result,
    alter column traceparent type workflow.run_traceparent,
    alter column source_namespace type workflow.run_source_namespace,
    alter column source_name type workflow.run_source_name,
    alter column source_uid type workflow.run_source_uid;

-- The insert policies the database had, with the roles script's bodies
-- (a producer must not meet the table without them).
do $$ begin
    if exists (select 1 from run_insert_policies where name = 'workflow_run_producer_insert') then
        create policy workflow_run_producer_insert on workflow.workflow_run
            as restrictive for insert to workflow_producer
            with check (source_namespace is null and source_name is null and source_uid is null
                        and (idempotency_key is null
                             or not (starts_with(idempotency_key, 'k8s:')
                                     or starts_with(idempotency_key, 'k8s-uid:'))));
    end if;
    if exists (select 1 from run_insert_policies where name = 'workflow_run_namespace_insert') then
        create policy workflow_run_namespace_insert on workflow.workflow_run
            as restrictive for insert to public
            with check (((select workflow.caller_namespaces('producer')) is null
                         or namespace = any ((select workflow.caller_namespaces('producer'))::text[]))
                        and workflow.type_shared(type_namespace, type, namespace));
    end if;
end $$;

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (10);
