-- Version 6: namespaces are tenants. Every run belongs to a namespace
-- (workflow_run.namespace) and names the namespace whose registry and
-- workers run its type (type_namespace); registry entries, rate windows and
-- schedules belong to a namespace; database logins are bound to namespaces
-- (workflow_namespace_grant).
-- from: version 5 at f08a59069d286cb7560c6627501d546cbbfdff4c
--
-- Existing rows move to their source namespace (a mirrored run, registry
-- entry or schedule), a child to its parent's, everything else to
-- 'default'. Every login that is a member of workflow_producer,
-- workflow_worker or workflow_reader today is bound to 'default' in that
-- capacity, so an install that used one namespace keeps working as it did;
-- bind and unbind them with workflow.grant_namespace and
-- workflow.revoke_namespace afterwards (docs/security.md).
--
-- Rebuilt while the upgrade holds workflow_run (workers wait): the claim,
-- depth, flow-limit and namespace indexes (the file makes them again with
-- the type namespace first), and every run row is rewritten once to fill
-- the two columns. Every step may run again on a database it already
-- brought to version 6 (and a table that an older release did not have
-- yet is left to the file).

do $$ begin
    if to_regtype('workflow.namespace_name') is null then
        create domain workflow.namespace_name as text
            constraint namespace_name_format check (char_length(value) <= 63 and value ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$');
    end if;
end $$;

-- Bindings, made by the same statement as the file's.
create table if not exists workflow.workflow_namespace_grant (
    role_name text not null,
    namespace workflow.namespace_name not null,
    capacity text not null,
    granted_by text not null default session_user,
    granted_at timestamptz not null default now(),
    constraint workflow_namespace_grant_pkey primary key (role_name, namespace, capacity),
    constraint workflow_namespace_grant_role_length check (char_length(role_name) between 1 and 63),
    constraint workflow_namespace_grant_capacity_valid check (capacity in ('producer', 'worker', 'reader'))
);
insert into workflow.workflow_namespace_grant (role_name, namespace, capacity)
select distinct r.rolname, 'default', c.capacity
from (values ('workflow_producer', 'producer'), ('workflow_worker', 'worker'), ('workflow_reader', 'reader')) c(role, capacity)
join pg_catalog.pg_roles g on g.rolname = c.role
join pg_catalog.pg_roles r on r.rolcanlogin and r.oid <> g.oid and pg_catalog.pg_has_role(r.oid, g.oid, 'MEMBER')
where not r.rolsuper and char_length(r.rolname) <= 63
on conflict do nothing;

-- Runs.
drop index if exists workflow.idx_workflow_run_claim_type;
drop index if exists workflow.idx_workflow_run_claim;
drop index if exists workflow.idx_workflow_run_depth;
drop index if exists workflow.idx_workflow_run_namespace_created;
drop index if exists workflow.idx_workflow_run_flow_key;
drop index if exists workflow.idx_workflow_run_flow_parked;
drop index if exists workflow.idx_workflow_run_flow_due;
drop index if exists workflow.idx_workflow_run_flow_list;
drop trigger if exists workflow_run_child_traceparent on workflow.workflow_run;
do $$
declare
    v_n bigint;
begin
    if exists (select 1 from pg_catalog.pg_attribute
               where attrelid = 'workflow.workflow_run'::regclass and attname = 'type_namespace') then
        return; -- already done
    end if;
    alter table workflow.workflow_run
        add column namespace workflow.namespace_name not null default 'default',
        add column type_namespace workflow.namespace_name;
    -- (The triggers see nothing to do: only the two new columns move.)
    alter table workflow.workflow_run disable trigger user;
    update workflow.workflow_run set namespace = source_namespace
    where source_namespace ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' and char_length(source_namespace) <= 63;
    -- Children take their parents' namespace, level by level (a tree of
    -- workflows is shallow; each pass moves one level).
    for i in 1 .. 1000 loop
        update workflow.workflow_run c set namespace = p.namespace
        from workflow.workflow_run p
        where c.parent_id = p.id and c.namespace is distinct from p.namespace;
        get diagnostics v_n = row_count;
        exit when v_n = 0;
    end loop;
    update workflow.workflow_run set type_namespace = namespace;
    alter table workflow.workflow_run enable trigger user;
    alter table workflow.workflow_run alter column type_namespace set not null;
end $$;

-- Registry entries: the namespace of their object; the key is the
-- namespace and the name.
do $$ begin
    if not exists (select 1 from pg_catalog.pg_attribute
                   where attrelid = 'workflow.workflow_registry'::regclass and attname = 'namespace') then
        alter table workflow.workflow_registry
            add column namespace workflow.namespace_name not null default 'default',
            add column shared_with text[] not null default '{}';
        update workflow.workflow_registry set namespace = owner_namespace
        where owner_namespace ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' and char_length(owner_namespace) <= 63;
        alter table workflow.workflow_registry drop constraint workflow_registry_pkey;
        alter table workflow.workflow_registry add constraint workflow_registry_pkey primary key (namespace, workflow_name);
    end if;

    -- Rate windows: per namespace and type.
    if not exists (select 1 from pg_catalog.pg_attribute
                   where attrelid = to_regclass('workflow.workflow_flow_window') and attname = 'namespace')
       and to_regclass('workflow.workflow_flow_window') is not null then
        alter table workflow.workflow_flow_window add column namespace text not null default 'default';
        update workflow.workflow_flow_window w set namespace = g.namespace
        from workflow.workflow_registry g where g.workflow_name = w.type;
        alter table workflow.workflow_flow_window drop constraint workflow_flow_window_pkey;
        alter table workflow.workflow_flow_window
            add constraint workflow_flow_window_pkey primary key (namespace, type, concurrency_key);
    end if;

    -- Schedules: their runs are recorded in their namespace.
    if not exists (select 1 from pg_catalog.pg_attribute
                   where attrelid = to_regclass('workflow.workflow_schedule') and attname = 'namespace')
       and to_regclass('workflow.workflow_schedule') is not null then
        alter table workflow.workflow_schedule add column namespace workflow.namespace_name not null default 'default';
        update workflow.workflow_schedule set namespace = source_namespace where source_namespace is not null;
    end if;
end $$;

-- Functions whose parameters' names or results changed (the file makes
-- them again).
drop function if exists workflow.list_filter_match(text, timestamptz, uuid, text[], text, timestamptz, timestamptz,
                                                   timestamptz, uuid);
drop function if exists workflow.list_runs_newest(text, text, text, text[], timestamptz, timestamptz, timestamptz,
                                                  uuid, integer);
drop function if exists workflow.registry_entries(text, text, text);
drop function if exists workflow.run_counts();
drop function if exists workflow.oldest_runnable();
drop function if exists workflow.finished_since(timestamptz);

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (6);
