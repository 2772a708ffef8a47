-- Version 3: flow limits kept by the claim (runs of a type and of a
-- concurrency key leased at once, starts per window), and the concurrency
-- key a producer may give a run.
-- from: version 2 at 5792b79e533f4675a68ede069e08ecc91941c028
alter table workflow.workflow_run
    add column concurrency_key text,
    add column dag_skipped text[],
    add column dag_fanout jsonb,
    add constraint workflow_run_concurrency_key_length
        check (char_length(concurrency_key) >= 1 and char_length(concurrency_key) <= 255),
    drop constraint workflow_run_wait_kind_valid,
    add constraint workflow_run_wait_kind_valid check (wait_kind = any ('{sleep,signal,child,dag,limit}'));
alter table workflow.workflow_registry
    add column max_leased integer,
    add column max_leased_per_key integer,
    add column rate_limit integer,
    add column rate_period interval,
    add column rate_per_key boolean not null default false,
    add constraint workflow_registry_flow_limits_valid
        check (max_leased between 1 and 100000 and max_leased_per_key between 1 and 100000
               and rate_limit between 1 and 1000000
               and rate_period between interval '1 millisecond' and interval '1 day'),
    add constraint workflow_registry_rate_complete
        check ((rate_limit is null) = (rate_period is null) and (rate_limit is not null or not rate_per_key)),
    add constraint workflow_registry_flow_limits_need_runtime
        check (runtime is not null
               or (max_leased is null and max_leased_per_key is null and rate_limit is null));
-- The claim's indexes leave out runs parked on a limit; the file creates
-- them again with that predicate.
drop index workflow.idx_workflow_run_claim_type;
drop index workflow.idx_workflow_run_claim;
-- New arguments or result columns: the file creates them again.
drop function if exists workflow.dag_steps(uuid);
drop function if exists workflow.dag_ready_steps(workflow.workflow_run, jsonb);
drop function if exists workflow.create_runs(text[], text[], integer[], timestamptz[], text[], integer[], bigint[], bigint[],
                                   bigint[], text[]);
drop function if exists workflow.create_run(text, jsonb, integer, timestamptz, text, integer, bigint, timestamptz, bigint,
                                  bigint, text, text, text, text);
drop function if exists workflow.put_registry(text, text, boolean, text, text, text, jsonb);
drop function if exists workflow.registry_entries(text, text, text);

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (3);
