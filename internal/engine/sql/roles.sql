-- Database roles for the inbox: what workers, producers and consoles may do.
--
--   workflow_worker    calls the worker functions (claim, heartbeat, complete,
--                      fail, release, journal, park, children, reap, deadlines)
--                      and reads the registry. No other privilege on any table:
--                      every write goes through a function.
--   workflow_producer  records runs with a plain INSERT (the seed's) or
--                      workflow.create_runs (a batch), cancels
--                      them with the seed's UPDATE or workflow.cancel_run,
--                      soft-deletes them, sends signals, and reads runs, events,
--                      journals and signals.
--   workflow_reader    reads every table, workflow.queue_depth,
--                      workflow.type_depths and workflow.inbox_version (a console,
--                      a dashboard, KEDA's PostgreSQL scaler), and lists
--                      schedules.
--   (producers also keep their own cron schedules: put_schedule,
--   delete_schedule.)
--
-- The roles are NOLOGIN: grant them to login users, and bind each login to
-- the namespaces it acts on (a login bound to none acts on none), e.g.
--   create role app_worker login password '...';
--   grant workflow_worker to app_worker;
--   select workflow.grant_namespace('app_worker', 'payments', 'worker');
-- Row-level security and the functions' own checks keep a login inside its
-- namespaces; the schema's owner acts on every namespace.
--
-- Run this after the schema is installed or upgraded (engine.Migrate, which
-- runs workflow.sql and the release-to-release migrations; then
-- engine.CreateRoles does it, or psql -v ON_ERROR_STOP=1 -f roles.sql), and
-- again after every upgrade: it is idempotent, and it brings the grants in
-- line with the functions workflow.sql defines. Whoever runs it must own
-- the workflow schema's tables and functions (the user that installed the
-- schema), and needs CREATEROLE
-- only while a role is missing: a DBA may create the three roles beforehand
-- (create role workflow_worker nologin; ...) and leave the rest to the owner.
--
-- Role names are global to the Postgres cluster; the grants are per database.
-- Several databases of one cluster share the three roles.

begin;

-- Migrations and this script never run at the same time (the same lock as
-- engine.Migrate takes on an installed schema, which no login but the
-- schema's owner may take; the wait is bounded).
set local lock_timeout = '60s';
lock table workflow.schema_version in share row exclusive mode;
set local lock_timeout = 0;

do $$
declare
    v_role text;
begin
    foreach v_role in array array['workflow_worker', 'workflow_producer', 'workflow_reader'] loop
        if not exists (select 1 from pg_catalog.pg_roles where rolname = v_role) then
            begin
                execute format('create role %I nologin', v_role);
            exception when duplicate_object or unique_violation then
                null; -- created at this instant by the same script in another database
            end;
        end if;
    end loop;
end
$$;

-- The owner (normally the manager's user) may act as workflow_reader: the
-- console reads with SET ROLE workflow_reader. A superuser already may; an
-- owner that is not one is granted it here when it may grant it (it has
-- CREATEROLE); otherwise an administrator grants it.
do $$
begin
    if not pg_catalog.pg_has_role(current_user, 'workflow_reader', 'member') then
        begin
            execute format('grant workflow_reader to %I', current_user);
        exception when insufficient_privilege then
            raise notice 'roles.sql: % may not grant itself workflow_reader; the console needs it (grant workflow_reader to %)',
                current_user, current_user;
        end;
    end if;
end
$$;

-- Start from nothing, so that a privilege granted by an older version of
-- this script (or by hand) does not linger.
revoke all on schema workflow from workflow_worker, workflow_producer, workflow_reader;
revoke all on all tables in schema workflow from workflow_worker, workflow_producer, workflow_reader;
revoke all on all sequences in schema workflow from workflow_worker, workflow_producer, workflow_reader;
revoke all on all functions in schema workflow from workflow_worker, workflow_producer, workflow_reader;

grant usage on schema workflow to workflow_worker, workflow_producer, workflow_reader;

-- Workers: the functions, and the registry (which types are enabled, and
-- for which runtime).
grant execute on function
    workflow.claim_runs(text, text[], text, integer, bigint, text[], text, uuid[], boolean),
    workflow.heartbeat_runs(text, uuid[], bigint[], bigint),
    workflow.complete_runs(text, uuid[], bigint[], jsonb[]),
    workflow.fail_runs(text, uuid[], bigint[], text[], boolean[]),
    workflow.release_runs(text, uuid[], bigint[]),
    workflow.record_steps(text, uuid[], bigint[], text[], integer[], jsonb[]),
    workflow.park_run(text, uuid, bigint, text, text, integer, timestamptz, bigint, text),
    workflow.start_child(text, uuid, bigint, text, integer, text, jsonb, integer, integer, bigint),
    workflow.reap_expired_leases(integer),
    workflow.expire_deadlines(uuid[], integer),
    workflow.append_run_logs(text, uuid[], bigint[], bigint[], uuid[], timestamptz[], text[], text[])
to workflow_worker;
grant select on workflow.workflow_registry to workflow_worker;
-- Everyone reads the owner's limits (only the owner writes them).
grant select on workflow.workflow_settings to workflow_worker, workflow_producer, workflow_reader;

-- Producers: the columns a producer may set when it records a run (every
-- other column keeps its default: a run starts pending, unleased, without a
-- parent), the columns the seed's cancel and a soft delete change, the
-- producer functions, and reading what happened. The source columns are
-- granted only because the Go client's insert names them (as null); the
-- row-level security below keeps them null for producers.
grant insert (type, payload, priority, run_at, idempotency_key, max_attempts,
              retry_base_delay, retry_max_delay, deadline_at, traceparent, concurrency_key,
              source_namespace, source_name, source_uid, namespace, type_namespace)
    on workflow.workflow_run to workflow_producer;
grant update (status, updated_at, deleted_at) on workflow.workflow_run to workflow_producer;
grant select on workflow.workflow_run, workflow.workflow_event, workflow.workflow_step,
                workflow.workflow_signal, workflow.run_view, workflow.run_event
    to workflow_producer;
grant execute on function
    workflow.cancel_run(uuid),
    workflow.retry_run(uuid, integer, text),
    workflow.send_signal(uuid, text, jsonb, text, text),
    workflow.create_runs(text[], text[], integer[], timestamptz[], text[], integer[], bigint[], bigint[], bigint[], text[],
                         text[], text, text)
to workflow_producer;
-- Namespaces: every role may ask which namespaces it acts on (the
-- row-level security below asks it for them); a producer's plain INSERT
-- takes its namespace from default_namespace and may name a type another
-- namespace shares with it (type_shared).
grant execute on function workflow.caller_namespaces(text) to workflow_worker, workflow_producer, workflow_reader;
grant execute on function workflow.default_namespace(), workflow.type_shared(text, text, text) to workflow_producer;

-- A console reads everything.
grant select on workflow.workflow_run, workflow.workflow_event, workflow.workflow_step,
                workflow.workflow_signal, workflow.workflow_registry, workflow.run_view, workflow.run_event
    to workflow_reader;
-- Whoever reads runs reads their audit trails through run_trail (which
-- checks the caller's namespaces itself, as row-level security would).
grant execute on function workflow.run_trail(uuid) to workflow_producer, workflow_reader, workflow_worker;
-- ... and their runs' logs (the same rule).
grant execute on function workflow.run_logs(uuid, integer, bigint, integer), workflow.run_log_attempts(uuid)
    to workflow_producer, workflow_reader, workflow_worker;
-- ... and the queue depth of a worker pool (a KEDA scaler or a dashboard).
grant execute on function workflow.queue_depth(text[], text, bigint, text) to workflow_reader;
-- ... and every type's queue (the console's overview).
grant execute on function workflow.type_depths() to workflow_reader;
-- ... and when to look at it again.
grant execute on function workflow.inbox_version() to workflow_reader;
-- Every role may ask which version of the schema the database holds.
grant execute on function workflow.schema_version() to workflow_worker, workflow_producer, workflow_reader;

-- Schedules (workflow.sql section 8): producers keep their own SQL
-- schedules (the functions refuse anyone else's, and every mirrored one);
-- everyone may list them and check a cron expression.
grant execute on function
    workflow.put_schedule(text, text, text, jsonb, text, integer, integer, interval, text, integer, boolean, text, text,
                          interval, interval, text),
    workflow.delete_schedule(text, text)
to workflow_producer;
grant execute on function
    workflow.list_schedules(text, text, text[]),
    workflow.cron_next(text, text, timestamptz),
    workflow.cron_problem(text, text)
to workflow_producer, workflow_reader;
-- ... and the console reads a schedule's latest runs.
grant execute on function workflow.schedule_latest_runs(text, text, integer) to workflow_reader;

-- What a producer's own statements may leave behind, enforced by row-level
-- security. Every role sees and writes every row (the first policy), so
-- enabling it changes nothing for anyone else; the table's owner (the
-- functions, which run as the owner, and the operator) bypasses it
-- altogether. For members of workflow_producer:
--   * an UPDATE may only cancel or soft-delete: the row it leaves is
--     cancelled, or deleted and finished. A producer cannot mark a run
--     succeeded or failed, nor hand a leased run back to the queue.
--   * an INSERT may not claim to come from Kubernetes: no source object, and
--     no idempotency key of the operator's reserved forms (k8s:<namespace>:<key>,
--     k8s-uid:<uid>), so a producer cannot take over the run of a
--     WorkflowRun that does not exist yet.
--   * namespaces: a login sees the runs (and their events, journals and
--     signals) of the namespaces it produces for or reads, and the registry
--     entries of those it works for or reads; it records, cancels and
--     soft-deletes only runs of the namespaces it produces for, and a run
--     of another namespace's type only when that namespace shares it.
-- Each step below runs only when its object is missing, so running this
-- script again takes no lock that would stop the queue.
do $$
declare
    p record;
    t text;
begin
    foreach t in array array['workflow_run', 'workflow_event', 'workflow_step', 'workflow_signal', 'workflow_registry'] loop
        if not (select relrowsecurity from pg_catalog.pg_class where oid = ('workflow.' || t)::regclass) then
            execute format('alter table workflow.%I enable row level security', t);
        end if;
    end loop;
    for p in
        select * from (values
            ('workflow_run', 'workflow_run_any', 'as permissive for all to public using (true) with check (true)'),
            ('workflow_run', 'workflow_run_producer_update',
             'as restrictive for update to workflow_producer using (true)
              with check (status = ''cancelled'' or (deleted_at is not null and finished_at is not null))'),
            ('workflow_run', 'workflow_run_producer_insert',
             'as restrictive for insert to workflow_producer
              with check (source_namespace is null and source_name is null and source_uid is null
                          and (idempotency_key is null
                               or not (starts_with(idempotency_key, ''k8s:'')
                                       or starts_with(idempotency_key, ''k8s-uid:''))))'),
            ('workflow_run', 'workflow_run_namespace_read',
             'as restrictive for select to public
              using ((select workflow.caller_namespaces(''read'')) is null
                     or namespace = any ((select workflow.caller_namespaces(''read''))::text[]))'),
            ('workflow_run', 'workflow_run_namespace_update',
             'as restrictive for update to public
              using ((select workflow.caller_namespaces(''producer'')) is null
                     or namespace = any ((select workflow.caller_namespaces(''producer''))::text[]))
              with check ((select workflow.caller_namespaces(''producer'')) is null
                          or namespace = any ((select workflow.caller_namespaces(''producer''))::text[]))'),
            ('workflow_run', 'workflow_run_namespace_insert',
             'as restrictive for insert to public
              with check (((select workflow.caller_namespaces(''producer'')) is null
                           or namespace = any ((select workflow.caller_namespaces(''producer''))::text[]))
                          and workflow.type_shared(type_namespace, type, namespace))'),
            ('workflow_event', 'workflow_event_any', 'as permissive for all to public using (true) with check (true)'),
            ('workflow_event', 'workflow_event_namespace_read',
             'as restrictive for select to public
              using (exists (select 1 from workflow.workflow_run r where r.id = workflow_id)
                     or (run_ids is not null
                         and exists (select 1 from workflow.workflow_run r where r.id = any (run_ids))))'),
            ('workflow_step', 'workflow_step_any', 'as permissive for all to public using (true) with check (true)'),
            ('workflow_step', 'workflow_step_namespace_read',
             'as restrictive for select to public
              using (exists (select 1 from workflow.workflow_run r where r.id = run_id))'),
            ('workflow_signal', 'workflow_signal_any', 'as permissive for all to public using (true) with check (true)'),
            ('workflow_signal', 'workflow_signal_namespace_read',
             'as restrictive for select to public
              using (exists (select 1 from workflow.workflow_run r where r.id = run_id))'),
            ('workflow_registry', 'workflow_registry_any',
             'as permissive for all to public using (true) with check (true)'),
            ('workflow_registry', 'workflow_registry_namespace_read',
             'as restrictive for select to public
              using ((select workflow.caller_namespaces(''worker'')) is null
                     or namespace = any ((select workflow.caller_namespaces(''worker''))::text[])
                     or namespace = any ((select workflow.caller_namespaces(''read''))::text[]))')
        ) v(tab, name, body)
        where not exists (select 1 from pg_catalog.pg_policies x
                          where x.schemaname = 'workflow' and x.tablename = v.tab and x.policyname = v.name)
    loop
        -- The names and bodies are the constants above.
        execute format('create policy %I on workflow.%I %s', p.name, p.tab, p.body);
    end loop;
end
$$;

commit;
