-- Version 8: a claim's 'started' and a completion's 'succeeded' are kept as
-- one batch row per statement, namespace and history span
-- (workflow_event.run_ids and attempts) instead of a row per run; a run's
-- trail reads the same through run_trail, run_events and the view
-- run_event. Events recorded before the upgrade stay rows of their own.
-- from: version 7 at 4b4433700ac494fd903f9152f214b3a2881b16f0
--
-- The columns are added without a default (no rewrite); the check reads
-- the trail once (every existing row passes it); the index of batch rows
-- starts empty (the schema file creates it). Non-owners read batch rows
-- of the runs they may read (the policy below).

alter table workflow.workflow_event add column if not exists run_ids uuid[];
alter table workflow.workflow_event add column if not exists attempts integer[];
do $$ begin
    if not exists (select 1 from pg_catalog.pg_constraint
                   where conrelid = 'workflow.workflow_event'::regclass and conname = 'workflow_event_batch_valid') then
        alter table workflow.workflow_event add constraint workflow_event_batch_valid
            check ((run_ids is null and attempts is null)
                   or (event_type in ('started', 'succeeded') and cardinality(run_ids) >= 1
                       and cardinality(attempts) = cardinality(run_ids)));
    end if;
    if exists (select 1 from pg_catalog.pg_policies
               where schemaname = 'workflow' and tablename = 'workflow_event'
                 and policyname = 'workflow_event_namespace_read') then
        alter policy workflow_event_namespace_read on workflow.workflow_event
            using (exists (select 1 from workflow.workflow_run r where r.id = workflow_id)
                   or (run_ids is not null
                       and exists (select 1 from workflow.workflow_run r where r.id = any (run_ids))));
    end if;
end $$;

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (8);
