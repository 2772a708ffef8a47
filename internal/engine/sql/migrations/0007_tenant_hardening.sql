-- Version 7: no tenant forges, redirects or stalls another. Lease tokens
-- nobody else can read: a claim draws its token at random and hands it to
-- the claimer alone; the run keeps only its fence (workflow.lease_fence, a
-- one-way digest of the token), so a login that reads the row cannot write
-- as the holder. Every event records the database login that made it
-- (workflow_event.db_user). A namespace's schedules are bounded by the
-- owner's workflow_settings.max_schedules_per_namespace (default 1000), and
-- the logins bound to namespaces get an idle bound
-- (workflow_settings.idle_transaction_timeout, default 5 minutes) when the
-- owner may alter roles (a notice gives the statement otherwise).
-- from: version 6 at f7059f7a5093701b146649f346daf9ef40543f7a
--
-- The leases held while the upgrade runs keep working: their tokens (from
-- the old sequence) are replaced by their fences, which the holders' next
-- writes match. Rewrites the leased rows only (a finished run's old token
-- fences nothing); events recorded before the upgrade keep db_user null
-- (who made them was not recorded).

-- The sequence goes first: dropping it waits for the claims in flight
-- (they hold it) and holds new ones back, so the rewrite below sees every
-- lease drawn from it. Once it is gone the rewrite is done: running this
-- file again changes nothing.
do $$ begin
    if to_regclass('workflow.lease_token_seq') is not null then
        drop sequence workflow.lease_token_seq cascade;
        update workflow.workflow_run
        set lease_token = ('x' || left(encode(sha256(int8send(lease_token)), 'hex'), 16))::bit(64)::bigint
        where status = 'leased' and lease_token is not null;
    end if;
end $$;

alter table workflow.workflow_event add column if not exists db_user text;
alter table workflow.workflow_event alter column db_user set default session_user;


-- The schedules a namespace may have (put_schedule counts them).
alter table workflow.workflow_settings add column if not exists max_schedules_per_namespace integer not null default 1000;
do $$ begin
    if not exists (select 1 from pg_catalog.pg_constraint
                   where conrelid = 'workflow.workflow_settings'::regclass
                     and conname = 'workflow_settings_max_schedules_range') then
        alter table workflow.workflow_settings add constraint workflow_settings_max_schedules_range
            check (max_schedules_per_namespace between 1 and 1000000);
    end if;
end $$;

-- The idle bound grant_namespace gives the logins it binds.
alter table workflow.workflow_settings add column if not exists idle_transaction_timeout interval not null default '5 minutes';
do $$ begin
    if not exists (select 1 from pg_catalog.pg_constraint
                   where conrelid = 'workflow.workflow_settings'::regclass
                     and conname = 'workflow_settings_idle_transaction_range') then
        alter table workflow.workflow_settings add constraint workflow_settings_idle_transaction_range
            check (idle_transaction_timeout between interval '1 second' and interval '1 day');
    end if;
end $$;
-- Logins bound before the upgrade get the bound now, as grant_namespace
-- gives it (those with a bound of their own keep theirs).
do $$
declare
    v_role text;
begin
    for v_role in
        select distinct g.role_name from workflow.workflow_namespace_grant g
        join pg_catalog.pg_roles r on r.rolname = g.role_name
        where r.rolcanlogin
          and not exists (select 1 from pg_catalog.pg_db_role_setting s
                          where s.setrole = r.oid
                            and s.setdatabase in (0, (select d.oid from pg_catalog.pg_database d
                                                      where d.datname = current_database()))
                            and exists (select 1 from unnest(s.setconfig) c
                                        where c like 'idle\_in\_transaction\_session\_timeout=%'))
    loop
        begin
            execute format('alter role %I in database %I set idle_in_transaction_session_timeout = 300000',
                           v_role, current_database());
        exception when insufficient_privilege then
            raise notice 'version 7: as an administrator, run: alter role % in database % set idle_in_transaction_session_timeout = 300000',
                quote_ident(v_role), quote_ident(current_database());
        end;
    end loop;
end $$;

-- A SQL schedule's name is its namespace's (the file makes
-- idx_workflow_schedule_name): two namespaces' producers may both have a
-- "nightly".
drop index if exists workflow.idx_workflow_schedule_identity;

-- When a schedule's tick was last found busy (fire_due_schedules fires the
-- others first).
do $$ begin
    if to_regclass('workflow.workflow_schedule') is not null then
        alter table workflow.workflow_schedule add column if not exists busy_at timestamptz;
    end if;
end $$;

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (7);
