-- Version 4: the audit trail in partitions by run id (spans of creation
-- time), which retention drops whole; the span one partition holds.
-- from: version 3 at 2530dd25abb31301a6127eacaeebcb5a3684617b
--
-- The table kept so far becomes the default partition as it is, rows in
-- place (nothing is copied): its identity is handed to the new parent,
-- which numbers on from its last id, and its primary key and index take
-- the names a default partition's get. Its trails leave row by row with
-- their runs, as before; new runs' trails go to the time partitions the
-- manager prepares.
alter table workflow.workflow_settings
    add column history_partition interval not null default '1 day',
    add constraint workflow_settings_history_partition_range
        check (history_partition between interval '1 minute' and interval '31 days'
               and extract(epoch from history_partition) = floor(extract(epoch from history_partition)));
-- The next event's number, from the old identity's sequence (not a scan).
create temporary table history_partitions_next on commit drop as
    select case when s.is_called then s.last_value + 1 else s.last_value end as next_id
    from workflow.workflow_event_id_seq s;
alter table workflow.workflow_event rename to workflow_event_default;
alter table workflow.workflow_event_default alter column id drop identity;
comment on table workflow.workflow_event_default is null;
alter table workflow.workflow_event_default rename constraint workflow_event_pkey to workflow_event_default_pkey;
alter index workflow.idx_workflow_event_id rename to workflow_event_default_id_idx;
-- The same columns, defaults and check as the old table (the file has the
-- definition); the identity is given back below.
create table workflow.workflow_event (
    like workflow.workflow_event_default including defaults including constraints,
    constraint workflow_event_pkey primary key (workflow_id, id)
) partition by range (workflow_id);
alter table workflow.workflow_event alter column id add generated always as identity;
do $$
declare
    v_next bigint;
begin
    select next_id into v_next from history_partitions_next;
    execute format('alter table workflow.workflow_event alter column id restart with %s', v_next);
end
$$;
alter table workflow.workflow_event attach partition workflow.workflow_event_default default;

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (4);
