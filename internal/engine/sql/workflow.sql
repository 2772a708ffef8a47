-- simple-workflow: the inbox and its state machine, in one file.
--
-- Its version is the one it begins with (workflow.begin_schema, section 0).
--
-- Read this file top to bottom to know what happens to a run. It is the
-- whole schema, in the order of a run's life: the tables and the rules they
-- keep, what a producer calls, how a worker claims and holds a run, the step
-- journal and waits, children and DAGs, the maintenance that finishes what
-- nobody else will, reading for clients, schedules (cron in the database),
-- how the hot calls are planned, and the roles. A fresh install runs this
-- file; an upgrade runs the release's migrations
-- (internal/engine/sql/migrations) and then this file again, all in one
-- transaction (engine.Migrate does; so does psql -v ON_ERROR_STOP=1
-- --single-transaction with -f for each migration and then this file).
-- So every statement here may run twice: tables and indexes are created
-- "if not exists" (a changed table is changed by the migration), functions
-- "or replace" with every setting they run with, triggers "or replace"
-- (the one constraint trigger is dropped and created). A test installs
-- this file fresh, and each earlier release plus its migrations, and
-- compares the catalogs.
--
-- The database is the only judge: every rule below holds whoever writes,
-- a Go or Python worker, the operator, or a producer using plain SQL (an
-- INSERT to record a run, an UPDATE of status to cancel it). The SDKs are
-- thin callers of these functions.
--
--
-- THE STATE MACHINE
--
--   statuses of workflow.workflow_run.status
--     pending    waits for a worker: runnable once run_at <= workflow.now(); a
--                "parked" run is pending with wait_kind set (sleep, signal,
--                child, dag, limit) and run_at at its timer (far_future()
--                if none); 'limit' is a run its type's flow limits hold
--                back (see FLOW LIMITS in section 3)
--     leased     a worker holds it until lease_until; every write the
--                holder makes names its lease token, unpredictable (each
--                claim derives its runs' tokens from a secret it draws at
--                random; the row keeps only its fence, lease_token)
--     succeeded, failed, cancelled
--                finished: final (trigger workflow_run_finished_is_final)
--
--   transition                     made by                            called by
--   (new) -> pending               INSERT, create_runs; trigger        producer
--                                  workflow_run_inserted checks the
--                                  payload, writes 'created' and
--                                  starts a DAG run
--   pending -> leased              claim_runs ('started'; 'woken'      worker
--                                  first when it ends a timer)
--   leased -> leased               heartbeat_runs (a longer lease)     worker
--   leased -> succeeded            complete_runs                       worker
--   leased -> failed               complete_runs (result refused),     worker
--                                  fail_runs (no attempt left or not
--                                  retryable)
--   leased -> pending              fail_runs (retry after backoff),    worker
--                                  release_runs (attempt returned),
--                                  park_run (a wait: parked)
--   leased -> pending | failed     reap_expired_leases                 worker, manager
--   pending|leased -> failed       expire_deadlines (deadline_at),     worker, manager
--                                  also from heartbeat_runs
--   pending -> parked on limit     flow_admit, from claim_runs (its    worker
--                                  key is full or out of starts)
--   parked on limit -> runnable    free_slots from complete_runs,      -
--                                  fail_runs and release_runs, trigger
--                                  workflow_run_flow_slot_freed
--                                  elsewhere (a run of its key stopped
--                                  being leased), flow_admit (its rate
--                                  window ended), flow_recheck
--   parked -> runnable             claim_runs (its timer is due),      -
--                                  send_signal (the awaited signal),
--                                  trigger workflow_child_finished
--                                  (the awaited child ended)
--   pending(dag) -> succeeded |    dag_advance / dag_end, from         -
--     failed                       workflow_child_finished
--   pending|leased -> cancelled    cancel_run, or UPDATE status =      producer
--                                  'cancelled'; trigger
--                                  workflow_run_cancelled writes the
--                                  event and clears the wait
--   pending|leased -> cancelled    UPDATE deleted_at (soft delete);    producer
--                                  trigger workflow_run_soft_deleted
--   pending|leased -> cancelled    trigger workflow_parent_ended: a    -
--                                  parent that failed or was
--                                  cancelled takes its children
--   any other status change        plain SQL; audited by trigger       owner
--                                  workflow_status_changed_by_sql
--   finished -> anything else      refused                             -
--   (new) -> pending (a tick)      fire_due_schedules (a schedule's    manager
--                                  tick, once; see section 8)
--   (row) -> gone                  delete_finished_runs (retention),   manager
--                                  DELETE; trigger
--                                  workflow_runs_deleted removes its
--                                  events, journal and signals (after
--                                  retention, events in a history
--                                  partition go with their partition:
--                                  drop_history_partitions)
--
-- Every transition writes its row of workflow_event (the audit trail; a
-- claim's and a completion's of several runs, one batch row) in
-- the same transaction, by the function that makes it or by the trigger
-- named above. Every trigger on workflow_run serves a plain-SQL path too
-- (an INSERT, an UPDATE of status or deleted_at, a DELETE), so a transition
-- a trigger makes stays in the trigger, and each function's header names
-- the triggers its writes fire; one exception, measured: the batch
-- functions that end leases let their keys' parked runs go themselves
-- (free_slots), the trigger serving every other path. What only functions
-- do is in the functions. The functions that change a status set the
-- transaction-local setting workflow.via_function while they run (set_marks,
-- then restore_marks), so that the plain-SQL audit trigger does not write a
-- second event; it is an audit hint, not a guard.
--
-- LOCK ORDER, wherever two rows are locked:
--   1. a workflow (a DAG run or a durable parent) before its children: every
--      path that ends runs (complete_runs, fail_runs, reap_expired_leases,
--      expire_deadlines) first locks the parents of those runs, in id order,
--      as ending a parent does (the parent, then its children through
--      workflow_parent_ended); steps of one workflow ending together never
--      deadlock. A plain-SQL update of a child is the exception (the child's
--      row, then the parent's): a deadlock there is resolved by Postgres
--      aborting one side, which its caller retries;
--   2. a run before its journal entries and its signals (park_run,
--      send_signal, start_child); record_steps share-locks the runs first;
--   3. new runs with idempotency keys are inserted in key order;
--   4. registry definitions are checked under one advisory lock.
--
-- TIME: every rule reads one clock, workflow.now(): the transaction's start
-- (now()) plus workflow_settings.clock_offset, which is zero unless a test
-- moves it forward (as the owner) to see a lease expire, a retry come due,
-- a sleep end, a deadline pass or retention delete, without waiting. A
-- client's clock is never read. Timestamps that only record when something
-- happened (column defaults, the audit trail's created_at) are real time,
-- as are run ids (new_run_id), which carry their creation time. The audit
-- trail's partitions are spans of run ids, so making and dropping them
-- reads the real clock (clock_timestamp()) too: a moved clock would drop
-- the span new ids still fall in. Tests of partitions give them spans in
-- the past instead of moving the clock; row-by-row retention of finished
-- runs (delete_finished_runs) follows workflow.now().
--
-- LIMITS: the owner's, in workflow_settings (one row), never the caller's
-- session: a payload is at most max_payload_bytes (1 MiB by default); a
-- result, a step output and a child's result at most 1 MiB; a signal
-- payload 256 KiB; a registry definition 256 KiB; no stored JSON nests
-- deeper than 64 objects and arrays (json_too_deep).
--
-- PRIVILEGE: every function a role calls is SECURITY DEFINER with a fixed
-- search_path (pg_catalog, pg_temp) and is revoked from PUBLIC; roles.sql
-- (run after this file) grants each role what it needs.


create schema if not exists workflow;


-- ===========================================================================
-- 0. THE SCHEMA'S VERSION
-- ===========================================================================

-- Every client may ask the database which version it holds
-- (workflow.schema_version()), and any client may install or upgrade it:
-- the bookkeeping is here, not in an SDK. The file opens with
-- begin_schema(N), its version, and closes with finish_schema(), in one
-- transaction: a fresh install records N, each migration records its own
-- version (sql/migrations/NNNN_*.sql ends by inserting NNNN), and the
-- functions an earlier release had and this file no longer defines are
-- dropped at the end.

-- One row per version the database was installed or upgraded to.
create table if not exists workflow.schema_version (
    version    integer     primary key,
    applied_at timestamptz not null default now()
);

-- schema_version returns the version of the workflow schema in this
-- database: the newest row of workflow.schema_version (0 while a first
-- install runs). Every role may ask.
create or replace function workflow.schema_version() returns integer
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select coalesce(max(v.version), 0) from workflow.schema_version v
$$;

-- begin_schema opens an install or upgrade to version p_version: it locks
-- the version table (as engine.Migrate and roles.sql do; only the owner
-- may), and refuses a database newer than the file (an older release must
-- not replace a newer one's functions), one older whose migrations have
-- not run first, and a version table with a gap (a migration skipped). It
-- leaves the version for finish_schema in a transaction-local setting, so
-- a file run statement by statement outside one transaction fails there.
create or replace function workflow.begin_schema(p_version integer) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_installed integer;
    v_first integer;
    v_count integer;
begin
    lock table workflow.schema_version in share row exclusive mode;
    select coalesce(max(v.version), 0), min(v.version), count(*)
      into v_installed, v_first, v_count
      from workflow.schema_version v;
    if v_installed > p_version then
        raise exception 'the workflow schema of this database is at version %, newer than this file (version %)',
            v_installed, p_version
            using errcode = 'SW007',
                  hint = 'Install the schema file of that release or a newer one.';
    end if;
    if v_installed > 0 and v_installed < p_version then
        raise exception 'the workflow schema of this database is at version %: run migrations % to % before this file, in the same transaction',
            v_installed, v_installed + 1, p_version
            using errcode = 'SW007',
                  hint = 'The migrations are internal/engine/sql/migrations/NNNN_*.sql; engine.Migrate runs them.';
    end if;
    if v_count = 0 and pg_catalog.to_regclass('workflow.workflow_run') is not null then
        raise exception 'the workflow schema of this database has no recorded version (installed by an earlier release''s file alone)'
            using errcode = 'SW007',
                  hint = 'Record the version it was installed at (insert into workflow.schema_version (version) values (N)), then run migrations N+1 onwards and this file in one transaction.';
    end if;
    if v_count <> v_installed - v_first + 1 then
        raise exception 'workflow.schema_version skips a version between % and %: a migration did not run',
            v_first, v_installed
            using errcode = 'SW007';
    end if;
    perform pg_catalog.set_config('workflow.schema_installing', p_version::text, true);
end $$;

-- finish_schema closes what begin_schema opened, as the file's last
-- statement: it records the version of a fresh install and drops the
-- routines of schema workflow that this transaction did not create or
-- replace (an earlier release's function renamed, re-signed or gone; an
-- extension's are left alone), in one statement, so that one calling
-- another is no obstacle. Everything between begin_schema and here must
-- have run in this one transaction (not in savepoints: a function replaced
-- in one would look stale), which it checks before dropping anything.
-- Returns the version.
create or replace function workflow.finish_schema() returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_version integer := nullif(pg_catalog.current_setting('workflow.schema_installing', true), '')::integer;
    v_xid xid := (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
    v_stale text;
begin
    if v_version is null
       or (select p.xmin from pg_catalog.pg_proc p
           where p.oid = 'workflow.begin_schema(integer)'::pg_catalog.regprocedure) <> v_xid then
        raise exception 'the schema file must run whole in one transaction, without savepoints'
            using errcode = 'SW007',
                  hint = 'psql -v ON_ERROR_STOP=1 --single-transaction -f workflow.sql (after the migrations, in the same run)';
    end if;
    insert into workflow.schema_version (version)
    select v_version where not exists (select 1 from workflow.schema_version);
    -- The signatures are the catalog's own rendering (regprocedure),
    -- quoted where they must be; DROP ROUTINE takes functions, procedures
    -- and aggregates alike.
    select pg_catalog.string_agg(p.oid::pg_catalog.regprocedure::text, ', ' order by p.oid::pg_catalog.regprocedure::text)
      into v_stale
      from pg_catalog.pg_proc p
     where p.pronamespace = 'workflow'::pg_catalog.regnamespace
       and p.xmin <> v_xid
       and not exists (select 1 from pg_catalog.pg_depend d
                       where d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                         and d.objid = p.oid and d.deptype = 'e');
    if v_stale is not null then
        execute 'drop routine ' || v_stale;
    end if;
    perform pg_catalog.set_config('workflow.schema_installing', '', true);
    return v_version;
end $$;

select workflow.begin_schema(18);


-- ===========================================================================
-- 1. TABLES AND THEIR RULES
-- ===========================================================================

-- Small pure helpers the tables' defaults and checks use.

-- far_future is the run_at of a run parked on a wait with no timer: beyond
-- any real time, yet representable by every client library.
create or replace function workflow.far_future() returns timestamptz
language sql immutable parallel safe
as $$ select timestamptz '9999-01-01 00:00:00+00' $$;

-- A new run id: a UUID in the version 7 layout (48 bits of milliseconds,
-- then random), so ids sort by creation and index pages fill in order.
create or replace function workflow.new_run_id()
returns uuid
language sql volatile
begin atomic
    select encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint) from 3)
                    from 1 for 6),
            52, 1), 53, 1),
        'hex')::uuid;
end;
comment on function workflow.new_run_id() is
    'A new run id: a UUID (version 7 layout) whose first 48 bits are the time in milliseconds, the rest random.';

-- Whether a JSON value nests more than 64 containers (objects and arrays)
-- deep: true when a container sits at level 64 (the value itself is level
-- 0). It visits only the first 64 levels, so a deep value is told cheaply.
-- Every value a client will decode is refused past this bound.
create or replace function workflow.json_too_deep(p_value jsonb) returns boolean
language sql immutable parallel safe
return jsonb_path_exists(p_value, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")');

-- What is wrong with a value stored for a client to decode (over 1 MiB as
-- JSON text, or nested too deep), named by what it is, or null.
create or replace function workflow.stored_value_problem(p_value jsonb, p_what text) returns text
language sql stable parallel safe
return case when p_value is not null and octet_length(p_value::text) > 1048576
            then format('%s is %s bytes; the limit is 1048576 (1 MiB)', p_what, octet_length(p_value::text))
            when workflow.json_too_deep(p_value)
            then p_what || ' nests deeper than 64 levels (objects and arrays), the most a stored value may' end;

-- Whether a text is a W3C traceparent (version 00, neither id all zeros);
-- null is valid (no trace).
create or replace function workflow.traceparent_valid(p text) returns boolean
language sql immutable parallel safe
as $_$
    select p is null
        or (octet_length(p) = 55
            and p ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
            and substr(p, 4, 32) <> '00000000000000000000000000000000'
            and substr(p, 37, 16) <> '0000000000000000')
$_$;


-- The owner's limits: one row, readable by every role, writable by the
-- owner alone. A caller's session settings raise nothing.
create table if not exists workflow.workflow_settings (
    singleton boolean not null default true,
    max_payload_bytes integer not null default 1048576,
    max_journal_bytes bigint not null default 67108864,
    clock_offset interval not null default '0',
    history_partition interval not null default '1 day',
    max_schedules_per_namespace integer not null default 1000,
    idle_transaction_timeout interval not null default '5 minutes',
    max_log_lines integer not null default 1000,
    max_log_bytes integer not null default 262144,
    constraint workflow_settings_pkey primary key (singleton),
    constraint workflow_settings_one_row check (singleton),
    constraint workflow_settings_max_payload_bytes_range check (max_payload_bytes between 1024 and 67108864),
    constraint workflow_settings_max_journal_bytes_range check (max_journal_bytes between 1048576 and 134217728),
    constraint workflow_settings_clock_offset_forward check (clock_offset >= '0' and clock_offset <= '100 years'),
    constraint workflow_settings_history_partition_range
        check (history_partition between interval '1 minute' and interval '31 days'
               and extract(epoch from history_partition) = floor(extract(epoch from history_partition))),
    constraint workflow_settings_max_schedules_range check (max_schedules_per_namespace between 1 and 1000000),
    constraint workflow_settings_idle_transaction_range
        check (idle_transaction_timeout between interval '1 second' and interval '1 day'),
    constraint workflow_settings_max_log_lines_range check (max_log_lines between 0 and 100000),
    constraint workflow_settings_max_log_bytes_range check (max_log_bytes between 0 and 16777216)
);
comment on table workflow.workflow_settings is
    'Limits set by the database owner (one row): max_payload_bytes bounds a run''s payload as JSON text (1 KiB to 64 MiB, default 1 MiB); max_journal_bytes the step outputs a claim loads for one run (1 to 128 MiB, default 64 MiB); clock_offset moves workflow.now() forward (tests only); history_partition is the span of run creation times one partition of the audit trail holds (1 minute to 31 days, default 1 day); max_schedules_per_namespace bounds the schedules of one namespace (1 to 1000000, default 1000); idle_transaction_timeout is the idle_in_transaction_session_timeout grant_namespace gives a login that has none (1 second to 1 day, default 5 minutes); max_log_lines and max_log_bytes bound the log lines one attempt of a run keeps (0 to 100000 lines, default 1000; 0 to 16 MiB of messages, default 256 KiB; 0 keeps none), unless workflow_namespace_settings sets its own for the run''s namespace.';
insert into workflow.workflow_settings default values on conflict do nothing;

-- The clock of every rule: now() moved by the owner's clock_offset (zero
-- unless a test moved it). PL/pgSQL, not SQL: a SQL function that reads a
-- table is never inlined, and the server parses and plans its body again
-- in every statement that calls it (about 50 µs), where PL/pgSQL keeps
-- the plan for the session. A statement that needs it for many rows (a
-- SET list, a select list, an aggregate's FILTER) reads it once, as
-- (select workflow.now()); a WHERE condition an index serves calls it as
-- it is: the scan evaluates it once, and the planner estimates the range
-- with its value (it cannot with the subquery's). Every name is
-- qualified, the operator too: the body is parsed with the caller's
-- search_path (no SET clause: it is called in nearly every statement).
create or replace function workflow.now() returns timestamptz
language plpgsql stable parallel safe as $$
begin
    return pg_catalog.now() operator(pg_catalog.+)
           coalesce((select st.clock_offset from workflow.workflow_settings st), '0'::pg_catalog.interval);
end $$;


-- NAMESPACES. Every run belongs to a namespace (a Kubernetes namespace, or
-- 'default'), and so do registry entries and schedules: namespaces are the
-- tenants of one inbox. A run also names the namespace whose registry and
-- workers run its type (type_namespace): its own, unless that namespace's
-- registry shares the type with it (shared_with). A database login acts
-- on the namespaces the schema's owner bound it to, per capacity
-- (producer, worker, reader: workflow_namespace_grant, written by
-- grant_namespace and revoke_namespace); the owner (and the operator,
-- which connects as the owner) acts on every namespace. Logins are told
-- apart by session_user, which SET ROLE does not change, so a login never
-- gains a namespace by switching roles; a binding of a group role holds for
-- its members.

-- Whether a text is a namespace name (a Kubernetes namespace: a DNS label
-- of at most 63 characters).
create or replace function workflow.namespace_valid(p text) returns boolean
language sql immutable parallel safe
return char_length(p) <= 63 and p ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$';

-- Whether every element of a list is a namespace name.
create or replace function workflow.namespaces_valid(p text[]) returns boolean
language sql immutable parallel safe
return (select coalesce(bool_and(coalesce(workflow.namespace_valid(n), false)), true) from unnest(p) n);

-- rule_broken raises a broken rule of the rules below as the project's
-- own error: SQLSTATE SW001 (invalid input; the codes are listed in
-- testdata/contract/errors.json, which both SDKs map to their typed
-- errors), the rule's sentence as the message and its name as the
-- constraint. A rule's check calls it only in its ELSE branch, when the
-- rule is broken, so a value that keeps the rules costs nothing more.
-- Anyone may call it (the check runs as the writer, and a function in an
-- expression needs EXECUTE even where it is not reached); all it does is
-- raise the error it is given.
create or replace function workflow.rule_broken(p_rule text, p_message text) returns boolean
language plpgsql volatile set search_path = pg_catalog, pg_temp as $$
begin
    raise exception '%', p_message using errcode = 'SW001', constraint = p_rule;
end $$;

-- A namespace column: a domain, whose check (namespace_name_format, among
-- the rules at the end of this section) runs only when the column is
-- written (a table CHECK would run on every update of the row).
do $$ begin
    if to_regtype('workflow.namespace_name') is null then
        create domain workflow.namespace_name as text;
    end if;
end $$;

-- The run table's rules on one column each are domains too: the server
-- keeps a domain's check compiled for the session and runs it only for the
-- columns a statement writes, where a table CHECK is read back from its
-- stored text by every statement that inserts or updates a run and runs on
-- every row it writes, whatever columns changed (decision 0013). Their
-- checks are among the rules a caller can break (the end of this section),
-- each named as the table's CHECK was. A value a function returns from one
-- of these columns is cast to its base type (PL/pgSQL's RETURN QUERY takes
-- no domain for it).
do $$ begin
    if to_regtype('workflow.run_type') is null then
        create domain workflow.run_type as text;
    end if;
    if to_regtype('workflow.run_payload') is null then
        create domain workflow.run_payload as jsonb;
    end if;
    if to_regtype('workflow.run_priority') is null then
        create domain workflow.run_priority as integer;
    end if;
    if to_regtype('workflow.run_idempotency_key') is null then
        create domain workflow.run_idempotency_key as text;
    end if;
    if to_regtype('workflow.run_concurrency_key') is null then
        create domain workflow.run_concurrency_key as text;
    end if;
    if to_regtype('workflow.run_result') is null then
        create domain workflow.run_result as jsonb;
    end if;
    if to_regtype('workflow.run_traceparent') is null then
        create domain workflow.run_traceparent as text;
    end if;
    -- A mirrored WorkflowRun's namespace, name and UID (one rule, three lengths).
    if to_regtype('workflow.run_source_namespace') is null then
        create domain workflow.run_source_namespace as text;
    end if;
    if to_regtype('workflow.run_source_name') is null then
        create domain workflow.run_source_name as text;
    end if;
    if to_regtype('workflow.run_source_uid') is null then
        create domain workflow.run_source_uid as text;
    end if;
    -- run_at and deadline_at: a real time, never infinity.
    if to_regtype('workflow.run_time') is null then
        create domain workflow.run_time as timestamptz;
    end if;
end $$;

-- (Release 6's migration creates this table with the same statement.)
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
comment on table workflow.workflow_namespace_grant is
    'Which namespaces a database role acts on, and as what (producer, worker, reader); written by the schema''s owner through grant_namespace and revoke_namespace.';

-- Whether the session's login is the schema's owner (or a member of it, or
-- a superuser): it acts on every namespace. Called only from functions
-- that run as the owner (security definer), where current_user is the
-- owner. No SET clause and no table: it is inlined where it is called, so
-- the owner's calls (the manager, the operator) pay one membership test.
create or replace function workflow.session_is_owner() returns boolean
language sql stable parallel safe
return pg_catalog.pg_has_role(session_user, current_user, 'MEMBER');

-- The namespaces the session's login acts on as p_capacity ('producer',
-- 'worker', 'reader', or 'read': producer or reader), through a binding of
-- its own or of a role it is a member of; null for the owner (every
-- namespace), '{}' for a login bound to none.
-- (PL/pgSQL, so that the session keeps its plan: as a SQL function with a
-- SET clause it was parsed and planned at every call, about 0.3 ms of a
-- one-run insert.)
create or replace function workflow.caller_namespaces(p_capacity text) returns text[]
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
    if workflow.session_is_owner() then
        return null;
    end if;
    return coalesce((
        select array_agg(distinct g.namespace order by g.namespace)
        from workflow.workflow_namespace_grant g
        join pg_catalog.pg_roles r on r.rolname = g.role_name
        where g.capacity = any (case when p_capacity = 'read' then array['producer', 'reader']
                                     else array[p_capacity] end)
          and pg_has_role(session_user, r.oid, 'MEMBER')), '{}');
end $$;

-- Whether the session's login acts on p_namespace as p_capacity (inlined
-- where it is called: the owner's answer costs one membership test).
create or replace function workflow.acts_on(p_namespace text, p_capacity text) returns boolean
language sql stable
return workflow.session_is_owner()
       or coalesce(p_namespace = any (workflow.caller_namespaces(p_capacity)), false);

-- The namespace of a run recorded without one (set by the insert trigger,
-- on_run_inserting): the one namespace the login produces for; 'default'
-- for the owner. A login
-- bound to several must name one, and a login bound to none records
-- nothing.
create or replace function workflow.default_namespace() returns text
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_ns text[] := workflow.caller_namespaces('producer');
begin
    if v_ns is null then
        return 'default';
    elsif cardinality(v_ns) = 1 then
        return v_ns[1];
    elsif cardinality(v_ns) = 0 then
        raise exception 'database user % is bound to no namespace as a producer; the schema''s owner binds it with workflow.grant_namespace(role, namespace, ''producer'')',
            session_user using errcode = 'SW002';
    end if;
    raise exception 'database user % produces for several namespaces (%); name one (a run''s namespace column, or the call''s namespace argument)',
        session_user, array_to_string(v_ns, ', ') using errcode = 'SW001';
end $$;

-- The namespace a producer's call records into: p_namespace when the login
-- may produce there, else its one namespace (default_namespace); refused
-- otherwise, naming nothing the caller may not know.
create or replace function workflow.producer_namespace(p_namespace text) returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
begin
    if p_namespace is null then
        return workflow.default_namespace();
    end if;
    if not workflow.namespace_valid(p_namespace) then
        raise exception 'namespace %: a namespace is a DNS label of at most 63 characters (lowercase letters, digits and "-")',
            quote_literal(left(p_namespace, 100)) using errcode = 'SW001';
    end if;
    if not workflow.acts_on(p_namespace, 'producer') then
        raise exception 'database user % may not record runs in namespace %', session_user, p_namespace
            using errcode = 'SW002';
    end if;
    return p_namespace;
end $$;

-- grant_namespace binds a role to a namespace as producer, worker or
-- reader; revoke_namespace undoes it (true when there was such a binding).
-- Only the schema's owner may (the functions are not granted to anyone).
-- A login without an idle_in_transaction_session_timeout of its own gets
-- workflow_settings.idle_transaction_timeout (when the owner may alter
-- roles; a notice gives the statement otherwise).
create or replace function workflow.grant_namespace(p_role text, p_namespace text, p_as text) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_bound bigint;
begin
    if not exists (select 1 from pg_catalog.pg_roles r where r.rolname = p_role) then
        raise exception 'grant_namespace: role % does not exist', quote_ident(left(p_role, 100)) using errcode = 'SW001';
    end if;
    if not workflow.namespace_valid(p_namespace) then
        raise exception 'grant_namespace: namespace %: a namespace is a DNS label of at most 63 characters',
            quote_literal(left(p_namespace, 100)) using errcode = 'SW001';
    end if;
    if p_as is null or p_as not in ('producer', 'worker', 'reader') then
        raise exception 'grant_namespace: "as" is producer, worker or reader, got %', quote_literal(left(p_as, 100))
            using errcode = 'SW001';
    end if;
    insert into workflow.workflow_namespace_grant (role_name, namespace, capacity)
    values (p_role, p_namespace, p_as)
    on conflict do nothing;
    -- A login left idle in a transaction holds back retention and
    -- maintenance for every namespace: its sessions end after the owner's
    -- idle_transaction_timeout, unless the role has a bound of its own
    -- (role settings apply at login, to the login role only).
    v_bound := (select (extract(epoch from st.idle_transaction_timeout) * 1000)::bigint
                from workflow.workflow_settings st);
    -- (In this database only; a group role's settings never apply to its
    -- members, so only a login gets one.)
    if exists (select 1 from pg_catalog.pg_roles r where r.rolname = p_role and r.rolcanlogin)
       and not exists (select 1 from pg_catalog.pg_db_role_setting s
                       join pg_catalog.pg_roles r on r.oid = s.setrole
                       where r.rolname = p_role
                         and s.setdatabase in (0, (select d.oid from pg_catalog.pg_database d
                                                   where d.datname = current_database()))
                         and exists (select 1 from unnest(s.setconfig) c
                                     where c like 'idle\_in\_transaction\_session\_timeout=%')) then
        begin
            execute format('alter role %I in database %I set idle_in_transaction_session_timeout = %s',
                           p_role, current_database(), v_bound);
        exception when insufficient_privilege then
            raise notice 'grant_namespace: % may not set the role''s idle bound; as an administrator, run: alter role % in database % set idle_in_transaction_session_timeout = %',
                current_user, quote_ident(p_role), quote_ident(current_database()), v_bound;
        end;
    end if;
end $$;

-- revoke_namespace removes one binding; true when there was one.
create or replace function workflow.revoke_namespace(p_role text, p_namespace text, p_as text) returns boolean
language sql set search_path = pg_catalog, pg_temp as $$
    with gone as (delete from workflow.workflow_namespace_grant g
                  where g.role_name = p_role and g.namespace = p_namespace and g.capacity = p_as returning 1)
    select exists (select 1 from gone)
$$;


-- Which runtime runs a type, whether it may run at all, and the steps of a
-- DAG workflow (definition; the database runs those). Written by the
-- operator from WorkflowRegistry objects. Analyzed after every change: it
-- is tiny, and a stale estimate made claims sort every pending run.
create table if not exists workflow.workflow_registry (
    workflow_name text not null,
    intent_type text not null default 'workflow',
    runtime text,
    is_enabled boolean not null default true,
    description text not null default '',
    owner_namespace text,
    owner_name text,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    definition jsonb,
    max_leased integer,                             -- runs of the type leased at once
    max_leased_per_key integer,                     -- runs of one concurrency key leased at once
    rate_limit integer,                             -- starts per rate_period
    rate_period interval,
    rate_per_key boolean not null default false,    -- the rate is per concurrency key
    namespace workflow.namespace_name not null default 'default', -- the namespace whose type it is
    shared_with text[] not null default '{}',       -- namespaces whose runs may run it
    constraint workflow_registry_pkey primary key (namespace, workflow_name)
) with (autovacuum_analyze_threshold = 0, autovacuum_analyze_scale_factor = 0);
comment on table workflow.workflow_registry is 'Which runtime executes a workflow type, and whether it may run at all.';
comment on column workflow.workflow_registry.definition is
    'A DAG workflow''s steps ({"steps": [...]}); runtime is null then: the database runs it.';
comment on column workflow.workflow_registry.max_leased is
    'At most this many runs of the type leased at once, across all workers (null: no cap).';
comment on column workflow.workflow_registry.max_leased_per_key is
    'At most this many runs of one concurrency key of the type leased at once (null: no cap).';
comment on column workflow.workflow_registry.rate_limit is
    'At most this many runs of the type (of one key, with rate_per_key) start in each window of rate_period; windows are aligned to the epoch.';
create index if not exists idx_workflow_registry_owner on workflow.workflow_registry (owner_namespace, owner_name);

-- Whether namespace p_type_namespace's registry shares type p_type with
-- namespace p_namespace (its entry lists it in shared_with): runs of
-- p_namespace may then ask for it (type_namespace), and run among
-- p_type_namespace's workers. A run of a type its own namespace runs needs
-- no share.
-- (PL/pgSQL: row-level security asks it for every row a login inserts,
-- and a SQL function with a SET clause is planned again at every call.)
create or replace function workflow.type_shared(p_type_namespace text, p_type text, p_namespace text) returns boolean
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
    if p_type_namespace = p_namespace then
        return true;
    end if;
    return exists (select 1 from workflow.workflow_registry g
                   where g.namespace = p_type_namespace and g.workflow_name = p_type
                     and p_namespace = any (g.shared_with));
end $$;


-- The durable inbox: one row per recorded intent. The checks are written
-- compactly on purpose: each is evaluated on every write of the hot path.
-- Half of each page stays free (fillfactor 50), so a claim's and a
-- completion's new row versions stay on their page; autovacuum starts
-- early and unthrottled, as a queue replaces its rows all day.
create table if not exists workflow.workflow_run (
    id uuid not null default workflow.new_run_id(),
    type workflow.run_type not null,
    payload workflow.run_payload not null default '{}',
    status text not null default 'pending',
    priority workflow.run_priority not null default 100, -- lower runs first
    run_at workflow.run_time not null default now(), -- not before
    idempotency_key workflow.run_idempotency_key,   -- one run per key, ever
    attempt integer not null default 0,             -- attempts started
    max_attempts integer not null default 3,
    leased_by text,
    lease_until timestamptz,
    last_error text,
    result workflow.run_result,
    retry_base_delay interval,                      -- null: one minute
    retry_max_delay interval,                       -- null: no cap
    source_namespace workflow.run_source_namespace, -- a mirrored WorkflowRun
    source_name workflow.run_source_name,
    source_uid workflow.run_source_uid,
    started_at timestamptz,
    finished_at timestamptz,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    deleted_at timestamptz,                         -- soft delete
    lease_token bigint,
    heartbeat_count integer not null default 0,     -- of the current attempt
    parent_id uuid,                                 -- a child: its parent
    parent_step text,                               -- and the step that started it
    deadline_at workflow.run_time,                  -- past it: failed
    wait_kind text,                                 -- parked: what it waits for
    wait_step text,
    wait_signal text,
    dag jsonb,
    traceparent workflow.run_traceparent,
    concurrency_key workflow.run_concurrency_key,   -- the flow limits' key (a customer, a tenant)
    dag_skipped text[],                             -- a DAG's steps whose condition was false
    dag_fanout jsonb,                               -- a DAG's fanned-out steps: {name: elements}
    namespace workflow.namespace_name not null,     -- its tenant (on_run_inserting sets it)
    type_namespace workflow.namespace_name not null, -- whose registry and workers run its type
    constraint workflow_run_pkey primary key (id),
    -- The rules of the state machine: several columns, changed by claims
    -- and completions. (Rules on one column are the columns' domains;
    -- rules on columns written once are checked once, at insert, by
    -- on_run_inserted, and those columns are not written afterwards:
    -- workflow_run_written_once.)
    constraint workflow_run_attempt_range check (attempt >= 0 and attempt <= max_attempts),
    constraint workflow_run_lease_held
        check (status <> 'leased' or (leased_by is not null and lease_until is not null)),
    constraint workflow_run_wait_kind_valid check (wait_kind = any ('{sleep,signal,child,dag,limit}')),
    constraint workflow_run_wait_not_leased check (wait_kind is null or status <> 'leased'),
    constraint workflow_run_pending_has_attempt_left check (status <> 'pending' or attempt < max_attempts)
) with (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
comment on table workflow.workflow_run is
    'The durable inbox: one row per recorded intent. A pending row always runs eventually.';
-- (Release 6's migration filled the column of existing rows with a default
-- it then drops here; a run recorded without a namespace gets one from
-- on_run_inserting.)
alter table workflow.workflow_run alter column namespace drop default;
comment on column workflow.workflow_run.lease_token is
    'The fence of the latest claim: workflow.lease_fence of the random token only the claimer was given; every write of the holder names the token.';
comment on column workflow.workflow_run.dag is
    'The definition a DAG run started with (a snapshot: editing the registry changes new runs only).';
comment on column workflow.workflow_run.concurrency_key is
    'Runs sharing a key count together against their type''s max_leased_per_key and per-key rate (null: no key).';
comment on column workflow.workflow_run.traceparent is
    'W3C traceparent of the context that recorded the run (a child''s is its parent''s); null when none was given.';

-- The claim reads runnable runs type by type in claim order (the coalesce
-- keeps the completion's primary-key lookups off this index); the depth
-- index serves the autoscaler's counts; the others serve the reaper,
-- deadlines, retention, children, the console's lists and the wake-ups.
create index if not exists idx_workflow_run_claim_type on workflow.workflow_run
    (type_namespace, type collate "C", priority, created_at)
    where coalesce(status, '') = 'pending' and deleted_at is null and wait_kind is distinct from 'limit';
create index if not exists idx_workflow_run_claim on workflow.workflow_run
    (type_namespace, priority, created_at, run_at)
    where status = 'pending' and deleted_at is null and wait_kind is distinct from 'limit';
create index if not exists idx_workflow_run_depth on workflow.workflow_run
    (type_namespace, type collate "C", status, run_at) where status in ('pending', 'leased') and deleted_at is null;
create unique index if not exists idx_workflow_run_idempotency on workflow.workflow_run (idempotency_key);
create index if not exists idx_workflow_run_lease_until on workflow.workflow_run (lease_until)
    where status = 'leased';
create index if not exists idx_workflow_run_deadline on workflow.workflow_run (deadline_at)
    where deadline_at is not null and status in ('pending', 'leased');
create index if not exists idx_workflow_run_finished_at on workflow.workflow_run (finished_at)
    where finished_at is not null;
create index if not exists idx_workflow_run_deleted_at on workflow.workflow_run (deleted_at)
    where deleted_at is not null;
-- The parents of unfinished children, for lock_parents alone. Its
-- predicate is written so that no other statement implies it, nor does
-- lock_parents imply the predicates of the other indexes of children
-- ("parent_id is not null"): a partial index that was empty when the
-- statistics were taken looks free to read whole, and such a read of
-- every child of every DAG once stood in for a probe at each DAG step.
create index if not exists idx_workflow_run_child on workflow.workflow_run (id) include (parent_id)
    where coalesce(parent_id::text, '') <> '' and coalesce(status, '') in ('pending', 'leased');
create index if not exists idx_workflow_run_parent on workflow.workflow_run (parent_id, created_at, id)
    where parent_id is not null;
create unique index if not exists idx_workflow_run_parent_step on workflow.workflow_run (parent_id, parent_step)
    where parent_id is not null;
create index if not exists idx_workflow_run_dag on workflow.workflow_run (id) where dag is not null;
create index if not exists idx_workflow_run_source on workflow.workflow_run (source_uid)
    where source_uid is not null;
-- The console's list of one namespace's runs. Partial: only runs of a
-- namespace other than default (mirrored WorkflowRuns, tenants' SQL and SDK
-- producers), so that an install of one namespace pays no entry per write
-- for it, as before namespaces (every update of the run row that is not
-- HOT, a claim's and a completion's, writes an entry in every index whose
-- predicate the new row meets).
create index if not exists idx_workflow_run_namespace_created on workflow.workflow_run (namespace, created_at, id)
    where namespace <> 'default';
create index if not exists idx_workflow_run_type_created on workflow.workflow_run
    (type collate "C", created_at, id) where status in ('succeeded', 'failed', 'cancelled');
create index if not exists idx_workflow_run_ended_badly on workflow.workflow_run (created_at, id)
    where status in ('failed', 'cancelled');
-- Flow limits: the pending and leased runs of a key (a claim counts those
-- leased, and parks those pending when the key is full), and the runs
-- a limit holds back ("parked on limit", outside the claim's indexes), by
-- key in claim order, by when a rate window lets them go, and by type in
-- claim order (the console's lists).
create index if not exists idx_workflow_run_flow_key on workflow.workflow_run
    (type_namespace, type collate "C", concurrency_key, status, run_at)
    where concurrency_key is not null and status in ('pending', 'leased') and deleted_at is null;
create index if not exists idx_workflow_run_flow_parked on workflow.workflow_run
    (type_namespace, type collate "C", concurrency_key, priority, created_at) where wait_kind = 'limit';
create index if not exists idx_workflow_run_flow_due on workflow.workflow_run
    (type_namespace, type collate "C", run_at) where wait_kind = 'limit';
-- (The list's predicate names deleted_at, which a run parked on a limit
-- never has, so that only the console's lists, which say so, read it.)
create index if not exists idx_workflow_run_flow_list on workflow.workflow_run
    (type_namespace, type collate "C", priority, created_at) where wait_kind = 'limit' and deleted_at is null;


-- The audit trail: one row per transition (or per batch, below), written
-- in the transaction that makes it; numbered per run in the order written. Deleted with its run.
-- The two transitions every run makes, a claim's 'started' and a
-- completion's 'succeeded', are kept as one batch row per statement,
-- namespace and history span (run_ids, attempts) when the statement makes
-- them for several runs: a claim of 500 runs writes one row, not 500 (a
-- claim of one writes the run's own row, without the index of batch
-- rows). A run's trail reads the same either way:
-- run_trail, run_events and the view run_event give one row per run and
-- transition, each batch row's data with the run's own attempt.
--
-- Partitioned by run id: ids begin with their creation time in
-- milliseconds (new_run_id), so a range of ids is a span of creation times
-- and a run's whole trail lies in one partition. The manager keeps
-- partitions ahead of time (prepare_history_partitions) and drops a
-- partition whole once retention has deleted its runs
-- (drop_history_partitions): history leaves without a row deleted and
-- leaves no dead row to vacuum. The default partition takes what no time
-- partition covers: trails of ids chosen by hand (only the owner may), of
-- periods nobody prepared, moved out of a dropped partition, and the
-- trails a database kept from before partitions; retention deletes those
-- row by row with their runs, as an explicit DELETE of a run does anywhere.
create table if not exists workflow.workflow_event (
    id bigint generated always as identity,
    workflow_id uuid not null,
    event_type text not null,
    data jsonb not null default '{}',
    created_at timestamptz not null default clock_timestamp(),
    -- The database login whose statement made the transition (the login,
    -- not a role it switched to; inside the functions, their caller).
    db_user text default session_user,
    -- A batch row: the same transition of several runs of one namespace,
    -- made by one statement (a claim's 'started', a completion's
    -- 'succeeded'): their ids, each one's attempt (data then names none),
    -- and workflow_id the smallest id. Null in a row of one run.
    run_ids uuid[],
    attempts integer[],
    constraint workflow_event_pkey primary key (workflow_id, id),
    constraint workflow_event_type_valid
        check (event_type in ('created', 'leased', 'started', 'heartbeat', 'succeeded', 'failed', 'retried',
                              'cancelled', 'waiting', 'woken', 'signal_received')),
    constraint workflow_event_batch_valid
        check ((run_ids is null and attempts is null)
               or (event_type in ('started', 'succeeded') and cardinality(run_ids) >= 1
                   and cardinality(attempts) = cardinality(run_ids)))
) partition by range (workflow_id);
comment on table workflow.workflow_event is
    'Audit trail: one row per transition of a workflow_run (a claim''s or completion''s of several runs: one batch row, run_ids), written in the same transaction.';
create table if not exists workflow.workflow_event_default partition of workflow.workflow_event default
    with (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0,
          autovacuum_vacuum_insert_scale_factor = 0.02);
create index if not exists idx_workflow_event_id on workflow.workflow_event using brin (id);
-- The batch rows naming a run (run_trail, deletes, dropping a partition).
-- Its pending list (fastupdate) is kept small: every search reads the
-- whole list (decision 0008); the inserting claim or completion flushes
-- it when full.
create index if not exists idx_workflow_event_runs on workflow.workflow_event using gin (run_ids)
    with (gin_pending_list_limit = 128) where run_ids is not null;


-- Locks the engine's own functions take, as rows no other login may read
-- or lock (an advisory lock can be taken by any login, which could then
-- stop what waits for it): row 0 serialises registry definitions
-- (on_registry_written); rows 1 to 4096 debounce wake-ups, one per hash
-- bucket of a type (on_run_committing). Nothing else is stored here.
create table if not exists workflow.workflow_lock (
    id integer primary key check (id between 0 and 4096)
);
insert into workflow.workflow_lock (id) select g from generate_series(0, 4096) g on conflict do nothing;
comment on table workflow.workflow_lock is
    'Rows the engine locks (0: registry definitions; 1-4096: wake-up buckets); no login but the owner may read or lock them.';

-- The worker buckets of woken claims (claim_runs): while a claim woken by
-- a notification holds its bucket's row, other woken claims of the bucket
-- return at once. A bucket is a namespace and a hash of the worker's
-- prefixes and types (256 per namespace), so a login holds back only the
-- workers of a namespace it works for. Rows are made on first use; like
-- workflow_lock, no login but the owner may read or lock them.
create table if not exists workflow.workflow_claimer (
    namespace text not null,
    bucket smallint not null check (bucket between 0 and 255),
    primary key (namespace, bucket)
);
comment on table workflow.workflow_claimer is
    'Worker buckets of woken claims, one row per namespace and hash of a worker''s prefixes and types; locked by claim_runs only.';

comment on column workflow.workflow_event.db_user is
    'The database login (session_user) whose statement made the transition; null for events recorded before schema version 7.';

-- The fence. Every claim draws a new token for each run it leases
-- (new_lease_token: unpredictable, from a secret the claim draws at random)
-- and hands it to the claimer alone; the run keeps only its fence
-- (lease_fence, a one-way digest), so nobody who reads the row can write
-- as the holder. Every write by a worker names the token it holds, so a
-- worker that lost its lease (even one that then claims the same run
-- again) never writes into the attempt that followed.

-- new_lease_token is the token of run p_id in a claim whose secret is
-- p_seed: the first 64 bits of the SHA-256 of the two. The claim draws its
-- secret once per statement (a UUID's 122 random bits from the server's
-- strong random source, which costs more than the rest of a token:
-- decision 0017), inside the statement, so that it is never stored,
-- returned, nor written into a plan as a constant (as a PL/pgSQL
-- variable's value would be): a token cannot be told from the run id, the
-- fence or other tokens.
create or replace function workflow.new_lease_token(p_seed bytea, p_id uuid) returns bigint
language sql immutable parallel safe
return ('x' || left(encode(sha256(p_seed || uuid_send(p_id)), 'hex'), 16))::bit(64)::bigint;

-- lease_fence is what a run keeps of its lease token: the first 64 bits
-- of its SHA-256, which tell claims apart and cannot be turned back into
-- the token. Inlined into holds_lease.
create or replace function workflow.lease_fence(p_token bigint) returns bigint
language sql immutable parallel safe
return ('x' || left(encode(sha256(int8send(p_token)), 'hex'), 16))::bit(64)::bigint;


-- The step journal: what each run already did, replayed by later attempts
-- instead of redone. One entry per step name; positions give the order a
-- replay must meet them in. Only the functions below write it, and whoever
-- resolves a wait writes that wait's entry (the claim for a timer, the
-- sender of a signal, a finishing child).
create table if not exists workflow.workflow_step (
    run_id uuid not null,
    name text not null,
    "position" integer not null,
    kind text not null,                 -- step, sleep, signal, child
    outcome text,                       -- null while a wait is open
    output jsonb,
    error text,
    attempt integer not null,
    child_id uuid,
    wake_at timestamptz,
    started_at timestamptz not null default now(),
    finished_at timestamptz,
    -- Kept by the database, so a claim can tell a journal too large to
    -- load without reading it.
    output_bytes integer generated always as (coalesce(octet_length(output::text), 0)) stored,
    constraint workflow_step_pkey primary key (run_id, name),
    constraint workflow_step_finished check ((outcome is null) = (finished_at is null)),
    constraint workflow_step_kind_valid check (kind in ('step', 'sleep', 'signal', 'child')),
    constraint workflow_step_outcome_valid check (outcome is null or outcome in ('ok', 'error', 'timeout'))
);
comment on table workflow.workflow_step is
    'The step journal: what each run already did, replayed by later attempts instead of redone.';
create unique index if not exists idx_workflow_step_position on workflow.workflow_step (run_id, "position");


-- Signals sent to runs, kept until a wait consumes them (oldest first, one
-- wait each). At most one per idempotency key and run.
create table if not exists workflow.workflow_signal (
    id bigint generated always as identity,
    run_id uuid not null,
    name text not null,
    payload jsonb,
    idempotency_key text,
    created_at timestamptz not null default now(),
    consumed_at timestamptz,
    consumed_by text,                   -- the step that consumed it
    constraint workflow_signal_pkey primary key (id)
);
comment on table workflow.workflow_signal is 'Signals sent to runs; each is delivered to at most one wait, oldest first.';
create unique index if not exists idx_workflow_signal_key on workflow.workflow_signal (run_id, idempotency_key)
    where idempotency_key is not null;
create index if not exists idx_workflow_signal_pending on workflow.workflow_signal (run_id, name, id)
    where consumed_at is null;

-- Rate windows: how many runs of a type (key '') or of one concurrency key
-- started in the current window of the type's rate_period. Written only by
-- claims, under the type's flow lock; rows of ended windows are
-- deleted by flow_recheck.
create table if not exists workflow.workflow_flow_window (
    type text not null,
    concurrency_key text not null,      -- '' for the type's own window
    window_start timestamptz not null,
    starts integer not null default 0,
    namespace text not null default 'default', -- the type's namespace
    constraint workflow_flow_window_pkey primary key (namespace, type, concurrency_key),
    constraint workflow_flow_window_starts_valid check (starts >= 0)
);
-- A claim moves each of its keys' rows to the current window: room left in
-- the page keeps those updates HOT (no index entry, no lock record).
alter table workflow.workflow_flow_window set (fillfactor = 50);
comment on table workflow.workflow_flow_window is
    'Starts counted in the current rate window, per type (concurrency_key '''') or per key.';

-- RUN LOGS. What a handler logged, per run and attempt: lines sent by the
-- worker holding the attempt's lease (append_run_logs, section 4), read
-- by run_logs and run_log_attempts, deleted with the run. An attempt keeps
-- at most the owner's limits (workflow_settings.max_log_lines and
-- max_log_bytes, or its namespace's in workflow_namespace_settings): the
-- oldest lines go first, and workflow_run_log_attempt.dropped counts every
-- line dropped, here or by the worker before it sent them. No login but
-- the owner reads or writes these tables: the functions do.
create table if not exists workflow.workflow_run_log (
    run_id uuid not null,
    attempt integer not null,
    seq bigint not null,                -- the attempt's line number, from 1
    logged_at timestamptz not null,     -- by the worker's clock
    level text not null,
    message text not null,
    constraint workflow_run_log_pkey primary key (run_id, attempt, seq),
    constraint workflow_run_log_level_valid check (level in ('debug', 'info', 'warn', 'error')),
    constraint workflow_run_log_message_size check (octet_length(message) <= 8192)
);
comment on table workflow.workflow_run_log is
    'Log lines of runs'' attempts (append_run_logs), the newest within the owner''s limits.';
create table if not exists workflow.workflow_run_log_attempt (
    run_id uuid not null,
    attempt integer not null,
    lines integer not null default 0,   -- kept
    bytes bigint not null default 0,    -- kept: the octets of their messages
    next_seq bigint not null default 1,
    dropped bigint not null default 0,  -- dropped, by the worker or here
    constraint workflow_run_log_attempt_pkey primary key (run_id, attempt),
    constraint workflow_run_log_attempt_counts_valid
        check (lines >= 0 and bytes >= 0 and dropped >= 0 and next_seq >= 1)
);
comment on table workflow.workflow_run_log_attempt is
    'Per attempt of a run that logged: the lines and octets kept, and how many lines were dropped.';

-- Limits the owner sets for one namespace, over workflow_settings' (null:
-- the setting's). The owner's alone: other logins would learn the names
-- of other namespaces from it.
create table if not exists workflow.workflow_namespace_settings (
    namespace text not null,
    max_log_lines integer,
    max_log_bytes integer,
    constraint workflow_namespace_settings_pkey primary key (namespace),
    constraint workflow_namespace_settings_namespace_valid check (workflow.namespace_valid(namespace)),
    constraint workflow_namespace_settings_max_log_lines_range check (max_log_lines between 0 and 100000),
    constraint workflow_namespace_settings_max_log_bytes_range check (max_log_bytes between 0 and 16777216)
);
comment on table workflow.workflow_namespace_settings is
    'The owner''s limits for one namespace (null: workflow_settings''s): max_log_lines, max_log_bytes.';


-- Rules that hold for every writer, plain SQL included.

-- A finished run never changes status again.
create or replace function workflow.on_finished_run_changed() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    -- The one way back: retry_run (running as the owner) makes a failed or
    -- cancelled run pending again.
    if new.status = 'pending' and old.status in ('failed', 'cancelled')
       and coalesce(current_setting('workflow.retrying', true), '') = 'on'
       and pg_has_role(current_user, (select c.relowner from pg_catalog.pg_class c where c.oid = tg_relid), 'usage') then
        return new;
    end if;
    raise exception 'workflow run % is % and cannot become %', old.id, old.status, new.status
        using errcode = 'SW004', hint = 'finished runs (succeeded, failed, cancelled) never change status';
end $$;
create or replace trigger workflow_run_finished_is_final before update of status on workflow.workflow_run
    for each row when (old.status in ('succeeded', 'failed', 'cancelled') and new.status <> old.status)
    execute function workflow.on_finished_run_changed();

-- History is not rewritten by anyone but the owner: a soft delete is final,
-- and updated_at never goes back (it keeps the later time silently).
create or replace function workflow.on_run_history_rewritten() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    if pg_has_role(current_user, (select c.relowner from pg_catalog.pg_class c where c.oid = tg_relid), 'usage') then
        return new;
    end if;
    if old.deleted_at is not null and new.deleted_at is distinct from old.deleted_at then
        raise exception 'workflow run % was deleted at %; a soft delete is final', old.id, old.deleted_at
            using errcode = 'SW004';
    end if;
    -- updated_at keeps the later time (a cancel that waited on a worker's
    -- write may carry an earlier workflow.now(); that is no error, and no rewrite).
    new.updated_at := old.updated_at;
    return new;
end $$;
create or replace trigger workflow_run_history_rewritten
    before update of deleted_at, updated_at on workflow.workflow_run
    for each row when ((old.deleted_at is not null and new.deleted_at is distinct from old.deleted_at)
                       or new.updated_at < old.updated_at)
    execute function workflow.on_run_history_rewritten();

-- set_marks turns the audit mark (workflow.via_function) on for the rest
-- of the calling function and returns what it was; with p_frees_slots, it
-- also says that the caller lets its keys' parked runs go itself
-- (workflow.frees_slots, read by workflow_run_flow_slot_freed). The caller
-- gives both back with restore_marks before it returns, once: a call
-- nested in another function's keeps the outer function's mark on. The
-- two touch no table and name pg_catalog's functions in full, so they need
-- no SET clause, which would make each call cost nearly twice as much
-- (decision 0008); nor can the marks be a SET clause of the functions
-- themselves (decision 0006).
-- It also turns workflow.ends_children off, whoever set it: only
-- complete_runs and fail_runs turn it on, after set_marks, for their own
-- statement (which moves its runs' parents on itself); a session that set
-- it before calling any other function that ends runs (a cancel, the
-- reaper, deadlines) would otherwise leave their parents unmoved.
-- Fires: nothing. Locks: nothing.
create or replace function workflow.set_marks(p_frees_slots boolean default false) returns text
language plpgsql as $$
declare
    v_was text := coalesce(pg_catalog.current_setting('workflow.via_function', true), '');
begin
    perform pg_catalog.set_config('workflow.via_function', 'on', true);
    perform pg_catalog.set_config('workflow.ends_children', '', true);
    if p_frees_slots then
        perform pg_catalog.set_config('workflow.frees_slots', 'on', true);
    end if;
    return v_was;
end $$;

-- restore_marks gives back the marks set_marks set: workflow.via_function
-- as it was (p_was, what set_marks returned), and workflow.frees_slots off
-- when p_frees_slots says set_marks turned it on.
-- Fires: nothing. Locks: nothing.
create or replace function workflow.restore_marks(p_was text, p_frees_slots boolean default false) returns void
language plpgsql as $$
begin
    if p_frees_slots then
        perform pg_catalog.set_config('workflow.frees_slots', '', true);
    end if;
    perform pg_catalog.set_config('workflow.via_function', p_was, true);
end $$;

-- A status changed by plain SQL (not by one of the functions below, which
-- write their own events) is audited with reason plain_sql and the
-- database user. A cancel has its own trigger (workflow_run_cancelled).
create or replace function workflow.on_status_changed_by_sql() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (new.id,
            case new.status when 'pending' then 'retried' when 'leased' then 'leased'
                            when 'succeeded' then 'succeeded' else 'failed' end,
            jsonb_strip_nulls(jsonb_build_object(
                'reason', 'plain_sql', 'previous_status', old.status, 'attempt', new.attempt,
                'database_user', session_user)));
    return null;
end $$;
create or replace trigger workflow_status_changed_by_sql after update on workflow.workflow_run
    for each row when (old.status is distinct from new.status and new.status <> 'cancelled'
                       and coalesce(current_setting('workflow.via_function', true), '') <> 'on')
    execute function workflow.on_status_changed_by_sql();

-- A row deleted (retention, or a DELETE) takes its events, journal and
-- signals with it, in the same statement; under retention, events kept in a
-- time partition are left to drop_history_partitions, which drops them
-- with their partition once no run of its range is left. A batch row
-- loses the deleted runs (and goes with the last of them).
create or replace function workflow.on_runs_deleted() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp
-- By bitmap alone: a trail whose statistics are not taken yet looked
-- cheaper to read whole (or through another index whole) than to search
-- the index of batch rows.
-- (JIT off, as wherever a planner method is off.)
set enable_seqscan = off set enable_indexscan = off set jit = off as $$
declare
    v_retention boolean := coalesce(current_setting('workflow.retention', true), '') = 'on';
    v_ids uuid[];
begin
    if v_retention then
        -- Retention (delete_finished_runs): a trail in a time partition
        -- leaves with its partition (drop_history_partitions).
        delete from workflow.workflow_event_default e using old_runs o
        where e.workflow_id = o.id and e.run_ids is null;
    else
        delete from workflow.workflow_event e using old_runs o where e.workflow_id = o.id and e.run_ids is null;
    end if;
    -- The batch rows naming deleted runs (under retention, the default
    -- partition's alone), by idx_workflow_event_runs: each loses them, the
    -- rest recomputed from the row as it is when updated (a concurrent
    -- delete's trim is kept), and a row left with none goes; its
    -- workflow_id stays (still at most every id it names). The relation
    -- is one of the two constants.
    -- The batch rows are found by one search of the index for all the
    -- deleted ids (the function reads by bitmap alone: a plain index scan
    -- of another index was planned instead), and the ids they name are
    -- looked up by hash.
    v_ids := array(select o.id from old_runs o);
    execute format($q$
        with gone as materialized (select g.id from unnest($1) g(id))
        update %1$s e
        set (run_ids, attempts) = (
                select array_agg(u.run_id order by u.run_id), array_agg(u.attempt order by u.run_id)
                from unnest(e.run_ids, e.attempts) u(run_id, attempt)
                where u.run_id not in (select g.id from gone g))
        where e.run_ids && $1 and e.run_ids is not null
          and exists (select 1 from unnest(e.run_ids) u(run_id) where u.run_id not in (select g.id from gone g))$q$,
        case when v_retention then 'workflow.workflow_event_default' else 'workflow.workflow_event' end)
    using v_ids;
    execute format($q$
        with gone as materialized (select g.id from unnest($1) g(id))
        delete from %1$s e
        where e.run_ids && $1 and e.run_ids is not null
          and not exists (select 1 from unnest(e.run_ids) u(run_id) where u.run_id not in (select g.id from gone g))$q$,
        case when v_retention then 'workflow.workflow_event_default' else 'workflow.workflow_event' end)
    using v_ids;
    delete from workflow.workflow_step s using old_runs o where s.run_id = o.id;
    delete from workflow.workflow_signal g using old_runs o where g.run_id = o.id;
    delete from workflow.workflow_run_log g using old_runs o where g.run_id = o.id;
    delete from workflow.workflow_run_log_attempt a using old_runs o where a.run_id = o.id;
    return null;
end $$;
create or replace trigger workflow_runs_deleted after delete on workflow.workflow_run
    referencing old table as old_runs for each statement execute function workflow.on_runs_deleted();


-- THE RULES A CALLER CAN BREAK, AND WHAT EACH SAYS. Each is a check of
-- a table or a domain whose failure raises SW001 with the sentence a user
-- reads (rule_broken), so neither SDK keeps a list of constraint names. A
-- row null in the rule's columns passes, as a CHECK's does. The rules that
-- only the state machine's own writes could break (workflow_run's attempt
-- and lease rules, a step's outcome, an event's type) are plain checks of
-- their tables: a failure there is a defect, not a caller's mistake. Each
-- rule is added here when missing, on a fresh install and after a
-- migration that drops one to change it; the rules on columns written once
-- are on_run_inserted's (section 2).
do $$
declare
    r record;
begin
    for r in
        select * from (values
        ('domain', 'workflow.namespace_name', 'namespace_name_format',
         $r$char_length(value) <= 63 and value ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'$r$,
         $m$a namespace must be a Kubernetes namespace name: at most 63 lowercase letters, digits and hyphens, beginning and ending with a letter or digit$m$),
        ('domain', 'workflow.run_type', 'workflow_run_type_format',
         $r$char_length(value) <= 253 and value ~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'$r$,
         $m$type must be dot-separated lowercase segments of letters, digits and underscores ending in a version such as .v1 (for example content.thumbnail.v1), at most 253 characters$m$),
        ('domain', 'workflow.run_payload', 'workflow_run_payload_object',
         $r$jsonb_typeof(value) = 'object'$r$,
         $m$payload must be a JSON object$m$),
        ('domain', 'workflow.run_priority', 'workflow_run_priority_range',
         $r$value >= 0 and value <= 1000000$r$,
         $m$priority must be between 0 and 1000000$m$),
        ('domain', 'workflow.run_idempotency_key', 'workflow_run_idempotency_key_length',
         $r$char_length(value) >= 1 and char_length(value) <= 512$r$,
         $m$idempotency_key must be 1 to 512 characters$m$),
        ('domain', 'workflow.run_concurrency_key', 'workflow_run_concurrency_key_length',
         $r$char_length(value) >= 1 and char_length(value) <= 255$r$,
         $m$concurrency_key must be 1 to 255 characters$m$),
        ('domain', 'workflow.run_result', 'workflow_run_result_size',
         $r$octet_length(value::text) <= 1048576$r$,
         $m$a run's result must be at most 1 MiB of JSON$m$),
        ('domain', 'workflow.run_traceparent', 'workflow_run_traceparent_format',
         $r$octet_length(value) = 55 and value ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
           and substr(value, 4, 32) <> '00000000000000000000000000000000'
           and substr(value, 37, 16) <> '0000000000000000'$r$,
         $m$traceparent must be a W3C traceparent: 00-<32 lowercase hex trace id>-<16 lowercase hex parent id>-<2 hex flags>, neither id all zeros$m$),
        ('domain', 'workflow.run_source_namespace', 'workflow_run_source_bounded',
         $r$char_length(value) <= 63$r$,
         $m$a run's source is a Kubernetes object: namespace at most 63, name at most 253, uid at most 128 characters$m$),
        ('domain', 'workflow.run_source_name', 'workflow_run_source_bounded',
         $r$char_length(value) <= 253$r$,
         $m$a run's source is a Kubernetes object: namespace at most 63, name at most 253, uid at most 128 characters$m$),
        ('domain', 'workflow.run_source_uid', 'workflow_run_source_bounded',
         $r$char_length(value) <= 128$r$,
         $m$a run's source is a Kubernetes object: namespace at most 63, name at most 253, uid at most 128 characters$m$),
        ('domain', 'workflow.run_time', 'workflow_run_times_finite',
         $r$isfinite(value)$r$,
         $m$run_at and deadline_at must be real times, not infinity$m$),
        ('table', 'workflow.workflow_run', 'workflow_run_max_attempts_range',
         $r$max_attempts >= 1 and max_attempts <= 1000$r$,
         $m$max_attempts must be between 1 and 1000$m$),
        ('table', 'workflow.workflow_run', 'workflow_run_status_valid',
         $r$status = any ('{pending,leased,succeeded,failed,cancelled}')$r$,
         $m$status must be one of pending, leased, succeeded, failed, cancelled$m$),
        ('table', 'workflow.workflow_registry', 'workflow_registry_name_format',
         $r$char_length(workflow_name) <= 253 and workflow_name ~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'$r$,
         $m$workflow name must be a versioned type such as content.thumbnail.v1$m$),
        ('table', 'workflow.workflow_registry', 'workflow_registry_runtime_or_steps',
         $r$(runtime is null) <> (definition is null)$r$,
         $m$a registry entry has either a runtime or a definition (steps), not both and not neither$m$),
        ('table', 'workflow.workflow_registry', 'workflow_registry_runtime_valid',
         $r$runtime in ('go', 'python')$r$,
         $m$runtime must be go or python$m$),
        ('table', 'workflow.workflow_registry', 'workflow_registry_definition_size',
         $r$definition is null or octet_length(definition::text) <= 262144$r$,
         $m$a definition must be at most 256 KiB of JSON$m$),
        ('table', 'workflow.workflow_registry', 'workflow_registry_flow_limits_valid',
         $r$max_leased between 1 and 100000 and max_leased_per_key between 1 and 100000
           and rate_limit between 1 and 1000000
           and rate_period between interval '1 millisecond' and interval '1 day'$r$,
         $m$flow limits: maxLeased and maxLeasedPerKey 1 to 100000, a rate 1 to 1000000 starts per 1ms to 24h$m$),
        ('table', 'workflow.workflow_registry', 'workflow_registry_rate_complete',
         $r$(rate_limit is null) = (rate_period is null) and (rate_limit is not null or not rate_per_key)$r$,
         $m$a rate limit needs both a count and a period, and a rate per key needs a rate limit$m$),
        ('table', 'workflow.workflow_registry', 'workflow_registry_flow_limits_need_runtime',
         $r$runtime is not null
           or (max_leased is null and max_leased_per_key is null and rate_limit is null)$r$,
         $m$flow limits apply to types that workers run, not to a workflow with steps$m$),
        ('table', 'workflow.workflow_registry', 'workflow_registry_shared_with_valid',
         $r$cardinality(shared_with) <= 256 and workflow.namespaces_valid(shared_with)$r$,
         $m$shared_with must list at most 256 namespace names$m$),
        ('table', 'workflow.workflow_step', 'workflow_step_error_length',
         $r$error is null or char_length(error) <= 8192$r$,
         $m$step error must be at most 8192 characters$m$),
        ('table', 'workflow.workflow_step', 'workflow_step_name_format',
         $r$char_length(name) between 1 and 128 and name ~ '^[A-Za-z0-9._:-]+$'$r$,
         $m$step name must be 1 to 128 characters of letters, digits and . _ : -$m$),
        ('table', 'workflow.workflow_step', 'workflow_step_position_range',
         $r$"position" >= 0 and "position" <= 999$r$,
         $m$a run has at most 1000 steps (positions 0 to 999)$m$),
        ('table', 'workflow.workflow_step', 'workflow_step_output_size',
         $r$output is null or octet_length(output::text) <= 1048576$r$,
         $m$step output must be at most 1 MiB of JSON$m$),
        ('table', 'workflow.workflow_signal', 'workflow_signal_idempotency_key_length',
         $r$idempotency_key is null or (char_length(idempotency_key) >= 1 and char_length(idempotency_key) <= 512)$r$,
         $m$a signal's idempotency key must be 1 to 512 characters$m$),
        ('table', 'workflow.workflow_signal', 'workflow_signal_name_format',
         $r$char_length(name) between 1 and 128 and name ~ '^[A-Za-z0-9._:-]+$'$r$,
         $m$signal name must be 1 to 128 characters of letters, digits and . _ : -$m$),
        ('table', 'workflow.workflow_signal', 'workflow_signal_payload_size',
         $r$payload is null or octet_length(payload::text) <= 262144$r$,
         $m$signal payload must be at most 256 KiB of JSON$m$)
        ) v(kind, target, name, rule, sentence)
    loop
        if not exists (select 1 from pg_catalog.pg_constraint c
                       where c.conname = r.name
                         and case r.kind when 'domain' then c.contypid = r.target::regtype
                                         else c.conrelid = r.target::regclass end) then
            execute format('alter %s %s add constraint %I check (case when (%s) is not false then true'
                           ' else workflow.rule_broken(%L, %L) end)',
                           r.kind, r.target, r.name, r.rule, r.name, r.sentence);
        end if;
    end loop;
end $$;


-- ===========================================================================
-- 2. THE PRODUCER: RECORDING, CANCELLING, WAKING
-- ===========================================================================

-- A run recorded by plain SQL without a namespace or type_namespace: a
-- mirrored run (source_namespace) belongs to its object's namespace, a
-- child to its parent's (and inherits its parent's traceparent when it has
-- none), any other to the namespace its producer records for
-- (default_namespace; 'default' for the owner); its type is its own
-- namespace's (the child's, its parent's type namespace). Row-level
-- security then checks that a producer may record there. The functions that record runs (create_runs, create_run,
-- start_child, and dag_advance and dag_finally for a DAG's steps) set both
-- namespaces and the traceparent themselves, so the trigger is not called
-- for them: a lookup and a security-definer call per row spared (a sixth
-- of the time a 100-step fan-out took to start).
create or replace function workflow.on_run_inserting() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    p workflow.workflow_run;
begin
    if new.parent_id is not null then
        select * into p from workflow.workflow_run r where r.id = new.parent_id;
        if found then
            new.namespace := p.namespace;
            new.type_namespace := p.type_namespace;
            new.traceparent := coalesce(new.traceparent, p.traceparent);
        end if;
    elsif new.source_namespace is not null then
        new.namespace := new.source_namespace;
    elsif new.namespace is null then
        new.namespace := case when workflow.session_is_owner() then 'default' else workflow.default_namespace() end;
    end if;
    new.type_namespace := coalesce(new.type_namespace, new.namespace);
    return new;
end $$;
create or replace trigger workflow_run_inserting before insert on workflow.workflow_run
    for each row when (new.type_namespace is null or new.namespace is null)
    execute function workflow.on_run_inserting();

-- Every insert, from create_runs or plain SQL, passes here once per
-- statement: payloads over workflow_settings.max_payload_bytes or nested
-- too deep are refused (the whole statement fails with the reason), each
-- new run gets its 'created' event, a run of a key at its type's limit is
-- parked on 'limit', and a run whose type has steps (a DAG,
-- from the registry or its own dag column) is parked on 'dag' with a
-- 'waiting' event and its first steps inserted, every new DAG's by one
-- call of dags_advance (which fires this trigger again for them). A DAG
-- step whose own type has steps fails.
-- Locks: the DAG runs it starts (dags_advance).
create or replace function workflow.on_run_inserted() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_limit bigint := (select st.max_payload_bytes from workflow.workflow_settings st);
    v_big record;
    v_dag record;
    v_started uuid[] := '{}';
    v_now timestamptz;
begin
    -- The rules on columns a run is recorded with and that nothing writes
    -- afterwards (workflow_run_written_once), checked here once per
    -- statement as a CHECK would check each row (one that is null passes):
    -- a child names its parent and step together; retry delays are
    -- positive, the maximum at least the base; a dag: key is its DAG
    -- step's own; k8s: and k8s-uid: keys are mirrored runs'.
    select n.type, n.idempotency_key,
           case when not r.parent_step_set then 'workflow_run_parent_step_set'
                when not r.retry_policy_valid then 'workflow_run_retry_policy_valid'
                when not r.dag_key then 'workflow_run_dag_key'
                else 'workflow_run_reserved_key' end as rule
    into v_big
    from new_runs n
    cross join lateral (select
        coalesce((n.parent_id is null) = (n.parent_step is null), true) as parent_step_set,
        coalesce(n.retry_base_delay > '0' and n.retry_max_delay > '0'
                 and n.retry_max_delay >= n.retry_base_delay, true) as retry_policy_valid,
        coalesce(left(n.idempotency_key, 4) <> 'dag:'
                 or n.idempotency_key !~ '^dag:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:'
                 or coalesce(n.idempotency_key = 'dag:' || n.parent_id::text || ':' || n.parent_step, false),
                 true) as dag_key,
        coalesce((left(n.idempotency_key, 4) <> 'k8s:' and left(n.idempotency_key, 8) <> 'k8s-uid:')
                 or coalesce((n.source_uid is not null
                              and starts_with(n.idempotency_key, 'k8s:' || n.source_namespace || ':'))
                             or n.idempotency_key = 'k8s-uid:' || n.source_uid, false),
                 true) as reserved_key) r
    where not (r.parent_step_set and r.retry_policy_valid and r.dag_key and r.reserved_key)
    limit 1;
    if found then
        raise exception '%', case v_big.rule
                when 'workflow_run_parent_step_set' then 'a child run names both its parent and the parent''s step'
                when 'workflow_run_retry_policy_valid' then
                    'retry delays must be positive and the maximum delay at least the base delay'
                when 'workflow_run_dag_key' then
                    'idempotency keys of the form dag:<run id>:<step> are reserved for that step of that DAG run'
                else 'idempotency keys starting with k8s: or k8s-uid: are reserved for runs mirrored from a WorkflowRun of that namespace or UID'
                end
            using errcode = 'SW001', constraint = v_big.rule, table = 'workflow_run', schema = 'workflow',
                  detail = format('A %s run (idempotency key %s).', v_big.type,
                                  coalesce(quote_literal(left(v_big.idempotency_key, 100)), 'none'));
    end if;
    select n.type, octet_length(n.payload::text) as bytes into v_big
    from new_runs n where octet_length(n.payload::text) > v_limit limit 1;
    if found then
        raise exception 'payload of a % run is % bytes; the limit is % (workflow_settings.max_payload_bytes)',
            v_big.type, v_big.bytes, v_limit using errcode = 'SW001';
    end if;
    select n.type into v_big from new_runs n where workflow.json_too_deep(n.payload) limit 1;
    if found then
        raise exception 'payload of a % run nests deeper than 64 levels (objects and arrays), the most a stored value may',
            v_big.type using errcode = 'SW001';
    end if;
    -- schedule: keys name a schedule's ticks: only fire_due_schedules, in
    -- the schema owner's session, records them, so that no other run is
    -- taken for a tick, or holds a Forbid schedule back.
    if exists (select 1 from new_runs n where left(n.idempotency_key, 9) = 'schedule:')
       and not workflow.session_is_owner() then
        raise exception 'idempotency keys starting with schedule: are reserved for the runs schedules record'
            using errcode = 'SW001';
    end if;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    select n.id, 'created',
           jsonb_strip_nulls(jsonb_build_object(
               'type', n.type, 'namespace', n.namespace,
               'type_namespace', nullif(n.type_namespace, n.namespace), 'priority', n.priority, 'run_at', n.run_at,
               'max_attempts', n.max_attempts, 'idempotency_key', n.idempotency_key,
               'source_namespace', n.source_namespace, 'source_name', n.source_name,
               'parent_id', n.parent_id, 'parent_step', n.parent_step, 'deadline_at', n.deadline_at))
    from new_runs n
    order by n.created_at;

    -- New runs of a key already at its type's max_leased_per_key (its
    -- leased and runnable runs) wait from the start, parked on 'limit'
    -- (see FLOW LIMITS): a burst of one customer's runs never crowds the
    -- claim index. Runs due later are left alone (their run_at is kept).
    if exists (select 1 from workflow.workflow_registry g where g.max_leased_per_key is not null) then
        v_now := workflow.now();
        with fresh as materialized (
            select n.id, n.type, n.type_namespace as tns, n.concurrency_key as key, g.max_leased_per_key as lim,
                   row_number() over (partition by n.type_namespace, n.type, n.concurrency_key
                                      order by n.priority, n.created_at, n.id) as nth,
                   count(*) over (partition by n.type_namespace, n.type, n.concurrency_key) as news
            from new_runs n
            join workflow.workflow_registry g
              on g.namespace = n.type_namespace and g.workflow_name = n.type and g.max_leased_per_key is not null
            where n.concurrency_key is not null and n.status = 'pending' and n.wait_kind is null
              and n.run_at <= v_now
        ), judged as (
            -- The key's leased and runnable runs (the new ones included),
            -- counted once per key (by its first new run) and handed to
            -- the key's other new runs by the window, never by a join.
            select f.id, f.lim, f.news, f.nth,
                   max(case when f.nth = 1 then
                       -- (at most lim + news: past that, every new run waits)
                       (select count(*) from (
                            select 1 from workflow.workflow_run x
                            where x.type_namespace = f.tns and x.type collate "C" = f.type
                              and x.concurrency_key = f.key and x.deleted_at is null
                              and x.status in ('pending', 'leased') and x.wait_kind is null
                              and x.run_at <= v_now
                            limit f.lim + f.news) x) end) over (partition by f.tns, f.type, f.key) as n
            from fresh f
        )
        update workflow.workflow_run r
        set wait_kind = 'limit', run_at = workflow.far_future()
        from judged j
        where j.n - j.news + j.nth > j.lim and r.id = j.id;
    end if;

    if exists (select 1 from new_runs n where n.dag is not null)
       or exists (select 1 from workflow.workflow_registry g where g.definition is not null) then
        for v_dag in
            select n.id, n.type, n.run_at, coalesce(n.dag, g.definition) as def, n.dag is not null as inline,
                   exists (select 1 from workflow.workflow_run p where p.id = n.parent_id and p.dag is not null) as parent_dag
            from new_runs n
            left join workflow.workflow_registry g
              on g.namespace = n.type_namespace and g.workflow_name = n.type and g.definition is not null
            where n.status = 'pending' and (n.dag is not null or g.definition is not null)
            order by n.created_at, n.id
        loop
            if v_dag.inline and workflow.definition_problem(v_dag.def) is not null then
                raise exception 'invalid definition of run %: %', v_dag.id, workflow.definition_problem(v_dag.def)
                    using errcode = 'SW001';
            end if;
            if v_dag.run_at > workflow.now() + interval '1 second' then
                raise exception 'a run of %, a workflow with steps, starts at once: run_at is not supported for it', v_dag.type
                    using errcode = 'SW001';
            end if;
            if v_dag.parent_dag then
                -- A step whose type has steps (possible only if the registry
                -- changed under a running workflow): it fails, and so does
                -- its workflow, instead of nesting without end.
                update workflow.workflow_run r
                set status = 'failed', finished_at = (select workflow.now()), updated_at = (select workflow.now()),
                    last_error = format('%s has steps of its own; a step must be a type that workers run', v_dag.type)
                where r.id = v_dag.id;
                insert into workflow.workflow_event (workflow_id, event_type, data)
                values (v_dag.id, 'failed', jsonb_build_object('reason', 'nested_workflow',
                        'error', format('%s has steps of its own; a step must be a type that workers run', v_dag.type)));
                continue;
            end if;
            update workflow.workflow_run r
            set dag = v_dag.def, run_at = workflow.far_future(), wait_kind = 'dag', updated_at = (select workflow.now())
            where r.id = v_dag.id;
            insert into workflow.workflow_event (workflow_id, event_type, data)
            values (v_dag.id, 'waiting', jsonb_build_object('kind', 'dag',
                                                            'steps', jsonb_array_length(v_dag.def->'steps')));
            v_started := v_started || v_dag.id;
        end loop;
        -- Their first steps, every DAG's together.
        if cardinality(v_started) > 0 then
            perform workflow.dags_advance(v_started);
        end if;
    end if;
    return null;
end $$;
create or replace trigger workflow_run_inserted after insert on workflow.workflow_run
    referencing new table as new_runs for each statement execute function workflow.on_run_inserted();

-- What a run is recorded with and nothing writes afterwards: its parent and
-- step, idempotency key, source and retry delays (on_run_inserted checks
-- their rules once, at insert). An UPDATE naming one of them is refused
-- unless one of the functions makes it (retry_run detaches a retried
-- child from its parent and key). Producers, workers and readers may not
-- update these columns at all (roles.sql); this keeps the owner's plain
-- SQL from bypassing the rules.
create or replace function workflow.on_written_once_updated() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    if coalesce(current_setting('workflow.via_function', true), '') = 'on' then
        return null;
    end if;
    raise exception 'a run''s parent_id, parent_step, idempotency_key, source_namespace, source_name, source_uid, retry_base_delay and retry_max_delay are written once, when it is recorded'
        using errcode = 'SW001';
end $$;
create or replace trigger workflow_run_written_once
    before update of parent_id, parent_step, idempotency_key, source_namespace, source_name, source_uid,
                     retry_base_delay, retry_max_delay on workflow.workflow_run
    for each statement execute function workflow.on_written_once_updated();

-- Wake-ups: at commit, one NOTIFY workflow_run_created per type of the new
-- runs (the payload is the type's namespace and name, 'namespace/type'),
-- so idle workers of that namespace claim at once instead of at their next
-- poll, and the workers of other namespaces sleep on. The WHEN clause
-- remembers the types already seen in the transaction
-- (workflow.wake_types), so a batch of 10,000 runs of one type fires the
-- trigger once; the type's row of workflow_lock lets one committing
-- transaction per type notify at a time, and the others skip theirs (a
-- worker woken claims every runnable run of the type).
create or replace function workflow.on_run_committing() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
    -- Fired at commit (the statement is COMMIT, or the transaction is the
    -- statement's own): the type's wake-up row (one of 4096, by a hash of
    -- its namespace and type), which no login but the schema's owner may
    -- lock, is held for the instant of the commit; skipped when another
    -- committing transaction holds it, as that one then notifies. Fired
    -- earlier (a transaction that made the trigger immediate, and could
    -- then hold the row for as long as it likes), it notifies without the
    -- row.
    if statement_timestamp() = transaction_timestamp()
       or current_query() ~* '^\s*(commit|end)\M' then
        perform 1 from workflow.workflow_lock l
        where l.id = 1 + (hashtext(new.type_namespace || '/' || new.type) & 4095)
        for update skip locked;
        if not found then
            return null;
        end if;
    end if;
    perform pg_notify('workflow_run_created', new.type_namespace || '/' || new.type);
    return null;
end $$;
drop trigger if exists workflow_run_wake on workflow.workflow_run;
create constraint trigger workflow_run_wake
    after insert on workflow.workflow_run
    deferrable initially deferred
    for each row when (strpos(coalesce(current_setting('workflow.wake_types', true), ''),
                              ',' || new.type_namespace || '/' || new.type || ',') = 0
                       and set_config('workflow.wake_types',
                                      coalesce(current_setting('workflow.wake_types', true), '') || ','
                                      || new.type_namespace || '/' || new.type || ',',
                                      true) <> '')
    execute function workflow.on_run_committing();
comment on trigger workflow_run_wake on workflow.workflow_run is
    'Notifies workflow_run_created (namespace/type) once per type at commit; one committing transaction per type at a time (see on_run_committing).';

-- create_runs records many runs in one call, checking every row first and
-- naming the first bad one (type, key, numbers, traceparent, payload JSON)
-- so that nothing is recorded when one row is bad. Rows with an
-- idempotency key already taken, in the database or earlier in the batch,
-- return the existing run (created = false). Returns one row per input
-- row, in input order.
-- Fires: workflow_run_inserted (payload limits, 'created', DAG start),
-- workflow_run_child_traceparent, workflow_run_wake.
-- Locks: the new rows; rows with keys are inserted in key order, so two
-- batches sharing keys wait for each other in one order, never in a cycle.
create or replace function workflow.create_runs(
    p_types text[],
    p_payloads text[],
    p_priorities integer[] default null,
    p_run_ats timestamptz[] default null,
    p_idempotency_keys text[] default null,
    p_max_attempts integer[] default null,
    p_deadline_ms bigint[] default null,
    p_retry_base_ms bigint[] default null,
    p_retry_max_ms bigint[] default null,
    p_traceparents text[] default null,
    p_concurrency_keys text[] default null,
    p_namespace text default null,
    p_type_namespace text default null
) returns table (ord integer, id uuid, created boolean)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $_$
#variable_conflict use_column
declare
    c_max constant integer := 10000;
    n integer := coalesce(cardinality(p_types), 0);
    v_payloads jsonb[];
    v_keys text[];
    v_ids uuid[];
    v_bad record;
    v_text text;
    v_ns text;
    v_tns text;
begin
    if n = 0 then
        return;
    end if;
    -- The namespace the runs belong to (the caller's, or one it names and
    -- produces for), and whose type they run (a type another namespace
    -- shares with it).
    v_ns := workflow.producer_namespace(p_namespace);
    v_tns := coalesce(p_type_namespace, v_ns);
    if v_tns <> v_ns then
        if not workflow.namespace_valid(v_tns) then
            raise exception 'create_runs: type namespace %: a namespace is a DNS label of at most 63 characters',
                quote_literal(left(v_tns, 100)) using errcode = 'SW001';
        end if;
        select t.ord, t.type into v_bad
        from unnest(p_types) with ordinality t(type, ord)
        where not workflow.type_shared(v_tns, t.type, v_ns)
        order by t.ord limit 1;
        if found then
            raise exception 'create_runs: row %: namespace % does not share type % with namespace %',
                v_bad.ord, v_tns, left(v_bad.type, 253), v_ns using errcode = 'SW002';
        end if;
    end if;
    if n > c_max then
        raise exception 'create_runs: at most % runs per call, got %', c_max, n using errcode = 'SW001';
    end if;
    select a.name, a.len into v_bad
    from (values ('payloads', cardinality(p_payloads)), ('priorities', cardinality(p_priorities)),
                 ('run_ats', cardinality(p_run_ats)), ('idempotency_keys', cardinality(p_idempotency_keys)),
                 ('max_attempts', cardinality(p_max_attempts)), ('deadline_ms', cardinality(p_deadline_ms)),
                 ('retry_base_ms', cardinality(p_retry_base_ms)), ('retry_max_ms', cardinality(p_retry_max_ms)),
                 ('traceparents', cardinality(p_traceparents)),
                 ('concurrency_keys', cardinality(p_concurrency_keys))) a(name, len)
    where a.len is not null and a.len <> n
    limit 1;
    if found then
        raise exception 'create_runs: % has % elements, types has %', v_bad.name, v_bad.len, n using errcode = 'SW001';
    end if;

    -- Types, keys and numbers, row by row (the first bad row is named).
    select t.ord, t.type, t.key, t.max_attempts, t.deadline_ms, t.base_ms, t.max_ms, t.traceparent, t.ckey into v_bad
    from unnest(p_types, p_idempotency_keys, p_max_attempts, p_deadline_ms, p_retry_base_ms, p_retry_max_ms,
                p_traceparents, p_concurrency_keys)
         with ordinality t(type, key, max_attempts, deadline_ms, base_ms, max_ms, traceparent, ckey, ord)
    where t.type is null or char_length(t.type) > 253 or t.type !~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'
       or char_length(t.key) > 512 or starts_with(t.key, 'k8s:') or starts_with(t.key, 'k8s-uid:')
       or char_length(t.ckey) not between 1 and 255
       or t.max_attempts < 1 or t.max_attempts > 1000
       or t.deadline_ms < 1 or t.base_ms < 1 or t.max_ms < 1 or t.max_ms < t.base_ms
       or not workflow.traceparent_valid(t.traceparent)
    order by t.ord
    limit 1;
    if found then
        raise exception 'create_runs: row %: %', v_bad.ord,
            case
                when v_bad.type is null or char_length(v_bad.type) > 253
                     or v_bad.type !~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'
                    then format('type %L: a type is lowercase dot-separated words ending in a version, like billing.invoice.v1 (at most 253 characters)',
                                left(v_bad.type, 300))
                when char_length(v_bad.key) > 512
                    then format('idempotency key is %s characters, at most 512 are allowed', char_length(v_bad.key))
                when char_length(v_bad.ckey) not between 1 and 255
                    then format('concurrency key is %s characters; a key is 1 to 255 characters (or none)',
                                char_length(v_bad.ckey))
                when starts_with(v_bad.key, 'k8s:') or starts_with(v_bad.key, 'k8s-uid:')
                    then 'idempotency keys starting with k8s: or k8s-uid: are reserved for runs mirrored from Kubernetes'
                when v_bad.max_attempts < 1 or v_bad.max_attempts > 1000
                    then format('max attempts must be between 1 and 1000, got %s', v_bad.max_attempts)
                when not workflow.traceparent_valid(v_bad.traceparent)
                    then 'traceparent must be a W3C traceparent: 00-<32 lowercase hex trace id>-<16 lowercase hex parent id>-<2 hex flags>, neither id all zeros'
                when v_bad.deadline_ms < 1
                    then format('deadline must be at least 1 ms, got %s ms', v_bad.deadline_ms)
                else 'retry delays must be at least 1 ms, and the max delay at least the base delay'
            end
            using errcode = 'SW001';
    end if;

    -- Payloads: all at once, and row by row only to name a bad one.
    begin
        select array_agg(coalesce(p::jsonb, '{}'::jsonb) order by o) into v_payloads
        from unnest(coalesce(p_payloads, array_fill(null::text, array[n]))) with ordinality u(p, o);
    exception when others then
        for i in 1 .. n loop
            begin
                perform p_payloads[i]::jsonb;
            exception when others then
                get stacked diagnostics v_text = message_text;
                raise exception 'create_runs: row %: payload is not valid JSON: %', i, v_text using errcode = 'SW001';
            end;
        end loop;
        raise;
    end;
    select u.o into v_bad from unnest(v_payloads) with ordinality u(p, o)
    where jsonb_typeof(u.p) <> 'object' order by u.o limit 1;
    if found then
        raise exception 'create_runs: row %: payload must be a JSON object', v_bad.o using errcode = 'SW001';
    end if;

    select array_agg(workflow.new_run_id()) into v_ids from generate_series(1, n);
    if p_idempotency_keys is null or not exists (select 1 from unnest(p_idempotency_keys) k where k <> '') then
        -- No keys: every row is a new run.
        insert into workflow.workflow_run (id, type, payload, priority, run_at, max_attempts,
                                           retry_base_delay, retry_max_delay, deadline_at, traceparent,
                                           concurrency_key, namespace, type_namespace)
        select t.id, t.type, t.payload, coalesce(t.priority, 100), coalesce(t.run_at, (select workflow.now())),
               coalesce(t.max_attempts, 3),
               t.base_ms * interval '1 millisecond', t.max_ms * interval '1 millisecond',
               (select workflow.now()) + t.deadline_ms * interval '1 millisecond', t.traceparent, t.ckey, v_ns, v_tns
        from unnest(v_ids, p_types, v_payloads, p_priorities, p_run_ats, p_max_attempts,
                    p_retry_base_ms, p_retry_max_ms, p_deadline_ms, p_traceparents, p_concurrency_keys)
             as t(id, type, payload, priority, run_at, max_attempts, base_ms, max_ms, deadline_ms,
                  traceparent, ckey);
        -- (Unsorted: the ids were given above, in order, and nothing reads
        -- the order rows are inserted in; sorting a batch's rows, payloads
        -- and all, cost a tenth of the call.)
        return query select u.o::integer, u.id, true from unnest(v_ids) with ordinality u(id, o);
        return;
    end if;
    select array_agg(nullif(k, '') order by o) into v_keys
    from unnest(p_idempotency_keys) with ordinality u(k, o);

    -- The first row of each key (a later row with the same key gets its
    -- run); a key already taken records nothing.
    insert into workflow.workflow_run (id, type, payload, priority, run_at, idempotency_key, max_attempts,
                                       retry_base_delay, retry_max_delay, deadline_at, traceparent, concurrency_key,
                                       namespace, type_namespace)
    select t.id, t.type, t.payload, coalesce(t.priority, 100), coalesce(t.run_at, (select workflow.now())), t.key,
           coalesce(t.max_attempts, 3),
           t.base_ms * interval '1 millisecond', t.max_ms * interval '1 millisecond',
           (select workflow.now()) + t.deadline_ms * interval '1 millisecond', t.traceparent, t.ckey, v_ns, v_tns
    from (
        select u.*, row_number() over (partition by u.key order by u.ord) as nth
        from unnest(v_ids, p_types, v_payloads, p_priorities, p_run_ats, v_keys, p_max_attempts,
                    p_retry_base_ms, p_retry_max_ms, p_deadline_ms, p_traceparents, p_concurrency_keys)
             with ordinality u(id, type, payload, priority, run_at, key, max_attempts, base_ms, max_ms, deadline_ms,
                               traceparent, ckey, ord)
    ) t
    where t.key is null or t.nth = 1
    -- In key order: two batches sharing keys wait for each other's keys in
    -- the same order, never in a cycle.
    order by t.key, t.ord
    on conflict (idempotency_key) do nothing;

    -- A key held by a run of another namespace is refused: its run is not
    -- the caller's to see. (Keys are inbox-wide; a namespace's own prefix
    -- keeps them apart.) A new statement, so a key taken by a transaction
    -- that committed while this one waited on it is seen.
    select i.ord into v_bad
    from unnest(v_keys) with ordinality i(key, ord)
    join workflow.workflow_run r on r.idempotency_key = i.key
    where r.namespace <> v_ns
    order by i.ord limit 1;
    if found then
        raise exception 'create_runs: row %: the idempotency key is held by a run of another namespace', v_bad.ord
            using errcode = 'SW006';
    end if;
    return query
    select i.ord::integer,
           case when i.key is null then i.id else r.id end,
           i.key is null or r.id = i.id
    from unnest(v_keys, v_ids) with ordinality i(key, id, ord)
    left join workflow.workflow_run r on r.idempotency_key = i.key
    order by i.ord;
end
$_$;
comment on function workflow.create_runs(text[], text[], integer[], timestamptz[], text[], integer[], bigint[],
                                         bigint[], bigint[], text[], text[], text, text) is
    'Records many runs in one call; idempotency keys and traceparents per row; returns (ord, id, created) per input row.';

-- cancel_run cancels one unfinished run; false when it had finished (or
-- does not exist, or belongs to a namespace the caller does not produce
-- for). The cancel itself is the trigger's work.
-- Fires: workflow_run_cancelled (event, wait cleared, NOTIFY
-- workflow_run_cancelled to the holder), workflow_parent_ended (its
-- children), workflow_child_finished (its parent), workflow_source_run_changed.
-- Locks: the run; then its children (workflow_parent_ended).
create or replace function workflow.cancel_run(p_id uuid) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_done boolean;
begin
    perform set_config('workflow.cancel_reason', 'requested', true);
    -- (A cancel moves its run's parent on: the mark only complete_runs and
    -- fail_runs use is off, whoever set it; see set_marks.)
    perform set_config('workflow.ends_children', '', true);
    update workflow.workflow_run
    set status = 'cancelled', updated_at = (select workflow.now())
    where id = p_id and status in ('pending', 'leased') and workflow.acts_on(namespace, 'producer');
    v_done := found;
    perform set_config('workflow.cancel_reason', '', true);
    return v_done;
end $$;

-- retry_run gives a failed or cancelled run another go from where it
-- stopped, without redoing what succeeded: the run is pending again with a
-- fresh budget of attempts (p_attempts, or as many as it was created with),
-- its journal kept (a durable run replays its recorded steps), and for a
-- DAG its failed and cancelled steps pending again the same way, the steps
-- that succeeded kept, and the steps never started started by dag_advance
-- as their dependencies allow. A deadline already passed is dropped. Each
-- run made pending gets a 'retried' event with reason retry_run and the
-- status it left, and who asked (p_by, as given; at most 256 characters
-- kept). A run of a namespace the caller does not produce for is
-- 'not_found'. Answers: 'retried'; 'not_found'; 'refused' with the
-- reason (not failed or cancelled, deleted, a step of a workflow or a child
-- of a durable run, whose parent is what is retried).
-- Fires: workflow_dag_step_changed, workflow_source_run_changed; what
-- dag_advance fires.
-- Locks: the run, then its failed and cancelled steps.
create or replace function workflow.retry_run(p_id uuid, p_attempts integer default null, p_by text default null)
returns table (status text, message text)
language plpgsql security definer set search_path = pg_catalog, pg_temp set jit = off as $$
#variable_conflict use_column
declare
    v_run workflow.workflow_run;
    v_via text;
    v_now timestamptz := workflow.now();
    v_steps integer := 0;
    v_prev text;
    v_old_final uuid;
    v_kept text[] := '{}';
begin
    if p_attempts is not null and (p_attempts < 1 or p_attempts > 1000) then
        return query select 'refused'::text, format('attempts must be between 1 and 1000, got %s', p_attempts);
        return;
    end if;
    select * into v_run from workflow.workflow_run r
    where r.id = p_id and workflow.acts_on(r.namespace, 'producer') for update;
    if not found then
        return query select 'not_found'::text, format('no run %s', p_id);
        return;
    end if;
    if v_run.deleted_at is not null then
        return query select 'refused'::text, format('run %s was deleted', p_id);
        return;
    end if;
    if v_run.status not in ('failed', 'cancelled') then
        return query select 'refused'::text,
            format('run %s is %s: only a failed or cancelled run is retried', p_id, v_run.status);
        return;
    end if;
    if v_run.parent_id is not null then
        return query select 'refused'::text,
            format('run %s is a step or child of run %s: retry that run', p_id, v_run.parent_id);
        return;
    end if;
    -- A run mirrored from a WorkflowRun is retried by its object alone
    -- (spec.retries, through the operator), and never once spec.cancel
    -- cancelled it.
    if v_run.source_uid is not null and not workflow.session_is_owner() then
        return query select 'refused'::text,
            format('run %s mirrors WorkflowRun %s/%s: raise its spec.retries to retry it', p_id,
                   v_run.source_namespace, v_run.source_name);
        return;
    end if;
    if v_run.source_uid is not null and v_run.status = 'cancelled' and exists (
           select 1 from workflow.workflow_event e
           where e.workflow_id = p_id and e.event_type = 'cancelled'
             and starts_with(e.data->>'by', 'spec.cancel of WorkflowRun ')) then
        return query select 'refused'::text,
            format('run %s was cancelled by spec.cancel of WorkflowRun %s/%s; a cancelled object is not retried', p_id,
                   v_run.source_namespace, v_run.source_name);
        return;
    end if;
    if v_run.dag is null and v_run.attempt >= 1000 then
        return query select 'refused'::text, format('run %s has used the 1000 attempts a run may have', p_id);
        return;
    end if;
    if v_run.dag is not null and exists (
           select 1 from workflow.workflow_run c
           where c.parent_id = p_id and c.parent_step = workflow.dag_final_step(v_run.dag)->>'name'
             and c.status in ('pending', 'leased')) then
        return query select 'refused'::text,
            format('the final step of run %s is still running; retry the workflow once it has ended', p_id);
        return;
    end if;
    if v_run.dag is not null and exists (
           select 1 from workflow.child_runs(p_id) c
           where c.status in ('failed', 'cancelled') and (c.deleted_at is not null or c.attempt >= 1000)) then
        return query select 'refused'::text,
            format('a step of run %s that would run again was deleted or has used the 1000 attempts a run may have', p_id);
        return;
    end if;
    v_prev := v_run.status;
    v_via := workflow.set_marks();
    perform set_config('workflow.retrying', 'on', true);
    if v_run.dag is not null then
        -- Fanned-out steps that succeeded (continuing past failed elements),
        -- read once.
        if v_run.dag_fanout is not null then
            v_kept := array(select st.name from workflow.dag_step_states(v_run) st
                            where st.elements is not null and st.status = 'succeeded');
        end if;
        -- A final step that ran already ran with the old outcome: its run is
        -- kept, detached (named in the event), and the step runs again at
        -- the end.
        update workflow.workflow_run c
        set parent_id = null, parent_step = null, idempotency_key = null, updated_at = v_now
        where c.parent_id = p_id and c.parent_step = workflow.dag_final_step(v_run.dag)->>'name'
        returning c.id into v_old_final;
        -- The steps that failed or were cancelled, in id order.
        with again as (
            update workflow.workflow_run c
            set status = 'pending', run_at = v_now, finished_at = null,
                max_attempts = least(1000, c.attempt + coalesce(p_attempts, workflow.created_attempts(c.id))),
                -- (a step that used all 1000 attempts is refused by the
                -- constraint on attempts: the whole retry fails with it)
                lease_until = null, leased_by = null, lease_token = null,
                wait_kind = null, wait_step = null, wait_signal = null,
                deadline_at = case when c.deadline_at <= v_now then null else c.deadline_at end,
                updated_at = v_now
            from (select x.id from workflow.workflow_run x
                  where x.parent_id = p_id and x.status in ('failed', 'cancelled')
                    -- the elements of a fan-out that continued past them
                    -- and succeeded stay as they were
                    and not (x.parent_step ~ '\[[0-9]+\]$'
                             and left(x.parent_step, position('[' in x.parent_step) - 1) = any (v_kept))
                  order by x.id for update) x
            where c.id = x.id
            returning c.id, c.attempt, c.max_attempts
        ), events as (
            insert into workflow.workflow_event (workflow_id, event_type, data)
            select a.id, 'retried', jsonb_build_object('reason', 'retry_run', 'workflow_id', p_id,
                                                       'attempt', a.attempt, 'max_attempts', a.max_attempts)
            from again a
            returning 1
        )
        select count(*) into v_steps from events;
    end if;
    update workflow.workflow_run r
    set status = 'pending', finished_at = null, result = null,
        run_at = case when r.dag is not null then workflow.far_future() else v_now end,
        wait_kind = case when r.dag is not null then 'dag' end, wait_step = null, wait_signal = null,
        max_attempts = case when r.dag is not null then r.max_attempts
                            else least(1000, r.attempt + coalesce(p_attempts, workflow.created_attempts(r.id))) end,
        lease_until = null, leased_by = null, lease_token = null,
        deadline_at = case when r.deadline_at <= v_now then null else r.deadline_at end,
        updated_at = v_now
    where r.id = p_id
    returning * into v_run;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (p_id, 'retried', jsonb_strip_nulls(jsonb_build_object(
        'reason', 'retry_run', 'previous_status', v_prev,
        'attempt', v_run.attempt, 'max_attempts', v_run.max_attempts,
        'steps_retried', case when v_run.dag is not null then v_steps end,
        'previous_final_run_id', v_old_final,
        'by', left(nullif(p_by, ''), 256))));
    perform set_config('workflow.retrying', '', true);
    if v_run.dag is not null then
        perform workflow.dag_advance(p_id);
    end if;
    perform pg_notify('workflow_run_created', v_run.type_namespace || '/' || v_run.type);
    perform workflow.restore_marks(v_via);
    return query select 'retried'::text, null::text;
end $$;
comment on function workflow.retry_run(uuid, integer, text) is
    'Makes a failed or cancelled run pending again with fresh attempts, keeping its journal and, for a DAG, the steps that succeeded.';

-- created_attempts is the attempts a run was created with (its 'created'
-- event), 3 when that event is gone.
create or replace function workflow.created_attempts(p_id uuid) returns integer
language sql stable set search_path = pg_catalog, pg_temp as $$
    select coalesce((select least(1000, greatest(1, (e.data->>'max_attempts')::integer))
                     from workflow.workflow_event e
                     where e.workflow_id = p_id and e.event_type = 'created'
                     order by e.id limit 1), 3)
$$;

-- Any cancel, by cancel_run, plain SQL or a parent's end: the finish time,
-- no lease, no wait, a 'cancelled' event with the reason (requested,
-- parent_ended, plain_sql) and who asked (workflow.cancelled_by), and a
-- NOTIFY so the worker holding it stops.
create or replace function workflow.on_run_cancelled() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_by text := left(nullif(current_setting('workflow.cancelled_by', true), ''), 256);
    v_reason text := coalesce(nullif(current_setting('workflow.cancel_reason', true), ''), 'plain_sql');
begin
    if v_reason not in ('requested', 'parent_ended')
       or v_reason = 'parent_ended'
          and not exists (select 1 from workflow.workflow_run p
                          where p.id = new.parent_id and p.status in ('failed', 'cancelled')) then
        v_reason := 'plain_sql';
    end if;
    new.finished_at := coalesce(new.finished_at, workflow.now());
    new.lease_until := null;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (new.id, 'cancelled',
            jsonb_strip_nulls(jsonb_build_object(
                'previous_status', old.status, 'attempt', old.attempt,
                'parked', old.wait_kind, 'parent_id', new.parent_id,
                'worker_id', case when old.status = 'leased' then old.leased_by end,
                'reason', v_reason, 'by', v_by)));
    new.wait_kind := null;
    new.wait_step := null;
    new.wait_signal := null;
    perform pg_notify('workflow_run_cancelled', new.id::text);
    return new;
end $$;
create or replace trigger workflow_run_cancelled before update of status on workflow.workflow_run
    for each row when (new.status = 'cancelled' and old.status in ('pending', 'leased'))
    execute function workflow.on_run_cancelled();

-- A soft delete (deleted_at set on an unfinished run) cancels it, with a
-- 'cancelled' event whose reason is deleted; deleted runs are never claimed.
create or replace function workflow.on_run_soft_deleted() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
    new.status := 'cancelled';
    new.finished_at := coalesce(new.finished_at, workflow.now());
    new.lease_until := null;
    new.wait_kind := null;
    new.wait_step := null;
    new.wait_signal := null;
    new.updated_at := workflow.now();
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (new.id, 'cancelled',
            jsonb_strip_nulls(jsonb_build_object(
                'previous_status', old.status, 'attempt', old.attempt, 'reason', 'deleted',
                'parked', old.wait_kind,
                'worker_id', case when old.status = 'leased' then old.leased_by end,
                'by', left(nullif(current_setting('workflow.cancelled_by', true), ''), 256))));
    perform pg_notify('workflow_run_cancelled', new.id::text);
    return new;
end $$;
create or replace trigger workflow_run_soft_deleted before update of deleted_at on workflow.workflow_run
    for each row when (old.deleted_at is null and new.deleted_at is not null
                       and old.status in ('pending', 'leased') and new.status in ('pending', 'leased'))
    execute function workflow.on_run_soft_deleted();

-- A run mirrored from a WorkflowRun (source_name set) tells the operator
-- when its status, attempt, holder or wait changed: NOTIFY
-- workflow_run_changed with the run's id, so status is written back at
-- once. The id, not the object's namespace/name: any login may LISTEN, and
-- an id tells a login of another namespace nothing it may read (the
-- operator looks the object up).
create or replace function workflow.on_source_run_changed() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    perform pg_notify('workflow_run_changed', new.id::text);
    return null;
end $$;
create or replace trigger workflow_source_run_changed after update on workflow.workflow_run
    for each row when (new.source_name is not null
                       and (old.status is distinct from new.status or old.attempt is distinct from new.attempt
                            or old.leased_by is distinct from new.leased_by
                            or old.wait_kind is distinct from new.wait_kind))
    execute function workflow.on_source_run_changed();


-- ===========================================================================
-- 3. CLAIM AND LEASE
-- ===========================================================================

-- prefix_pattern turns a type prefix into a LIKE pattern that matches it
-- literally: '\', '_' and '%' inside it are escaped, and a single trailing
-- '%' is accepted as a synonym for the bare prefix.
create or replace function workflow.prefix_pattern(p_prefix text) returns text
language sql immutable parallel safe
begin atomic
    select replace(replace(replace(
               case when right(p_prefix, 1) = '%' then left(p_prefix, -1) else p_prefix end,
               chr(92), chr(92) || chr(92)), '%', chr(92) || '%'), '_', chr(92) || '_') || '%';
end;

-- active_types lists the types of one namespace (type_namespace) that have
-- pending or leased runs under literal type prefixes, by skipping from one type to the next along
-- idx_workflow_run_depth (a loose index scan): its cost follows the number
-- of types, not of runs. Reads only; no locks.
-- A hot call: planned as section 9 says.
create or replace function workflow.active_types(p_namespace text, p_type_prefixes text[]) returns setof text
language plpgsql stable security definer rows 10 set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan set enable_seqscan = off set jit = off as $$
begin
    return query
    with recursive bounds as (
        select distinct b.lo, b.lo || chr(127) as hi
        from unnest(p_type_prefixes) p
        cross join lateral (
            select (case when right(p, 1) = '%' then left(p, -1) else p end) collate "C" as lo) b
        where p is not null
    ), found as (
        select b.hi, (select r.type collate "C" from workflow.workflow_run r
                      where r.status in ('pending', 'leased') and r.deleted_at is null
                        and r.type_namespace = p_namespace
                        and r.type collate "C" >= b.lo and r.type collate "C" < b.hi
                      order by r.type_namespace, r.type collate "C" limit 1) as type
        from bounds b
        union all
        select f.hi, (select r.type collate "C" from workflow.workflow_run r
                      where r.status in ('pending', 'leased') and r.deleted_at is null
                        and r.type_namespace = p_namespace
                        and r.type collate "C" > f.type and r.type collate "C" < f.hi
                      order by r.type_namespace, r.type collate "C" limit 1)
        from found f
        where f.type is not null
    )
    select distinct f.type::text from found f where f.type is not null;
end $$;
comment on function workflow.active_types(text, text[]) is
    'Types of one namespace''s pending or leased runs under literal type prefixes.';

-- FLOW LIMITS. A type's registry entry may cap how many of its runs are
-- leased at once (max_leased), how many of one concurrency key
-- (max_leased_per_key), and how many start per window of rate_period
-- (rate_limit, for the type or, with rate_per_key, for each key). The
-- claim keeps them: claim_runs hands each limited type to flow_admit,
-- which decides, under a flow lock, which runnable runs may start.
--
--   * A type's flow lock is a transaction-level advisory lock
--     (hashtext('workflow_flow:' || namespace || '/' || type), 0), taken only with
--     pg_try_advisory_xact_lock: one claim of a limited type at a time;
--     another claim leaves the type to the next and never waits, so claims
--     cannot deadlock on it. Counting after the lock is taken (a new
--     statement, so a new snapshot) sees every claim of the type that
--     committed before: a limit is never exceeded. (One lock per type, not
--     per key: a claim over a thousand keys would otherwise fill the
--     server's lock table.)
--   * A run held back by a key's limit is parked on 'limit' (pending,
--     wait_kind 'limit'): out of the claim's indexes, so ten thousand runs
--     waiting on one customer do not slow the claims of any other. It
--     spends no attempt and writes no event. Held back by the key's
--     concurrency, its run_at is far_future(); a run of the key that stops
--     being leased lets the oldest parked one go (free_slots in the batch
--     functions that end leases, trigger workflow_run_flow_slot_freed on
--     every other path). Held back by the key's rate, its
--     run_at is the end of the window, when a claim of the type lets it go.
--   * A type at its cap or out of its window's starts is simply not
--     claimed: its runs stay runnable, and queue_depth counts only as many
--     as the limits let start, so the autoscaler does not scale for them.
--   * flow_recheck (from reap_expired_leases, so workers and the manager
--     run it every few seconds) lets parked runs go wherever a slot is
--     free: the cases that free_slots and the trigger cannot see are a run
--     of a key that finishes after the statement parking the key's runs
--     took its snapshot (it counts the key's leased runs again) and before
--     that claim commits, and a parked run locked by another transaction
--     when its slot was freed (skip locked). It also ends rate windows of
--     idle keys.

-- flow_pass is one pass of flow_admit over a limited type g of
-- p_namespace: it locks up to p_room runnable runs of the type in claim
-- order (skip locked), past the runs earlier passes admitted (p_admitted,
-- with their keys p_adm_keys), and decides which of them start: ids, tids
-- and keys of those admitted (ids and keys left empty when every candidate
-- fits), how many it read (fetched), the keys now full and until when, and
-- what it took of each key with the key's rate window row (took_keys,
-- took_n, took_tids). p_leased_keys and p_leased_n are the type's leased
-- runs per key, read whole when p_leased_whole (fewer than p_whole);
-- p_window is the rate's current window.
-- Its statement is planned with hash joins (the claim turns them off), for
-- the keys' counts, whatever the type.
-- Fires: nothing. Locks: the candidate runs (skip locked).
create or replace function workflow.flow_pass(
    p_namespace text,
    g workflow.workflow_registry,
    p_now timestamptz,
    p_window timestamptz,
    p_room integer,
    p_whole integer,
    p_leased_whole boolean,
    p_leased_keys text[],
    p_leased_n integer[],
    p_admitted uuid[],
    p_adm_keys text[],
    out ids uuid[],
    out tids tid[],
    out keys text[],
    out fetched integer,
    out full_keys text[],
    out full_until timestamptz[],
    out took_keys text[],
    out took_n integer[],
    out took_tids tid[])
language plpgsql
set search_path = pg_catalog, pg_temp
set enable_bitmapscan = off
set enable_seqscan = off
set jit = off
set enable_hashjoin = on
set enable_nestloop = off
as $$
begin
    -- One statement per pass, after the type's flow lock was taken, so
    -- it sees every claim of the type that committed before. The
    -- candidates: runnable runs of the type in claim order, locked
    -- (skip locked), past what earlier passes took. For each of their
    -- keys: how many runs are leased and how many started in the
    -- current window (read whole when the type has few leased runs and
    -- few window rows, else probed key by key), and what earlier passes
    -- took. A key's room is its free slots or its window's starts left,
    -- whichever is fewer, less what this claim took already; a
    -- candidate is admitted when it is among the first `room` of its
    -- key. A key is full when its candidates reach its room; its
    -- held-back runs wait for the window's end when the rate binds,
    -- else for a slot.
    with cand as materialized (
        select r.id, r.ctid as tid, r.concurrency_key as key, r.priority, r.created_at
        from workflow.workflow_run r
        where r.type_namespace = p_namespace and r.type collate "C" = g.workflow_name
          and coalesce(r.status, '') = 'pending'
          and r.deleted_at is null
          and r.wait_kind is distinct from 'limit'
          and r.run_at <= p_now
          and (r.deadline_at is null or r.deadline_at > p_now)
          and r.id not in (select a from unnest(p_admitted) a) -- hashed, not a scan of the array
        order by r.priority, r.created_at
        limit p_room
        for update of r skip locked
    ),
    windows as materialized (
        select w.concurrency_key as key, w.ctid as tid,
               case when w.window_start = p_window then w.starts else 0 end as started
        from workflow.workflow_flow_window w
        where g.rate_per_key and w.namespace = p_namespace and w.type = g.workflow_name and w.concurrency_key <> ''
        limit p_whole
    ),
    keys as materialized (
        -- Each candidate key once: its candidates in this pass, its
        -- counts, its window row, and its room.
        select k.key, k.n, k.tid,
               least(coalesce(g.max_leased_per_key - k.leased, 2147483647),
                     case when g.rate_per_key then g.rate_limit - k.started else 2147483647 end)
                 - k.mine as room,
               g.rate_per_key and g.rate_limit - k.started
                 < coalesce(g.max_leased_per_key - k.leased, 2147483647) as by_rate
        from (
            select k.key, k.n,
                   case when g.max_leased_per_key is null then 0
                        when p_leased_whole then k.leased
                        else (select count(*) from workflow.workflow_run r
                              where r.type_namespace = p_namespace and r.type collate "C" = g.workflow_name and r.concurrency_key = k.key
                                and r.status = 'leased' and r.deleted_at is null) end as leased,
                   coalesce(w.started, p.started, 0) as started,
                   coalesce(w.tid, p.tid) as tid,
                   k.mine
            from (
                -- The candidates' keys, with what the leased runs read
                -- above and earlier passes took of each, in one grouping.
                select u.key, sum(u.n) as n, sum(u.leased) as leased, sum(u.mine) as mine
                from (select c.key, 1 as n, 0 as leased, 0 as mine from cand c where c.key is not null
                      union all
                      select l.key, 0, l.n, 0 from unnest(p_leased_keys, p_leased_n) l(key, n)
                      union all
                      select a.key, 0, 0, 1 from unnest(p_adm_keys) a(key) where a.key is not null) u
                group by u.key
                having sum(u.n) > 0) k
            left join windows w on w.key = k.key
            left join lateral (
                select x.ctid as tid, case when x.window_start = p_window then x.starts else 0 end as started
                from workflow.workflow_flow_window x
                where g.rate_per_key and (select count(*) from windows) >= p_whole
                  and x.namespace = p_namespace and x.type = g.workflow_name and x.concurrency_key = k.key
                limit 1) p on true
        ) k
    ),
    summary as materialized (
        -- Over the candidate keys at once: whether every key has room
        -- for all its candidates (the common case, decided without
        -- ranking the candidates); the keys now full, and until when
        -- (the window's end when the rate binds); what this pass took
        -- of each key (its first `room` candidates) with its window row.
        select coalesce(bool_and(k.n <= k.room), true) as all_fit,
               array_agg(k.key) filter (where k.n >= k.room) as full_keys,
               array_agg(case when k.by_rate then p_window + g.rate_period else workflow.far_future() end)
                   filter (where k.n >= k.room) as full_until,
               coalesce(array_agg(k.key) filter (where g.rate_per_key and k.room > 0), '{}') as took_keys,
               coalesce(array_agg(least(k.n, k.room)::integer) filter (where g.rate_per_key and k.room > 0), '{}') as took_n,
               coalesce(array_agg(k.tid) filter (where g.rate_per_key and k.room > 0), '{}') as took_tids
        from keys k
    ),
    ranked as materialized (
        -- Only when some key has not: a candidate is admitted when it
        -- is among the first `room` of its key.
        select c.id, c.tid, c.key, c.nth, k.room
        from (select c.*, row_number() over (partition by c.key order by c.priority, c.created_at) as nth
              from cand c) c
        left join keys k on k.key = c.key
    )
    -- (The arrays come from one tuple store each, in the same order;
    -- the claim orders what it leases. When every candidate fits, the
    -- loop ends with this pass: the ids and keys that later passes and
    -- the parking would read are left empty.)
    select case when s.all_fit then '{}'
                else (select coalesce(array_agg(r.id), '{}') from ranked r where r.key is null or r.nth <= r.room) end,
           case when s.all_fit then (select coalesce(array_agg(c.tid), '{}') from cand c)
                else (select coalesce(array_agg(r.tid), '{}') from ranked r where r.key is null or r.nth <= r.room) end,
           case when s.all_fit then '{}'
                else (select coalesce(array_agg(r.key), '{}') from ranked r where r.key is null or r.nth <= r.room) end,
           (select count(*) from cand),
           s.full_keys, s.full_until, s.took_keys, s.took_n, s.took_tids
    into ids, tids, keys, fetched, full_keys, full_until, took_keys, took_n, took_tids
    from summary s;
end $$;

-- flow_park_full parks on 'limit' the other runnable runs of the keys a
-- pass of flow_admit found full (p_full, each until p_full_until: a
-- window's end when the rate binds, far_future() for a slot), at most
-- 10,000, past the runs admitted (p_admitted, with their keys p_adm_keys).
-- A key full by its cap (p_max_leased_per_key) is counted again first, in
-- this statement's snapshot: a run of it that ended since the claim
-- counted frees a slot whose trigger saw nothing parked yet, and the key
-- is then left runnable. Returns how many it parked.
-- Fires: workflow_source_run_changed (a mirrored run parked).
-- Locks: the runs it parks (skip locked).
create or replace function workflow.flow_park_full(
    p_namespace text,
    p_type text,
    p_max_leased_per_key integer,
    p_now timestamptz,
    p_full text[],
    p_full_until timestamptz[],
    p_admitted uuid[],
    p_adm_keys text[]
) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
set enable_bitmapscan = off
set enable_seqscan = off
set jit = off
set enable_hashjoin = off
set enable_nestloop = on
as $$
declare
    v_parked bigint;
begin
    with parked as (
        update workflow.workflow_run r
        set wait_kind = 'limit', run_at = p.until, updated_at = p_now
        from (select x.id, f.until
              from unnest(p_full, p_full_until) f(key, until)
              cross join lateral (
                  select f.until <> workflow.far_future() -- full by its rate: no end frees it
                         or (select count(*) from workflow.workflow_run r
                             where r.type_namespace = p_namespace and r.type collate "C" = p_type and r.concurrency_key = f.key
                               and r.status = 'leased' and r.deleted_at is null)
                            + (select count(*) from unnest(p_adm_keys) a where a = f.key)
                            >= p_max_leased_per_key as still_full) s
              cross join lateral (
                  select x.id from workflow.workflow_run x
                  where x.type_namespace = p_namespace and x.type collate "C" = p_type and x.concurrency_key = f.key
                    and x.status = 'pending' and x.deleted_at is null
                    and x.wait_kind is null and x.run_at <= p_now
                    and x.id not in (select a from unnest(p_admitted) a)
                    and s.still_full
                  for update skip locked) x
              limit 10000) p
        where r.id = p.id
        returning 1)
    select count(*) into v_parked from parked;
    return v_parked;
end $$;

-- flow_count_starts counts what flow_admit started against the rate
-- windows of limited type g of p_namespace (the current window
-- p_window): per key, p_n runs of each key of p_keys, whose window row
-- flow_pass read at p_tids (null for a key new to the type); per type,
-- p_admitted runs. p_passes is how many passes took runs (more than one
-- may have taken runs of one key).
-- Fires: nothing. Locks: the window rows it writes.
create or replace function workflow.flow_count_starts(
    p_namespace text,
    g workflow.workflow_registry,
    p_window timestamptz,
    p_keys text[],
    p_n integer[],
    p_tids tid[],
    p_passes integer,
    p_admitted integer
) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
set enable_bitmapscan = off
set enable_seqscan = off
set jit = off
set enable_hashjoin = off
set enable_nestloop = on
as $$
declare
    v_moved bigint;
begin
    if g.rate_per_key and cardinality(p_keys) > 0 then
        if p_passes > 1 then
            -- Several passes took runs of one key: one entry per key.
            select array_agg(t.key), array_agg(t.n), array_agg(t.tid)
            into p_keys, p_n, p_tids
            from (select t.key, sum(t.n)::integer as n, (array_agg(t.tid) filter (where t.tid is not null))[1] as tid
                  from unnest(p_keys, p_n, p_tids) t(key, n, tid)
                  group by t.key) t;
        end if;
        -- Keys with a row: moved to this window at the row's address, read
        -- above under the flow lock (an update, HOT in the table's free
        -- space, not an upsert's lock and write).
        update workflow.workflow_flow_window w
        set starts = case when w.window_start = p_window then w.starts else 0 end + t.n,
            window_start = p_window
        from unnest(p_keys, p_n, p_tids) t(key, n, tid)
        -- (The row's identity checked, not looked up: "is true" keeps the
        -- key off the index, so the row is read at its address.)
        where w.ctid = t.tid and ((w.namespace, w.type, w.concurrency_key) = (p_namespace, g.workflow_name, t.key)) is true;
        get diagnostics v_moved = row_count;
        if v_moved < cardinality(p_keys) then
            -- Keys new to the type get a row, as does a key whose ended
            -- window flow_recheck deleted meanwhile (the update above
            -- skipped it, after waiting for the delete if it was still
            -- in progress).
            insert into workflow.workflow_flow_window (namespace, type, concurrency_key, window_start, starts)
            select p_namespace, g.workflow_name, t.key, p_window, t.n
            from unnest(p_keys, p_n) t(key, n)
            where not exists (select 1 from workflow.workflow_flow_window w
                              where w.namespace = p_namespace and w.type = g.workflow_name and w.concurrency_key = t.key)
            on conflict do nothing;
        end if;
    end if;
    if g.rate_limit is not null and not g.rate_per_key and p_admitted > 0 then
        update workflow.workflow_flow_window w
        set starts = case when w.window_start = p_window then w.starts else 0 end + p_admitted,
            window_start = p_window
        where w.namespace = p_namespace and w.type = g.workflow_name and w.concurrency_key = '';
    end if;
end $$;

-- flow_admit picks which runnable runs of one limited type (of namespace
-- p_namespace: limits are per namespace and type) this claim may
-- lease (at most p_limit), and returns their addresses (ctid), locked by
-- this transaction: claim_runs leases them. It parks the runs of keys it
-- finds full and counts the starts against the rate windows.
-- Fires: workflow_source_run_changed (a mirrored run parked or let go).
-- Locks: runs whose rate window ended (skip locked), the type's flow lock
-- (try only), the type's own rate window row (a rate per type), candidate
-- runs (skip locked), runs of full keys (skip locked), then the window
-- rows of the keys it started runs of.
-- Its steps: the type's room (here), then up to three passes (flow_pass),
-- each followed by the parking of the keys it filled (flow_park_full),
-- then the starts counted against the rate windows (flow_count_starts).
create or replace function workflow.flow_admit(p_namespace text, p_type text, p_limit integer, p_now timestamptz)
returns tid[]
language plpgsql
set search_path = pg_catalog, pg_temp
-- Index scans, not bitmap scans: an index scan skips (and marks) entries of
-- row versions that parking left dead; a bitmap scan visits them all until
-- vacuum. Nor sequential scans: the claim runs with hash and merge joins
-- off, so a rate window table the statistics think small would otherwise be
-- read whole once per key. JIT off, as wherever a planner method is off: the
-- cost that turns a method off would start a compilation on every call.
set enable_bitmapscan = off
set enable_seqscan = off
set jit = off
-- Joins by nested loop, as in the claim; each pass (flow_pass) joins by
-- hash for its deciding statement alone.
set enable_hashjoin = off
set enable_nestloop = on
as $$
declare
    -- A type's leased runs, or its rate window rows, are read whole when
    -- fewer than this; from this many on, each candidate key is probed.
    c_whole constant integer := 2000;
    g workflow.workflow_registry;
    p record;
    v_room integer := p_limit;
    v_period double precision;
    v_window timestamptz;
    v_starts integer;
    v_by_key boolean;
    v_admitted uuid[] := '{}';
    v_adm_tids tid[] := '{}';
    v_adm_keys text[] := '{}';
    -- What the passes took per key, with the key's window row address.
    v_took_keys text[] := '{}';
    v_took_n integer[] := '{}';
    v_took_tids tid[] := '{}';
    v_pass integer;
    v_took_passes integer := 0;
    v_leased_read integer;
    v_leased_whole boolean := false;
    v_leased_keys text[];
    v_leased_n integer[];
begin
    select * into g from workflow.workflow_registry r where r.namespace = p_namespace and r.workflow_name = p_type;
    if not found then
        return '{}';
    end if;
    v_by_key := g.max_leased_per_key is not null or g.rate_per_key;
    if g.rate_limit is not null then
        v_period := extract(epoch from g.rate_period);
        v_window := to_timestamp(floor(extract(epoch from p_now) / v_period) * v_period);
    end if;
    if g.rate_per_key then
        -- Runs held back by their key's rate whose window has ended.
        update workflow.workflow_run r
        set wait_kind = null, run_at = p_now, updated_at = p_now
        where r.id in (select x.id from workflow.workflow_run x
                       where x.type_namespace = p_namespace and x.type collate "C" = p_type and x.wait_kind = 'limit' and x.run_at <= p_now
                       order by x.type collate "C", x.run_at
                       limit 1000
                       for update skip locked);
    end if;
    -- One claim of a limited type at a time: the others leave it to the
    -- next claim and take other types. The lock is the registry entry's
    -- row, which no login but the schema's owner may lock (an advisory
    -- lock, which any login may take, let anyone stop a type's claims).
    perform 1 from workflow.workflow_registry r
    where r.namespace = p_namespace and r.workflow_name = p_type
    for no key update skip locked;
    if not found then
        return '{}';
    end if;
    if g.max_leased is not null or g.max_leased_per_key is not null then
        -- The type's leased runs, read whole while fewer than c_whole: how
        -- many (the cap per type) and how many of each key (the cap per
        -- key), in one range of idx_workflow_run_depth (and the rows, for
        -- their keys). The order names that index: statistics taken while
        -- few runs were leased would otherwise send the read through the
        -- index of every leased run, other teams' types included.
        select coalesce(sum(x.n), 0)::integer,
               coalesce(array_agg(x.key) filter (where x.key is not null), '{}'),
               coalesce(array_agg(x.n::integer) filter (where x.key is not null), '{}')
        into v_leased_read, v_leased_keys, v_leased_n
        from (select l.key, count(*) as n
              from (select r.concurrency_key as key
                    from workflow.workflow_run r
                    where r.type_namespace = p_namespace and r.type collate "C" = p_type and r.status = 'leased' and r.deleted_at is null
                    order by r.type collate "C", r.status, r.run_at
                    limit c_whole) l
              group by l.key) x;
        v_leased_whole := v_leased_read < c_whole;
    end if;
    if g.max_leased is not null then
        v_room := least(v_room, g.max_leased - case when v_leased_whole then v_leased_read else (
            select count(*) from (
                select 1 from workflow.workflow_run r
                where r.type_namespace = p_namespace and r.type collate "C" = p_type and r.status = 'leased' and r.deleted_at is null
                order by r.type collate "C", r.status, r.run_at
                limit g.max_leased) x)::integer end);
    end if;
    if g.rate_limit is not null and not g.rate_per_key then
        insert into workflow.workflow_flow_window (namespace, type, concurrency_key, window_start)
        values (p_namespace, p_type, '', v_window) on conflict do nothing;
        -- Locked until the claim commits: flow_recheck (skip locked) cannot
        -- delete it meanwhile and lose this claim's starts.
        select case when w.window_start = v_window then w.starts else 0 end into v_starts
        from workflow.workflow_flow_window w
        where w.namespace = p_namespace and w.type = p_type and w.concurrency_key = ''
        for update;
        v_room := least(v_room, g.rate_limit - v_starts);
    end if;
    if v_room <= 0 then
        return '{}';
    end if;

    -- Candidates in claim order, pass by pass (one pass without limits per
    -- key: every candidate fits). When a pass held runs of full keys back
    -- (and parked their keys' other runs), up to two more passes read past
    -- them, so that the claim is not left short.
    for v_pass in 1 .. case when v_by_key then 3 else 1 end loop
        p := workflow.flow_pass(p_namespace, g, p_now, v_window, v_room - cardinality(v_adm_tids), c_whole,
                                v_leased_whole, v_leased_keys, v_leased_n, v_admitted, v_adm_keys);
        v_took_keys := v_took_keys || p.took_keys;
        v_took_n := v_took_n || p.took_n;
        v_took_tids := v_took_tids || p.took_tids;
        exit when p.fetched = 0;
        if cardinality(p.tids) > 0 then
            v_took_passes := v_took_passes + 1;
        end if;
        v_adm_tids := v_adm_tids || p.tids;
        -- Done when this pass held nothing back (a key it filled parks its
        -- other runs at the next claim that meets them), or the room is
        -- used up.
        exit when cardinality(p.tids) = p.fetched or cardinality(v_adm_tids) >= v_room;
        v_admitted := v_admitted || p.ids;
        v_adm_keys := v_adm_keys || p.keys;
        -- Keys now full (this pass took their last room): their other
        -- runnable runs wait, parked on 'limit'.
        perform workflow.flow_park_full(p_namespace, p_type, g.max_leased_per_key, p_now, p.full_keys, p.full_until,
                                        v_admitted, v_adm_keys);
    end loop;
    if g.rate_limit is not null then
        perform workflow.flow_count_starts(p_namespace, g, v_window, v_took_keys, v_took_n, v_took_tids,
                                           v_took_passes, cardinality(v_adm_tids));
    end if;
    return v_adm_tids;
end $$;

-- A leased run with a concurrency key that stops being leased (finished,
-- retried, released, parked, reaped, cancelled) frees a slot of its key:
-- the oldest run parked on that key's limit may go. complete_runs,
-- fail_runs and release_runs let the runs they end free their slots in one
-- statement (free_slots) and mark the transaction while they do
-- (workflow.frees_slots), so that the trigger is not called for those
-- runs; runs their writes end in turn (a parent's end cancelling its
-- children, from a trigger: pg_trigger_depth() > 0) call it as every other
-- path does (park_run, the reaper, deadlines, plain SQL). Like
-- workflow.via_function the mark is a hint, not a guard: a session that
-- sets it itself only delays the parked runs of the keys whose runs it
-- ends, until flow_recheck lets them go.
-- Locks: that parked run (skip locked).
create or replace function workflow.on_flow_slot_freed() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_id uuid;
begin
    if not exists (select 1 from workflow.workflow_registry g
                   where g.namespace = old.type_namespace and g.workflow_name = old.type
                     and g.max_leased_per_key is not null) then
        return null;
    end if;
    -- The key's oldest parked run, from idx_workflow_run_flow_parked (one
    -- held back by the key's rate too: the next claim parks it again if
    -- its window is still used up), found and locked by a read: most slots
    -- free with nothing waiting, and an update of the run table costs its
    -- setting up (its indexes and triggers) even when it finds no row.
    select x.id into v_id from workflow.workflow_run x
    where x.type_namespace = old.type_namespace and x.type collate "C" = old.type
      and x.concurrency_key = old.concurrency_key and x.wait_kind = 'limit'
    order by x.type_namespace, x.type collate "C", x.concurrency_key, x.priority, x.created_at
    limit 1
    for update skip locked;
    if found then
        update workflow.workflow_run r
        set wait_kind = null, run_at = (select workflow.now()), updated_at = (select workflow.now())
        where r.id = v_id;
    end if;
    return null;
end $$;
create or replace trigger workflow_run_flow_slot_freed after update of status on workflow.workflow_run
    for each row when (old.status = 'leased' and new.status <> 'leased' and old.concurrency_key is not null
                       and (pg_trigger_depth() > 0
                            or coalesce(current_setting('workflow.frees_slots', true), '') <> 'on'))
    execute function workflow.on_flow_slot_freed();

-- free_slots lets go, for each run ended by the calling batch (its type's
-- namespace, its type and concurrency key; null keys are skipped), the oldest run parked on
-- that key's limit when the run's type has a cap per key: what the
-- trigger workflow_run_flow_slot_freed does run by run, for a whole batch
-- in one statement. A completion of 500 runs of a capped type cost 1.39x
-- the same runs of a type without limits with the trigger called per run.
-- The registry is read once for the batch's types, so a registry of
-- thousands of capped types costs a batch nothing more. Returns how many
-- runs it let go.
-- Fires: workflow_source_run_changed (a mirrored run's wait ends).
-- Locks: the parked runs it lets go (skip locked).
create or replace function workflow.free_slots(p_namespaces text[], p_types text[], p_keys text[]) returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
-- Its callers run with nested loops off; the parked runs of each key are
-- read by idx_workflow_run_flow_parked, in a nested loop.
set enable_nestloop = on
set enable_seqscan = off
set jit = off
as $$
declare
    v_n integer;
begin
    -- Most batches have no type with a cap per key: one probe of the
    -- registry spares the rest (decision 0008).
    if not exists (select 1 from workflow.workflow_registry g
                   where g.workflow_name = any (p_types) and g.max_leased_per_key is not null) then
        return 0;
    end if;
    update workflow.workflow_run r
    set wait_kind = null, run_at = (select workflow.now()), updated_at = (select workflow.now())
    from (select x.id
          from (select t.ns, t.type, t.key, count(*)::integer as n
                from unnest(p_namespaces, p_types, p_keys) as t(ns, type, key)
                where t.key is not null
                  and (t.ns, t.type) in (select g.namespace, g.workflow_name from workflow.workflow_registry g
                                         where g.workflow_name = any (p_types)
                                           and g.max_leased_per_key is not null)
                group by t.ns, t.type, t.key) f
          cross join lateral (
              select x.id from workflow.workflow_run x
              where x.type_namespace = f.ns and x.type collate "C" = f.type and x.concurrency_key = f.key
                and x.wait_kind = 'limit'
              order by x.type_namespace, x.type collate "C", x.concurrency_key, x.priority, x.created_at
              limit f.n
              for update skip locked) x) p
    where r.id = p.id;
    get diagnostics v_n = row_count;
    return v_n;
end $$;

-- flow_recheck lets parked runs go wherever their key has a free slot (or
-- their type no longer has a limit), at most p_limit runs, and deletes the
-- rate windows that ended. Returns how many runs it let go.
-- Fires: workflow_source_run_changed (a mirrored run's wait ends).
-- Locks: the parked runs it lets go (skip locked); window rows of ended
-- windows (skip locked).
create or replace function workflow.flow_recheck(p_limit integer default 1000) returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_now timestamptz := workflow.now();
    v_freed integer;
begin
    with keys as (
        select distinct x.type_namespace as ns, x.type, x.concurrency_key
        from workflow.workflow_run x
        where x.wait_kind = 'limit' and (x.run_at = workflow.far_future() or x.run_at <= v_now)
        limit p_limit
    ), free as (
        select k.ns, k.type, k.concurrency_key,
               case when g.max_leased_per_key is null then p_limit
                    else g.max_leased_per_key - (
                        select count(*) from workflow.workflow_run r
                        where r.type_namespace = k.ns and r.type collate "C" = k.type
                          and r.concurrency_key = k.concurrency_key
                          and r.status = 'leased' and r.deleted_at is null)::integer end as slots
        from keys k
        left join workflow.workflow_registry g on g.namespace = k.ns and g.workflow_name = k.type
    ), go as (
        select x.id
        from free f
        cross join lateral (
            select x.id from workflow.workflow_run x
            where x.type_namespace = f.ns and x.type collate "C" = f.type
              and x.concurrency_key is not distinct from f.concurrency_key
              and x.wait_kind = 'limit' and (x.run_at = workflow.far_future() or x.run_at <= v_now)
            order by x.priority, x.created_at
            limit greatest(f.slots, 0)
            for update skip locked) x
        limit p_limit
    ), freed as (
        update workflow.workflow_run r
        set wait_kind = null, run_at = v_now, updated_at = v_now
        from go where r.id = go.id
        returning 1
    )
    select count(*) into v_freed from freed;
    delete from workflow.workflow_flow_window w
    where (w.namespace, w.type, w.concurrency_key) in (
        select o.namespace, o.type, o.concurrency_key from workflow.workflow_flow_window o
        left join workflow.workflow_registry g on g.namespace = o.namespace and g.workflow_name = o.type
        where g.rate_period is null or o.window_start + g.rate_period < v_now
        limit p_limit
        for update of o skip locked);
    return v_freed;
end $$;

-- hand_off_candidates locks the runs that the runs p_after, ended by
-- worker p_worker earlier in this transaction (their finished_at is its
-- workflow.now(), p_now), made runnable, and returns their addresses:
-- the steps their completion started in their DAGs and their durable
-- parents it woke. Only runs a claim of the worker could take now: of
-- namespace p_ns, of the worker's types p_types and under its prefixes
-- p_prefixes (as LIKE patterns, p_patterns; each null or empty: any), of
-- a type the registry neither
-- disables, nor gives to another runtime than p_runtime, nor limits
-- (flow_admit admits those), and not behind a runnable run of the
-- worker's types (p_types, else the active types under its prefixes, else
-- the run's own type) with a better priority. At most p_limit, best
-- priority first, then oldest. claim_runs' hand-off.
-- Locks: the runs returned, FOR UPDATE, skipping locked ones.
-- PL/pgSQL, so that a session plans its query once (an SQL function's is
-- planned at every call; decision 0008); planned without bitmap scans:
-- the candidates are read by primary key, never by ANDing the claim
-- index's entries of the whole namespace (a generic plan did, on a table
-- whose statistics were young).
create or replace function workflow.hand_off_candidates(
    p_ns text, p_worker text, p_after uuid[], p_types text[], p_prefixes text[], p_patterns text[],
    p_runtime text, p_limit integer, p_now timestamptz
) returns tid[]
language plpgsql set search_path = pg_catalog, pg_temp set enable_bitmapscan = off set jit = off as $$
declare
    -- the types whose runnable runs may come first: the worker's
    v_ranked text[] := p_types;
begin
    if p_types is null and cardinality(p_prefixes) > 0 then
        v_ranked := array(select t from workflow.active_types(p_ns, p_prefixes) t);
    end if;
    return (
    with ended as materialized (
        select distinct d.parent_id from workflow.workflow_run d
        where d.id = any (p_after) and d.parent_id is not null
          and d.leased_by = p_worker and d.finished_at = p_now
    ), near as (
        -- the parents, and the steps inserted in this transaction (by the
        -- parent and creation time: one probe of idx_workflow_run_parent)
        select e.parent_id as id from ended e
        union
        select s.id from ended e
        join workflow.workflow_run s on s.parent_id = e.parent_id and s.created_at = pg_catalog.now()
    )
    select coalesce(array_agg(x.ctid), '{}') from (
        select r.ctid from workflow.workflow_run r
        where r.id = any (array(select n.id from near n))
          and coalesce(r.status, '') = 'pending' and r.deleted_at is null and r.dag is null
          and r.type_namespace = p_ns
          and r.wait_kind is distinct from 'limit' and r.run_at <= p_now
          and (r.deadline_at is null or r.deadline_at > p_now)
          and (p_types is null or r.type = any (p_types))
          and (p_patterns is null or r.type like any (p_patterns))
          and not exists (
                  select 1 from workflow.workflow_registry g
                  where g.namespace = p_ns and g.workflow_name = r.type
                    and (not g.is_enabled or (p_runtime is not null and g.runtime <> p_runtime)
                         or g.max_leased is not null or g.max_leased_per_key is not null or g.rate_limit is not null))
          and not exists (
                  select 1 from unnest(coalesce(v_ranked, array[r.type])) t(type)
                  cross join lateral (
                      select 1 from workflow.workflow_run b
                      where b.type_namespace = p_ns and b.type collate "C" = t.type
                        and coalesce(b.status, '') = 'pending' and b.deleted_at is null
                        and b.wait_kind is distinct from 'limit'
                        and b.priority < r.priority and b.run_at <= p_now
                      limit 1) b)
        order by r.priority, r.created_at
        limit p_limit
        for update of r skip locked
    ) x);
end $$;

-- claim_bucket is the turn of a claim woken by a notification: it goes on
-- only when no other woken claim of the same namespace p_ns, prefixes
-- p_prefixes and types p_types is under way (that one takes what there
-- is). It returns the claim's bucket (a hash of its prefixes and types,
-- 0 to 255) with the bucket's row of workflow_claimer locked until the
-- claim commits, or null when another claim holds it.
-- Locks: that row, FOR UPDATE, skipping it when locked (or inserts it:
-- the new row is held as the lock holds it).
create or replace function workflow.claim_bucket(p_ns text, p_prefixes text[], p_types text[])
returns smallint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_bucket smallint := pg_catalog.hashtext(coalesce(array_to_string(p_prefixes, ','), '') || '|'
                             || coalesce((select string_agg(t, ',' order by t) from unnest(p_types) t), ''))
                         & 255;
begin
    perform 1 from workflow.workflow_claimer w
    where w.namespace = p_ns and w.bucket = v_bucket
    for update skip locked;
    if not found then
        insert into workflow.workflow_claimer (namespace, bucket) values (p_ns, v_bucket)
        on conflict do nothing;
        if not found then
            return null;
        end if;
    end if;
    return v_bucket;
end $$;

-- claim_pick locks the runnable runs of the types p_types of namespace
-- p_ns (null: every type, except those the registry disables, gives to
-- another runtime than p_runtime, or limits, p_limited), at most p_limit,
-- best priority first, then oldest, and returns their addresses: the part
-- of a claim that no flow limit governs (claim_runs leases them with what
-- flow_admit let start).
-- Locks: the runs returned, type by type, FOR UPDATE, skipping locked ones
-- (never waits on another claim).
-- Planned under claim_runs' settings, its one caller.
create or replace function workflow.claim_pick(
    p_ns text, p_types text[], p_limited text[], p_runtime text, p_limit integer, p_now timestamptz
) returns tid[]
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    return (
    select coalesce(array_agg(c.ctid), '{}')
    from (
      select c.ctid
      from (
        select r.ctid, r.priority, r.created_at
        from unnest(p_types) t(type)
        cross join lateral (
            select r.ctid, r.priority, r.created_at
            from workflow.workflow_run r
            where r.type_namespace = p_ns and r.type collate "C" = t.type
              and coalesce(r.status, '') = 'pending' -- idx_workflow_run_claim_type's predicate
              and r.deleted_at is null
              and r.wait_kind is distinct from 'limit'
              and r.run_at <= p_now
              and (r.deadline_at is null or r.deadline_at > p_now)
            order by r.priority, r.created_at
            limit p_limit
            for update of r skip locked
        ) r
        union all
        select a.ctid, a.priority, a.created_at
        from (
            select r.ctid, r.priority, r.created_at
            from workflow.workflow_run r
            where p_types is null
              and r.type_namespace = p_ns
              and r.status = 'pending'
              and r.deleted_at is null
              and r.wait_kind is distinct from 'limit'
              and r.run_at <= p_now
              and (r.deadline_at is null or r.deadline_at > p_now)
              and not exists (
                  select 1 from workflow.workflow_registry g
                  where g.namespace = p_ns and g.workflow_name = r.type
                    and (not g.is_enabled or (p_runtime is not null and g.runtime <> p_runtime)
                         or g.workflow_name = any (p_limited)))
            order by r.priority, r.created_at
            limit p_limit
            for update of r skip locked
        ) a
      ) c
      order by c.priority, c.created_at
      limit p_limit
    ) c);
end $$;

-- claim_lease leases the pending runs at the addresses p_runs (locked by
-- the claim that calls it) to worker p_worker until p_now plus p_lease_ms,
-- each with a new lease token, and returns them as claim_runs does, best
-- priority first, then oldest: a parked run whose timer is due has its wait
-- entry resolved (a sleep 'ok', any other wait 'timeout') and a 'woken'
-- event before 'started'; a claim of several records one 'started' batch
-- row per namespace and history span (p_span); a journal whose outputs
-- exceed p_journal_cap comes back as a JSON string saying so.
-- Fires: workflow_source_run_changed (mirrored runs).
-- Locks: the runs' open wait entries.
-- Planned under claim_runs' settings, its one caller.
create or replace function workflow.claim_lease(
    p_worker text, p_runs tid[], p_lease_ms bigint, p_now timestamptz, p_journal_cap bigint, p_span interval
) returns table (
    id uuid, type text, payload jsonb, attempt integer, max_attempts integer, lease_until timestamptz,
    created_at timestamptz, lease_token bigint, deadline_at timestamptz, journal jsonb, traceparent text,
    parent_id uuid
)
language plpgsql set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
begin
    return query
    with secret as materialized (
        -- The secret this claim's tokens come from (see new_lease_token):
        -- drawn once, here.
        select uuid_send(gen_random_uuid()) as seed
    ), candidates as (
        -- The runs locked for this claim, at the addresses they were
        -- locked at.
        select r.id, r.wait_kind, r.wait_step
        from workflow.workflow_run r
        where r.ctid = any (p_runs)
          and coalesce(r.status, '') = 'pending'
    ), claimed as (
        update workflow.workflow_run r
        set status      = 'leased',
            attempt     = r.attempt + 1,
            leased_by   = p_worker,
            lease_until = p_now + p_lease_ms * interval '1 millisecond',
            lease_token = workflow.lease_fence(c.token),
            heartbeat_count = 0,
            wait_kind   = null,
            wait_step   = null,
            wait_signal = null,
            started_at  = coalesce(r.started_at, p_now),
            updated_at  = p_now
        -- (offset 0: each token is computed once, not once for the fence
        -- and again for the returned value.)
        from (select c.*, workflow.new_lease_token(k.seed, c.id) as token
              from candidates c cross join secret k offset 0) c
        where r.id = c.id
        returning r.id, r.type, r.payload, r.attempt, r.max_attempts, r.lease_until,
                  r.created_at, r.priority, c.token as lease_token, r.deadline_at, c.wait_kind, c.wait_step,
                  r.traceparent, r.namespace, r.parent_id
    ), timers as (
        -- The timer resolves the wait it ends: a sleep is done, any other wait
        -- timed out.
        update workflow.workflow_step s
        set outcome     = case when c.wait_kind = 'sleep' then 'ok' else 'timeout' end,
            finished_at = p_now
        from claimed c
        where c.wait_kind is not null
          and s.run_id = c.id and s.name = c.wait_step and s.finished_at is null
        returning s.run_id
    ), span as materialized (
        -- The history span of the claim's oldest run, once: a run inside
        -- is placed by two comparisons of its id, any other by its
        -- creation time (reading the time from an id cost a tenth of a
        -- claim's server time a run).
        select b.start, b.lo, b.hi
        from (select x.id from claimed x order by x.id limit 1) x
        cross join lateral workflow.history_span_bounds(x.id, p_span) b
    ), events as (
        -- A run that waited (woken, then started, so that its events are
        -- emitted and numbered in order) and the run of a claim of one:
        -- rows of their own. 'started' is the lease: who holds it, for
        -- which attempt, until when. The other runs of a claim of several:
        -- one batch row per namespace and history span (see
        -- workflow_event.run_ids), whose runs share the worker and the
        -- lease's end. (One INSERT for both: one table to open.)
        insert into workflow.workflow_event (workflow_id, event_type, data, run_ids, attempts)
        select c.id, e.event_type, e.data, null, null
        from claimed c
        cross join lateral (values
            ('woken', jsonb_build_object('reason', case when c.wait_kind = 'sleep' then 'timer' else 'timeout' end,
                                         'step', c.wait_step, 'wait_kind', c.wait_kind)),
            ('started', jsonb_build_object('worker_id', p_worker, 'attempt', c.attempt,
                                           'lease_until', c.lease_until))) e(event_type, data)
        where (c.wait_kind is not null or (select count(*) from claimed) = 1)
          and (e.event_type <> 'woken' or c.wait_kind is not null)
        union all
        select (array_agg(c.id order by c.id))[1], 'started',
               jsonb_build_object('worker_id', p_worker, 'lease_until', min(c.lease_until)),
               array_agg(c.id order by c.id), array_agg(c.attempt order by c.id)
        from claimed c
        cross join span b
        where c.wait_kind is null and (select count(*) from claimed) > 1
        group by c.namespace, case when c.id >= b.lo and c.id < b.hi then b.start
                                   else workflow.history_span_start(workflow.run_id_time(c.id), p_span) end
    )
    select c.id, c.type::text, c.payload::jsonb, c.attempt, c.max_attempts, c.lease_until, c.created_at,
           c.lease_token, c.deadline_at::timestamptz,
           -- A journal too large to load is handed over as a JSON string
           -- saying so (the client fails that run alone), never aggregated:
           -- an aggregate over jsonb's limit would fail the whole claim.
           case when (select sum(s.output_bytes) from workflow.workflow_step s where s.run_id = c.id) > p_journal_cap
                then to_jsonb(format('the journal holds %s bytes of step outputs; a claim loads at most %s (workflow_settings.max_journal_bytes), so the run cannot be replayed',
                                     (select sum(s.output_bytes) from workflow.workflow_step s where s.run_id = c.id),
                                     p_journal_cap))
                else (select jsonb_agg(jsonb_build_object(
                       'name', s.name, 'position', s.position, 'kind', s.kind,
                       'outcome', case when s.name = c.wait_step and s.finished_at is null
                                       then case when c.wait_kind = 'sleep' then 'ok' else 'timeout' end
                                       else s.outcome end,
                       'output', s.output, 'error', s.error, 'child_id', s.child_id)
                   order by s.position)
            from workflow.workflow_step s where s.run_id = c.id) end,
           c.traceparent::text, c.parent_id
    from claimed c
    order by c.priority, c.created_at;
end $$;

-- claim_runs leases up to p_limit runnable runs of a worker's types (its
-- prefixes, or the exact p_types) in the namespace it serves (p_namespace,
-- 'default' when null; refused unless the login works for it), skipping types disabled in the registry
-- or of another runtime, best priority first, then oldest. Each run comes
-- back with its new lease token and attempt, its deadline, its traceparent
-- and its journal (every entry in order; an open wait whose timer ended is
-- shown resolved). A journal whose outputs exceed
-- workflow_settings.max_journal_bytes comes back as a JSON string saying
-- so: the worker fails that run alone.
-- A parked run whose timer is due is woken here: its wait entry is
-- resolved (a sleep 'ok', any other wait 'timeout') and a 'woken' event
-- precedes 'started'. Types with flow limits go through flow_admit.
-- p_woken says the claim follows a notification: it returns nothing when
-- another woken claim of the same namespace, prefixes and types is under
-- way, and a woken claim that fills p_limit notifies workflow_run_created
-- again so that those it skipped look once more (a worker's bucket: its
-- namespace and a hash of its prefixes and types, a row of
-- workflow_claimer). A woken claim that leases nothing in a transaction
-- that had written nothing before it commits without waiting for its WAL
-- flush (synchronous_commit off for the rest of that transaction: call it
-- as a statement of its own, as the SDKs do).
-- With p_after (a hand-off), it claims nothing from the queue: only the
-- runs that the runs in p_after, ended by this worker earlier in the same
-- transaction, made runnable: the next steps of their DAGs and their
-- durable parents woken, of the worker's types and namespace, unless the
-- type has a flow limit or a runnable run of the worker's types has a
-- better priority (those wait in the queue as any run does).
-- Fires: workflow_source_run_changed (mirrored runs); what flow_admit fires.
-- Locks: what flow_admit locks, type by type in name order; the claimed
-- runs, type by type, skipping locked rows (never waits on another claim);
-- then their open wait entries.
-- A hot call: planned as section 9 says.
create or replace function workflow.claim_runs(
    p_worker_id text,
    p_type_prefixes text[],
    p_runtime text,
    p_limit integer,
    p_lease_ms bigint,
    p_types text[] default null,
    p_namespace text default null,
    p_after uuid[] default null,
    p_woken boolean default false
) returns table (
    id uuid,
    type text,
    payload jsonb,
    attempt integer,
    max_attempts integer,
    lease_until timestamptz,
    created_at timestamptz,
    lease_token bigint,
    deadline_at timestamptz,
    journal jsonb,
    traceparent text,
    parent_id uuid
)
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_hashjoin = off set enable_mergejoin = off
set plan_cache_mode = force_generic_plan set enable_seqscan = off set jit = off as $$
#variable_conflict use_column
declare
    v_now timestamptz;
    v_via text;
    v_patterns text[];
    v_types text[];
    v_journal_cap bigint;
    v_limited text[];
    v_admitted tid[] := '{}';
    v_type text;
    v_ns text := coalesce(p_namespace, 'default');
    v_owner boolean;
    v_span interval;
    v_claimed bigint;
    v_fresh boolean;
    v_bucket smallint;
begin
    -- workflow.now(), the journal's cap, the history span, the types with
    -- flow limits (for this worker's namespace and runtime), and whether
    -- the login is the owner, in one statement.
    select pg_catalog.now() + st.clock_offset, st.max_journal_bytes, st.history_partition,
           (select array_agg(g.workflow_name order by g.workflow_name)
            from workflow.workflow_registry g
            where (g.max_leased is not null or g.max_leased_per_key is not null or g.rate_limit is not null)
              and g.namespace = v_ns and g.is_enabled and (p_runtime is null or g.runtime = p_runtime)),
           workflow.session_is_owner()
    into v_now, v_journal_cap, v_span, v_limited, v_owner
    from workflow.workflow_settings st;
    -- The namespace the worker serves ('default' when it names none): a
    -- login other than the owner must be bound to it as a worker.
    if not v_owner and not workflow.acts_on(v_ns, 'worker') then
        raise exception 'claim_runs: database user % does not work for namespace %', session_user,
            quote_literal(left(v_ns, 100)) using errcode = 'SW002';
    end if;
    v_via := workflow.set_marks();
    if p_worker_id is null or p_worker_id = '' or char_length(p_worker_id) > 253 then
        raise exception 'claim_runs: worker id must be 1 to 253 characters' using errcode = 'SW001';
    end if;
    if p_limit is null or p_limit < 1 or p_limit > 10000 then
        raise exception 'claim_runs: limit must be between 1 and 10000, got %', p_limit using errcode = 'SW001';
    end if;
    if p_lease_ms is null or p_lease_ms < 1000 or p_lease_ms > 86400000 then
        raise exception 'claim_runs: lease must be between 1000 ms and 24 h, got % ms', p_lease_ms using errcode = 'SW001';
    end if;
    -- '' and '%' would both mean "every type": say so with an empty list.
    if exists (select 1 from unnest(p_type_prefixes) p where p is null or p = '' or p = '%') then
        raise exception 'claim_runs: a type prefix must not be empty or "%%"; pass no prefixes to claim every type'
            using errcode = 'SW001';
    end if;
    if cardinality(p_type_prefixes) > 0 then
        select array_agg(workflow.prefix_pattern(p)) into v_patterns from unnest(p_type_prefixes) p;
    end if;
    if cardinality(p_after) > 10000 then
        raise exception 'claim_runs: at most 10000 ended runs to hand off from, got %', cardinality(p_after)
            using errcode = 'SW001';
    end if;
    -- One claimer per wake-up (claim_bucket); the one under way wakes the
    -- others again below if it filled its limit.
    if p_woken then
        v_fresh := pg_catalog.pg_current_xact_id_if_assigned() is null;
        v_bucket := workflow.claim_bucket(v_ns, p_type_prefixes, p_types);
        if v_bucket is null then
            perform workflow.restore_marks(v_via);
            return;
        end if;
    end if;
    if p_after is not null then
        -- A hand-off: the runs the ended ones made runnable, locked here
        -- (as flow_admit's are), and nothing from the queue.
        v_admitted := workflow.hand_off_candidates(v_ns, p_worker_id, p_after, p_types, p_type_prefixes,
                                                   v_patterns, p_runtime, p_limit, v_now);
        v_types := '{}';
    else
        -- The claimable types; null means every type (no prefixes, no types).
        if p_types is not null or v_patterns is not null then
            select coalesce(array_agg(distinct c.t), '{}') into v_types
            from (select t from unnest(p_types) t
                  where t is not null and (v_patterns is null or t like any (v_patterns))
                  union all
                  select t from workflow.active_types(v_ns, p_type_prefixes) t
                  where p_types is null) c
            where not exists (
                select 1 from workflow.workflow_registry g
                where g.namespace = v_ns and g.workflow_name = c.t
                  and (not g.is_enabled or (p_runtime is not null and g.runtime <> p_runtime)));
        end if;
        -- Types with flow limits: flow_admit picks their runs; the others are
        -- read below, straight from the claim index.
        if v_limited is not null and v_types is not null then
            v_limited := nullif(array(select t from unnest(v_limited) t where t = any (v_types)), '{}');
        end if;
        if v_limited is not null then
            foreach v_type in array v_limited loop
                v_admitted := v_admitted || workflow.flow_admit(v_ns, v_type, p_limit - cardinality(v_admitted), v_now);
                exit when cardinality(v_admitted) >= p_limit;
            end loop;
            if v_types is not null then
                v_types := array(select t from unnest(v_types) t where t <> all (v_limited));
            end if;
        end if;
        -- The other types fill the rest of the claim.
        if cardinality(v_admitted) < p_limit and (v_types is null or cardinality(v_types) > 0) then
            v_admitted := v_admitted || workflow.claim_pick(v_ns, v_types, v_limited, p_runtime,
                                                            p_limit - cardinality(v_admitted), v_now);
        end if;
    end if;

    v_claimed := 0;
    if cardinality(v_admitted) > 0 then
        return query
        select * from workflow.claim_lease(p_worker_id, v_admitted, p_lease_ms, v_now, v_journal_cap, v_span);
        get diagnostics v_claimed = row_count;
    end if;
    -- A full woken claim may have left runs behind: the workers of its
    -- bucket that it made skip (above) are woken again. (Only a woken
    -- claim makes others skip; a NOTIFY from every full claim serialised
    -- the commits of a burn-down's claims on the server's notification
    -- lock, and cost a third of its rate with four pollers.)
    if v_claimed = p_limit and v_bucket is not null then
        perform pg_catalog.pg_notify('workflow_run_created',
                                     v_ns || '/' || coalesce(p_type_prefixes[1], p_types[1], ''));
    end if;
    -- A woken claim of a transaction of its own that leased nothing wrote
    -- nothing but its lock: its commit need not wait for the WAL to reach
    -- the disk (a crash loses no transition).
    if v_fresh and v_claimed = 0 and v_limited is null then
        perform pg_catalog.set_config('synchronous_commit', 'off', true);
    end if;
    perform workflow.restore_marks(v_via);
end $$;
comment on function workflow.claim_runs(text, text[], text, integer, bigint, text[], text, uuid[], boolean) is
    'Leases up to p_limit runnable runs of a worker''s types (or, with p_after, the runs its ended runs made runnable); returns each with its journal and traceparent.';

-- holds_lease is the fence of every write a worker makes (its batches, and
-- held_run for the writes made run by run): the run is leased, by this
-- worker, under the token of the claim it holds (another attempt, another
-- worker or a finished run fails it; null where a value is null). The
-- status is compared as coalesce(status, '') = 'leased' so that a batch is
-- found by its primary key and never through the partial index of leased
-- runs, whose predicate (status = 'leased') a plain comparison would
-- match. An SQL body without SET clauses: the planner inlines it, so the
-- batch functions' plans are those of the comparisons written out.
create or replace function workflow.holds_lease(
    p_status text,
    p_leased_by text,
    p_lease_token bigint,
    p_worker_id text,
    p_token bigint
) returns boolean
language sql immutable parallel safe
return coalesce(p_status, '') = 'leased' and p_leased_by = p_worker_id and p_lease_token = workflow.lease_fence(p_token);

-- heartbeat_runs extends the leases a worker still holds (checked by
-- worker id and token) and tells, for each run, whether it still holds it,
-- its status, and whether its deadline passed (it expires those first, so
-- a handler past its deadline learns it at the next heartbeat). The first
-- heartbeat of an attempt and every tenth are kept in the audit trail.
-- Fires: what expire_deadlines fires.
-- Locks: as expire_deadlines; then the held runs.
-- A hot call: planned as section 9 says.
create or replace function workflow.heartbeat_runs(
    p_worker_id text, p_ids uuid[], p_tokens bigint[], -- the lease fence: who holds which attempts
    p_lease_ms bigint
) returns table (id uuid, status text, owned boolean, deadline_exceeded boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_nestloop = off
set plan_cache_mode = force_generic_plan set enable_seqscan = off set jit = off as $$
declare
    v_now timestamptz := workflow.now();
    v_via text := workflow.set_marks();
    -- The namespaces whose runs' status the caller may be told (null: all,
    -- for the owner), read once.
    v_worker_ns text[] := case when workflow.session_is_owner() then null
                               else workflow.caller_namespaces('worker') end;
begin
    if p_lease_ms is null or p_lease_ms < 1000 or p_lease_ms > 86400000 then
        raise exception 'heartbeat_runs: lease must be between 1000 ms and 24 h, got % ms', p_lease_ms using errcode = 'SW001';
    end if;
    perform 1 from workflow.expire_deadlines(p_ids, cardinality(p_ids));
    return query
    with req as (
        select * from unnest(p_ids, p_tokens) as t(id, token)
    ), extended as (
        update workflow.workflow_run r
        set lease_until = v_now + p_lease_ms * interval '1 millisecond',
            heartbeat_count = r.heartbeat_count + 1,
            updated_at  = v_now
        from req where r.id = any (p_ids) and r.id = req.id
          and workflow.holds_lease(r.status, r.leased_by, r.lease_token, p_worker_id, req.token)
        returning r.id, r.attempt, r.lease_until, r.heartbeat_count
    ), events as (
        -- The first heartbeat of an attempt and every tenth are kept.
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select e.id, 'heartbeat',
               jsonb_build_object('worker_id', p_worker_id, 'attempt', e.attempt,
                                  'lease_until', e.lease_until, 'heartbeats', e.heartbeat_count,
                                  'extended_by_seconds', p_lease_ms::double precision / 1000)
        from extended e
        where e.heartbeat_count = 1 or e.heartbeat_count % 10 = 0
    )
    select req.id, coalesce(cur.status, 'missing'), (x.id is not null),
           coalesce(cur.status = 'failed' and cur.last_error = 'deadline exceeded', false)
    from req
    left join extended x on x.id = req.id
    -- The batch's runs by primary key: joined as the whole table, under
    -- enable_nestloop off they were read by a scan of every run. A run of
    -- a namespace the caller does not work for is 'missing': its status
    -- is not the caller's to read.
    left join (select c.id, c.status, c.last_error from workflow.workflow_run c
               where c.id = any (p_ids) and (v_worker_ns is null or c.type_namespace = any (v_worker_ns))) cur
      on cur.id = req.id;
    perform workflow.restore_marks(v_via);
end $$;

-- lock_parents locks the workflows (DAG runs, durable parents) of the given
-- runs, in id order: rule 1 of the lock order, taken first by every path
-- that ends runs, as ending a parent does (the parent, then its children).
-- The parents are looked up by primary key: as a join under enable_nestloop
-- off, they were found by reading the whole table.
-- Locks: the parents, FOR UPDATE, in id order.
-- A hot call: planned as section 9 says.
create or replace function workflow.lock_parents(p_ids uuid[]) returns void
language plpgsql set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan set enable_seqscan = off set jit = off as $$
begin
    -- Every caller ends pending or leased runs; the condition is
    -- idx_workflow_run_child's predicate, so that it serves.
    perform 1 from workflow.workflow_run p
    where p.id = any (array(select c.parent_id from workflow.workflow_run c
                            where c.id = any (p_ids) and coalesce(c.parent_id::text, '') <> ''
                              and coalesce(c.status, '') in ('pending', 'leased')))
    order by p.id
    for update of p;
end $$;

-- result_problem names what is wrong with a run's result (over 1 MiB or
-- nested too deep), or null: the same bounds as a step output, so a
-- child's result always fits in its parent's journal.
create or replace function workflow.result_problem(p_result jsonb) returns text
language sql stable parallel safe
return workflow.stored_value_problem(p_result, 'result');

-- complete_runs records the results of runs a worker holds (by worker id
-- and token; a run it no longer holds is left alone and not returned). A
-- result over the limits fails its run alone, with the reason; the rest of
-- the batch stands. Returns (id, status, error) per finished run.
-- Fires: children_finished, once for the batch (its runs' parents move
-- on: a parent's journal and wake-up, every DAG's next steps together),
-- workflow_parent_ended (children of a run that failed here),
-- workflow_source_run_changed; workflow_run_flow_slot_freed only for the
-- runs those end (free_slots lets go the parked runs of the keys of the
-- runs it ends itself).
-- Locks: the parents of the batch's runs in id order, then the runs, then
-- the parked runs it lets go.
-- A hot call: planned as section 9 says.
create or replace function workflow.complete_runs(
    p_worker_id text, p_ids uuid[], p_tokens bigint[], -- the lease fence: who holds which attempts
    p_results jsonb[]
) returns table (id uuid, status text, error text)
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_nestloop = off
set plan_cache_mode = force_generic_plan set enable_seqscan = off set jit = off as $$
#variable_conflict use_column
declare
    v_via text := workflow.set_marks(p_frees_slots => true);
    v_now timestamptz := workflow.now();
begin
    perform workflow.lock_parents(p_ids);
    -- The parents of the runs this statement ends move on together (the
    -- moved step), not one by one (workflow_child_finished).
    perform set_config('workflow.ends_children', 'on', true);
    return query
    with req as (
        select t.id, t.token, t.result, workflow.result_problem(t.result) as problem
        from unnest(p_ids, p_tokens, p_results) as t(id, token, result)
    ), done as (
        update workflow.workflow_run r
        set status      = case when req.problem is null then 'succeeded' else 'failed' end,
            result      = case when req.problem is null then req.result end,
            last_error  = case when req.problem is not null
                               then 'the handler''s result was refused: ' || req.problem
                               else r.last_error end,
            lease_until = null,
            finished_at = v_now,
            updated_at  = v_now
        from req where r.id = any (p_ids) and r.id = req.id
          and workflow.holds_lease(r.status, r.leased_by, r.lease_token, p_worker_id, req.token)
        returning r.id, r.attempt, r.status, r.last_error, r.type, r.concurrency_key, r.type_namespace, r.namespace,
                  r.parent_id
    ), freed as (
        -- The slots of the keys whose runs ended (one row, when any has a key).
        select workflow.free_slots(array_agg(d.type_namespace), array_agg(d.type), array_agg(d.concurrency_key)) as let_go
        from done d where d.concurrency_key is not null having count(*) > 0
    ), span as materialized (
        -- The history span of the batch's oldest run, once (as in claim_runs).
        select b.start, x.width, b.lo, b.hi
        from (select x.id, (select st.history_partition from workflow.workflow_settings st) as width
              from done x order by x.id limit 1) x
        cross join lateral workflow.history_span_bounds(x.id, x.width) b
    ), events as (
        -- A refused result, and the run of a completion of one: rows of
        -- their own; the other successes: one batch row per namespace and
        -- history span (see workflow_event.run_ids). One INSERT for both.
        insert into workflow.workflow_event (workflow_id, event_type, data, run_ids, attempts)
        select d.id, d.status,
               case when d.status = 'succeeded'
                    then jsonb_build_object('worker_id', p_worker_id, 'attempt', d.attempt)
                    else jsonb_build_object('worker_id', p_worker_id, 'attempt', d.attempt,
                                            'reason', 'result_refused', 'error', d.last_error) end,
               null, null
        from done d
        where d.status <> 'succeeded' or (select count(*) from done) = 1
        union all
        select (array_agg(d.id order by d.id))[1], 'succeeded', jsonb_build_object('worker_id', p_worker_id),
               array_agg(d.id order by d.id), array_agg(d.attempt order by d.id)
        from done d
        cross join span b
        where d.status = 'succeeded' and (select count(*) from done) > 1
        group by d.namespace,
                 case when d.id >= b.lo and d.id < b.hi then b.start
                      else workflow.history_span_start(workflow.run_id_time(d.id), b.width) end
        returning 1
    ), moved as (
        -- The parents of the runs that ended, together (one row, when any
        -- has one), after the runs' own events (read first), so that a
        -- run's trail keeps its order when its parent's move ends it too.
        select workflow.children_finished(array_agg(d.id)) as moved_on
        from done d where d.parent_id is not null and (select count(*) from events) >= 0
        having count(*) > 0
    )
    select d.id, d.status, d.last_error from done d left join freed on true left join moved on true;
    perform set_config('workflow.ends_children', '', true);
    perform workflow.restore_marks(v_via, p_frees_slots => true);
end $$;
comment on function workflow.complete_runs(text, uuid[], bigint[], jsonb[]) is
    'Records the results of runs a worker holds; a result over the limits fails its run alone. Returns (id, status, error) per finished run.';

-- retry_delay is the backoff before the next attempt: attempt² × base (one
-- minute by default) plus up to 10 % jitter, capped at max when one is set
-- (and at 100 years).
create or replace function workflow.retry_delay(
    p_attempt integer,
    p_base interval,
    p_max interval,
    p_jitter double precision
) returns interval
language sql immutable parallel safe
-- (One expression naming p_jitter once, so that it is inlined with a
-- volatile jitter: least(d, coalesce(max, cap), cap) is least(d, max, cap)
-- with a cap, least(d, cap) without.)
return make_interval(secs => least(
           extract(epoch from coalesce(p_base, interval '1 minute'))::double precision
               * p_attempt::double precision * p_attempt::double precision
               * (1 + 0.1 * greatest(0, least(p_jitter, 1))),
           coalesce(extract(epoch from p_max)::double precision, 3153600000::double precision),
           3153600000::double precision));

-- fail_runs records handler errors of runs a worker holds: a retryable
-- error with attempts left makes the run pending again after retry_delay
-- ('retried', with next_run_at); otherwise it fails ('failed').
-- Fires: children_finished, workflow_parent_ended (runs that failed for
-- good), workflow_source_run_changed; free_slots, as complete_runs.
-- Locks: the parents of the batch's runs in id order, then the runs, then
-- the parked runs it lets go.
-- A hot call: planned as section 9 says.
create or replace function workflow.fail_runs(
    p_worker_id text, p_ids uuid[], p_tokens bigint[], -- the lease fence: who holds which attempts
    p_errors text[], p_retryable boolean[]
) returns table (id uuid, status text, run_at timestamptz)
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_nestloop = off
set plan_cache_mode = force_generic_plan set enable_seqscan = off set jit = off as $$
#variable_conflict use_column
declare
    v_now timestamptz := workflow.now();
    v_via text := workflow.set_marks(p_frees_slots => true);
begin
    perform workflow.lock_parents(p_ids);
    perform set_config('workflow.ends_children', 'on', true);
    return query
    with req as (
        select * from unnest(p_ids, p_tokens, p_errors, p_retryable)
            as t(id, token, error, retryable)
    ), failed as (
        update workflow.workflow_run r
        set status      = case when req.retryable and r.attempt < r.max_attempts
                               then 'pending' else 'failed' end,
            run_at      = case when req.retryable and r.attempt < r.max_attempts
                               then v_now + workflow.retry_delay(r.attempt, r.retry_base_delay,
                                                                 r.retry_max_delay, random())
                               else r.run_at end,
            leased_by   = case when req.retryable and r.attempt < r.max_attempts
                               then null else r.leased_by end,
            lease_until = null,
            last_error  = left(coalesce(req.error, 'unknown error'), 8192),
            finished_at = case when req.retryable and r.attempt < r.max_attempts
                               then null else v_now end,
            updated_at  = v_now
        from req where r.id = any (p_ids) and r.id = req.id
          and workflow.holds_lease(r.status, r.leased_by, r.lease_token, p_worker_id, req.token)
        returning r.id, r.status, r.run_at, r.attempt, r.max_attempts, r.last_error, r.type, r.concurrency_key,
                  r.type_namespace, r.parent_id
    ), events as (
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select f.id,
               case when f.status = 'pending' then 'retried' else 'failed' end,
               jsonb_strip_nulls(jsonb_build_object(
                   'worker_id', p_worker_id, 'attempt', f.attempt,
                   'max_attempts', f.max_attempts, 'error', f.last_error,
                   'reason', 'handler_error',
                   'next_run_at', case when f.status = 'pending' then f.run_at end))
        from failed f
        returning 1
    ), freed as (
        select workflow.free_slots(array_agg(f.type_namespace), array_agg(f.type), array_agg(f.concurrency_key)) as let_go
        from failed f where f.concurrency_key is not null having count(*) > 0
    ), moved as (
        -- The parents of the runs that failed for good, together, after
        -- the runs' own events (as complete_runs).
        select workflow.children_finished(array_agg(f.id)) as moved_on
        from failed f where f.parent_id is not null and f.status = 'failed'
                        and (select count(*) from events) >= 0
        having count(*) > 0
    )
    select f.id, f.status, f.run_at::timestamptz from failed f left join freed on true left join moved on true;
    perform set_config('workflow.ends_children', '', true);
    perform workflow.restore_marks(v_via, p_frees_slots => true);
end $$;

-- release_runs hands runs back without spending their attempt (a worker
-- shutting down): pending at once, attempt restored, 'retried' with
-- reason released.
-- Fires: workflow_source_run_changed; free_slots, as complete_runs.
-- Locks: the runs, then the parked runs it lets go.
-- A hot call: planned as section 9 says.
create or replace function workflow.release_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[]) returns table (id uuid)
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_nestloop = off
set plan_cache_mode = force_generic_plan set enable_seqscan = off set jit = off as $$
declare
    v_now timestamptz := workflow.now();
    v_via text := workflow.set_marks(p_frees_slots => true);
begin
    return query
    with req as (
        select * from unnest(p_ids, p_tokens) as t(id, token)
    ), released as (
        update workflow.workflow_run r
        set status      = 'pending',
            attempt     = r.attempt - 1,
            run_at      = v_now,
            leased_by   = null,
            lease_until = null,
            updated_at  = v_now
        from req where r.id = any (p_ids) and r.id = req.id
          and workflow.holds_lease(r.status, r.leased_by, r.lease_token, p_worker_id, req.token)
        returning r.id, r.attempt + 1 as released_attempt, r.type, r.concurrency_key, r.type_namespace
    ), events as (
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select x.id, 'retried',
               jsonb_build_object('worker_id', p_worker_id, 'attempt', x.released_attempt,
                                  'reason', 'released', 'attempt_counted', false)
        from released x
    ), freed as (
        select workflow.free_slots(array_agg(x.type_namespace), array_agg(x.type), array_agg(x.concurrency_key)) as let_go
        from released x where x.concurrency_key is not null having count(*) > 0
    )
    select x.id from released x left join freed on true;
    perform workflow.restore_marks(v_via, p_frees_slots => true);
end $$;

-- held_run returns the run a worker holds, locked, or null when the worker
-- no longer holds it (another attempt, another worker, finished). The
-- fence of every journal write that works run by run.
-- Locks: the run, FOR UPDATE (whoever holds it).
create or replace function workflow.held_run(p_worker_id text, p_id uuid, p_token bigint) returns workflow.workflow_run
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_run workflow.workflow_run;
begin
    select * into v_run from workflow.workflow_run r where r.id = p_id for update;
    if not found or not coalesce(workflow.holds_lease(v_run.status, v_run.leased_by, v_run.lease_token,
                                                      p_worker_id, p_token), false) then
        return null;
    end if;
    return v_run;
end $$;


-- ===========================================================================
-- 4. THE JOURNAL AND WAITS
-- ===========================================================================

-- step_name_problem names what is wrong with a step or signal name, or null.
create or replace function workflow.step_name_problem(p_name text) returns text
language sql stable parallel safe
as $_$
    select case
        when p_name is null or char_length(p_name) not between 1 and 128
            then format('step name must be 1 to 128 characters, got %s', coalesce(char_length(p_name), 0))
        when p_name !~ '^[A-Za-z0-9._:-]+$'
            then format('step name %s may contain only letters, digits and . _ : -', left(quote_literal(p_name), 140))
    end
$_$;

-- output_problem names what is wrong with a journaled value (a step's
-- output, a child's or a DAG's result copied into a parent's journal), or
-- null.
create or replace function workflow.output_problem(p_output jsonb) returns text
language sql stable parallel safe
return workflow.stored_value_problem(p_output, 'output');

-- The message of a replay that met another step than the journal holds.
create or replace function workflow.nondeterminism_message(
    p_kind text,
    p_name text,
    p_position integer,
    p_got_kind text,
    p_got_name text
) returns text
language sql stable parallel safe as $$
    select format('non-deterministic: expected %s "%s" at position %s, got %s', p_kind, p_name, p_position,
                  case when p_kind = p_got_kind then format('"%s"', p_got_name)
                       else format('%s "%s"', p_got_kind, p_got_name) end)
$$;

-- journal_conflict tells whether a step (name, kind) reached at a position
-- contradicts the journal: another step at that position, or this name at
-- another position. Null when it agrees.
-- (PL/pgSQL, so that its plan is cached, as resolve_child_entry's.)
create or replace function workflow.journal_conflict(p_run uuid, p_name text, p_kind text, p_position integer) returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
begin
    return coalesce(
        (select workflow.nondeterminism_message(s.kind, s.name, p_position, p_kind, p_name)
         from workflow.workflow_step s
         where s.run_id = p_run and s.position = p_position and (s.name <> p_name or s.kind <> p_kind)),
        (select format('non-deterministic: step "%s" is recorded at position %s, reached again at position %s',
                       p_name, s.position, p_position)
         from workflow.workflow_step s
         where s.run_id = p_run and s.name = p_name and s.position <> p_position));
end $$;

-- record_steps journals the outputs of completed steps, many runs and
-- steps in one call, each checked (name, position, output limits). Per
-- input row: 'recorded'; 'duplicate' with the output already journaled (a
-- replay that ran the step again: the first output wins); 'lease_lost';
-- 'nondeterministic' with the reason; 'invalid' with the reason. Bad rows
-- do not stop the others.
-- Fires: nothing on workflow_run.
-- Locks: share-locks the runs the writer holds, so a claim, park or cancel
-- of the same run waits for the write (or skips the run), and a write can
-- never land in an attempt the writer no longer holds.
-- A hot call: planned as section 9 says.
create or replace function workflow.record_steps(
    p_worker_id text, p_ids uuid[], p_tokens bigint[], -- the lease fence: who holds which attempts
    p_names text[], p_positions integer[], p_outputs jsonb[]
) returns table (idx integer, status text, output jsonb, message text)
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_nestloop = off
set plan_cache_mode = force_generic_plan set enable_seqscan = off set jit = off as $$
#variable_conflict use_column
declare
    v_now timestamptz := workflow.now();
    v_problems text[];
    v_owned boolean[];
    v_inserted boolean[];
    v_unresolved uuid[];
begin
    -- The run rows are share-locked: a claim, park or cancel of the same run
    -- waits for the journal write (or skips the run), so a write can never
    -- land in an attempt that the writer no longer holds.
    with req as (
        select t.*, coalesce(workflow.step_name_problem(t.name),
                             case when t.position is null or t.position not between 0 and 999
                                  then format('a run has at most 1000 steps (positions 0 to 999), got position %s',
                                              coalesce(t.position::text, 'null')) end,
                             workflow.output_problem(t.output)) as problem
        from unnest(p_ids, p_tokens, p_names, p_positions, p_outputs)
            with ordinality as t(id, token, name, position, output, idx)
    ), owned as (
        select r.id, r.attempt, req.token
        from workflow.workflow_run r
        join req on req.id = r.id
        where r.id = any (p_ids)
          and workflow.holds_lease(r.status, r.leased_by, r.lease_token, p_worker_id, req.token)
        for share of r
    ), ins as (
        insert into workflow.workflow_step (run_id, name, position, kind, outcome, output,
                                            attempt, started_at, finished_at)
        select req.id, req.name, req.position, 'step', 'ok', req.output, o.attempt, v_now, v_now
        from req
        join (select distinct on (o.id) o.id, o.attempt, o.token from owned o) o
          on o.id = req.id and o.token = req.token
        where req.problem is null
        on conflict do nothing
        returning run_id, name
    )
    select array_agg(req.problem order by req.idx),
           array_agg(o.id is not null order by req.idx),
           array_agg(i.run_id is not null order by req.idx),
           -- Runs whose journal must be read to answer: the usual batch,
           -- every step new, reads none.
           coalesce(array_agg(req.id) filter (where o.id is not null and i.run_id is null
                                                 and req.problem is null), '{}')
    into v_problems, v_owned, v_inserted, v_unresolved
    from req
    left join (select distinct on (o.id, o.token) o.id, o.token from owned o) o
      on o.id = req.id and o.token = req.token
    left join ins i on i.run_id = req.id and i.name = req.name;

    -- A new statement sees what concurrent writers committed meanwhile.
    return query
    with req as (
        select t.*, v_problems[t.idx::integer] as problem
        from unnest(p_ids, p_names, p_positions, p_outputs)
            with ordinality as t(id, name, position, output, idx)
    ), mine as (
        select s.run_id, s.name, s.position, s.kind, s.output
        from workflow.workflow_step s
        where s.run_id = any (v_unresolved)
    )
    select req.idx::integer,
           case when req.problem is not null then 'invalid'
                when not v_owned[req.idx::integer] then 'lease_lost'
                when v_inserted[req.idx::integer] then 'recorded'
                when byname.name is not null and byname.position = req.position
                     and byname.kind = 'step' then 'duplicate'
                else 'nondeterministic' end,
           case when not v_inserted[req.idx::integer] and byname.position = req.position
                     and byname.kind = 'step' then byname.output end,
           case when req.problem is not null then req.problem
                when not v_owned[req.idx::integer] or v_inserted[req.idx::integer] then null
                when bypos.name is not null and (bypos.name <> req.name or bypos.kind <> 'step')
                    then workflow.nondeterminism_message(bypos.kind, bypos.name, req.position, 'step', req.name)
                when byname.name is not null and byname.position <> req.position
                    then format('non-deterministic: step "%s" is recorded at position %s, reached again at position %s',
                                req.name, byname.position, req.position)
           end
    from req
    left join mine byname on byname.run_id = req.id and byname.name = req.name
    left join mine bypos on bypos.run_id = req.id and bypos.position = req.position
    order by req.idx;
end $$;

-- park_run opens a wait at a step (sleep until a time or for a delay,
-- wait for a signal with an optional timeout, wait for a child started at
-- that step) and parks the run: pending, its attempt given back, run_at at
-- the timer (far_future() when none), with a 'waiting' event. A wait
-- already resolved returns 'resolved' with its outcome instead (a replay,
-- a signal already buffered, a child already ended, a timer already due),
-- and the run stays leased. Other answers: 'lease_lost',
-- 'nondeterministic', 'invalid', each with a message.
-- Fires: workflow_source_run_changed.
-- Locks: the run (held_run), then its journal entry (so a child finishing
-- now either sees the run parked or is seen by it, never neither), then the
-- oldest buffered signal of the name.
create or replace function workflow.park_run(
    p_worker_id text,
    p_id uuid,
    p_token bigint,
    p_kind text,
    p_step text,
    p_position integer,
    p_wake_at timestamptz,
    p_delay_ms bigint,
    p_signal text
) returns table (
    status text,
    outcome text,
    output jsonb,
    error text,
    wake_at timestamptz,
    message text
)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    v_now timestamptz := workflow.now();
    v_via text := workflow.set_marks();
    v_run workflow.workflow_run;
    v_step workflow.workflow_step;
    v_problem text;
    v_wake timestamptz;
    v_signal workflow.workflow_signal;
begin
    <<marked>>
    begin
        if p_kind is null or p_kind not in ('sleep', 'signal', 'child') then
            raise exception 'park_run: kind must be sleep, signal or child, got %', p_kind using errcode = 'SW001';
        end if;
        v_problem := coalesce(workflow.step_name_problem(p_step),
                              case when p_position is null or p_position not between 0 and 999
                                   then 'a run has at most 1000 steps (positions 0 to 999)' end,
                              case when p_kind = 'signal' then workflow.step_name_problem(p_signal) end,
                              case when p_delay_ms < 0 then 'a delay must not be negative' end);
        if v_problem is not null then
            return query select 'invalid', null::text, null::jsonb, null::text, null::timestamptz, v_problem;
            exit marked;
        end if;
        if p_delay_ms is not null then
            if p_delay_ms > 3153600000000 then  -- 100 years
                return query select 'invalid', null::text, null::jsonb, null::text, null::timestamptz,
                                    'a wait may last at most 100 years';
                exit marked;
            end if;
            v_wake := v_now + p_delay_ms * interval '1 millisecond';
        else
            v_wake := p_wake_at;
        end if;
        if p_kind = 'sleep' and v_wake is null then
            return query select 'invalid', null::text, null::jsonb, null::text, null::timestamptz,
                                'a sleep needs a wake-up time or a delay';
            exit marked;
        end if;

        v_run := workflow.held_run(p_worker_id, p_id, p_token);
        if v_run.id is null then
            return query select 'lease_lost', null::text, null::jsonb, null::text, null::timestamptz, null::text;
            exit marked;
        end if;
        v_problem := workflow.journal_conflict(p_id, p_step, p_kind, p_position);
        if v_problem is not null then
            return query select 'nondeterministic', null::text, null::jsonb, null::text, null::timestamptz, v_problem;
            exit marked;
        end if;

        -- The entry is locked: a child finishing now updates it before it looks
        -- for a parked parent to wake, so either this sees the child's end or
        -- the child sees this run parked (never neither).
        select * into v_step from workflow.workflow_step s where s.run_id = p_id and s.name = p_step for update;
        if found and v_step.finished_at is not null then
            return query select 'resolved', v_step.outcome, v_step.output, v_step.error, v_step.wake_at, null::text;
            exit marked;
        end if;
        if p_kind = 'child' and not found then
            return query select 'invalid', null::text, null::jsonb, null::text, null::timestamptz,
                                format('no child run was started at step "%s"', p_step);
            exit marked;
        end if;
        if not found then
            insert into workflow.workflow_step (run_id, name, position, kind, attempt, wake_at)
            values (p_id, p_step, p_position, p_kind, v_run.attempt, v_wake)
            returning * into v_step;
        end if;

        -- Resolved without waiting?
        if p_kind = 'signal' then
            select * into v_signal from workflow.workflow_signal g
            where g.run_id = p_id and g.name = p_signal and g.consumed_at is null
            order by g.id limit 1
            for update;
            if found then
                update workflow.workflow_signal set consumed_at = v_now, consumed_by = p_step where id = v_signal.id;
                update workflow.workflow_step s set outcome = 'ok', output = v_signal.payload, finished_at = v_now
                where s.run_id = p_id and s.name = p_step;
                return query select 'resolved', 'ok'::text, v_signal.payload, null::text, v_wake, null::text;
                exit marked;
            end if;
        end if;
        if p_kind in ('sleep', 'signal') and v_wake <= v_now then
            update workflow.workflow_step s
            set outcome = case when p_kind = 'sleep' then 'ok' else 'timeout' end, finished_at = v_now
            where s.run_id = p_id and s.name = p_step;
            return query select 'resolved', case when p_kind = 'sleep' then 'ok' else 'timeout' end,
                                null::jsonb, null::text, v_wake, null::text;
            exit marked;
        end if;

        update workflow.workflow_run r
        set status      = 'pending',
            attempt     = r.attempt - 1,
            run_at      = least(coalesce(v_wake, workflow.far_future()), workflow.far_future()),
            leased_by   = null,
            lease_until = null,
            wait_kind   = p_kind,
            wait_step   = p_step,
            wait_signal = case when p_kind = 'signal' then p_signal end,
            updated_at  = v_now
        where r.id = p_id;
        insert into workflow.workflow_event (workflow_id, event_type, data)
        values (p_id, 'waiting', jsonb_strip_nulls(jsonb_build_object(
            'wait_kind', p_kind, 'step', p_step, 'signal', case when p_kind = 'signal' then p_signal end,
            'until', v_wake, 'child_id', v_step.child_id,
            'worker_id', p_worker_id, 'attempt', v_run.attempt, 'attempt_counted', false)));
        return query select 'parked', null::text, null::jsonb, null::text, v_wake, null::text;
    end;
    perform workflow.restore_marks(v_via);
end $$;

-- send_signal delivers a signal to a run: buffered until a wait for its
-- name consumes it, or delivered at once to the wait the run is parked on
-- (the entry resolved 'ok' with the payload, the run woken with a 'woken'
-- event and a wake-up NOTIFY). An idempotency key makes a resend a no-op
-- (duplicate = true). The backlog is bounded per name (1,000) and per run
-- (10,000), never for the name the run waits for. Who sent it (p_by, as
-- given, such as the console's verified user; at most 256 characters kept)
-- is in the signal_received event. Errors: 22023 for a bad name, key or
-- payload; P0002 for a run that does not exist; 55000 for a finished run.
-- Fires: workflow_source_run_changed (when it wakes the run).
-- Locks: the run, then its signals.
create or replace function workflow.send_signal(
    p_run_id uuid,
    p_name text,
    p_payload jsonb,
    p_idempotency_key text,
    p_by text default null
) returns table (signal_id bigint, duplicate boolean, delivered boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    v_run workflow.workflow_run;
    v_problem text;
    v_id bigint;
    v_oldest workflow.workflow_signal;
begin
    v_problem := coalesce(
        case when workflow.step_name_problem(p_name) is not null
             then replace(workflow.step_name_problem(p_name), 'step name', 'signal name') end,
        case when p_idempotency_key is not null and char_length(p_idempotency_key) not between 1 and 512
             then 'a signal''s idempotency key must be 1 to 512 characters' end,
        case when p_payload is not null and octet_length(p_payload::text) > 262144
             then format('signal payload is %s bytes; the limit is 262144 (256 KiB)', octet_length(p_payload::text)) end,
        case when workflow.json_too_deep(p_payload)
             then 'signal payload nests deeper than 64 levels (objects and arrays), the most a stored value may' end);
    if v_problem is not null then
        raise exception 'send_signal: %', v_problem using errcode = 'SW001';
    end if;
    select * into v_run from workflow.workflow_run r
    where r.id = p_run_id and workflow.acts_on(r.namespace, 'producer') for update;
    if not found or v_run.deleted_at is not null then
        raise exception 'send_signal: run % does not exist', p_run_id using errcode = 'SW003';
    end if;
    if v_run.status not in ('pending', 'leased') then
        raise exception 'send_signal: run % is %; signals reach only unfinished runs', p_run_id, v_run.status
            using errcode = 'SW004';
    end if;

    insert into workflow.workflow_signal (run_id, name, payload, idempotency_key)
    values (p_run_id, p_name, p_payload, p_idempotency_key)
    on conflict (run_id, idempotency_key) where idempotency_key is not null do nothing
    returning id into v_id;
    if v_id is null then
        select g.id into v_id from workflow.workflow_signal g
        where g.run_id = p_run_id and g.idempotency_key = p_idempotency_key;
        return query select v_id, true, false;
        return;
    end if;
    -- The backlog is bounded per name: signals of other names (however
    -- many) never stand in the way of the one a run waits for, and the
    -- signal a run is parked on is delivered at once, whatever waits.
    if not (v_run.status = 'pending' and v_run.wait_kind = 'signal' and v_run.wait_signal = p_name)
       and (select count(*) from (select 1 from workflow.workflow_signal g
                                  where g.run_id = p_run_id and g.name = p_name and g.consumed_at is null
                                  limit 1001) w) > 1000 then
        raise exception 'send_signal: run % already has 1000 signals named % waiting to be consumed', p_run_id, p_name
            using errcode = 'SW005';
    end if;
    if not (v_run.status = 'pending' and v_run.wait_kind = 'signal' and v_run.wait_signal = p_name)
       and (select count(*) from (select 1 from workflow.workflow_signal g
                                  where g.run_id = p_run_id and g.consumed_at is null
                                  limit 10001) w) > 10000 then
        raise exception 'send_signal: run % already has 10000 signals waiting to be consumed', p_run_id
            using errcode = 'SW005';
    end if;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (p_run_id, 'signal_received', jsonb_strip_nulls(jsonb_build_object(
        'signal', p_name, 'signal_id', v_id, 'idempotency_key', p_idempotency_key,
        'by', left(nullif(p_by, ''), 256))));

    if v_run.status = 'pending' and v_run.wait_kind = 'signal' and v_run.wait_signal = p_name then
        select * into v_oldest from workflow.workflow_signal g
        where g.run_id = p_run_id and g.name = p_name and g.consumed_at is null
        order by g.id limit 1;
        update workflow.workflow_signal set consumed_at = (select workflow.now()), consumed_by = v_run.wait_step
        where id = v_oldest.id;
        update workflow.workflow_step s set outcome = 'ok', output = v_oldest.payload, finished_at = (select workflow.now())
        where s.run_id = p_run_id and s.name = v_run.wait_step and s.finished_at is null;
        update workflow.workflow_run r
        set run_at = (select workflow.now()), wait_kind = null, wait_step = null, wait_signal = null, updated_at = (select workflow.now())
        where r.id = p_run_id;
        insert into workflow.workflow_event (workflow_id, event_type, data)
        values (p_run_id, 'woken', jsonb_build_object('reason', 'signal', 'step', v_run.wait_step,
                                                      'signal', p_name, 'signal_id', v_oldest.id));
        perform pg_notify('workflow_run_created', v_run.type_namespace || '/' || v_run.type);
        return query select v_id, false, true;
        return;
    end if;
    return query select v_id, false, false;
end $$;


-- RUN LOGS (the tables: section 1).

-- log_limits: the log limits of a namespace's attempts, the owner's.
create or replace function workflow.log_limits(p_namespace text)
returns table (max_lines integer, max_bytes integer)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select coalesce(ns.max_log_lines, st.max_log_lines), coalesce(ns.max_log_bytes, st.max_log_bytes)
    from workflow.workflow_settings st
    left join workflow.workflow_namespace_settings ns on ns.namespace = p_namespace
$$;

-- log_message_cut: a message as the log keeps it, at most 8 KiB: a longer
-- one is cut to its first 2,000 characters and says how long it was.
create or replace function workflow.log_message_cut(p_message text) returns text
language sql immutable parallel safe
return case when octet_length(p_message) <= 8192 then p_message
            else left(p_message, 2000) || format(' [cut: %s bytes]', octet_length(p_message)) end;

-- append_run_logs keeps the log lines of attempts a worker holds or held
-- last: checked by worker id and token as complete_runs does, the run
-- leased or ended by that attempt (a cancelled run's handler may say what
-- it did), and for a worker login of the namespaces it works for. p_ids
-- (each once), p_tokens and p_dropped (lines the worker dropped before
-- sending, counted) are per attempt; then per line its run (one of p_ids),
-- time, level (debug, info, warn, error) and message, oldest first. An
-- attempt keeps at most its namespace's limits (log_limits): the newest
-- lines, the older ones dropped and counted, so that what is kept is
-- always the newest lines without a gap (a call that drops lines of its
-- own, or says the worker dropped some, drops what was kept before it
-- too); a message over 8 KiB is cut (log_message_cut). Returns, per
-- attempt, whether it was taken (the lines of one that was not, its run
-- back in the queue or another attempt's, are dropped, not counted). At
-- most 1,000 attempts and 10,000 lines a call.
-- Locks: the runs taken, FOR KEY SHARE (a delete of the run waits, so no
-- line outlives it; claims and completions do not), in id order; then
-- their attempts' rows of workflow_run_log_attempt.
create or replace function workflow.append_run_logs(
    p_worker_id text, p_ids uuid[], p_tokens bigint[], p_dropped bigint[],
    p_line_runs uuid[], p_line_ats timestamptz[], p_line_levels text[], p_line_messages text[]
) returns table (id uuid, kept boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp set jit = off as $$
#variable_conflict use_column
declare
    v_lines integer := coalesce(cardinality(p_line_runs), 0);
    v_ids uuid[];
    v_attempts integer[];
    v_max_lines integer[];
    v_max_bytes integer[];
begin
    if coalesce(cardinality(p_ids), 0) <> coalesce(cardinality(p_tokens), 0)
       or coalesce(cardinality(p_ids), 0) <> coalesce(cardinality(p_dropped), 0)
       or v_lines <> coalesce(cardinality(p_line_ats), 0)
       or v_lines <> coalesce(cardinality(p_line_levels), 0)
       or v_lines <> coalesce(cardinality(p_line_messages), 0) then
        raise exception 'append_run_logs: the attempts'' arrays must have one length, and the lines'' arrays one length'
            using errcode = 'SW001';
    end if;
    if coalesce(cardinality(p_ids), 0) > 1000 or v_lines > 10000 then
        raise exception 'append_run_logs: at most 1000 attempts and 10000 lines a call, got % and %',
            cardinality(p_ids), v_lines using errcode = 'SW005';
    end if;
    if exists (select 1 from unnest(p_ids) t(id) where t.id is null group by t.id)
       or exists (select 1 from unnest(p_ids) t(id) group by t.id having count(*) > 1) then
        raise exception 'append_run_logs: each attempt once, by its run''s id' using errcode = 'SW001';
    end if;
    if exists (select 1 from unnest(p_line_runs, p_line_levels, p_line_messages) l(run_id, level, message)
               where l.run_id is null or not (l.run_id = any (p_ids)) or l.message is null
                  or l.level is null or l.level not in ('debug', 'info', 'warn', 'error')) then
        raise exception 'append_run_logs: every line needs a message, a level of debug, info, warn or error, and a run among p_ids'
            using errcode = 'SW001';
    end if;
    if exists (select 1 from unnest(p_dropped) d(n) where d.n is null or d.n < 0) then
        raise exception 'append_run_logs: p_dropped counts lines: zero or more' using errcode = 'SW001';
    end if;

    -- The attempts taken, with their limits, locked against a delete of
    -- their run.
    select array_agg(h.id order by h.id), array_agg(h.attempt order by h.id),
           array_agg(h.max_lines order by h.id), array_agg(h.max_bytes order by h.id)
    into v_ids, v_attempts, v_max_lines, v_max_bytes
    from (select r.id, r.attempt, lim.max_lines, lim.max_bytes
          from unnest(p_ids, p_tokens) t(id, token)
          join workflow.workflow_run r on r.id = t.id
          cross join lateral workflow.log_limits(r.namespace) lim
          where r.id = any (p_ids)
            and r.leased_by = p_worker_id and r.lease_token = workflow.lease_fence(t.token)
            and r.status in ('leased', 'succeeded', 'failed', 'cancelled')
            and ((select workflow.session_is_owner())
                 or r.type_namespace = any ((select workflow.caller_namespaces('worker'))::text[]))
          order by r.id
          for key share of r) h;

    with held as (
        select h.id, h.attempt, h.max_lines, h.max_bytes, t.dropped
        from unnest(v_ids, v_attempts, v_max_lines, v_max_bytes) h(id, attempt, max_lines, max_bytes)
        join unnest(p_ids, p_dropped) t(id, dropped) on t.id = h.id
    ), judged as (
        -- Newest first per run: what the limits keep of this call.
        select l.run_id, l.ord, l.at, l.level, l.message, h.attempt,
               (row_number() over w <= h.max_lines and sum(octet_length(l.message)) over w <= h.max_bytes) as fits
        from (select x.run_id, x.ord, coalesce(x.at, clock_timestamp()) as at, x.level,
                     workflow.log_message_cut(x.message) as message
              from unnest(p_line_runs, p_line_ats, p_line_levels, p_line_messages)
                   with ordinality x(run_id, at, level, message, ord)) l
        join held h on h.id = l.run_id
        window w as (partition by l.run_id order by l.ord desc)
    ), counted as (
        select h.id, h.attempt, h.dropped,
               count(j.run_id) as sent,
               count(j.run_id) filter (where j.fits) as n,
               coalesce(sum(octet_length(j.message)) filter (where j.fits), 0) as b,
               -- Lines dropped after those kept before: those go too.
               (count(j.run_id) filter (where not j.fits) > 0 or h.dropped > 0) as cut
        from held h
        left join judged j on j.run_id = h.id
        group by h.id, h.attempt, h.dropped
    ), wiped as (
        delete from workflow.workflow_run_log g
        using counted c
        where g.run_id = any (v_ids) and g.run_id = c.id and g.attempt = c.attempt and c.cut
        returning g.run_id
    ), allot as (
        insert into workflow.workflow_run_log_attempt as a (run_id, attempt, lines, bytes, next_seq, dropped)
        select c.id, c.attempt, c.n, c.b, c.n + 1, c.dropped + (c.sent - c.n)
        from counted c
        where c.sent > 0 or c.dropped > 0
        order by c.id
        on conflict (run_id, attempt) do update
        set lines    = case when excluded.dropped > 0 then excluded.lines else a.lines + excluded.lines end,
            bytes    = case when excluded.dropped > 0 then excluded.bytes else a.bytes + excluded.bytes end,
            next_seq = a.next_seq + excluded.lines,
            dropped  = a.dropped + excluded.dropped + case when excluded.dropped > 0 then a.lines else 0 end
        returning a.run_id, a.next_seq
    )
    insert into workflow.workflow_run_log (run_id, attempt, seq, logged_at, level, message)
    select j.run_id, j.attempt,
           x.next_seq - c.n + row_number() over (partition by j.run_id order by j.ord) - 1,
           j.at, j.level, j.message
    from judged j
    join counted c on c.id = j.run_id
    join allot x on x.run_id = j.run_id
    where j.fits and (select count(*) from wiped) >= 0;

    -- Attempts over their limits with what they kept before lose their
    -- oldest lines, counted.
    with over as (
        select a.run_id, a.attempt, h.max_lines, h.max_bytes
        from unnest(v_ids, v_attempts, v_max_lines, v_max_bytes) h(id, attempt, max_lines, max_bytes)
        join workflow.workflow_run_log_attempt a on a.run_id = h.id and a.attempt = h.attempt
        where a.lines > h.max_lines or a.bytes > h.max_bytes
    ), ranked as (
        select g.run_id, g.attempt, g.seq,
               (row_number() over w > o.max_lines or sum(octet_length(g.message)) over w > o.max_bytes) as goes
        from workflow.workflow_run_log g
        join over o on o.run_id = g.run_id and o.attempt = g.attempt
        where g.run_id = any (v_ids)
        window w as (partition by g.run_id, g.attempt order by g.seq desc)
    ), gone as (
        delete from workflow.workflow_run_log g
        using ranked k
        where g.run_id = any (v_ids) and g.run_id = k.run_id and g.attempt = k.attempt and g.seq = k.seq and k.goes
        returning g.run_id, g.attempt, octet_length(g.message) as b
    )
    update workflow.workflow_run_log_attempt a
    set lines = a.lines - x.n, bytes = a.bytes - x.b, dropped = a.dropped + x.n
    from (select gn.run_id, gn.attempt, count(*) as n, sum(gn.b) as b from gone gn group by 1, 2) x
    where a.run_id = x.run_id and a.attempt = x.attempt;

    return query
    select t.id, coalesce(t.id = any (v_ids), false) from unnest(p_ids) t(id);
end $$;
comment on function workflow.append_run_logs(text, uuid[], bigint[], bigint[], uuid[], timestamptz[], text[], text[]) is
    'Keeps log lines of attempts a worker holds, within the owner''s limits per attempt. Returns (id, kept) per attempt.';

-- run_log_visible: whether the caller may read the run's logs (the rule
-- of run_trail: the owner, or a login reading or producing for its
-- namespace).
create or replace function workflow.run_log_visible(p_id uuid) returns boolean
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select exists (select 1 from workflow.workflow_run r
                   where r.id = p_id
                     and ((select workflow.caller_namespaces('read')) is null
                          or r.namespace = any ((select workflow.caller_namespaces('read'))::text[])))
$$;

-- run_logs: a run's log lines after a line (attempt, seq; (0, 0) for the
-- first), in order, at most p_limit (1 to 10,000), when the caller may
-- read the run. Reads only.
create or replace function workflow.run_logs(
    p_id uuid, p_after_attempt integer default 0, p_after_seq bigint default 0, p_limit integer default 1000
) returns table (attempt integer, seq bigint, logged_at timestamptz, level text, message text)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select g.attempt, g.seq, g.logged_at, g.level, g.message
    from workflow.workflow_run_log g
    where g.run_id = p_id
      and (g.attempt, g.seq) > (coalesce(p_after_attempt, 0), coalesce(p_after_seq, 0))
      and workflow.run_log_visible(p_id)
    order by g.attempt, g.seq
    limit least(greatest(coalesce(p_limit, 1000), 1), 10000)
$$;

-- run_log_attempts: per attempt of a run that logged, the lines kept,
-- their octets and the lines dropped, when the caller may read the run.
create or replace function workflow.run_log_attempts(p_id uuid)
returns table (attempt integer, lines integer, bytes bigint, dropped bigint, first_seq bigint)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select a.attempt, a.lines, a.bytes, a.dropped, a.next_seq - a.lines
    from workflow.workflow_run_log_attempt a
    where a.run_id = p_id and workflow.run_log_visible(p_id)
    order by a.attempt
$$;


-- ===========================================================================
-- 5. CHILDREN AND DAGS
-- ===========================================================================

-- resolve_child_entry writes a finished child's end into its parent's
-- journal entry, unless the entry is already resolved: ok with the child's
-- result, or error with why it failed or that it was cancelled.
-- (PL/pgSQL, so that the statement's plan is cached: a SQL function with
-- a SET clause is planned anew on every call.)
create or replace function workflow.resolve_child_entry(p_child workflow.workflow_run) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    update workflow.workflow_step s
    set outcome     = case p_child.status when 'succeeded' then 'ok' else 'error' end,
        output      = case when p_child.status = 'succeeded' then p_child.result end,
        error       = case p_child.status
                          when 'failed' then left(coalesce(p_child.last_error, 'child run failed'), 8192)
                          when 'cancelled' then 'child run cancelled' end,
        finished_at = (select workflow.now())
    where s.run_id = p_child.parent_id and s.name = p_child.parent_step and s.finished_at is null;
end $$;

-- start_child records a child run at a parent's step (once: a replay gets
-- the same child, 'duplicate'), with the parent's priority and deadline
-- (or the earlier of it and the child's own), and journals a 'child' entry;
-- a child that had already ended is written in at once. The parent then
-- waits with park_run(kind 'child').
-- Fires: workflow_run_inserted and the other insert triggers for the child.
-- Locks: the parent (held_run), then the child's row, then the entry.
create or replace function workflow.start_child(
    p_worker_id text,
    p_id uuid,
    p_token bigint,
    p_step text,
    p_position integer,
    p_type text,
    p_payload jsonb,
    p_priority integer,
    p_max_attempts integer,
    p_deadline_ms bigint
) returns table (status text, child_id uuid, outcome text, output jsonb, error text, message text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    v_run workflow.workflow_run;
    v_step workflow.workflow_step;
    v_problem text;
    v_child uuid;
    v_deadline timestamptz;
begin
    v_problem := coalesce(workflow.step_name_problem(p_step),
                          case when p_position is null or p_position not between 0 and 999
                               then 'a run has at most 1000 steps (positions 0 to 999)' end,
                          case when p_payload is not null and jsonb_typeof(p_payload) <> 'object'
                               then 'a child''s payload must be a JSON object' end,
                          case when p_deadline_ms is not null and p_deadline_ms <= 0
                               then 'a child''s deadline must be positive' end,
                          case when p_priority is not null and p_priority not between 0 and 1000000
                               then format('a child''s priority must be between 0 and 1000000, got %s', p_priority) end,
                          case when octet_length(p_payload::text) > (select st.max_payload_bytes from workflow.workflow_settings st)
                               then format('a child''s payload is %s bytes; the limit is %s (workflow_settings.max_payload_bytes)',
                                           octet_length(p_payload::text),
                                           (select st.max_payload_bytes from workflow.workflow_settings st)) end,
                          case when workflow.json_too_deep(p_payload)
                               then 'a child''s payload nests deeper than 64 levels, the most a stored value may' end);
    if v_problem is not null then
        return query select 'invalid', null::uuid, null::text, null::jsonb, null::text, v_problem;
        return;
    end if;
    v_run := workflow.held_run(p_worker_id, p_id, p_token);
    if v_run.id is null then
        return query select 'lease_lost', null::uuid, null::text, null::jsonb, null::text, null::text;
        return;
    end if;
    v_problem := workflow.journal_conflict(p_id, p_step, 'child', p_position);
    if v_problem is not null then
        return query select 'nondeterministic', null::uuid, null::text, null::jsonb, null::text, v_problem;
        return;
    end if;
    select * into v_step from workflow.workflow_step s where s.run_id = p_id and s.name = p_step;
    if found then
        return query select 'duplicate', v_step.child_id, v_step.outcome, v_step.output, v_step.error, null::text;
        return;
    end if;

    v_deadline := case
        when p_deadline_ms is null then v_run.deadline_at
        when v_run.deadline_at is null then workflow.now() + p_deadline_ms * interval '1 millisecond'
        else least(v_run.deadline_at, workflow.now() + p_deadline_ms * interval '1 millisecond') end;
    insert into workflow.workflow_run (type, payload, priority, max_attempts, parent_id, parent_step, deadline_at,
                                       traceparent, namespace, type_namespace)
    values (p_type, coalesce(p_payload, '{}'::jsonb), coalesce(p_priority, v_run.priority),
            coalesce(p_max_attempts, 3), p_id, p_step, v_deadline, v_run.traceparent, v_run.namespace,
            v_run.type_namespace)
    on conflict (parent_id, parent_step) where parent_id is not null do nothing
    returning id into v_child;
    if v_child is null then
        select r.id into v_child from workflow.workflow_run r where r.parent_id = p_id and r.parent_step = p_step;
    end if;
    insert into workflow.workflow_step (run_id, name, position, kind, attempt, child_id)
    values (p_id, p_step, p_position, 'child', v_run.attempt, v_child);
    -- A child that already ended (it existed before its journal entry) is
    -- written in at once.
    perform workflow.resolve_child_entry(c)
    from workflow.workflow_run c
    where c.id = v_child and c.status in ('succeeded', 'failed', 'cancelled');
    select * into v_step from workflow.workflow_step s where s.run_id = p_id and s.name = p_step;
    return query select 'started', v_child, v_step.outcome, v_step.output, v_step.error, null::text;
end $$;

-- children_finished moves on the parents of runs that ended (p_ids: the
-- runs one statement ended; runs not ended are left out): the DAGs among
-- them together, each at most once (dags_advance), and for each child of a
-- durable parent its journal entry resolved (ok with its result, or error)
-- and the parent, if it is parked on that child, woken ('woken', NOTIFY to
-- its workers). A DAG that ended is left alone. A step that succeeded while
-- other steps of its DAG still run leaves its DAG alone when no step
-- depends on it, or when it is an element of a fan-out whose other
-- elements still run: nothing can start and the DAG cannot end. (A DAG's
-- advance reads every step of the DAG: called on each step's end, a
-- 100-wide fan-out whose steps ended apart read its steps 10,000 times.)
-- Called by on_child_finished for the runs any statement ends, and by
-- complete_runs and fail_runs for those their own statement ends (the
-- trigger leaves those rows alone while workflow.ends_children is on). What
-- it ends itself (a DAG, the steps a failure cancels) fires the triggers as
-- any statement's ends do: the callers' marks are off meanwhile.
-- Fires: workflow_run_inserted (steps), what dag_end and dag_fail fire.
-- Locks: the DAG runs in id order (the callers that end steps locked them
-- first, lock_parents), then each durable parent woken.
create or replace function workflow.children_finished(p_ids uuid[]) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
-- Index scans and nested loops, as dags_advance: the callers that end
-- steps plan generically with nested loops off, under which its reads of
-- steps and parents by id became scans of every DAG run.
set enable_seqscan = off
set enable_nestloop = on
set jit = off
as $$
declare
    v_frees text := coalesce(current_setting('workflow.frees_slots', true), '');
    v_ends text := coalesce(current_setting('workflow.ends_children', true), '');
    v_dags uuid[];
    v_child workflow.workflow_run;
    v_parent workflow.workflow_run;
begin
    perform set_config('workflow.frees_slots', '', true);
    perform set_config('workflow.ends_children', '', true);
    -- The DAG parents, locked in id order, so that of two statements ending
    -- steps of one DAG the later sees what the earlier ended.
    -- (Each read of the given runs names their parent and status so that no
    -- partial index's predicate is implied: the primary key is the only way
    -- in. Written plainly, the status filter read the index of every
    -- finished run, which grows with the history.)
    perform 1 from workflow.workflow_run p
    where p.id = any (array(select c.parent_id from workflow.workflow_run c
                            where c.id = any (p_ids) and coalesce(c.parent_id::text, '') <> ''))
      and p.dag is not null
    order by p.id
    for update of p;
    -- The DAGs with something to do: a step that ended otherwise than
    -- succeeded, or one a step waits for (or the final step), or the last
    -- of the steps no step waits for, or the last element of a fan-out.
    -- Whether something still runs is asked once per DAG (or fanned-out
    -- step), not once per step ended, and stops at the first it finds.
    -- (A definition is read once per DAG: the steps some step waits for,
    -- and its final step.)
    with dags as materialized (
        select p.id,
               array(select d from jsonb_array_elements(p.dag->'steps') s,
                                   jsonb_array_elements_text(coalesce(s->'dependsOn', '[]')) d) as awaited,
               (select s->>'name' from jsonb_array_elements(p.dag->'steps') s
                where coalesce((s->>'final')::boolean, false) limit 1) as final
        from workflow.workflow_run p
        where p.id = any (array(select c.parent_id from workflow.workflow_run c
                                where c.id = any (p_ids) and coalesce(c.parent_id::text, '') <> ''))
          and p.dag is not null and p.status = 'pending'
    ), ended as (
        select c.parent_id,
               c.status = 'succeeded'
               and (not st.step = any (d.awaited) or st.step <> c.parent_step)
               and st.step is distinct from d.final as quiet,
               case when st.step = any (d.awaited) then st.step else '' end as waits_for
        from workflow.workflow_run c
        join dags d on d.id = c.parent_id
        cross join lateral (select regexp_replace(c.parent_step, '\[[0-9]+\]$', '') as step) st -- an element's step
        where c.id = any (p_ids) and coalesce(c.status, '') in ('succeeded', 'failed', 'cancelled')
    )
    select array_agg(distinct x.parent_id) into v_dags
    from (select e.parent_id from ended e where not e.quiet
          union
          select k.parent_id
          from (select distinct e.parent_id, e.waits_for from ended e where e.quiet) k
          where not exists (select 1 from workflow.workflow_run o
                            where o.parent_id = k.parent_id and o.status in ('pending', 'leased')
                              and (k.waits_for = ''
                                   or left(o.parent_step, char_length(k.waits_for) + 1) = k.waits_for || '['))) x;
    if v_dags is not null then
        perform workflow.dags_advance(v_dags);
    end if;

    for v_child in
        select c.* from workflow.workflow_run c
        where c.id = any (p_ids) and coalesce(c.parent_id::text, '') <> ''
          and coalesce(c.status, '') in ('succeeded', 'failed', 'cancelled')
          and not exists (select 1 from workflow.workflow_run p where p.id = c.parent_id and p.dag is not null)
        order by c.id
    loop
        perform workflow.resolve_child_entry(v_child);
        update workflow.workflow_run p
        set run_at = (select workflow.now()), wait_kind = null, wait_step = null, wait_signal = null, updated_at = (select workflow.now())
        where p.id = v_child.parent_id and p.status = 'pending'
          and p.wait_kind = 'child' and p.wait_step = v_child.parent_step
        returning * into v_parent;
        if v_parent.id is not null then
            insert into workflow.workflow_event (workflow_id, event_type, data)
            values (v_parent.id, 'woken', jsonb_build_object('reason', 'child_finished', 'step', v_child.parent_step,
                                                             'child_id', v_child.id, 'child_status', v_child.status));
            perform pg_notify('workflow_run_created', v_parent.type_namespace || '/' || v_parent.type);
        end if;
    end loop;
    perform set_config('workflow.frees_slots', v_frees, true);
    perform set_config('workflow.ends_children', v_ends, true);
end $$;

-- A child's end, whatever ended it, moves its parent on (children_finished);
-- the runs complete_runs and fail_runs end themselves are theirs to move
-- on, all together (workflow.ends_children).
create or replace function workflow.on_child_finished() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
    perform workflow.children_finished(array[new.id]);
    return null;
end $$;
create or replace trigger workflow_child_finished after update on workflow.workflow_run
    for each row when (new.parent_id is not null and old.status in ('pending', 'leased')
                       and new.status in ('succeeded', 'failed', 'cancelled')
                       and (pg_trigger_depth() > 0
                            or coalesce(current_setting('workflow.ends_children', true), '') <> 'on'))
    execute function workflow.on_child_finished();

-- A parent that failed or was cancelled cancels its unfinished children
-- (reason parent_ended), which cancels theirs in turn.
create or replace function workflow.on_parent_ended() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_outer text := coalesce(current_setting('workflow.cancel_reason', true), '');
begin
    perform set_config('workflow.cancel_reason', 'parent_ended', true);
    update workflow.workflow_run c
    set status = 'cancelled', updated_at = (select workflow.now())
    where c.parent_id = new.id and c.status in ('pending', 'leased')
      -- a DAG's final step, once started, runs to its end whatever ends
      -- the workflow
      and c.parent_step is distinct from workflow.dag_final_step(new.dag)->>'name';
    perform set_config('workflow.cancel_reason', v_outer, true);
    -- A DAG ended from outside (cancelled, its deadline passed) before its
    -- final step started: the final step runs now, after it, with no
    -- deadline.
    if new.dag is not null then
        perform workflow.dag_finally(new, jsonb_build_object('status', new.status, 'error', new.last_error,
                                                             'reason', case when new.status = 'cancelled' then 'cancelled' end),
                                     null);
    end if;
    return null;
end $$;
create or replace trigger workflow_parent_ended after update on workflow.workflow_run
    for each row when (old.status in ('pending', 'leased') and new.status in ('failed', 'cancelled'))
    execute function workflow.on_parent_ended();

-- path_problem names what is wrong with a step's SQL/JSON path field
-- (when or forEach): not a string of 1 to 1024 characters, a path variable
-- (only $, the input, is defined), or not a path at all; null when fine.
create or replace function workflow.path_problem(p_step jsonb, p_field text) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
    if jsonb_typeof(p_step->p_field) is distinct from 'string' or char_length(p_step->>p_field) not between 1 and 1024 then
        return format('step "%s": %s must be an SQL/JSON path of 1 to 1024 characters', p_step->>'name', p_field);
    end if;
    if (p_step->>p_field) ~ '\$[A-Za-z_"]' then
        return format('step "%s": %s uses a path variable ($name); only $ (the input) is defined', p_step->>'name', p_field);
    end if;
    begin
        perform (p_step->>p_field)::jsonpath;
    exception when others then
        return format('step "%s": %s is not an SQL/JSON path expression: %s', p_step->>'name', p_field, sqlerrm);
    end;
    return 'step "' || (p_step->>'name') || '": ' || p_field || ' is refused: '
           || workflow.path_cost_problem(p_step->>p_field);
end $$;

-- path_cost_problem names what would make a step's SQL/JSON path cost
-- more than time in proportion to its input, or null: a comparison of two
-- paths (every item of one against every item of the other, quadratic in
-- lax mode's unwrapped arrays), $ inside a filter (the input read again
-- for every item), ** inside a filter or more than one ** (the input read
-- once per node). It reads the path as PostgreSQL prints it (members
-- quoted, spacing fixed), split into tokens. Called when a definition is
-- written (path_problem) and, for a path that could hold such a thing,
-- before it is evaluated (dag_path_value: definitions stored before this
-- check), so that a condition never holds a worker's completion for long.
create or replace function workflow.path_cost_problem(p_expr text) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
declare
    v_tokens text[];
    v_tk text;
    v_filters integer[] := '{}';
    v_parens integer := 0;
    v_brackets integer := 0;
    v_recursive integer := 0;
    v_n integer;
    v_j integer;
    v_left boolean;
    v_right boolean;
begin
    v_tokens := array(
        select m[1] from regexp_matches(p_expr::jsonpath::text,
            '("(?:\\.|[^"\\])*"|\*\*(?:\{[^}]*\})?|[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|[A-Za-z_][A-Za-z_0-9]*|==|!=|<>|<=|>=|&&|\|\||\(|\)|\[|\]|\{|\}|[-+*/%<>!.,?@$])',
            'g') m);
    v_n := cardinality(v_tokens);
    for i in 1 .. v_n loop
        v_tk := v_tokens[i];
        if v_tk = '(' then
            v_parens := v_parens + 1;
            if i > 1 and v_tokens[i - 1] = '?' then
                v_filters := v_filters || v_parens;
            end if;
        elsif v_tk = ')' then
            if cardinality(v_filters) > 0 and v_filters[cardinality(v_filters)] = v_parens then
                v_filters := v_filters[1:cardinality(v_filters) - 1];
            end if;
            v_parens := v_parens - 1;
        elsif v_tk = '[' then
            v_brackets := v_brackets + 1;
        elsif v_tk = ']' then
            v_brackets := v_brackets - 1;
        elsif left(v_tk, 2) = '**' then
            v_recursive := v_recursive + 1;
            if cardinality(v_filters) > 0 then
                return 'it uses ** inside a filter, which would read the whole input once per item';
            elsif v_recursive > 1 then
                return 'it uses ** more than once; one ** reads the whole input, each more one reads it again for every item';
            end if;
        elsif v_tk = '$' and (cardinality(v_filters) > 0 or v_brackets > 0) then
            return 'it uses $ inside a filter or a subscript, which would read the input again for every item; compare items with @ and constants';
        elsif v_tk in ('==', '!=', '<>', '<', '<=', '>', '>=') then
            v_left := i > 1 and (v_tokens[i - 1] ~ '^[0-9]' or v_tokens[i - 1] in ('true', 'false', 'null')
                                 or (left(v_tokens[i - 1], 1) = '"' and (i < 3 or v_tokens[i - 2] <> '.')));
            v_j := i + 1;
            if v_j <= v_n and v_tokens[v_j] in ('-', '+') then
                v_j := v_j + 1;
            end if;
            v_right := v_j <= v_n and (v_tokens[v_j] ~ '^[0-9]' or v_tokens[v_j] in ('true', 'false', 'null')
                                       or left(v_tokens[v_j], 1) = '"');
            if not (v_left or v_right) then
                return format('it compares two paths (%s): every item of one with every item of the other; one side of a comparison must be a constant',
                              v_tk);
            end if;
        end if;
    end loop;
    return null;
end $$;

-- dag_step_input is what a step's condition and forEach read: the
-- workflow's payload and, for each dependency, its status (succeeded or
-- skipped) and result.
create or replace function workflow.dag_step_input(p_run workflow.workflow_run, p_results jsonb, p_def jsonb)
returns jsonb
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
begin
    return jsonb_build_object('payload', p_run.payload, 'steps', coalesce(
        (select jsonb_object_agg(d, jsonb_build_object(
                    'status', case when d = any (coalesce(p_run.dag_skipped, '{}')) then 'skipped' else 'succeeded' end,
                    'result', p_results->d))
         from jsonb_array_elements_text(coalesce(p_def->'dependsOn', '[]')) d), '{}'::jsonb));
end $$;

-- dag_path_value evaluates a step's SQL/JSON path over its input: with
-- p_predicate, whether it holds (a condition: true, false, or null for no
-- boolean), else the first item it selects (a fan-out's list). An error
-- does not escape: it is returned as the error, for dag_advance to fail the
-- workflow with.
-- Fires: nothing. Locks: nothing.
create or replace function workflow.dag_path_value(p_input jsonb, p_expr text, p_predicate boolean,
                                                   out value jsonb, out error text)
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
    if p_expr ~ '[$@][^$@]*[$@]|[*][*]' then
        error := 'refused: ' || workflow.path_cost_problem(p_expr);
        if error is not null then
            return;
        end if;
    end if;
    if p_predicate then
        value := to_jsonb(jsonb_path_match(p_input, p_expr::jsonpath, '{}', true));
    else
        value := jsonb_path_query_first(p_input, p_expr::jsonpath, '{}', true);
    end if;
exception when others then
    error := sqlerrm;
end $$;

-- definition_problem names the first thing wrong with a DAG definition
-- ({"steps": [{name, type, dependsOn, payload, maxAttempts,
-- retryBaseDelayMs, retryMaxDelayMs}]}, 1 to 100 steps, unique names,
-- known dependencies, no cycle: the cycle is named), or null.
create or replace function workflow.definition_problem(p_def jsonb) returns text
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $_$
declare
    v_steps jsonb;
    v_n integer;
    v_step record;
    v_key text;
    v_done text[] := '{}';
    v_ready text[];
    v_path text[];
    v_cur text;
    v_next text;
begin
    if p_def is not null and octet_length(p_def::text) > 262144 then
        return format('a definition is at most 262144 bytes (256 KiB), got %s', octet_length(p_def::text));
    end if;
    if workflow.json_too_deep(p_def) then
        return 'a definition nests at most 64 levels deep (objects and arrays)';
    end if;
    if p_def is null or jsonb_typeof(p_def) <> 'object' or not p_def ? 'steps' then
        return 'a definition is an object with "steps"';
    end if;
    select k into v_key from jsonb_object_keys(p_def) k where k <> 'steps' limit 1;
    if found then
        return format('unknown field %s', to_jsonb(left(v_key, 64)));
    end if;
    v_steps := p_def->'steps';
    if jsonb_typeof(v_steps) <> 'array' then
        return '"steps" must be a list';
    end if;
    v_n := jsonb_array_length(v_steps);
    if v_n < 1 or v_n > 100 then
        return format('a workflow has 1 to 100 steps, not %s', v_n);
    end if;
    for v_step in select s, i from jsonb_array_elements(v_steps) with ordinality x(s, i) loop
        if jsonb_typeof(v_step.s) <> 'object' then
            return format('step %s is not an object', v_step.i);
        end if;
        select k into v_key from jsonb_object_keys(v_step.s) k
        where k not in ('name', 'type', 'dependsOn', 'payload', 'maxAttempts', 'retryBaseDelayMs', 'retryMaxDelayMs',
                        'final', 'when', 'forEach', 'forEachFailure', 'typeNamespace')
        limit 1;
        if found then
            return format('step %s: unknown field %s', v_step.i, to_jsonb(left(v_key, 64)));
        end if;
        if jsonb_typeof(v_step.s->'name') is distinct from 'string'
           or (v_step.s->>'name') !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$' then
            return format('step %s: name must be 1 to 63 letters, digits, ".", "_" or "-", starting with a letter or digit', v_step.i);
        end if;
        if jsonb_typeof(v_step.s->'type') is distinct from 'string'
           or char_length(v_step.s->>'type') > 253
           or (v_step.s->>'type') !~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$' then
            return format('step "%s": type must be a workflow type such as billing.charge.v1', v_step.s->>'name');
        end if;
        if v_step.s ? 'typeNamespace' and (jsonb_typeof(v_step.s->'typeNamespace') is distinct from 'string'
            or not workflow.namespace_valid(v_step.s->>'typeNamespace')) then
            return format('step "%s": typeNamespace must be a namespace name (a DNS label of at most 63 characters)',
                          v_step.s->>'name');
        end if;
        if v_step.s ? 'dependsOn' and (jsonb_typeof(v_step.s->'dependsOn') <> 'array'
            or jsonb_array_length(v_step.s->'dependsOn') > 100
            or exists (select 1 from jsonb_array_elements(v_step.s->'dependsOn') d where jsonb_typeof(d) <> 'string')) then
            return format('step "%s": dependsOn must be a list of at most 100 step names', v_step.s->>'name');
        end if;
        -- Before anything reads it as a boolean.
        if v_step.s ? 'final' and jsonb_typeof(v_step.s->'final') <> 'boolean' then
            return format('step "%s": final must be true or false', v_step.s->>'name');
        end if;
        if v_step.s ? 'when' and coalesce((v_step.s->>'final')::boolean, false) then
            return format('step "%s": a final step always runs; it takes no when', v_step.s->>'name');
        end if;
        if v_step.s ? 'forEach' and coalesce((v_step.s->>'final')::boolean, false) then
            return format('step "%s": a final step runs once; it takes no forEach', v_step.s->>'name');
        end if;
        if v_step.s ? 'forEach' and char_length(v_step.s->>'name') > 57 then
            return format('step "%s": a step with forEach has a name of at most 57 characters (its elements are named <name>[<index>])', v_step.s->>'name');
        end if;
        -- A condition and a list are SQL/JSON path expressions over the input.
        v_key := coalesce(case when v_step.s ? 'when' then workflow.path_problem(v_step.s, 'when') end,
                          case when v_step.s ? 'forEach' then workflow.path_problem(v_step.s, 'forEach') end);
        if v_key is not null then
            return v_key;
        end if;
        if v_step.s ? 'forEachFailure' and (not v_step.s ? 'forEach'
            or jsonb_typeof(v_step.s->'forEachFailure') <> 'string'
            or v_step.s->>'forEachFailure' not in ('failStep', 'continue')) then
            return format('step "%s": forEachFailure is failStep or continue, on a step with forEach', v_step.s->>'name');
        end if;
        if coalesce((v_step.s->>'final')::boolean, false) and jsonb_array_length(coalesce(v_step.s->'dependsOn', '[]')) > 0 then
            return format('step "%s": a final step runs after all the others and depends on none', v_step.s->>'name');
        end if;
        if v_step.s ? 'payload' and jsonb_typeof(v_step.s->'payload') <> 'object' then
            return format('step "%s": payload must be an object', v_step.s->>'name');
        end if;
        if v_step.s ? 'maxAttempts' and (jsonb_typeof(v_step.s->'maxAttempts') <> 'number'
            or (v_step.s->>'maxAttempts') !~ '^[0-9]{1,4}$'
            or (v_step.s->>'maxAttempts')::integer not between 1 and 1000) then
            return format('step "%s": maxAttempts must be 1 to 1000', v_step.s->>'name');
        end if;
        foreach v_key in array array['retryBaseDelayMs', 'retryMaxDelayMs'] loop
            if v_step.s ? v_key and (jsonb_typeof(v_step.s->v_key) <> 'number'
                or (v_step.s->>v_key) !~ '^[0-9]{1,11}$'
                or (v_step.s->>v_key)::bigint not between 1 and 31622400000) then
                return format('step "%s": %s must be 1 to 31622400000 (366 days)', v_step.s->>'name', v_key);
            end if;
        end loop;
        if (v_step.s->>'retryBaseDelayMs')::bigint > (v_step.s->>'retryMaxDelayMs')::bigint then
            return format('step "%s": retryMaxDelayMs must be at least retryBaseDelayMs', v_step.s->>'name');
        end if;
    end loop;

    select s->>'name' into v_key from jsonb_array_elements(v_steps) s
    group by s->>'name' having count(*) > 1 limit 1;
    if found then
        return format('step name "%s" is used twice', v_key);
    end if;
    if (select count(*) from jsonb_array_elements(v_steps) s where coalesce((s->>'final')::boolean, false)) > 1 then
        return 'a workflow has at most one final step';
    end if;
    if (select count(*) from jsonb_array_elements(v_steps) s where not coalesce((s->>'final')::boolean, false)) = 0 then
        return 'a workflow needs a step besides its final step';
    end if;
    select format('step "%s" depends on "%s", the final step, which runs after all the others', s->>'name', d) into v_key
    from jsonb_array_elements(v_steps) s, jsonb_array_elements_text(coalesce(s->'dependsOn', '[]')) d
    where exists (select 1 from jsonb_array_elements(v_steps) t
                  where t->>'name' = d and coalesce((t->>'final')::boolean, false))
    limit 1;
    if found then
        return v_key;
    end if;
    select format('step "%s" depends on "%s", which is not a step of this workflow', s->>'name', d) into v_key
    from jsonb_array_elements(v_steps) s, jsonb_array_elements_text(coalesce(s->'dependsOn', '[]')) d
    where not exists (select 1 from jsonb_array_elements(v_steps) t where t->>'name' = d)
    limit 1;
    if found then
        return v_key;
    end if;

    -- Peel off steps whose dependencies are all peeled; what is left holds a cycle.
    loop
        select array_agg(s->>'name') into v_ready
        from jsonb_array_elements(v_steps) s
        where not (s->>'name') = any (v_done)
          and array(select jsonb_array_elements_text(coalesce(s->'dependsOn', '[]'))) <@ v_done;
        exit when v_ready is null;
        v_done := v_done || v_ready;
    end loop;
    if cardinality(v_done) = v_n then
        return null;
    end if;
    -- Every step left depends on another step left: follow them until one repeats.
    select s->>'name' into v_cur from jsonb_array_elements(v_steps) with ordinality x(s, i)
    where not (s->>'name') = any (v_done) order by i limit 1;
    v_path := array[v_cur];
    loop
        select d into v_next
        from jsonb_array_elements(v_steps) s, jsonb_array_elements_text(s->'dependsOn') with ordinality y(d, j)
        where s->>'name' = v_cur and not d = any (v_done)
        order by j limit 1;
        if v_next = any (v_path) then
            return format('cycle: %s (each step depends on the next)',
                          array_to_string(v_path[array_position(v_path, v_next):] || v_next, ' → '));
        end if;
        v_path := v_path || v_next;
        v_cur := v_next;
    end loop;
end
$_$;

-- A registry entry's definition is checked when written: the size and
-- depth bounds first (before the lock, so an oversized definition never
-- holds up other writers), then, one writer at a time, the definition
-- itself and its relation to the others (a step's type must be a type that
-- workers run, not one with steps of its own).
create or replace function workflow.on_registry_written() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_problem text;
begin
    -- Bounded before the lock below: an oversized definition never holds
    -- up the writers of other registries.
    if new.definition is not null and octet_length(new.definition::text) > 262144 then
        raise exception 'invalid definition of %: it is % bytes; a definition is at most 262144 (256 KiB)',
            left(new.workflow_name, 253), octet_length(new.definition::text) using errcode = 'SW001';
    end if;
    if workflow.json_too_deep(new.definition) then
        raise exception 'invalid definition of %: it nests deeper than 64 levels (objects and arrays)',
            left(new.workflow_name, 253) using errcode = 'SW001';
    end if;
    -- Definitions are checked against each other: one writer at a time
    -- (a lock only the schema's owner may take: see workflow_lock).
    perform 1 from workflow.workflow_lock l where l.id = 0 for update;
    if new.definition is null then
        -- A type that is some workflow's step keeps no steps; a renamed
        -- entry is checked like a new one.
        return new;
    end if;
    v_problem := workflow.definition_problem(new.definition);
    if v_problem is null then
        select format('step "%s" runs %s, which has steps of its own; a step is a type that workers run',
                      s->>'name', s->>'type')
        into v_problem
        from jsonb_array_elements(new.definition->'steps') s
        where (s->>'type' = new.workflow_name and coalesce(s->>'typeNamespace', new.namespace) = new.namespace)
           or exists (select 1 from workflow.workflow_registry g
                      where g.namespace = coalesce(s->>'typeNamespace', new.namespace)
                        and g.workflow_name = s->>'type' and g.definition is not null)
        limit 1;
    end if;
    if v_problem is null then
        select format('it is step "%s" of %s, and a step is a type that workers run', s->>'name', g.workflow_name)
        into v_problem
        from workflow.workflow_registry g, jsonb_array_elements(g.definition->'steps') s
        where g.definition is not null and g.namespace = new.namespace and g.workflow_name <> new.workflow_name
          and s->>'type' = new.workflow_name and coalesce(s->>'typeNamespace', g.namespace) = new.namespace
        limit 1;
    end if;
    if v_problem is not null then
        raise exception 'invalid definition of %: %', new.workflow_name, v_problem using errcode = 'SW001';
    end if;
    return new;
end $$;
create or replace trigger workflow_registry_written
    before insert or update of definition, workflow_name, namespace on workflow.workflow_registry
    for each row execute function workflow.on_registry_written();

-- The steps of a DAG run that may start now: not started yet, every
-- dependency succeeded. Each step's payload is the run's payload, its own
-- constant payload over it, and "steps": the results of its dependencies.
create or replace function workflow.dag_ready_steps(
    p_run workflow.workflow_run,
    p_results jsonb
) returns table (
    name text,
    type text,
    payload jsonb,
    max_attempts integer,
    base_delay interval,
    max_delay interval,
    def jsonb
)
language sql stable
-- Inlined into its callers' statements (no SET clause), so that their
-- cached plans hold it: planned on every call, it cost a DAG's advance
-- about a millisecond a step. The body is bound when the function is
-- created, whatever the caller's search_path.
begin atomic
    select s->>'name', s->>'type',
           (p_run.payload || coalesce(s->'payload', '{}'::jsonb))
               || jsonb_build_object('steps', coalesce(
                      (select jsonb_object_agg(d, p_results->d)
                       from jsonb_array_elements_text(coalesce(s->'dependsOn', '[]')) d), '{}'::jsonb)),
           coalesce((s->>'maxAttempts')::integer, 3),
           make_interval(secs => (s->>'retryBaseDelayMs')::bigint / 1000.0),
           make_interval(secs => (s->>'retryMaxDelayMs')::bigint / 1000.0),
           s
    from jsonb_array_elements(p_run.dag->'steps') with ordinality x(s, i)
    where not exists (select 1 from workflow.workflow_run c
                      where c.parent_id = p_run.id and c.parent_step = s->>'name')
      and not (s->>'name') = any (coalesce(p_run.dag_skipped, '{}'))
      and not coalesce(p_run.dag_fanout ? (s->>'name'), false)
      -- A skipped dependency counts as done (its result is null).
      and not exists (select 1 from jsonb_array_elements_text(coalesce(s->'dependsOn', '[]')) d
                      where not p_results ? d and not d = any (coalesce(p_run.dag_skipped, '{}')))
      and not coalesce((s->>'final')::boolean, false) -- started by dag_finally
    order by x.i;
end;

-- dag_end finishes a DAG run with a status, result or error, and its event.
-- Fires: workflow_parent_ended (a failure cancels the steps still running),
-- workflow_child_finished (a DAG under a durable parent),
-- workflow_source_run_changed.
create or replace function workflow.dag_end(
    p_run workflow.workflow_run,
    p_status text,
    p_result jsonb,
    p_error text,
    p_data jsonb
) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_via text := workflow.set_marks();
begin
    update workflow.workflow_run r
    set status = p_status, result = p_result, last_error = p_error,
        wait_kind = null, wait_step = null, wait_signal = null,
        finished_at = (select workflow.now()), updated_at = (select workflow.now())
    where r.id = p_run.id;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (p_run.id, p_status, jsonb_strip_nulls(p_data || jsonb_build_object('error', p_error)));
    perform workflow.restore_marks(v_via);
end $$;

-- child_runs is the child runs of one parent (a DAG's steps, a durable
-- run's children), read by their parent's index and nothing else: a filter
-- on status around it (the OFFSET keeps it outside) cannot make the
-- planner read a partial index on status whole, as it did when the
-- statistics were taken before any child existed and such an index looked
-- as cheap as the probe. Inlined into its callers' statements.
create or replace function workflow.child_runs(p_parent uuid) returns setof workflow.workflow_run
language sql stable
begin atomic
    select * from workflow.workflow_run c where c.parent_id = p_parent offset 0;
end;

-- dag_step_states is the state of each started step of a DAG run: a
-- step's run, or for a fanned-out step (forEach) its elements together:
-- succeeded with the list of their results in index order when all ended
-- and none failed (with forEachFailure continue, failed and cancelled
-- elements leave null), failed or cancelled as its first element that did
-- (failStep, the default), running ('leased') otherwise. For a failure,
-- the run, type and error of the element that caused it. elements and
-- elements_done count a fanned-out step's elements.
create or replace function workflow.dag_step_states(p_run workflow.workflow_run)
returns table (name text, status text, result jsonb, run_id uuid, type text, last_error text,
               elements integer, elements_done integer, element text, finished_at timestamptz)
language sql stable
-- Inlined into its callers' statements, as dag_ready_steps. Its callers
-- set jit off: the callers that end steps run with nested loops off, which
-- prices the lateral join here so high that JIT compilation (half a
-- second) would start on every call.
begin atomic
    select c.parent_step, c.status, c.result, c.id, c.type, c.last_error, null::integer, null::integer, null::text,
           c.finished_at
    from workflow.workflow_run c
    where c.parent_id = p_run.id and c.parent_step !~ '\[[0-9]+\]$'
    union all
    select f.key,
           case when f.bad > 0 and f.policy <> 'continue' then f.bad_status
                when f.ok + f.bad = f.n then 'succeeded'
                else 'leased' end,
           case when f.ok + f.bad = f.n and (f.bad = 0 or f.policy = 'continue') then f.results end,
           f.bad_id, f.bad_type, f.bad_error, f.n, (f.ok + f.bad)::integer, f.bad_step, f.bad_at
    from (
        select k.key, (k.value)::integer as n,
               coalesce((select s->>'forEachFailure' from jsonb_array_elements(p_run.dag->'steps') s
                         where s->>'name' = k.key), 'failStep') as policy,
               coalesce(e.ok, 0) as ok, coalesce(e.bad, 0) as bad, e.bad_status, e.bad_id, e.bad_type,
               e.bad_error, e.bad_step, e.bad_at, coalesce(e.results, '[]'::jsonb) as results
        from jsonb_each_text(coalesce(p_run.dag_fanout, '{}')) k
        left join lateral (
            select count(*) filter (where c.status = 'succeeded') as ok,
                   count(*) filter (where c.status in ('failed', 'cancelled')) as bad,
                   (array_agg(c.status order by c.finished_at, c.id) filter (where c.status in ('failed', 'cancelled')))[1] as bad_status,
                   (array_agg(c.id order by c.finished_at, c.id) filter (where c.status in ('failed', 'cancelled')))[1] as bad_id,
                   (array_agg(c.type order by c.finished_at, c.id) filter (where c.status in ('failed', 'cancelled')))[1] as bad_type,
                   (array_agg(c.last_error order by c.finished_at, c.id) filter (where c.status in ('failed', 'cancelled')))[1] as bad_error,
                   (array_agg(c.parent_step order by c.finished_at, c.id) filter (where c.status in ('failed', 'cancelled')))[1] as bad_step,
                   min(c.finished_at) filter (where c.status in ('failed', 'cancelled')) as bad_at,
                   jsonb_agg(case when c.status = 'succeeded' then coalesce(c.result, 'null'::jsonb) else 'null'::jsonb end
                             order by substring(c.parent_step from '\[([0-9]+)\]$')::integer) as results
            from workflow.workflow_run c
            where c.parent_id = p_run.id
              and left(c.parent_step, char_length(k.key) + 1) = k.key || '['
              and c.parent_step ~ '\[[0-9]+\]$'
        ) e on true
    ) f;
end;

-- dag_final_step is a definition's final step (the one with "final":
-- true), or null.
-- (PL/pgSQL, as are dag_unshared_step and dag_step_input: a SQL function
-- with a SET clause is planned again at every call, and a DAG's every
-- step calls them.)
create or replace function workflow.dag_final_step(p_dag jsonb) returns jsonb
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
    return (select s from jsonb_array_elements(p_dag->'steps') s
            where coalesce((s->>'final')::boolean, false)
            limit 1);
end $$;

-- dag_finally starts a DAG run's final step, if it has one and it has not
-- started: its payload is the workflow's, the step's own merged over it,
-- the results of the steps that succeeded under "steps" (left out when
-- the payload would pass the limits) and the outcome under "outcome"
-- ({"status": "succeeded" | "failed" | "cancelled", "error", "reason",
-- "step"}). It has no deadline: a cleanup runs to its end (p_deadline is
-- not used). False when there is no final step.
-- Fires: workflow_run_inserted (the step).
create or replace function workflow.dag_finally(p_run workflow.workflow_run, p_outcome jsonb,
                                                 p_deadline timestamptz) returns boolean
language plpgsql set search_path = pg_catalog, pg_temp set jit = off as $$
declare
    v_final jsonb := workflow.dag_final_step(p_run.dag);
    v_results jsonb;
    v_payload jsonb;
    v_limit bigint;
begin
    if v_final is null then
        return false;
    end if;
    -- A final step of another namespace's type starts only while that
    -- namespace shares it with the run's (workflow.dag_unshared_step).
    if v_final->>'typeNamespace' not in (p_run.namespace, p_run.type_namespace)
       and not workflow.type_shared(v_final->>'typeNamespace', v_final->>'type', p_run.namespace) then
        return false;
    end if;
    select coalesce(jsonb_object_agg(st.name, coalesce(st.result, 'null'::jsonb)), '{}'::jsonb) into v_results
    from workflow.dag_step_states(p_run) st
    where st.status = 'succeeded';
    v_limit := (select st.max_payload_bytes from workflow.workflow_settings st);
    v_payload := (p_run.payload || coalesce(v_final->'payload', '{}'::jsonb))
                 || jsonb_build_object('steps', v_results, 'outcome', jsonb_strip_nulls(p_outcome));
    if octet_length(v_payload::text) > v_limit or workflow.json_too_deep(v_payload) then
        -- Without the results, then with the outcome alone (its error cut):
        -- the final step always starts, and nothing that ends the workflow
        -- (a cancel, the reaper, deadline expiry) fails on its payload.
        v_payload := (p_run.payload || coalesce(v_final->'payload', '{}'::jsonb))
                     || jsonb_build_object('outcome', jsonb_strip_nulls(p_outcome));
        if octet_length(v_payload::text) > v_limit or workflow.json_too_deep(v_payload) then
            v_payload := jsonb_build_object('outcome', jsonb_strip_nulls(jsonb_build_object(
                'status', p_outcome->>'status', 'reason', p_outcome->>'reason', 'step', p_outcome->>'step',
                'error', left(p_outcome->>'error', 1000))));
        end if;
    end if;
    insert into workflow.workflow_run (type, payload, priority, idempotency_key, max_attempts,
                                       retry_base_delay, retry_max_delay, parent_id, parent_step, deadline_at,
                                       traceparent, namespace, type_namespace)
    values (v_final->>'type', v_payload, p_run.priority, 'dag:' || p_run.id::text || ':' || (v_final->>'name'),
            coalesce((v_final->>'maxAttempts')::integer, 3),
            make_interval(secs => (v_final->>'retryBaseDelayMs')::bigint / 1000.0),
            make_interval(secs => (v_final->>'retryMaxDelayMs')::bigint / 1000.0),
            p_run.id, v_final->>'name', null, p_run.traceparent, p_run.namespace,
            coalesce(v_final->>'typeNamespace', p_run.type_namespace))
    on conflict do nothing;
    return true;
end $$;

-- dag_fail fails a DAG run with an error: at once when it has no final
-- step; otherwise its final step starts with the failure as its outcome,
-- its other unfinished steps are cancelled, and the run ends when the final
-- step does (dag_advance).
-- Fires: what dag_end fires, or workflow_run_inserted and
-- workflow_run_cancelled (the steps).
create or replace function workflow.dag_fail(p_run workflow.workflow_run, p_error text, p_data jsonb) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_outer text := coalesce(current_setting('workflow.cancel_reason', true), '');
    v_by text := coalesce(current_setting('workflow.cancelled_by', true), '');
begin
    -- Past the workflow's deadline, it ends now; on_parent_ended starts
    -- its final step after it.
    if p_run.deadline_at is not null and p_run.deadline_at <= workflow.now() then
        perform workflow.dag_end(p_run, 'failed', null, p_error, p_data);
        return;
    end if;
    if not workflow.dag_finally(p_run, jsonb_build_object('status', 'failed', 'error', p_error,
                                                            'reason', p_data->>'reason', 'step', p_data->>'step'),
                                p_run.deadline_at) then
        -- (a final step that did not start: its type is not shared)
        perform workflow.dag_end(p_run, 'failed', null,
            p_error || case when workflow.dag_final_step(p_run.dag) is null then ''
                            else format(' (final step "%s" did not run: its type is not shared with namespace %s)',
                                        workflow.dag_final_step(p_run.dag)->>'name', p_run.namespace) end,
            p_data);
        return;
    end if;
    perform set_config('workflow.cancel_reason', 'requested', true);
    perform set_config('workflow.cancelled_by', 'its workflow, which is failing (' || left(p_error, 200) || ')', true);
    update workflow.workflow_run c
    set status = 'cancelled', updated_at = (select workflow.now())
    where c.parent_id = p_run.id and c.status in ('pending', 'leased')
      and c.parent_step <> workflow.dag_final_step(p_run.dag)->>'name';
    perform set_config('workflow.cancel_reason', v_outer, true);
    perform set_config('workflow.cancelled_by', v_by, true);
end $$;

-- dag_succeed ends a DAG run whose steps all succeeded with their results
-- ({"steps": {name: result}}), or fails it when they are too large or deep
-- to be a result.
-- Fires: what dag_end fires.
create or replace function workflow.dag_succeed(p_run workflow.workflow_run, p_results jsonb, p_steps integer)
returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_result jsonb := jsonb_build_object('steps', p_results);
begin
    if octet_length(v_result::text) > 1048576 then
        perform workflow.dag_end(p_run, 'failed', null,
            format('the steps'' results together are %s bytes; a result is at most 1048576', octet_length(v_result::text)),
            jsonb_build_object('reason', 'result_too_large'));
    elsif workflow.json_too_deep(v_result) then
        perform workflow.dag_end(p_run, 'failed', null,
            'the steps'' results together nest deeper than 64 levels, the most a result may',
            jsonb_build_object('reason', 'result_too_deep'));
    else
        perform workflow.dag_end(p_run, 'succeeded', v_result, null, jsonb_build_object('steps', p_steps));
    end if;
end $$;

-- dag_unshared_step names the first step of a DAG run that runs another
-- namespace's type (typeNamespace) not shared with the run's namespace, or
-- null. A step without typeNamespace (or naming the run's own namespace or
-- its workflow's) runs a type of the workflow's namespace, as the
-- workflow itself does. Only definitions that name a typeNamespace read
-- the registry.
create or replace function workflow.dag_unshared_step(p_run workflow.workflow_run) returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
begin
    if not jsonb_path_exists(p_run.dag, '$.steps[*].typeNamespace') then
        return null;
    end if;
    return (select s->>'name'
            from jsonb_array_elements(p_run.dag->'steps') with ordinality x(s, i)
            where s ? 'typeNamespace'
              and s->>'typeNamespace' not in (p_run.namespace, p_run.type_namespace)
              and not workflow.type_shared(s->>'typeNamespace', s->>'type', p_run.namespace)
            order by x.i
            limit 1);
end $$;

-- dag_final_started ends a DAG run p_run whose final step (p_final) has
-- started, once that step ended: failed when a step before it or the final
-- step itself failed (the first failure's reason), succeeded otherwise,
-- with the other steps' results. It returns whether the final step has
-- started: the DAG's other steps are then done with, and nothing more
-- starts.
-- Fires: what dag_end and dag_succeed fire. Locks: nothing more.
create or replace function workflow.dag_final_started(p_run workflow.workflow_run, p_final jsonb) returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
set jit = off
set enable_seqscan = off
set enable_nestloop = on
as $$
declare
    v_run workflow.workflow_run := p_run;
    v_final jsonb := p_final;
    v_fin record;
    v_results jsonb;
    v_ok integer;
begin
    select c.id, c.type, c.status, c.last_error, c.payload->'outcome' as outcome into v_fin
    from workflow.workflow_run c
    where c.parent_id = v_run.id and c.parent_step = v_final->>'name';
    if found then
        if v_fin.status in ('succeeded', 'failed', 'cancelled') then
            if v_fin.outcome->>'status' is distinct from 'succeeded' then
                perform workflow.dag_end(v_run, 'failed', null,
                    coalesce(v_fin.outcome->>'error', 'a step failed'),
                    jsonb_strip_nulls(jsonb_build_object('reason', coalesce(v_fin.outcome->>'reason', 'step_failed'),
                        'step', v_fin.outcome->>'step', 'final_step', v_final->>'name',
                        'final_step_status', v_fin.status)));
            elsif v_fin.status <> 'succeeded' then
                perform workflow.dag_end(v_run, 'failed', null,
                    format('final step "%s" (%s) %s: %s', v_final->>'name', v_fin.type,
                           case v_fin.status when 'failed' then 'failed' else 'was cancelled' end,
                           left(coalesce(v_fin.last_error, v_fin.status), 4000)),
                    jsonb_build_object('reason', 'step_failed', 'step', v_final->>'name',
                                       'step_run_id', v_fin.id, 'step_status', v_fin.status));
            else
                select coalesce(jsonb_object_agg(st.name, coalesce(st.result, 'null'::jsonb)), '{}'::jsonb), count(*)
                into v_results, v_ok
                from workflow.dag_step_states(v_run) st
                where st.status = 'succeeded';
                perform workflow.dag_succeed(v_run, v_results, v_ok);
            end if;
        end if;
        return true;
    end if;
    return false;
end $$;

-- dag_step_failed fails DAG run p_run when one of its steps failed or was
-- cancelled (fanned out, when one of its elements did; the first to end
-- decides the reason), and says whether it did.
-- Fires: what dag_fail fires. Locks: nothing more.
create or replace function workflow.dag_step_failed(p_run workflow.workflow_run) returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
set jit = off
set enable_seqscan = off
set enable_nestloop = on
as $$
declare
    v_run workflow.workflow_run := p_run;
    v_bad record;
begin
    -- A step that failed (or, fanned out, an element that failed it). A
    -- DAG that fanned out nothing reads its steps' runs directly.
    if v_run.dag_fanout is null then
        select c.id, c.parent_step as name, null::text as element, c.type, c.status, c.last_error into v_bad
        from workflow.child_runs(v_run.id) c
        where c.status in ('failed', 'cancelled')
        order by c.finished_at, c.parent_step
        limit 1;
    else
        select st.run_id as id, st.name, st.element, st.type, st.status, st.last_error into v_bad
        from workflow.dag_step_states(v_run) st
        where st.status in ('failed', 'cancelled')
        order by st.finished_at, st.name
        limit 1;
    end if;
    if found then
        perform workflow.dag_fail(v_run,
            format('step "%s"%s (%s) %s: %s', v_bad.name,
                   case when v_bad.element is not null then ' element ' || substring(v_bad.element from '\[([0-9]+)\]$') else '' end,
                   v_bad.type, case v_bad.status when 'failed' then 'failed' else 'was cancelled' end,
                   left(coalesce(v_bad.last_error, v_bad.status), 4000)),
            jsonb_strip_nulls(jsonb_build_object('reason', 'step_failed', 'step', v_bad.name, 'element', v_bad.element,
                                                 'step_run_id', v_bad.id, 'step_status', v_bad.status)));
        return true;
    end if;

    return false;
end $$;

-- dag_fan_out starts the runs of one fanned-out step (p_fan: its name,
-- type, payload, attempts, delays, forEach path, type namespace and input)
-- of DAG run p_run: one run per element of the list the path selects,
-- named <step>[<index>], each with the step's payload plus "item" and
-- "index", and records the step's width in dag_fanout. It returns the run
-- as updated, or null when it failed the run instead: a path that cannot
-- be evaluated or selects no list, more than 1000 elements (for the step,
-- or for the workflow's fan-outs in all), elements carrying more than 16
-- payloads' limit (p_limit) together, or an element's payload over the
-- limit or nested too deep.
-- Fires: workflow_run_inserted (the runs), or what dag_fail fires.
-- Locks: nothing more.
create or replace function workflow.dag_fan_out(p_run workflow.workflow_run, p_fan record, p_limit bigint)
returns workflow.workflow_run
language plpgsql
set search_path = pg_catalog, pg_temp
set jit = off
set enable_seqscan = off
set enable_nestloop = on
as $$
declare
    v_run workflow.workflow_run := p_run;
    v_fan record := p_fan;
    v_limit bigint := p_limit;
    v_list jsonb;
    v_error text;
    v_bad record;
begin
    select p.value, p.error into v_list, v_error
    from workflow.dag_path_value(v_fan.input, v_fan.expr, false) p;
    if v_error is not null or v_list is null or jsonb_typeof(v_list) <> 'array'
       or jsonb_array_length(v_list) > 1000 then
        perform workflow.dag_fail(v_run,
            case when v_error is not null
                 then format('forEach of step "%s" could not be evaluated: %s', v_fan.name, v_error)
                 when v_list is not null and jsonb_typeof(v_list) = 'array'
                 then format('forEach of step "%s" selected %s elements; a step fans out to at most 1000',
                             v_fan.name, jsonb_array_length(v_list))
                 else format('forEach of step "%s" (%s) selected %s, not a list', v_fan.name, left(v_fan.expr, 200),
                             coalesce(jsonb_typeof(v_list), 'nothing')) end,
            jsonb_build_object('reason', 'for_each_invalid', 'step', v_fan.name));
        return null;
    end if;
    -- A workflow fans out to at most 1000 runs in all, whatever
    -- its number of steps: one small insert never becomes tens
    -- of thousands of runs.
    if v_run.dag_fanout is not null
       and (select sum(x.n::integer) from jsonb_each_text(v_run.dag_fanout) x(k, n)) + jsonb_array_length(v_list) > 1000 then
        perform workflow.dag_fail(v_run,
            format('step "%s" would bring the workflow''s fanned-out runs to %s; a workflow fans out to at most 1000 runs in all',
                   v_fan.name,
                   (select sum(x.n::integer) from jsonb_each_text(v_run.dag_fanout) x(k, n)) + jsonb_array_length(v_list)),
            jsonb_build_object('reason', 'for_each_invalid', 'step', v_fan.name));
        return null;
    end if;
    -- The elements together, of this step and of the workflow's
    -- other fanned-out steps, are at most 16 times a payload's
    -- limit: a fan-out never multiplies one producer's payload a
    -- thousand times over.
    if jsonb_array_length(v_list) * octet_length(v_fan.payload::text) + octet_length(v_list::text)
       + (case when v_run.dag_fanout is null then 0
               else coalesce((select sum(octet_length(c.payload::text)) from workflow.child_runs(v_run.id) c
                              where c.parent_step ~ '\[[0-9]+\]$'), 0) end) > 16 * v_limit then
        perform workflow.dag_fail(v_run,
            format('the %s elements of step "%s" would carry %s bytes of payload in all%s; a workflow''s fan-outs carry at most %s (16 payloads)',
                   jsonb_array_length(v_list), v_fan.name,
                   jsonb_array_length(v_list) * octet_length(v_fan.payload::text) + octet_length(v_list::text),
                   case when v_run.dag_fanout is not null then ', beside its other fanned-out runs' else '' end,
                   16 * v_limit),
            jsonb_build_object('reason', 'payload_too_large', 'step', v_fan.name));
        return null;
    end if;
    select e.i - 1 as idx, octet_length((v_fan.payload || jsonb_build_object('item', e.item, 'index', e.i - 1))::text) as bytes
    into v_bad
    from jsonb_array_elements(v_list) with ordinality e(item, i)
    where octet_length((v_fan.payload || jsonb_build_object('item', e.item, 'index', e.i - 1))::text) > v_limit
       or workflow.json_too_deep(v_fan.payload || jsonb_build_object('item', e.item, 'index', e.i - 1))
    limit 1;
    if found then
        perform workflow.dag_fail(v_run,
            format('the payload of element %s of step "%s" would be %s bytes or nest deeper than 64 levels; the limit is %s bytes',
                   v_bad.idx, v_fan.name, v_bad.bytes, v_limit),
            jsonb_build_object('reason', 'payload_too_large', 'step', v_fan.name));
        return null;
    end if;
    insert into workflow.workflow_run (type, payload, priority, idempotency_key, max_attempts,
                                       retry_base_delay, retry_max_delay, parent_id, parent_step, deadline_at,
                                       traceparent, namespace, type_namespace)
    select v_fan.type, v_fan.payload || jsonb_build_object('item', e.item, 'index', e.i - 1), v_run.priority,
           'dag:' || v_run.id::text || ':' || v_fan.name || '[' || (e.i - 1) || ']', v_fan.max_attempts,
           v_fan.base_delay, v_fan.max_delay, v_run.id, v_fan.name || '[' || (e.i - 1) || ']', v_run.deadline_at,
           v_run.traceparent, v_run.namespace, v_fan.tns
    from jsonb_array_elements(v_list) with ordinality e(item, i)
    order by e.i
    on conflict do nothing;
    update workflow.workflow_run r
    set dag_fanout = coalesce(r.dag_fanout, '{}') || jsonb_build_object(v_fan.name, jsonb_array_length(v_list)),
        updated_at = (select workflow.now())
    where r.id = v_run.id
    returning * into v_run;
    return v_run;
end $$;

-- dag_all_done ends DAG run p_run when every step but the final one
-- succeeded or was skipped (p_ok of them succeeded, with p_results): it
-- succeeds with the results, or, with a final step (p_final), the final
-- step starts (dag_finally) unless the results are over a result's limits
-- or its type is no longer shared, which fail the run. Returns whether it
-- ended or moved the run.
-- Fires: what dag_succeed, dag_fail, dag_finally and dag_end fire.
-- Locks: nothing more.
create or replace function workflow.dag_all_done(p_run workflow.workflow_run, p_results jsonb, p_ok integer,
                                                 p_final jsonb) returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
set jit = off
set enable_seqscan = off
set enable_nestloop = on
as $$
declare
    v_run workflow.workflow_run := p_run;
    v_results jsonb := p_results;
    v_ok integer := p_ok;
    v_final jsonb := p_final;
    v_total integer;
begin
    v_total := jsonb_array_length(v_run.dag->'steps') - case when v_final is null then 0 else 1 end;
    if v_ok + cardinality(coalesce(v_run.dag_skipped, '{}')) is distinct from v_total then
        return false;
    end if;
    if v_final is null then
        perform workflow.dag_succeed(v_run, v_results, v_total);
    elsif octet_length(jsonb_build_object('steps', v_results)::text) > 1048576
          or workflow.json_too_deep(jsonb_build_object('steps', v_results)) then
        -- The results cannot be the workflow's: it fails, and its final
        -- step is told so.
        perform workflow.dag_fail(v_run,
            'the steps'' results together are over 1048576 bytes or nest deeper than 64 levels, the most a result may',
            jsonb_build_object('reason', 'result_too_large'));
    elsif not workflow.dag_finally(v_run, jsonb_build_object('status', 'succeeded'), null) then
        -- (its share was revoked since dag_unshared_step looked)
        perform workflow.dag_end(v_run, 'failed', null,
            format('step "%s" runs a type that is not shared with namespace %s', v_final->>'name', v_run.namespace),
            jsonb_build_object('reason', 'type_not_shared', 'step', v_final->>'name'));
    end if;
    return true;
end $$;

-- dag_advance moves a DAG run on after one of its steps changed: a failed
-- or cancelled step fails the run; all steps succeeded ends it with their
-- results ({"steps": {name: result}}, within a result's limits); otherwise
-- the ready steps are inserted as child runs (a step's payload over the
-- limits fails the run instead). With a final step, "ends" means the final
-- step starts with the outcome in its input (dag_finally, dag_fail), and
-- the run ends when it does: succeeded when the other steps and the final
-- step succeeded, failed otherwise (the first failure's reason).
-- Its steps: the final step's end (dag_final_started), a type no longer
-- shared, a failed step (dag_step_failed), the fan-outs (dag_fan_out) and
-- conditions of the ready steps, the end when all are done (dag_all_done),
-- then the ready steps started.
-- Fires: workflow_run_inserted (the steps), or what dag_end fires.
-- Locks: the DAG run (the callers that end steps locked it first).
create or replace function workflow.dag_advance(p_run uuid) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
set jit = off
-- The callers that end steps run with generic plans and nested loops off,
-- which this function would inherit: its reads of a DAG's steps by parent
-- were then planned as scans of every run (decision 0008). Index scans and
-- nested loops here.
set enable_seqscan = off
set enable_nestloop = on
as $$
declare
    v_via text := workflow.set_marks();
    v_run workflow.workflow_run;
    v_limit bigint := (select st.max_payload_bytes from workflow.workflow_settings st);
    v_bad record;
    v_final jsonb;
    v_results jsonb;
    v_ok integer;
    v_cond record;
    v_holds boolean;
    v_skipped_any boolean;
    v_fan record;
    v_error text;
    v_held text[] := '{}';
begin
    <<marked>>
    begin
        select * into v_run from workflow.workflow_run r where r.id = p_run for update;
        if not found or v_run.status <> 'pending' or v_run.dag is null then
            exit marked;
        end if;
        v_final := workflow.dag_final_step(v_run.dag);

        -- The final step started: the run ends when it does.
        if v_final is not null then
            if workflow.dag_final_started(v_run, v_final) then
                exit marked;
            end if;
        end if;

        -- A step of another namespace's type (typeNamespace) that this
        -- namespace may not run: the workflow fails before it starts, or as
        -- soon as a share is revoked (steps already running go on).
        v_error := workflow.dag_unshared_step(v_run);
        if v_error is not null then
            perform workflow.dag_fail(v_run,
                format('step "%s" runs a type that is not shared with namespace %s', v_error, v_run.namespace),
                jsonb_build_object('reason', 'type_not_shared', 'step', v_error));
            exit marked;
        end if;

        -- A step that failed (or, fanned out, an element that failed it).
        if workflow.dag_step_failed(v_run) then
            exit marked;
        end if;

        if v_run.dag_fanout is null then
            select coalesce(jsonb_object_agg(c.parent_step, coalesce(c.result, 'null'::jsonb)), '{}'::jsonb), count(*)
            into v_results, v_ok
            from workflow.child_runs(p_run) c
            where c.status = 'succeeded';
        else
            select coalesce(jsonb_object_agg(st.name, coalesce(st.result, 'null'::jsonb)), '{}'::jsonb), count(*)
            into v_results, v_ok
            from workflow.dag_step_states(v_run) st
            where st.status = 'succeeded';
        end if;

        -- Ready steps with a condition ("when", an SQL/JSON path predicate over
        -- {"payload": the workflow's payload, "steps": {dependency: {"status":
        -- "succeeded" | "skipped", "result": ...}}}): false (or no boolean)
        -- skips the step, which counts as done for what depends on it; an
        -- error fails the workflow. Skipping may make more steps ready.
        -- (Only a definition with a condition or a fan-out has work here.)
        loop
            exit when not jsonb_path_exists(v_run.dag, '$.steps[*] ? (exists (@.when) || exists (@.forEach))');
            v_skipped_any := false;
            -- Steps with forEach fan out: one run per element of the list their
            -- path selects (at most 1000), named <step>[<index>], each with the
            -- step's payload plus "item" and "index".
            for v_fan in
                select r.name, r.type, r.payload, r.max_attempts, r.base_delay, r.max_delay, r.def->>'forEach' as expr,
                       coalesce(r.def->>'typeNamespace', v_run.type_namespace) as tns,
                       workflow.dag_step_input(v_run, v_results, r.def) as input
                from workflow.dag_ready_steps(v_run, v_results) r
                where r.def ? 'forEach'
                  and (not r.def ? 'when' or r.name = any (v_held)) -- a condition is decided first (below)
            loop
                v_run := workflow.dag_fan_out(v_run, v_fan, v_limit);
                if v_run is null then
                    exit marked;
                end if;
                if (v_run.dag_fanout->>v_fan.name)::integer = 0 then
                    v_skipped_any := true; -- done at once, with []: what depends on it may be ready
                end if;
            end loop;
            if v_skipped_any then
                select coalesce(jsonb_object_agg(st.name, coalesce(st.result, 'null'::jsonb)), '{}'::jsonb), count(*)
                into v_results, v_ok
                from workflow.dag_step_states(v_run) st
                where st.status = 'succeeded';
                continue;
            end if;
            for v_cond in
                select r.name, r.def->>'when' as expr, r.def ? 'forEach' as fans_out,
                       workflow.dag_step_input(v_run, v_results, r.def) as input
                from workflow.dag_ready_steps(v_run, v_results) r
                where r.def ? 'when' and not r.name = any (v_held)
            loop
                select p.value::boolean, p.error into v_holds, v_error
                from workflow.dag_path_value(v_cond.input, v_cond.expr, true) p;
                if v_error is not null then
                    perform workflow.dag_fail(v_run,
                        format('the condition of step "%s" could not be evaluated: %s', v_cond.name, v_error),
                        jsonb_build_object('reason', 'condition_error', 'step', v_cond.name));
                    exit marked;
                end if;
                if not coalesce(v_holds, false) then
                    update workflow.workflow_run r
                    set dag_skipped = coalesce(r.dag_skipped, '{}') || v_cond.name, updated_at = (select workflow.now())
                    where r.id = p_run
                    returning * into v_run;
                    v_skipped_any := true;
                else
                    v_held := v_held || v_cond.name; -- it holds: started below (a forEach fans out next pass)
                    v_skipped_any := v_skipped_any or v_cond.fans_out;
                end if;
            end loop;
            exit when not v_skipped_any;
        end loop;

        if workflow.dag_all_done(v_run, v_results, v_ok, v_final) then
            exit marked;
        end if;

        -- The ready steps, read once: they start, unless one of them would
        -- have a payload too large or too deep; then none starts and the run
        -- fails.
        with ready as materialized (
            select r.*, octet_length(r.payload::text) as bytes
            from workflow.dag_ready_steps(v_run, v_results) r
        ), bad as (
            select x.name, x.bytes, x.bytes <= v_limit as fits
            from ready x
            where x.bytes > v_limit or workflow.json_too_deep(x.payload)
            limit 1
        ), started as (
            insert into workflow.workflow_run (type, payload, priority, idempotency_key, max_attempts,
                                               retry_base_delay, retry_max_delay, parent_id, parent_step, deadline_at,
                                               traceparent, namespace, type_namespace)
            select r.type, r.payload, v_run.priority, 'dag:' || p_run::text || ':' || r.name, r.max_attempts,
                   r.base_delay, r.max_delay, p_run, r.name, v_run.deadline_at, v_run.traceparent, v_run.namespace,
                   coalesce(r.def->>'typeNamespace', v_run.type_namespace)
            from ready r
            where not exists (select 1 from bad)
              and not r.def ? 'forEach' and (not r.def ? 'when' or r.name = any (v_held))
            on conflict do nothing
            returning 1
        )
        select b.name, b.bytes, b.fits into v_bad from bad b;
        if found and not v_bad.fits then
            perform workflow.dag_fail(v_run,
                format('the payload of step "%s" would be %s bytes; the limit is %s (workflow_settings.max_payload_bytes)',
                       v_bad.name, v_bad.bytes, v_limit),
                jsonb_build_object('reason', 'payload_too_large', 'step', v_bad.name));
            exit marked;
        elsif found then
            perform workflow.dag_fail(v_run,
                format('the payload of step "%s" would nest deeper than 64 levels, the most a payload may', v_bad.name),
                jsonb_build_object('reason', 'payload_too_deep', 'step', v_bad.name));
            exit marked;
        end if;
    end;
    perform workflow.restore_marks(v_via);
end $$;

-- dags_advance moves DAG runs on together (p_runs: DAG runs whose steps
-- changed; those not pending are left alone). The DAGs whose definitions
-- are plain (no condition, fan-out or other namespace's type) move in
-- set-based statements: one whose steps all succeeded ends with their
-- results (within a result's limits), the others start their ready steps,
-- every DAG's in one insert. The rest go to dag_advance one by one, in id
-- order: DAGs that are not plain, every DAG whose move is a failure (a
-- step failed, a ready step's payload or the results over the limits),
-- and a DAG with a final step once its other steps are done (the final
-- step starts, or has, and decides the end).
-- Fires: workflow_run_inserted (the steps), the triggers of the DAG runs
-- that end (workflow_child_finished, workflow_source_run_changed), and what
-- dag_advance fires.
-- Locks: the DAG runs (the callers locked them first), in id order.
create or replace function workflow.dags_advance(p_runs uuid[]) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
set jit = off
-- Index scans and nested loops, as dag_advance (its callers plan with
-- nested loops off).
set enable_seqscan = off
set enable_nestloop = on
as $$
declare
    v_via text := workflow.set_marks();
    v_now timestamptz := workflow.now();
    v_limit bigint := (select st.max_payload_bytes from workflow.workflow_settings st);
    v_one uuid[];
    v_ids uuid[];
    v_results jsonb[];
    v_kinds text[];
    v_slow uuid[];
    v_id uuid;
begin
    -- Plain DAGs, with what their steps say; the others one by one.
    select array_agg(r.id order by r.id) filter (where not x.plain)
    into v_one
    from workflow.workflow_run r
    cross join lateral (select r.dag_fanout is null and r.dag_skipped is null
                               and not jsonb_path_exists(r.dag, '$.steps[*] ? (exists (@.when) || exists (@.forEach)
                                                                               || exists (@.typeNamespace))')
                               as plain) x
    where r.id = any (p_runs) and r.status = 'pending' and r.dag is not null;
    select array_agg(k.id order by k.id), array_agg(k.results order by k.id),
           array_agg(case when k.bad > 0 or k.final_started > 0 then 'one'
                          when k.ok < k.total then 'next'
                          when k.final is not null then 'one'
                          when octet_length(jsonb_build_object('steps', k.results)::text) > 1048576
                               or workflow.json_too_deep(jsonb_build_object('steps', k.results)) then 'one'
                          else 'end' end order by k.id)
    into v_ids, v_results, v_kinds
    from (
        select r.id, f.name as final,
               jsonb_array_length(r.dag->'steps') - case when f.name is null then 0 else 1 end as total,
               coalesce(jsonb_object_agg(c.parent_step, coalesce(c.result, 'null'::jsonb))
                            filter (where c.status = 'succeeded' and c.parent_step is distinct from f.name),
                        '{}'::jsonb) as results,
               count(c.id) filter (where c.status = 'succeeded' and c.parent_step is distinct from f.name) as ok,
               count(c.id) filter (where c.status in ('failed', 'cancelled')) as bad,
               count(c.id) filter (where c.parent_step = f.name) as final_started
        from workflow.workflow_run r
        cross join lateral (select workflow.dag_final_step(r.dag)->>'name' as name) f
        left join lateral workflow.child_runs(r.id) c on true
        where r.id = any (p_runs) and r.status = 'pending' and r.dag is not null
          and not r.id = any (coalesce(v_one, '{}'))
        group by r.id, f.name
    ) k;

    -- Ended: every step succeeded. (Each statement below runs only when it
    -- has rows to write: an UPDATE or INSERT of the run table costs its
    -- plan's start, every index opened, even for no rows.)
    if 'end' = any (v_kinds) then
        with ended as (
            update workflow.workflow_run r
            set status = 'succeeded', result = jsonb_build_object('steps', u.results), last_error = null,
                wait_kind = null, wait_step = null, wait_signal = null, finished_at = v_now, updated_at = v_now
            from unnest(v_ids, v_results, v_kinds) u(id, results, kind)
            where u.kind = 'end' and r.id = u.id
            returning r.id, (select count(*) from jsonb_object_keys(u.results)) as steps
        )
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select e.id, 'succeeded', jsonb_build_object('steps', e.steps) from ended e;
    end if;

    -- The ready steps of every DAG that goes on, read once: they start,
    -- unless one of a DAG's would have a payload too large or too deep;
    -- then none of that DAG's starts and it goes to dag_advance, to fail.
    if 'next' = any (v_kinds) then
        with ready as materialized (
            select d.id as run_id, d.priority, d.deadline_at, d.traceparent, d.namespace, d.type_namespace,
                   s.name, s.type, s.payload, s.max_attempts, s.base_delay, s.max_delay,
                   octet_length(s.payload::text) as bytes
            from unnest(v_ids, v_results, v_kinds) u(id, results, kind)
            join workflow.workflow_run d on d.id = u.id
            cross join lateral workflow.dag_ready_steps(d, u.results) s
            where u.kind = 'next'
        ), bad as (
            select distinct x.run_id from ready x
            where x.bytes > v_limit or workflow.json_too_deep(x.payload)
        ), started as (
            insert into workflow.workflow_run (type, payload, priority, idempotency_key, max_attempts,
                                               retry_base_delay, retry_max_delay, parent_id, parent_step, deadline_at,
                                               traceparent, namespace, type_namespace)
            select r.type, r.payload, r.priority, 'dag:' || r.run_id::text || ':' || r.name, r.max_attempts,
                   r.base_delay, r.max_delay, r.run_id, r.name, r.deadline_at, r.traceparent, r.namespace,
                   r.type_namespace
            from ready r
            where not r.run_id in (select b.run_id from bad b)
            order by r.run_id, r.name
            on conflict do nothing
            returning 1
        )
        select array_agg(b.run_id) into v_slow from bad b;
    end if;

    for v_id in
        select x from unnest(coalesce(v_one, '{}') || coalesce(v_slow, '{}')
                             || coalesce(array(select u.id from unnest(v_ids, v_kinds) u(id, kind)
                                               where u.kind = 'one'), '{}')) x
        order by x
    loop
        perform workflow.dag_advance(v_id);
    end loop;
    perform workflow.restore_marks(v_via);
end $$;

-- run_sources names the Kubernetes objects the given runs were mirrored
-- from (the ids of workflow_run_changed notifications; at most 10,000, ids
-- that are not uuids left out). For the operator, which runs as the owner.
create or replace function workflow.run_sources(p_ids text[])
returns table (id text, source_namespace text, source_name text, source_uid text)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select r.id::text, r.source_namespace, r.source_name, coalesce(r.source_uid, '')
    from workflow.workflow_run r
    where r.id = any (array(select x::uuid from unnest(p_ids) x
                            where x ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                            limit 10000))
      and r.source_name is not null
$$;

-- A DAG step's change tells the operator about its DAG run (NOTIFY
-- workflow_run_changed with the DAG run's id), so the WorkflowRun's step
-- list is written back.
create or replace function workflow.on_dag_step_changed() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    perform 1 from workflow.workflow_run p
    where p.id = new.parent_id and p.dag is not null and p.source_name is not null;
    if found then
        perform pg_notify('workflow_run_changed', new.parent_id::text);
    end if;
    return null;
end $$;
create or replace trigger workflow_dag_step_changed after update on workflow.workflow_run
    for each row when (new.parent_id is not null
                       and (old.status is distinct from new.status or old.attempt is distinct from new.attempt))
    execute function workflow.on_dag_step_changed();


-- ===========================================================================
-- 6. MAINTENANCE: WHAT NOBODY ELSE WILL FINISH
-- ===========================================================================

-- reap_expired_leases ends leases whose holder stopped heartbeating: the
-- run is pending again (its attempt spent) or failed when it has none left,
-- with reason lease_expired. Called by the manager's leader and by workers
-- (a worker login reaps the runs of the namespaces it works for only).
-- Then flow_recheck lets go runs parked on a limit whose key has room.
-- Fires: workflow_child_finished, workflow_parent_ended (runs that failed),
-- workflow_run_flow_slot_freed, workflow_source_run_changed.
-- Locks: the parents of the runs it reaps in id order, then the runs
-- (skipping locked ones), oldest lease first; then what flow_recheck locks.
create or replace function workflow.reap_expired_leases(p_limit integer) returns table (id uuid, status text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    v_now timestamptz := workflow.now();
    v_via text := workflow.set_marks();
begin
    -- A worker login reaps the namespaces it works for; the owner every one
    -- (the tests below are computed once per statement).
    perform workflow.lock_parents(array(
        select r.id from workflow.workflow_run r
        where r.status = 'leased' and r.lease_until < v_now and r.parent_id is not null
          and ((select workflow.session_is_owner())
               or r.type_namespace = any ((select workflow.caller_namespaces('worker'))::text[]))
        order by r.lease_until
        limit p_limit));
    return query
    with expired as (
        select r.id, r.leased_by, r.lease_until
        from workflow.workflow_run r
        where r.status = 'leased' and r.lease_until < v_now
          and ((select workflow.session_is_owner())
               or r.type_namespace = any ((select workflow.caller_namespaces('worker'))::text[]))
        order by r.lease_until
        limit p_limit
        for update skip locked
    ), reaped as (
        update workflow.workflow_run r
        set status      = case when r.attempt < r.max_attempts then 'pending' else 'failed' end,
            run_at      = case when r.attempt < r.max_attempts then v_now else r.run_at end,
            last_error  = format('lease expired: worker %s stopped heartbeating', e.leased_by),
            leased_by   = case when r.attempt < r.max_attempts then null else r.leased_by end,
            lease_until = null,
            finished_at = case when r.attempt < r.max_attempts then null else v_now end,
            updated_at  = v_now
        from expired e where r.id = e.id
        returning r.id, r.status, r.attempt, r.max_attempts, e.leased_by, e.lease_until
    ), events as (
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select x.id,
               case when x.status = 'pending' then 'retried' else 'failed' end,
               jsonb_build_object('reason', 'lease_expired', 'worker_id', x.leased_by,
                                  'attempt', x.attempt, 'max_attempts', x.max_attempts,
                                  'lease_until', x.lease_until)
        from reaped x
    )
    select x.id, x.status from reaped x;
    -- Parked runs whose key has room again (see FLOW LIMITS).
    perform workflow.flow_recheck(p_limit);
    perform workflow.restore_marks(v_via);
end $$;

-- expire_deadlines fails unfinished runs whose deadline passed (all of
-- them, or those of p_ids), at most p_limit, fairly across types (the
-- oldest deadline of each type first), with reason deadline_exceeded. A
-- worker login fails those of the namespaces it works for only.
-- Fires: workflow_run_cancelled is not fired (failed, not cancelled);
-- workflow_child_finished, workflow_parent_ended, workflow_source_run_changed.
-- Locks: the parents of the runs it expires in id order, then the runs
-- (skipping locked ones).
create or replace function workflow.expire_deadlines(
    p_ids uuid[],
    p_limit integer
) returns table (id uuid, previous_status text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    v_now timestamptz := workflow.now();
    v_via text;
    v_ids uuid[];
begin
    -- A worker login fails the runs of the namespaces it works for; the
    -- owner every one (the test is computed once per statement).
    select array_agg(d.id) into v_ids
    from (
        select o.id
        from (select r.id, r.deadline_at,
                     row_number() over (partition by r.type order by r.deadline_at, r.id) as round
              from workflow.workflow_run r
              where r.deadline_at <= v_now
                and r.deadline_at is not null
                and r.status in ('pending', 'leased')
                and ((select workflow.session_is_owner())
                     or r.type_namespace = any ((select workflow.caller_namespaces('worker'))::text[]))
                and (p_ids is null or r.id = any (p_ids))) o
        order by o.round, o.deadline_at, o.id
        limit p_limit
    ) d;
    if v_ids is null then
        return;
    end if;
    v_via := workflow.set_marks();
    perform workflow.lock_parents(v_ids);
    return query
    with doomed as (
        select r.id, r.status, r.leased_by, r.wait_kind
        from workflow.workflow_run r
        where r.id = any (v_ids)
          and r.deadline_at <= v_now
          and r.status in ('pending', 'leased')
        for update skip locked
    ), expired as (
        update workflow.workflow_run r
        set status      = 'failed',
            last_error  = 'deadline exceeded',
            lease_until = null,
            wait_kind   = null,
            wait_step   = null,
            wait_signal = null,
            finished_at = v_now,
            updated_at  = v_now
        from doomed d where r.id = d.id
        returning r.id, r.attempt, r.deadline_at, d.status, d.leased_by, d.wait_kind
    ), events as (
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select x.id, 'failed',
               jsonb_strip_nulls(jsonb_build_object(
                   'reason', 'deadline_exceeded', 'error', 'deadline exceeded',
                   'deadline_at', x.deadline_at, 'previous_status', x.status,
                   'parked', x.wait_kind, 'attempt', x.attempt,
                   'worker_id', case when x.status = 'leased' then x.leased_by end))
        from expired x
    )
    select x.id, x.status from expired x;
    perform workflow.restore_marks(v_via);
end $$;

-- delete_finished_runs deletes up to p_limit runs that finished more than
-- p_retention ago (oldest first), except the steps of DAG runs, which go
-- with their DAG. Called by the manager's retention.
-- Fires: workflow_runs_deleted (journal, signals, and events kept in the
-- default partition; events in a time partition stay until
-- drop_history_partitions drops their partition).
-- Locks: the runs it deletes, skipping locked ones.
create or replace function workflow.delete_finished_runs(p_retention interval, p_limit integer) returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_was text := coalesce(current_setting('workflow.retention', true), '');
    v_n bigint;
begin
    perform set_config('workflow.retention', 'on', true);
    with doomed as (
        select r.ctid from workflow.workflow_run r
        where r.finished_at < workflow.now() - p_retention
          and r.status in ('succeeded', 'failed', 'cancelled')
          and (r.parent_id is null
               or not exists (select 1 from workflow.workflow_run p
                              where p.id = r.parent_id and p.dag is not null))
        order by r.finished_at
        limit p_limit
        for update skip locked
    ), deleted as (
        -- By the row's address: the row is locked (above) until the end of
        -- this statement, so it cannot move.
        delete from workflow.workflow_run r
        where r.ctid = any (array(select d.ctid from doomed d))
        returning 1
    )
    select count(*) into v_n from deleted;
    perform set_config('workflow.retention', v_was, true);
    return v_n;
end $$;


-- HISTORY PARTITIONS
--
-- The audit trail is partitioned by run id (section 1), one partition per
-- span of workflow_settings.history_partition (a day unless the owner sets
-- it), aligned to the epoch and named workflow_event_pYYYYMMDDtHHMMSS (its
-- start, UTC). The manager prepares the current span and the next ones,
-- and drops a partition whose span has ended once no run of it is left;
-- a partition that still holds runs a retention and a span after its end
-- (a run that lives for weeks) has those runs' trails moved to the default
-- partition first, so a long-lived run never keeps a day of history alive
-- and no reader sees a trail cut.

-- The smallest run id of a millisecond: ids begin with their creation time,
-- so a span of creation times is the range of ids between two of these.
-- Times before 1970 give the smallest id, times past the 48 bits' end
-- (year 10889) the largest millisecond's. One expression (32 hex digits
-- are a uuid without its dashes) and stable, as extract from a timestamptz
-- is: a body with a subquery, or more volatile than its function, is never
-- inlined, and the server then plans it again in every statement that
-- calls it.
create or replace function workflow.run_id_at(p_at timestamptz) returns uuid
language sql stable parallel safe
return (lpad(to_hex(least(greatest(floor(extract(epoch from p_at) * 1000), 0), 281474976710655)::bigint), 12, '0')
        || '00000000000000000000')::uuid;

-- The creation time a run id carries (new_run_id's first 48 bits).
create or replace function workflow.run_id_time(p_id uuid) returns timestamptz
language sql immutable parallel safe
return to_timestamp((('x' || substr(replace(p_id::text, '-', ''), 1, 12))::bit(48)::bigint) / 1000.0);

-- The start of the span of p_width that holds p_at (spans are aligned to
-- the epoch).
create or replace function workflow.history_span_start(p_at timestamptz, p_width interval) returns timestamptz
language sql stable parallel safe
return to_timestamp(floor(extract(epoch from p_at) / extract(epoch from p_width)) * extract(epoch from p_width));

-- The history span of width p_width that holds run p_id, and the run ids
-- that bound it (lo inclusive, hi exclusive): a run of the span is known
-- by two comparisons of its id, without reading its time (the batch rows
-- of claim_runs and complete_runs, for all runs of the span of their
-- oldest). The end is counted in seconds, as history_span_start counts: a
-- day added to a time would be a calendar day of the session's time zone.
-- A set of one row: only a function returning a set is inlined where it
-- stands in a FROM list.
create or replace function workflow.history_span_bounds(p_id uuid, p_width interval)
returns table (start timestamptz, lo uuid, hi uuid)
language sql stable parallel safe rows 1 as $$
    select s.start, workflow.run_id_at(s.start),
           workflow.run_id_at(to_timestamp(extract(epoch from s.start) + extract(epoch from p_width)))
    from (select workflow.history_span_start(workflow.run_id_time(p_id), p_width) as start) s
$$;

-- history_partitions lists the time partitions of the audit trail, oldest
-- first: the span of run creation times each holds (and the run ids that
-- bound it), whether any run of that span is still in workflow_run (one
-- probe of its primary key), and its size. Reads only.
create or replace function workflow.history_partitions()
returns table (partition_name text, from_time timestamptz, to_time timestamptz, runs_left boolean, bytes bigint,
               from_id uuid, to_id uuid)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select c.relname::text, workflow.run_id_time(b.lo), workflow.run_id_time(b.hi),
           exists (select 1 from workflow.workflow_run r where r.id >= b.lo and r.id < b.hi),
           pg_total_relation_size(c.oid), b.lo, b.hi
    from pg_inherits i
    join pg_class c on c.oid = i.inhrelid
    cross join lateral (
        select m[1]::uuid as lo, m[2]::uuid as hi
        from regexp_match(pg_get_expr(c.relpartbound, c.oid),
                          '^FOR VALUES FROM \(''([0-9a-f-]{36})''\) TO \(''([0-9a-f-]{36})''\)$') m
    ) b
    where i.inhparent = 'workflow.workflow_event'::regclass and b.lo is not null
    order by b.lo
$$;

-- create_history_partition makes the partition of the audit trail for runs
-- created in [p_from, p_to), or returns false, changing nothing, when the
-- range overlaps a partition or the default partition already holds events
-- of it (one probe of its primary key; they then stay there). The
-- partition is built apart with a check of its range, then attached, which
-- locks the trail only against other schema changes (SHARE UPDATE
-- EXCLUSIVE) but locks the default partition (ACCESS EXCLUSIVE) while
-- Postgres reads it to prove it holds nothing of the range: writes routed
-- to the default partition wait for that read, as long as the default
-- partition is large (after an upgrade, the whole trail kept from before,
-- until retention empties it). A span that has begun (or begins within a
-- minute) is attached with the trail locked against writes (SHARE, waiting
-- at most lock_timeout for the transactions writing to it to end; writers
-- wait for the attach): a statement already writing a run of that span
-- would have routed its events to the default partition and then fail its
-- narrowed constraint. Calls at once go one after the other: each first
-- locks the trail alone in SHARE UPDATE EXCLUSIVE mode, before its checks.
create or replace function workflow.create_history_partition(p_from timestamptz, p_to timestamptz) returns boolean
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_name text;
    v_lo uuid;
    v_hi uuid;
begin
    if p_from is null or p_to is null or not isfinite(p_from) or not isfinite(p_to) or not (p_from < p_to) then
        raise exception 'create_history_partition: the span must be finite and end after it starts, got [%, %)',
            p_from, p_to using errcode = 'SW001';
    end if;
    -- Taken first, on the trail alone, in the attach's own mode, which
    -- conflicts with itself and not with writers: two calls at once go one
    -- after the other, where a call that had read the default partition
    -- (the check below) held it against the other's attach (a deadlock,
    -- seen with the manager's prepare_history_partitions beside a call by
    -- hand).
    lock table only workflow.workflow_event in share update exclusive mode;
    v_name := 'workflow_event_p' || to_char(p_from at time zone 'UTC', 'YYYYMMDD"t"HH24MISS');
    v_lo := workflow.run_id_at(p_from);
    v_hi := workflow.run_id_at(p_to);
    if v_lo >= v_hi
       or exists (select 1 from workflow.history_partitions() p where p.from_time < p_to and p.to_time > p_from)
       or exists (select 1 from workflow.workflow_event_default d where d.workflow_id >= v_lo and d.workflow_id < v_hi) then
        return false;
    end if;
    -- A span that has begun (or begins within a minute) keeps writers out
    -- until it is attached: a statement already writing a run of it would
    -- route its events to the default partition meanwhile.
    if p_from < clock_timestamp() + interval '1 minute' then
        lock table workflow.workflow_event in share mode;
    end if;
    -- Written once and dropped whole: no vacuum for its inserts (autovacuum
    -- still analyzes it, and freezes it if it ever lives that long).
    execute format('create table workflow.%I (like workflow.workflow_event including defaults including constraints)
                    with (autovacuum_vacuum_insert_threshold = -1)', v_name);
    execute format('alter table workflow.%I add constraint %I check (workflow_id >= %L and workflow_id < %L)',
                   v_name, v_name || '_range', v_lo, v_hi);
    begin
        execute format('alter table workflow.workflow_event attach partition workflow.%I for values from (%L) to (%L)',
                       v_name, v_lo, v_hi);
    exception when check_violation then
        -- The default partition took events of this span meanwhile.
        execute format('drop table workflow.%I', v_name);
        return false;
    end;
    execute format('alter table workflow.%I drop constraint %I', v_name, v_name || '_range');
    return true;
end $$;

-- prepare_history_partitions makes sure the audit trail has a partition
-- for the span in progress and the p_ahead spans after it (spans of
-- workflow_settings.history_partition), walking from the span in progress:
-- a span a partition covers (one made with another span setting, or ahead
-- by hand) is stepped over, a gap is filled up to the next partition, and a
-- span whose runs already wrote into the default partition (nobody
-- prepared it in time) is left there. Returns how many it made. Called by
-- the manager on every retention tick.
-- Locks: see create_history_partition; waits at most lock_timeout for them.
create or replace function workflow.prepare_history_partitions(p_ahead integer default 2) returns integer
language plpgsql set search_path = pg_catalog, pg_temp set lock_timeout = '2s' as $$
declare
    v_width interval;
    v_from timestamptz;
    v_to timestamptz;
    v_next timestamptz;
    v_until timestamptz;
    v_made integer := 0;
begin
    if p_ahead is null or p_ahead < 0 or p_ahead > 100 then
        raise exception 'prepare_history_partitions: p_ahead must be between 0 and 100, got %', p_ahead
            using errcode = 'SW001';
    end if;
    select st.history_partition into v_width from workflow.workflow_settings st;
    v_from := workflow.history_span_start(clock_timestamp(), v_width);
    v_until := v_from + v_width * (p_ahead + 1);
    while v_from < v_until loop
        select p.to_time into v_next from workflow.history_partitions() p
        where p.from_time <= v_from and p.to_time > v_from;
        if found then
            v_from := v_next;
            continue;
        end if;
        v_to := workflow.history_span_start(v_from, v_width) + v_width;
        select min(p.from_time) into v_next from workflow.history_partitions() p where p.from_time > v_from;
        v_to := least(v_to, coalesce(v_next, v_to));
        if workflow.create_history_partition(v_from, v_to) then
            v_made := v_made + 1;
        end if;
        v_from := v_to;
    end loop;
    return v_made;
end $$;

-- drop_history_partitions drops the oldest partition of the audit trail
-- whose span ended and none of whose runs is left (retention deleted them;
-- their trails stayed for this), or whose span ended more than p_retention
-- and one span ago whatever is left: the trails of the runs still there are
-- first moved to the default partition (by the runs' primary key, not by
-- reading the partition), where they live and leave with their runs.
-- A partition with more than 10,000 runs left is not dropped that way (its
-- move would hold the trail locked for long): it waits for its runs.
-- Returns 1 when it dropped one, 0 when none is due, -1 when the trail was
-- busy (another transaction held it past lock_timeout: the partition is
-- left for the next call, and writers waited that long behind the
-- attempt); callers call again while 1, each call its own transaction,
-- which must be READ COMMITTED (the move reads the runs after the lock).
-- Locks: the audit trail, ACCESS EXCLUSIVE, from the detach to the commit
-- (one partition's detach, move and drop), waiting at most lock_timeout
-- (200 ms) for it: transitions wait for at most that and the move.
create or replace function workflow.drop_history_partitions(p_retention interval) returns integer
language plpgsql set search_path = pg_catalog, pg_temp set lock_timeout = '200ms' as $$
declare
    v_part record;
    v_dropped integer := 0;
begin
    if p_retention is null or p_retention < interval '0' then
        raise exception 'drop_history_partitions: the retention must be zero or more, got %', p_retention
            using errcode = 'SW001';
    end if;
    if current_setting('transaction_isolation') <> 'read committed' then
        raise exception 'drop_history_partitions: runs only in a READ COMMITTED transaction, not %',
            current_setting('transaction_isolation') using errcode = 'SW007';
    end if;
    for v_part in
        select p.* from workflow.history_partitions() p
        where p.to_time <= clock_timestamp()
          and (not p.runs_left
               or (p.to_time + p_retention + (p.to_time - p.from_time) <= clock_timestamp()
                   and (select count(*) from (select 1 from workflow.workflow_run r
                                              where r.id >= p.from_id and r.id < p.to_id
                                              limit 10001) x) <= 10000))
        order by p.from_time
        limit 1
    loop
        begin
            execute format('alter table workflow.workflow_event detach partition workflow.%I', v_part.partition_name);
            -- The range is no longer attached: these rows go to the default
            -- partition. Runs read under the lock just taken, so a run
            -- committed before it is never left without its trail.
            execute format('insert into workflow.workflow_event overriding system value
                            select e.* from workflow.workflow_run r
                            join workflow.%I e on e.workflow_id = r.id
                            where r.id >= $1 and r.id < $2 and e.run_ids is null', v_part.partition_name)
                using v_part.from_id, v_part.to_id;
            -- A batch row's runs still recorded keep their transition, as
            -- rows of their own. The rows naming runs of this range are
            -- found by idx_workflow_event_runs (never a read of the
            -- partition); only when the owner changed history_partition
            -- since the partition was made (a batch row groups its runs by
            -- the span of its day, which may then reach past this range)
            -- are all its batch rows read.
            execute format('insert into workflow.workflow_event
                                (id, workflow_id, event_type, data, created_at, db_user) overriding system value
                            select e.id, u.run_id, e.event_type, e.data || jsonb_build_object(''attempt'', u.attempt),
                                   e.created_at, e.db_user
                            from workflow.%I e
                            cross join lateral unnest(e.run_ids, e.attempts) u(run_id, attempt)
                            where e.run_ids is not null
                              and ($3 or e.run_ids && array(select r.id from workflow.workflow_run r
                                                            where r.id >= $1 and r.id < $2))
                              and exists (select 1 from workflow.workflow_run r where r.id = u.run_id)',
                           v_part.partition_name)
                using v_part.from_id, v_part.to_id,
                      v_part.to_time - v_part.from_time
                      <> (select st.history_partition from workflow.workflow_settings st);
            execute format('drop table workflow.%I', v_part.partition_name);
            v_dropped := v_dropped + 1;
        exception when lock_not_available then
            return -1; -- busy: the next call tries again
        end;
    end loop;
    return v_dropped;
end $$;

-- queue_depth counts the runnable and leased runs of a worker pool (its
-- namespace, type prefixes and runtime), each up to p_cap (null: exactly), type by
-- type from idx_workflow_run_depth alone: the numbers the autoscaler
-- scales by. A type with flow limits counts only the runnable runs its
-- limits let start now. Reads only.
-- A hot call: planned as section 9 says.
create or replace function workflow.queue_depth(
    p_type_prefixes text[],
    p_runtime text default null,
    p_cap bigint default null,
    p_namespace text default null
) returns table (runnable bigint, leased bigint)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan set enable_seqscan = off set jit = off as $$
#variable_conflict use_column
declare
    v_types text[];
    v_claimable text[];
    v_runnable bigint;
    v_leased bigint;
    v_type text;
    v_n bigint;
    v_flow record;
    v_ns text := coalesce(p_namespace, 'default');
begin
    if not workflow.acts_on(v_ns, 'read') and not workflow.acts_on(v_ns, 'worker') then
        raise exception 'queue_depth: database user % may not read namespace %', session_user,
            quote_literal(left(v_ns, 100)) using errcode = 'SW002';
    end if;
    if p_cap is not null and p_cap < 1 then
        raise exception 'queue_depth: the cap must be at least 1 (or null for an exact count), got %', p_cap
            using errcode = 'SW001';
    end if;
    select array_agg(t) into v_types from workflow.active_types(v_ns, p_type_prefixes) t;
    if v_types is null then
        return query select 0::bigint, 0::bigint;
        return;
    end if;
    select array_agg(t) into v_claimable
    from unnest(v_types) t
    where not exists (
        select 1 from workflow.workflow_registry g
        where g.namespace = v_ns and g.workflow_name = t
          and (not g.is_enabled or (p_runtime is not null and g.runtime <> p_runtime)));
    -- Type by type, each from idx_workflow_run_depth alone (type, status,
    -- run_at), until the cap is reached; a null limit is no limit. The
    -- order is that index's: under a limit, a generic plan would otherwise
    -- walk another index of pending or leased runs (in claim or lease
    -- order) filtering by type, hoping to stop early, and read everyone's.
    v_runnable := 0;
    v_leased := 0;
    foreach v_type in array coalesce(v_claimable, '{}') loop
        exit when v_runnable >= p_cap;
        v_n := (select count(*) from (
                    select 1 from workflow.workflow_run r
                    where r.type_namespace = v_ns and r.type collate "C" = v_type and r.status = 'pending'
                      and r.deleted_at is null and r.run_at <= workflow.now()
                    order by r.type collate "C", r.status, r.run_at
                    limit p_cap - v_runnable) x);
        -- Only as many as the type's flow limits let start (runs parked on
        -- a key's limit are not runnable: their run_at is ahead).
        select g.max_leased, g.rate_limit, g.rate_per_key into v_flow
        from workflow.workflow_registry g where g.namespace = v_ns and g.workflow_name = v_type;
        if v_flow.max_leased is not null then
            v_n := least(v_n, greatest(v_flow.max_leased - (
                select count(*) from (
                    select 1 from workflow.workflow_run r
                    where r.type_namespace = v_ns and r.type collate "C" = v_type and r.status = 'leased' and r.deleted_at is null
                    order by r.type collate "C", r.status, r.run_at
                    limit v_flow.max_leased) x), 0));
        end if;
        if v_flow.rate_limit is not null and not v_flow.rate_per_key then
            v_n := least(v_n, v_flow.rate_limit);
        end if;
        v_runnable := v_runnable + v_n;
    end loop;
    foreach v_type in array v_types loop
        exit when v_leased >= p_cap;
        v_leased := v_leased + (
            select count(*) from (
                select 1 from workflow.workflow_run r
                where r.type_namespace = v_ns and r.type collate "C" = v_type and r.status = 'leased' and r.deleted_at is null
                order by r.type collate "C", r.status, r.run_at
                limit p_cap - v_leased) x);
    end loop;
    return query select v_runnable, v_leased;
end $$;
comment on function workflow.queue_depth(text[], text, bigint, text) is
    'Runnable and leased runs of a worker pool (its namespace, type prefixes and runtime), each counted up to p_cap (null: exactly): the numbers the autoscaler scales by.';

-- active_namespace_types: the (type namespace, type) pairs with pending or
-- leased runs, by a loose index scan of idx_workflow_run_depth; of the
-- namespaces p_namespaces only (null: every namespace). Reads only.
create or replace function workflow.active_namespace_types(p_namespaces text[])
returns table (namespace text, type text)
language sql stable set search_path = pg_catalog, pg_temp as $$
    with recursive found as (
        (select r.type_namespace::text as ns, r.type collate "C" as type from workflow.workflow_run r
         where r.status in ('pending', 'leased') and r.deleted_at is null
         order by r.type_namespace, r.type collate "C" limit 1)
        union all
        select x.ns, x.type
        from found f
        cross join lateral (
            select r.type_namespace::text as ns, r.type collate "C" as type from workflow.workflow_run r
            where r.status in ('pending', 'leased') and r.deleted_at is null
              and (r.type_namespace, r.type collate "C") > (f.ns, f.type)
            order by r.type_namespace, r.type collate "C" limit 1) x
    )
    select f.ns, f.type::text from found f where p_namespaces is null or f.ns = any (p_namespaces)
$$;

-- type_depths: every type with unfinished runs in the namespaces the
-- caller reads, its runnable, leased and parked runs (summed over those
-- namespaces), and when its oldest runnable run became due (the console's
-- overview). Reads only.
create or replace function workflow.type_depths(

) returns table (type text, runnable bigint, leased bigint, parked bigint, oldest_due timestamptz)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp set jit = off as $$
#variable_conflict use_column
begin
    return query
    select t.type, sum(t.runnable)::bigint, sum(t.leased)::bigint, sum(t.parked)::bigint, min(t.oldest_due)
    from (
        select t.type,
               (select count(*) from workflow.workflow_run r
                where r.type_namespace = t.namespace and r.type collate "C" = t.type and r.status = 'pending'
                  and r.deleted_at is null and r.run_at <= workflow.now()) as runnable,
               (select count(*) from workflow.workflow_run r
                where r.type_namespace = t.namespace and r.type collate "C" = t.type and r.status = 'leased'
                  and r.deleted_at is null) as leased,
               (select count(*) from workflow.workflow_run r
                where r.type_namespace = t.namespace and r.type collate "C" = t.type and r.status = 'pending'
                  and r.deleted_at is null and r.run_at > workflow.now()) as parked,
               (select min(r.run_at) from workflow.workflow_run r
                where r.type_namespace = t.namespace and r.type collate "C" = t.type and r.status = 'pending'
                  and r.deleted_at is null and r.run_at <= workflow.now()) as oldest_due
        from workflow.active_namespace_types(workflow.caller_namespaces('read')) t
    ) t
    group by t.type
    order by t.type;
end $$;
comment on function workflow.type_depths() is
    'Runnable, leased and parked runs of every type with unfinished runs, and when its oldest runnable run became due.';

-- inbox_version: a marker that moves whenever a run makes an audited
-- transition or finishes, for a reader deciding when to look again.
create or replace function workflow.inbox_version() returns text
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select (select case when s.is_called then s.last_value else 0 end
            from workflow.workflow_event_id_seq s)::text || '/' ||
           coalesce((select max(r.finished_at) from workflow.workflow_run r
                     where r.finished_at is not null)::text, '')
$$;
comment on function workflow.inbox_version() is
    'A marker that moves whenever a run makes an audited transition or finishes (for a reader deciding when to look again).';


-- ===========================================================================
-- 7. READING AND RECORDING FOR CLIENTS
-- ===========================================================================

-- What the SDKs, the operator and the console read and write outside the
-- state machine's own functions, each as one function, so no client holds a
-- query of its own. These run with the caller's privileges (the table
-- grants of roles.sql decide what a caller may read); they decide nothing.

-- create_run records one run, with the fields only the operator sets (the
-- WorkflowRun it mirrors: source_namespace, source_name, source_uid; the
-- run belongs to that namespace, else to p_namespace, else to the
-- caller's; it runs a type of p_type_namespace when that namespace shares
-- it), or
-- returns the run that already holds its idempotency key (created =
-- false). Defaults: priority 100, run_at now, three attempts. deadline_at,
-- when given, wins over deadline_ms.
-- Fires: workflow_run_inserted, workflow_run_child_traceparent,
-- workflow_run_wake.
create or replace function workflow.create_run(
    p_type text,
    p_payload jsonb,
    p_priority integer default null,
    p_run_at timestamptz default null,
    p_idempotency_key text default null,
    p_max_attempts integer default null,
    p_deadline_ms bigint default null,
    p_deadline_at timestamptz default null,
    p_retry_base_ms bigint default null,
    p_retry_max_ms bigint default null,
    p_traceparent text default null,
    p_source_namespace text default null,
    p_source_name text default null,
    p_source_uid text default null,
    p_concurrency_key text default null,
    p_namespace text default null,
    p_type_namespace text default null
) returns table (id uuid, created boolean)
language plpgsql set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    v_id uuid;
    v_ns text := coalesce(p_source_namespace, p_namespace, workflow.default_namespace());
    v_tns text := coalesce(p_type_namespace, v_ns);
begin
    if v_tns <> v_ns and not workflow.type_shared(v_tns, p_type, v_ns) then
        raise exception 'namespace % does not share type % with namespace %', left(v_tns, 100), left(p_type, 253),
            left(v_ns, 100) using errcode = 'SW002';
    end if;
    insert into workflow.workflow_run (
        type, payload, priority, run_at, idempotency_key, max_attempts, retry_base_delay, retry_max_delay,
        source_namespace, source_name, source_uid, deadline_at, traceparent, concurrency_key, namespace,
        type_namespace)
    values (
        p_type, coalesce(p_payload, '{}'), coalesce(p_priority, 100), coalesce(p_run_at, workflow.now()),
        p_idempotency_key, coalesce(p_max_attempts, 3),
        p_retry_base_ms * interval '1 millisecond', p_retry_max_ms * interval '1 millisecond',
        p_source_namespace, p_source_name, p_source_uid,
        coalesce(p_deadline_at, workflow.now() + p_deadline_ms * interval '1 millisecond'), p_traceparent,
        p_concurrency_key, v_ns, v_tns)
    on conflict (idempotency_key) do nothing
    returning workflow_run.id into v_id;
    if v_id is not null then
        return query select v_id, true;
        return;
    end if;
    -- The key is taken (by a transaction that committed while this one
    -- waited on it, too: this is a new statement); by a run of another
    -- namespace, it is refused, naming nothing of that run.
    -- (A caller under row-level security does not see another
    -- namespace's run at all: no row is the same answer.)
    select r.id into v_id from workflow.workflow_run r
    where r.idempotency_key = p_idempotency_key and r.namespace = v_ns;
    if v_id is null then
        raise exception 'the idempotency key is held by a run of another namespace' using errcode = 'SW006';
    end if;
    return query select v_id, false;
end $$;

-- A run as clients show it: every column, retry delays in milliseconds.
-- Read with the reader's own rights (security_invoker), so that row-level
-- security keeps a login to its namespaces here as on the table.
create or replace view workflow.run_view with (security_invoker = true) as
    select r.id, r.type, r.payload, r.status, r.priority, r.run_at, r.idempotency_key, r.attempt,
           r.max_attempts, r.leased_by, r.lease_until, r.last_error, r.result,
           (extract(epoch from r.retry_base_delay) * 1000)::bigint as retry_base_ms,
           (extract(epoch from r.retry_max_delay) * 1000)::bigint as retry_max_ms,
           r.source_namespace, r.source_name, r.source_uid,
           r.started_at, r.finished_at, r.created_at, r.updated_at, r.deleted_at,
           r.lease_token, r.parent_id, r.parent_step, r.deadline_at, r.wait_kind, r.wait_step, r.wait_signal,
           r.traceparent, r.concurrency_key, r.namespace::text as namespace, r.type_namespace::text as type_namespace
    from workflow.workflow_run r;

-- get_run: one run (deleted ones too); no row when there is none.
create or replace function workflow.get_run(p_id uuid) returns setof workflow.run_view
language sql stable set search_path = pg_catalog, pg_temp as $$
    select * from workflow.run_view v where v.id = p_id
$$;

-- run_by_key: the id of the run holding an idempotency key, or null.
create or replace function workflow.run_by_key(p_idempotency_key text) returns uuid
language sql stable set search_path = pg_catalog, pg_temp as $$
    select r.id from workflow.workflow_run r where r.idempotency_key = p_idempotency_key
$$;

-- list_runs: runs not deleted, in creation order after a cursor (the last
-- row's created_at and id; null for the first page), of a literal type
-- prefix (null: every type) and of some statuses (empty: every status).
create or replace function workflow.list_runs(
    p_type_prefix text,
    p_statuses text[],
    p_after_created_at timestamptz,
    p_after_id uuid,
    p_limit integer
) returns setof workflow.run_view
language sql stable set search_path = pg_catalog, pg_temp as $$
    select * from workflow.run_view v
    where v.deleted_at is null
      and (p_type_prefix is null or v.type like workflow.prefix_pattern(p_type_prefix))
      and (coalesce(cardinality(p_statuses), 0) = 0 or v.status = any (p_statuses))
      and (p_after_created_at is null or (v.created_at, v.id) > (p_after_created_at, p_after_id))
    order by v.created_at, v.id
    limit p_limit
$$;

-- run_trail: a run's audit trail, in no order, when the run is recorded
-- and the caller may read it (the rule of workflow_run's row-level
-- security: the owner, or a login reading or producing for its
-- namespace): its own rows, and one row per batch row naming it
-- (workflow_event.run_ids), whose data gains the run's attempt, as a row
-- of its own would hold. Security definer, so that the batch rows are
-- found by idx_workflow_event_runs whoever asks (row-level security
-- would keep the planner from that index: @> is not leakproof), within
-- the partitions a batch row naming the run can be in (its smallest id
-- is at most the run's, and at most a span of 31 days before it).
-- Reads only.
create or replace function workflow.run_trail(p_id uuid)
returns table (id bigint, workflow_id uuid, event_type text, data jsonb, created_at timestamptz, db_user text)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    with seen as materialized (
        select r.id from workflow.workflow_run r
        where r.id = p_id
          and ((select workflow.caller_namespaces('read')) is null
               or r.namespace = any ((select workflow.caller_namespaces('read'))::text[]))
    )
    select e.id, e.workflow_id, e.event_type, e.data, e.created_at, e.db_user
    from workflow.workflow_event e
    where e.workflow_id = p_id and e.run_ids is null and exists (select 1 from seen)
    union all
    select e.id, p_id, e.event_type,
           e.data || jsonb_build_object('attempt', e.attempts[array_position(e.run_ids, p_id)]),
           e.created_at, e.db_user
    from workflow.workflow_event e
    where e.run_ids @> array[p_id] and e.run_ids is not null
      and e.workflow_id <= p_id
      and e.workflow_id >= workflow.run_id_at(workflow.run_id_time(p_id) - interval '31 days')
      and exists (select 1 from seen)
$$;

-- run_event: every run's audit trail, one row per run and transition (a
-- batch row of workflow_event expanded into its runs' rows), for plain
-- SQL readers' joins and bulk reads; row-level security as
-- workflow_event's. Not for one run: a filter on its workflow_id cannot
-- reach the index of batch rows, so it reads them all; run_events(id)
-- reads one run's trail by index.
create or replace view workflow.run_event with (security_invoker = true) as
    select e.id, e.workflow_id, e.event_type, e.data, e.created_at, e.db_user
    from workflow.workflow_event e
    where e.run_ids is null
    union all
    select e.id, b.run_id, e.event_type, e.data || jsonb_build_object('attempt', b.attempt), e.created_at, e.db_user
    from workflow.workflow_event e
    cross join lateral unnest(e.run_ids, e.attempts) b(run_id, attempt)
    where e.run_ids is not null;
comment on view workflow.run_event is
    'The audit trail one row per run and transition (workflow_event''s batch rows expanded).';

-- run_events: a run's audit trail after an event id (0: all), oldest first;
-- nothing once the run is deleted.
create or replace function workflow.run_events(p_id uuid, p_after bigint default 0)
returns table (id bigint, workflow_id uuid, event_type text, data jsonb, created_at timestamptz)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select e.id, e.workflow_id, e.event_type, e.data, e.created_at
    from workflow.run_trail(p_id) e
    where e.id > coalesce(p_after, 0)
      -- a deleted run's trail may wait for its partition to be dropped
      and exists (select 1 from workflow.workflow_run r where r.id = p_id)
    order by e.id
$$;

-- run_steps: a run's journal in position order.
create or replace function workflow.run_steps(p_id uuid)
returns table (name text, "position" integer, kind text, outcome text, output jsonb, error text, attempt integer,
               child_id uuid, wake_at timestamptz, started_at timestamptz, finished_at timestamptz)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select s.name, s.position, s.kind, s.outcome, s.output, s.error, s.attempt, s.child_id, s.wake_at,
           s.started_at, s.finished_at
    from workflow.workflow_step s
    where s.run_id = p_id
    order by s.position
$$;

-- run_signals: a run's signals, oldest first.
create or replace function workflow.run_signals(p_id uuid)
returns table (id bigint, name text, payload jsonb, idempotency_key text, created_at timestamptz,
               consumed_at timestamptz, consumed_by text)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select g.id, g.name, g.payload, g.idempotency_key, g.created_at, g.consumed_at, g.consumed_by
    from workflow.workflow_signal g
    where g.run_id = p_id
    order by g.id
$$;

-- run_children: a run's child runs in creation order, at most p_limit.
create or replace function workflow.run_children(p_id uuid, p_limit integer)
returns table (id uuid, parent_step text, type text, status text, attempt integer, last_error text)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select c.id, c.parent_step, c.type, c.status, c.attempt, c.last_error
    from workflow.workflow_run c
    where c.parent_id = p_id
    order by c.created_at, c.id
    limit p_limit
$$;

-- run_step_summary: what a mirrored run's status shows of its journal and
-- children: finished entries, the name of the one that finished last, and
-- child runs started. Outputs are not read.
create or replace function workflow.run_step_summary(p_id uuid)
returns table (steps_done bigint, last_step text, children bigint)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select (select count(*) from workflow.workflow_step s where s.run_id = p_id and s.finished_at is not null),
           (select s.name from workflow.workflow_step s
            where s.run_id = p_id and s.finished_at is not null
            order by s.finished_at desc, s.position desc
            limit 1),
           (select count(*) from workflow.workflow_run c where c.parent_id = p_id)
$$;

-- dag_steps: a DAG run's steps in definition order, each with its run (if
-- started) and the DAG run's own status.
create or replace function workflow.dag_steps(p_id uuid)
returns table (name text, type text, depends_on text[], run_id uuid, status text, attempt integer,
               max_attempts integer, started_at timestamptz, finished_at timestamptz, last_error text,
               wait_kind text, workflow_status text, final boolean, elements integer, elements_done integer)
language sql stable set search_path = pg_catalog, pg_temp set jit = off as $$
    with p as (select r from workflow.workflow_run r where r.id = p_id and r.dag is not null),
    -- (read only for a DAG that fanned a step out)
    fanned as (select st.* from p cross join lateral workflow.dag_step_states(p.r) st
               where (p.r).dag_fanout is not null and st.elements is not null)
    select s.step->>'name', s.step->>'type',
           coalesce((select array_agg(d order by o)
                     from jsonb_array_elements_text(s.step->'dependsOn') with ordinality x(d, o)), '{}'),
           coalesce(c.id, f.run_id),
           case when s.step->>'name' = any (coalesce((p.r).dag_skipped, '{}')) then 'skipped'
                when f.name is not null then f.status
                else c.status end,
           coalesce(c.attempt, 0), coalesce(c.max_attempts, 0),
           c.started_at, coalesce(c.finished_at, f.finished_at), left(coalesce(c.last_error, f.last_error), 1024),
           c.wait_kind, (p.r).status, coalesce((s.step->>'final')::boolean, false), f.elements, f.elements_done
    from p
    cross join lateral jsonb_array_elements((p.r).dag->'steps') with ordinality s(step, ord)
    left join workflow.workflow_run c on c.parent_id = (p.r).id and c.parent_step = s.step->>'name'
    left join fanned f on f.name = s.step->>'name'
    order by s.ord
$$;

-- The operator's metrics are read by the five functions that follow.
-- run_counts: runs by first type segment and status, and by namespace.
create or replace function workflow.run_counts()
returns table (segment text, status text, runs bigint, namespace text)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select split_part(r.type, '.', 1), r.status, count(*), r.namespace::text
    from workflow.workflow_run r
    where r.deleted_at is null
    group by 1, 2, 4
$$;

-- oldest_runnable: the age of the oldest runnable run by first segment
-- and namespace.
create or replace function workflow.oldest_runnable()
returns table (segment text, age_seconds double precision, namespace text)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select split_part(r.type, '.', 1), extract(epoch from (select workflow.now()) - min(r.run_at))::double precision,
           r.namespace::text
    from workflow.workflow_run r
    where r.status = 'pending' and r.deleted_at is null and r.run_at <= workflow.now()
    group by 1, 3
$$;

-- finished_since: durations of runs finished after a point in time (at
-- most 10,000, oldest first).
create or replace function workflow.finished_since(p_since timestamptz)
returns table (segment text, status text, seconds double precision, finished_at timestamptz, namespace text)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select split_part(r.type, '.', 1), r.status,
           extract(epoch from r.finished_at - coalesce(r.started_at, r.created_at))::double precision,
           r.finished_at, r.namespace::text
    from workflow.workflow_run r
    where r.finished_at > p_since
    order by r.finished_at
    limit 10000
$$;

-- event_counts_after: transitions since an event id, by type (a batch row
-- counts its runs), and of those how many ended a lease that expired (the
-- reaper's retried and failed events, reason lease_expired; always one run
-- each).
create or replace function workflow.event_counts_after(p_after bigint)
returns table (event_type text, events bigint, lease_expiries bigint, last_id bigint)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select e.event_type, sum(coalesce(cardinality(e.run_ids), 1))::bigint,
           count(*) filter (where e.event_type in ('retried', 'failed')
                            and e.data ->> 'reason' = 'lease_expired'), max(e.id)
    from workflow.workflow_event e
    where e.id > p_after
    group by e.event_type
$$;

-- latest_event_id: the latest event id drawn (its transaction may not have
-- committed).
create or replace function workflow.latest_event_id() returns bigint
language sql stable set search_path = pg_catalog, pg_temp as $$
    select case when s.is_called then s.last_value else 0 end from workflow.workflow_event_id_seq s
$$;

-- The registry, as the operator writes it from WorkflowRegistry objects: an
-- entry belongs to its object's namespace (owner_namespace; 'default' for
-- an entry with no object), where it is written and deleted only by the
-- object that owns it (owner_namespace, owner_name); put_registry returns
-- null when another object of that namespace owns the name. The same name
-- in two namespaces is two types. p_shared_with lists the namespaces whose
-- runs may run the type (see type_shared).
-- Fires: workflow_registry_written (the definition's checks).
create or replace function workflow.put_registry(
    p_workflow_name text, p_runtime text, p_is_enabled boolean, p_description text,
    p_owner_namespace text, p_owner_name text, p_definition jsonb,
    p_max_leased integer default null, p_max_leased_per_key integer default null,
    p_rate_limit integer default null, p_rate_period_ms bigint default null,
    p_rate_per_key boolean default false, p_shared_with text[] default null
) returns text
language sql set search_path = pg_catalog, pg_temp as $$
    insert into workflow.workflow_registry (
        workflow_name, runtime, is_enabled, description, owner_namespace, owner_name, definition,
        max_leased, max_leased_per_key, rate_limit, rate_period, rate_per_key, namespace, shared_with)
    values (p_workflow_name, p_runtime, p_is_enabled, p_description, p_owner_namespace, p_owner_name, p_definition,
            p_max_leased, p_max_leased_per_key, p_rate_limit, p_rate_period_ms * interval '1 millisecond',
            coalesce(p_rate_per_key, false), coalesce(p_owner_namespace, 'default'),
            coalesce((select array_agg(distinct n order by n) from unnest(p_shared_with) n
                      where n is distinct from coalesce(p_owner_namespace, 'default')), '{}'))
    on conflict (namespace, workflow_name) do update
    set runtime     = excluded.runtime,
        is_enabled  = excluded.is_enabled,
        description = excluded.description,
        definition  = excluded.definition,
        max_leased  = excluded.max_leased,
        max_leased_per_key = excluded.max_leased_per_key,
        rate_limit  = excluded.rate_limit,
        rate_period = excluded.rate_period,
        rate_per_key = excluded.rate_per_key,
        shared_with = excluded.shared_with,
        updated_at  = now()
    where workflow.workflow_registry.owner_namespace is not distinct from excluded.owner_namespace
      and workflow.workflow_registry.owner_name is not distinct from excluded.owner_name
    returning workflow_name
$$;

-- delete_registry deletes an entry for the object that owns it; false when
-- there is none or another object owns it.
create or replace function workflow.delete_registry(p_workflow_name text, p_owner_namespace text, p_owner_name text)
returns boolean
language sql set search_path = pg_catalog, pg_temp as $$
    with gone as (
        delete from workflow.workflow_registry g
        where g.namespace = coalesce(p_owner_namespace, 'default') and g.workflow_name = p_workflow_name
          and g.owner_namespace is not distinct from p_owner_namespace
          and g.owner_name is not distinct from p_owner_name
        returning 1)
    select exists (select 1 from gone)
$$;

-- registry_entries: the entries of one name (p_workflow_name, one per
-- namespace that has it), or those one object owns.
create or replace function workflow.registry_entries(p_workflow_name text, p_owner_namespace text, p_owner_name text)
returns table (workflow_name text, runtime text, is_enabled boolean, description text, owner_namespace text,
               owner_name text, created_at timestamptz, updated_at timestamptz, definition jsonb,
               max_leased integer, max_leased_per_key integer, rate_limit integer, rate_period_ms bigint,
               rate_per_key boolean, namespace text, shared_with text[])
language sql stable set search_path = pg_catalog, pg_temp as $$
    select g.workflow_name, g.runtime, g.is_enabled, g.description, g.owner_namespace, g.owner_name,
           g.created_at, g.updated_at, g.definition, g.max_leased, g.max_leased_per_key, g.rate_limit,
           (extract(epoch from g.rate_period) * 1000)::bigint, g.rate_per_key, g.namespace, g.shared_with
    from workflow.workflow_registry g
    where (p_workflow_name is null or g.workflow_name = p_workflow_name)
      and (p_owner_namespace is null or (g.owner_namespace = p_owner_namespace and g.owner_name = p_owner_name))
    order by g.workflow_name, g.namespace
$$;

-- The console's reads. Each takes the bounds of what its page shows: how
-- many rows, and how many characters of a JSON value or an error (cut
-- here, so that a page of hundreds of them stays small). The reads of a
-- viewer allowed only some namespaces take those (p_namespaces, as the
-- console's gate decided them).

-- list_filter_match: whether a run with this namespace, creation time and
-- id passes the filters every form of list_runs_newest shares: the
-- namespaces a viewer may see (null: all), one namespace, a creation
-- window [p_from, p_to) and the page's cursor (null: none). Inlined into
-- the caller's statement, so that with the call's values a filter that is
-- not set drops out and the cursor stays an index condition.
create or replace function workflow.list_filter_match(
    p_run_namespace text,
    p_created_at timestamptz,
    p_id uuid,
    p_namespaces text[],
    p_namespace text,
    p_from timestamptz,
    p_to timestamptz,
    p_before_created_at timestamptz,
    p_before_id uuid
) returns boolean
language sql immutable parallel safe
begin atomic
    select (p_namespaces is null or p_run_namespace = any (p_namespaces))
       and (p_namespace is null or p_run_namespace = p_namespace)
       and (p_from is null or p_created_at >= p_from)
       and (p_to is null or p_created_at < p_to)
       and (p_before_id is null or (p_created_at, p_id) < (p_before_created_at, p_before_id));
end;

-- list_runs_newest: a page of the console's list of runs, newest first
-- (created_at, then id, descending), at most p_limit: runs of a literal
-- type prefix (null or '': every type), of one status (null: every
-- status), of one namespace (null: any), created in [p_from, p_to) (null
-- bounds: none), before a cursor (the last row's created_at and id; null
-- for the first page). p_namespaces, when not null, are the only
-- namespaces whose runs are listed (a run with no Kubernetes source is of
-- none); null lists every run. Soft-deleted runs are listed (deleted_at
-- set); last_error is cut to 200 characters.
-- Two static statements, each planned for the call's values (a custom
-- plan: a part whose guard is false is never run, a filter that is not set
-- drops out; the filters all forms share are list_filter_match, inlined).
-- A namespace, or a status other than succeeded, without a prefix
-- (v_direct) reads one index in the list's order or one that narrows it to
-- a few rows: idx_workflow_run_namespace_created,
-- idx_workflow_run_ended_badly (failed or cancelled) and the queue's own
-- indexes (pending or leased; a pending or leased run is never
-- soft-deleted, and saying so lets those partial indexes serve).
-- Otherwise the page merges parts, each reading its own index newest first
-- and stopping after p_limit rows, and reads the newest p_limit of their
-- rows whole by primary key: the finished runs of each type under the
-- prefix from idx_workflow_run_type_created, the types found one index
-- probe each (a skip scan); the pending runs of each type and priority
-- from the claim index, found the same way, and those a flow limit holds
-- back from idx_workflow_run_flow_list; and the leased runs, as many as
-- workers hold.
create or replace function workflow.list_runs_newest(
    p_type_prefix text,
    p_status text,
    p_namespace text,
    p_namespaces text[],
    p_from timestamptz,
    p_to timestamptz,
    p_before_created_at timestamptz,
    p_before_id uuid,
    p_limit integer
) returns table (id uuid, type text, status text, attempt integer, max_attempts integer, namespace text,
                 source_name text, created_at timestamptz, finished_at timestamptz, wait_kind text,
                 deleted_at timestamptz, last_error text)
language plpgsql stable
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
-- The estimates of the parts a call does not run would otherwise make the
-- statement look costly enough to compile, which takes far longer than the
-- page.
set jit = off
as $$
#variable_conflict use_column
declare
    -- Types hold only a-z, 0-9, '_' and '.': every type under the prefix
    -- sorts (collation C) between it and it followed by DEL.
    v_lo text := coalesce(p_type_prefix, '');
    v_hi text := coalesce(p_type_prefix, '') || chr(127);
    v_direct boolean := v_lo = ''
        and (p_namespace is not null or coalesce(p_status in ('pending', 'leased', 'failed', 'cancelled'), false));
    -- The parts of the merge a call needs (the merge runs when not v_direct).
    v_finished boolean := p_status is null or p_status in ('succeeded', 'failed', 'cancelled');
    v_pending boolean := p_status is null or p_status = 'pending';
    v_leased boolean := p_status is null or p_status = 'leased';
begin
    if p_status <> all ('{pending,leased,succeeded,failed,cancelled}') then
        raise exception 'list_runs_newest: % is not a status', p_status using errcode = 'SW001';
    end if;
    if v_direct then
        return query
        select r.id, r.type::text, r.status, r.attempt, r.max_attempts, r.namespace::text, r.source_name::text,
               r.created_at, r.finished_at, r.wait_kind, r.deleted_at, left(r.last_error, 200)
        from workflow.workflow_run r
        where (p_status is null or r.status = p_status)
          and (p_status is null or p_status in ('succeeded', 'failed', 'cancelled') or r.deleted_at is null)
          and workflow.list_filter_match(r.namespace, r.created_at, r.id, p_namespaces, p_namespace,
                                         p_from, p_to, p_before_created_at, p_before_id)
        order by r.created_at desc, r.id desc
        limit p_limit;
        return;
    end if;
    return query
    with recursive fin as (
        (select r.type collate "C" as type from workflow.workflow_run r
         where v_finished and r.status in ('succeeded', 'failed', 'cancelled') and r.type collate "C" >= v_lo
           and r.type collate "C" < v_hi
         order by 1 limit 1)
        union all
        select (select r.type collate "C" from workflow.workflow_run r
                where r.status in ('succeeded', 'failed', 'cancelled') and r.type collate "C" > fin.type
                  and r.type collate "C" < v_hi
                order by 1 limit 1)
        from fin where fin.type is not null
    ), pend as (
        -- The claim index's own predicate, so that it serves: each (type
        -- namespace, type, priority) of pending runs, one probe each.
        (select r.type_namespace::text as ns, r.type collate "C" as type, r.priority from workflow.workflow_run r
         where v_pending and coalesce(r.status, '') = 'pending' and r.deleted_at is null
           and r.wait_kind is distinct from 'limit' and r.type collate "C" >= v_lo
           and r.type collate "C" < v_hi
         order by r.type_namespace, 2, 3 limit 1)
        union all
        select x.ns, x.type, x.priority from pend cross join lateral (
            select r.type_namespace::text as ns, r.type collate "C" as type, r.priority from workflow.workflow_run r
            where coalesce(r.status, '') = 'pending' and r.deleted_at is null
              and r.wait_kind is distinct from 'limit'
              and (r.type_namespace, r.type collate "C", r.priority) > (pend.ns, pend.type, pend.priority)
              and r.type collate "C" >= v_lo and r.type collate "C" < v_hi
            order by r.type_namespace, 2, 3 limit 1) x
    ), held as (
        -- Pending runs a flow limit holds back are outside the claim
        -- index: the same skip scan over idx_workflow_run_flow_list.
        (select r.type_namespace::text as ns, r.type collate "C" as type, r.priority from workflow.workflow_run r
         where v_pending and r.wait_kind = 'limit' and r.deleted_at is null
           and r.type collate "C" >= v_lo and r.type collate "C" < v_hi
         order by r.type_namespace, 2, 3 limit 1)
        union all
        select x.ns, x.type, x.priority from held cross join lateral (
            select r.type_namespace::text as ns, r.type collate "C" as type, r.priority from workflow.workflow_run r
            where r.wait_kind = 'limit' and r.deleted_at is null
              and (r.type_namespace, r.type collate "C", r.priority) > (held.ns, held.type, held.priority)
              and r.type collate "C" >= v_lo and r.type collate "C" < v_hi
            order by r.type_namespace, 2, 3 limit 1) x
    ), part as (
        select x.* from fin cross join lateral (
            select r.created_at, r.id from workflow.workflow_run r
            where r.type collate "C" = fin.type and r.status in ('succeeded', 'failed', 'cancelled')
              and (p_status is null or r.status = p_status)
              and workflow.list_filter_match(r.namespace, r.created_at, r.id, p_namespaces, p_namespace,
                                             p_from, p_to, p_before_created_at, p_before_id)
            order by r.created_at desc, r.id desc limit p_limit) x
        where fin.type is not null
        union all
        select x.* from pend cross join lateral (
            select r.created_at, r.id from workflow.workflow_run r
            where r.type_namespace = pend.ns and r.type collate "C" = pend.type and r.priority = pend.priority
              and coalesce(r.status, '') = 'pending' and r.deleted_at is null and r.wait_kind is distinct from 'limit'
              and workflow.list_filter_match(r.namespace, r.created_at, r.id, p_namespaces, p_namespace,
                                             p_from, p_to, p_before_created_at, p_before_id)
            order by r.created_at desc, r.id desc limit p_limit) x
        union all
        select x.* from held cross join lateral (
            select r.created_at, r.id from workflow.workflow_run r
            where r.type_namespace = held.ns and r.type collate "C" = held.type and r.priority = held.priority
              and r.wait_kind = 'limit'
              and r.deleted_at is null
              and workflow.list_filter_match(r.namespace, r.created_at, r.id, p_namespaces, p_namespace,
                                             p_from, p_to, p_before_created_at, p_before_id)
            order by r.created_at desc, r.id desc limit p_limit) x
        union all
        (select r.created_at, r.id from workflow.workflow_run r
         where v_leased and r.status = 'leased' and r.deleted_at is null
           and r.type collate "C" >= v_lo and r.type collate "C" < v_hi
           and workflow.list_filter_match(r.namespace, r.created_at, r.id, p_namespaces, p_namespace,
                                          p_from, p_to, p_before_created_at, p_before_id)
         order by r.created_at desc, r.id desc limit p_limit)
    ), page as (
        select p.created_at, p.id from part p order by 1 desc, 2 desc limit p_limit
    )
    select r.id, r.type::text, r.status, r.attempt, r.max_attempts, r.namespace::text, r.source_name::text,
           r.created_at, r.finished_at, r.wait_kind, r.deleted_at, left(r.last_error, 200)
    from page cross join lateral (select * from workflow.workflow_run r where r.id = page.id) r
    order by page.created_at desc, page.id desc;
end $$;

-- run_namespace: the namespace a run belongs to (a child's is its
-- parent's, set when it was recorded); null when the run does not exist.
-- (p_max_hops is no longer needed and is ignored.)
create or replace function workflow.run_namespace(p_id uuid, p_max_hops integer) returns text
language sql stable set search_path = pg_catalog, pg_temp as $$
    select r.namespace::text from workflow.workflow_run r where r.id = p_id
$$;

-- run_namespaces: default, then the other namespaces that have runs, in
-- order, one index probe each (a skip scan of
-- idx_workflow_run_namespace_created).
create or replace function workflow.run_namespaces() returns setof text
language sql stable set search_path = pg_catalog, pg_temp as $$
    with recursive ns as (
        (select r.namespace::text as n from workflow.workflow_run r
         where r.namespace <> 'default' order by r.namespace limit 1)
        union all
        select (select r.namespace::text from workflow.workflow_run r
                where r.namespace <> 'default' and r.namespace > ns.n order by r.namespace limit 1)
        from ns where ns.n is not null
    )
    select 'default'
    union all
    select ns.n from ns where ns.n is not null
$$;

-- namespace_type_depths: type_depths of the runs of some namespaces only:
-- each type with unfinished runs there, its runnable, leased and parked
-- runs, and when its oldest runnable run became due.
create or replace function workflow.namespace_type_depths(p_namespaces text[])
returns table (type text, runnable bigint, leased bigint, parked bigint, oldest_due timestamptz)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select r.type,
           count(*) filter (where r.status = 'pending' and r.run_at <= (select workflow.now())),
           count(*) filter (where r.status = 'leased'),
           count(*) filter (where r.status = 'pending' and r.run_at > (select workflow.now())),
           min(r.run_at) filter (where r.status = 'pending' and r.run_at <= (select workflow.now()))
    from workflow.workflow_run r
    where r.namespace = any (p_namespaces) and r.status in ('pending', 'leased') and r.deleted_at is null
    group by 1
$$;

-- finished_last_hour: the runs that finished in the last hour, by type and
-- five-minute bucket counted back from now (0: the latest five minutes, up
-- to 11), those that succeeded and those that ended otherwise; of every
-- run, or with p_namespaces only of the runs of those namespaces. Read from
-- idx_workflow_run_finished_at: the cost follows the runs of that hour.
create or replace function workflow.finished_last_hour(p_namespaces text[] default null)
returns table (type text, bucket integer, succeeded bigint, ended_otherwise bigint)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select r.type, least(floor(extract(epoch from ((select workflow.now()) - r.finished_at)) / 300)::int, 11),
           count(*) filter (where r.status = 'succeeded'), count(*) filter (where r.status <> 'succeeded')
    from workflow.workflow_run r
    where r.finished_at > workflow.now() - interval '1 hour'
      and (p_namespaces is null or r.namespace = any (p_namespaces))
    group by 1, 2
$$;

-- run_versions: for each run of p_ids that exists, a text that changes
-- whenever its page would show something new: its status, attempt and
-- update time, its latest audit event, the number of its journal entries,
-- and the count and latest update of its first p_children child runs (in
-- creation order, as its page lists them).
create or replace function workflow.run_versions(p_ids uuid[], p_children integer)
returns table (id uuid, version text)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select r.id,
           r.status || '/' || r.attempt || '/' || extract(epoch from r.updated_at)::text || '/' ||
           coalesce((select max(e.id) from workflow.run_trail(r.id) e), 0) || '/' ||
           (select count(*) from workflow.workflow_step st where st.run_id = r.id) || '/' ||
           coalesce((select count(*) || '@' || extract(epoch from max(c.updated_at))::text
                     from (select c.updated_at from workflow.workflow_run c where c.parent_id = r.id
                           order by c.created_at, c.id limit p_children) c), '')
    from workflow.workflow_run r
    where r.id = any (p_ids)
$$;

-- run_latest_events: a run's latest p_limit audit events, newest first,
-- each event's data as JSON text cut to p_data_chars characters.
create or replace function workflow.run_latest_events(p_id uuid, p_limit integer, p_data_chars integer)
returns table (id bigint, event_type text, data text, created_at timestamptz)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select e.id, e.event_type, left(e.data::text, p_data_chars), e.created_at
    from workflow.run_trail(p_id) e
    order by e.id desc
    limit p_limit
$$;

-- run_attempt_events: the first p_limit events of a run's audit trail that
-- name an attempt (leased, started, and how an attempt ended; not
-- heartbeats), oldest first: the attempt, the worker (null when the event
-- names none) and the error cut to p_error_chars characters (null when
-- none).
create or replace function workflow.run_attempt_events(p_id uuid, p_limit integer, p_error_chars integer)
returns table (event_type text, attempt integer, worker_id text, error text, created_at timestamptz)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select e.event_type, (e.data->>'attempt')::int, e.data->>'worker_id', left(e.data->>'error', p_error_chars),
           e.created_at
    from workflow.run_trail(p_id) e
    where e.event_type in ('leased', 'started', 'succeeded', 'failed', 'retried', 'cancelled')
      and e.data->>'attempt' ~ '^[0-9]{1,6}$'
      and e.data->>'reason' is distinct from 'retry_run' -- no attempt's end: see run_retries
    order by e.id
    limit p_limit
$$;

-- run_retries: the first p_limit times a run was retried from where it
-- stopped (retry_run), oldest first: when, the status it left, who asked
-- (cut to 256 characters), for a DAG how many steps ran again, and for a
-- DAG's step the workflow whose retry ran it again.
create or replace function workflow.run_retries(p_id uuid, p_limit integer)
returns table (created_at timestamptz, previous_status text, retried_by text, steps_retried integer,
               workflow_id text)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select e.created_at, e.data->>'previous_status', left(e.data->>'by', 256),
           case when e.data->>'steps_retried' ~ '^[0-9]{1,6}$' then (e.data->>'steps_retried')::integer end,
           left(e.data->>'workflow_id', 36)
    from workflow.workflow_event e
    where e.workflow_id = p_id and e.event_type = 'retried' and e.data->>'reason' = 'retry_run'
    order by e.id
    limit p_limit
$$;

-- run_first_steps: the first p_limit entries of a run's journal in position
-- order, each output as JSON text cut to p_output_chars characters.
create or replace function workflow.run_first_steps(p_id uuid, p_limit integer, p_output_chars integer)
returns table (name text, "position" integer, kind text, outcome text, error text, attempt integer, child_id uuid,
               wake_at timestamptz, started_at timestamptz, finished_at timestamptz, output text)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select st.name, st.position, st.kind, st.outcome, st.error, st.attempt, st.child_id, st.wake_at,
           st.started_at, st.finished_at, left(st.output::text, p_output_chars)
    from workflow.workflow_step st
    where st.run_id = p_id
    order by st.position
    limit p_limit
$$;

-- run_latest_signals: a run's latest p_limit signals, newest first, each
-- payload as JSON text cut to p_payload_chars characters.
create or replace function workflow.run_latest_signals(p_id uuid, p_limit integer, p_payload_chars integer)
returns table (id bigint, name text, created_at timestamptz, consumed_at timestamptz, consumed_by text,
               payload text)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select sg.id, sg.name, sg.created_at, sg.consumed_at, sg.consumed_by, left(sg.payload::text, p_payload_chars)
    from workflow.workflow_signal sg
    where sg.run_id = p_id
    order by sg.id desc
    limit p_limit
$$;


-- ===========================================================================
-- 8. SCHEDULES: CRON IN THE DATABASE
-- ===========================================================================

-- A schedule records a run of its type and payload at every tick of a cron
-- expression, in a time zone. Firing happens here, in
-- workflow.fire_due_schedules: whoever calls it (the manager's leader, a
-- second manager during a hand-over, a cron job of the DBA's), each tick of
-- each schedule makes at most one run, and a tick nobody fired stays due
-- until somebody does.
--
-- Exactly once, twice over:
--   * fire_due_schedules locks the due schedules FOR UPDATE SKIP LOCKED and
--     moves next_tick_at past the tick in the same transaction that records
--     the run; a second caller skips a locked schedule, and one that read
--     the old row re-reads it after the first commits and finds it no
--     longer due. A caller that dies before committing leaves nothing: the
--     tick is still due for the next one.
--   * the run's idempotency key names the schedule and the tick, so even a
--     tick fired twice (schedules restored from a backup; a mirrored
--     schedule deleted and recreated under its name) records one run.
--
-- Idempotency keys of the runs a schedule records:
--   schedule:<schedule id>:<tick in UTC, YYYY-MM-DDTHH:MI:SSZ>
--       a schedule made with SQL (source_namespace null), e.g.
--       schedule:5b1d...:2024-03-10T07:00:00Z
--   k8s:<namespace>:schedule/<name>/<tick in unix seconds>
--       a schedule mirrored from the WorkflowSchedule <namespace>/<name>,
--       e.g. k8s:shop:schedule/nightly/1710054000: the key the operator
--       gives a WorkflowRun with spec.idempotencyKey schedule/<name>/<unix>,
--       which therefore adopts the run. Such a run carries source_namespace,
--       source_uid (the WorkflowSchedule's UID, as workflow_run's
--       reserved-key rule asks) and source_name <name>-<tick in unix
--       seconds>, the name the operator gives that WorkflowRun, so that the
--       run's changes notify it (workflow_run_changed) once it exists.
-- A schedule's runs are found by these key prefixes alone (workflow_run has
-- no column naming the schedule), through idx_workflow_run_schedule_key,
-- the one object of this section on workflow_run. A run another writer
-- recorded under such a key counts as the schedule's.
--
-- TIME ZONES AND DAYLIGHT SAVING: a cron expression names wall-clock times
-- of the schedule's time zone. A tick that does not exist locally (the
-- hour skipped when clocks spring forward) fires once, at the instant the
-- gap ends (a daily 02:30 in America/New_York fires at 03:00 EDT on that
-- day; ticks 02:00 to 02:59 all land on that instant and fire once, with
-- 03:00). A tick that occurs twice locally (the hour repeated when clocks
-- fall back) fires once, at its first occurrence: the repeated hour has no
-- ticks of its own (an hourly job fires at 00:00, 01:00 daylight time and
-- 02:00 standard time; nothing at 01:00 standard time).
--
-- MISSED TICKS follow Kubernetes CronJob: when several ticks are due at
-- once (nobody called for a while, or a Forbid schedule waited), only the
-- most recent may start; the older ones are reported 'missed'. With
-- starting_deadline_seconds set, the most recent tick is missed too when it
-- is more than that many seconds old. Unlike CronJob, a schedule resumed
-- (suspend set back to false) or given a new cron or zone starts counting
-- from the moment of the change: ticks that passed while it was suspended
-- are not started on resume.
--
-- LOCK ORDER: a schedule row (put_schedule, delete_schedule,
-- fire_due_schedules, which skips locked ones), then runs: the unfinished
-- runs a Replace schedule cancels (cancel_run: the run, then its children),
-- then the run it records (by its key).
--
-- PRIVILEGE (roles.sql grants these):
--   the manager (the schema owner)   fire_due_schedules, put_schedule,
--                                    delete_schedule, list_schedules,
--                                    cron_next, cron_problem
--   workflow_producer                put_schedule, delete_schedule (their
--                                    own SQL schedules: the functions refuse
--                                    a schedule with a source_namespace to
--                                    anyone but the owner, and a SQL schedule
--                                    to a database user other than the one
--                                    that created it), list_schedules,
--                                    cron_next, cron_problem
--   workflow_reader                  list_schedules, cron_next, cron_problem
--   no one                           cron_fields, cron_field, cron_instant,
--                                    cron_tick, time_zone_problem,
--                                    schedule_key, schedule_key_range,
--                                    schedule_caller_is_owner,
--                                    schedule_payload_problem,
--                                    on_schedule_written


-- ---------------------------------------------------------------------------
-- Cron expressions
-- ---------------------------------------------------------------------------

-- A parsed cron expression (cron_fields): the sorted values each field
-- allows (weekdays 0-6 from Sunday), whether each day field is
-- unrestricted, and what is wrong (null when nothing is). Created once;
-- a changed layout is a migration's work.
do $$
begin
    if not exists (select 1 from pg_catalog.pg_type t join pg_catalog.pg_namespace n on n.oid = t.typnamespace
                   where n.nspname = 'workflow' and t.typname = 'cron_spec') then
        create type workflow.cron_spec as (
            minutes integer[], hours integer[], days integer[], months integer[], weekdays integer[],
            days_star boolean, weekdays_star boolean, problem text);
    end if;
end $$;

-- cron_field parses one field of a cron expression into the sorted values
-- it allows, between p_min and p_max: a comma-separated list of items, each
-- *, ? (the day fields: p_question), a value, a range a-b, or either
-- followed by /step (a value with a step, a/n, means a to the field's
-- maximum, as in Kubernetes CronJob). p_names, when given, name p_min,
-- p_min+1, ... (months JAN..DEC, weekdays SUN..SAT), in any case. star says
-- whether the field is unrestricted in CronJob's sense (an item * or ?
-- without a step above 1: */2 restricts), which decides how the two day
-- fields combine. problem names the field and what is wrong, or is null.
-- Numbers are read only up to 9 digits (a longer one is out of range,
-- never an overflow), steps only up to the field's count of values.
-- The forms * and a single number take a short path. Pure; no locks.
create or replace function workflow.cron_field(
    p_text text, p_what text, p_min integer, p_max integer, p_names text[], p_question boolean,
    out vals integer[], out star boolean, out problem text
)
language plpgsql immutable parallel safe set search_path = pg_catalog, pg_temp as $$
declare
    v_item text;
    v_range text;
    v_parts text[];
    v_stepped boolean;
    v_step integer;
    v_bounds integer[];
    v_txt text;
    v_set boolean[];
    v_lo integer;
    v_hi integer;
    v_not text;
begin
    star := false;
    if p_text = '*' or (p_text = '?' and p_question) then
        vals := array_positions(array_fill(true, array[p_max - p_min + 1], array[p_min]), true);
        star := true;
        return;
    end if;
    if p_text ~ '^[0-9]{1,2}$' and p_text::integer between p_min and p_max then
        vals := array[p_text::integer];
        return;
    end if;
    v_set := array_fill(false, array[p_max - p_min + 1], array[p_min]);
    v_not := case when p_names is null then 'is not a number'
                  else format('is neither a number nor a name (%s-%s)', p_names[1], p_names[cardinality(p_names)]) end;
    foreach v_item in array string_to_array(p_text, ',') loop
        if v_item = '' then
            problem := format('%s field %s has an empty item', p_what, left(p_text, 40));
            return;
        end if;
        v_parts := string_to_array(v_item, '/');
        if cardinality(v_parts) > 2 then
            problem := format('%s field item %s has more than one /', p_what, left(v_item, 40));
            return;
        end if;
        v_range := v_parts[1];
        v_stepped := cardinality(v_parts) = 2;
        v_step := 1;
        if v_stepped then
            if v_parts[2] !~ '^[0-9]+$' then
                problem := case when v_parts[2] = '' then format('%s field item %s has no step after /', p_what, left(v_item, 40))
                                else format('%s field step %s is not a number', p_what, left(v_parts[2], 40)) end;
                return;
            end if;
            if char_length(v_parts[2]) > 9 or v_parts[2]::integer not between 1 and p_max - p_min + 1 then
                problem := format('%s field step %s is out of range 1-%s', p_what, left(v_parts[2], 40), p_max - p_min + 1);
                return;
            end if;
            v_step := v_parts[2]::integer;
        end if;
        if v_range = '*' or (v_range = '?' and p_question) then
            v_lo := p_min;
            v_hi := p_max;
            star := star or v_step = 1;
        else
            -- A value or a range: each end a number or a name.
            v_parts := string_to_array(v_range, '-');
            if v_range = '' or cardinality(v_parts) > 2 or '' = any (v_parts) then
                problem := format('%s field item %s is not a value, a range a-b, * or a step x/n', p_what, left(v_item, 40));
                return;
            end if;
            v_bounds := '{}';
            foreach v_txt in array v_parts loop
                if v_txt ~ '^[0-9]+$' then
                    if char_length(v_txt) > 9 or v_txt::integer not between p_min and p_max then
                        problem := format('%s field %s is out of range %s-%s', p_what, left(v_txt, 40), p_min, p_max);
                        return;
                    end if;
                    v_bounds := v_bounds || v_txt::integer;
                elsif p_names is not null and upper(v_txt) = any (p_names) then
                    v_bounds := v_bounds || (p_min + array_position(p_names, upper(v_txt)) - 1);
                else
                    problem := format('%s field value %s %s', p_what, left(v_txt, 40), v_not);
                    return;
                end if;
            end loop;
            v_lo := v_bounds[1];
            v_hi := case when cardinality(v_bounds) = 2 then v_bounds[2]
                         when v_stepped then p_max   -- a/n: a to the maximum
                         else v_bounds[1] end;
            if v_lo > v_hi then
                problem := format('%s field range %s runs backwards (%s is after %s)', p_what, v_range, v_parts[1], v_parts[2]);
                return;
            end if;
        end if;
        for i in 0 .. (v_hi - v_lo) / v_step loop
            v_set[v_lo + i * v_step] := true;
        end loop;
    end loop;
    vals := array_positions(v_set, true);
end $$;

-- cron_fields parses a cron expression: five fields (minute, hour,
-- day-of-month, month, day-of-week) separated by blanks, or a macro
-- (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly).
-- Weekday 7 is Sunday, as 0 is. problem names what is wrong, including an
-- expression at most 1024 characters long that never fires (a day of the
-- month none of its months has, like 0 0 30 2 *); the value fields are
-- null then. Pure: no time zone, no clock, no locks.
create or replace function workflow.cron_fields(p_expr text) returns workflow.cron_spec
language plpgsql immutable parallel safe set search_path = pg_catalog, pg_temp as $$
declare
    c_months constant text[] := '{JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC}';
    c_weekdays constant text[] := '{SUN,MON,TUE,WED,THU,FRI,SAT}';
    c_max_days constant integer[] := '{31,29,31,30,31,30,31,31,30,31,30,31}';
    v_expr text := btrim(p_expr, E' \t\r\n');
    v_fields text[];
    v_month integer;
    r workflow.cron_spec;
    v_min record;
    v_hour record;
    v_day record;
    v_mon record;
    v_dow record;
begin
    if p_expr is null or v_expr = '' then
        r.problem := 'cron expression is empty';
        return r;
    end if;
    if char_length(p_expr) > 1024 then
        r.problem := format('cron expression is %s characters; at most 1024 are allowed', char_length(p_expr));
        return r;
    end if;
    if left(v_expr, 1) = '@' then
        v_expr := case lower(v_expr)
                      when '@yearly' then '0 0 1 1 *' when '@annually' then '0 0 1 1 *'
                      when '@monthly' then '0 0 1 * *' when '@weekly' then '0 0 * * 0'
                      when '@daily' then '0 0 * * *' when '@midnight' then '0 0 * * *'
                      when '@hourly' then '0 * * * *' end;
        if v_expr is null then
            r.problem := format('unknown macro %s; the macros are @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly',
                                left(btrim(p_expr, E' \t\r\n'), 40));
            return r;
        end if;
    end if;
    if upper(v_expr) ~ '^(CRON_)?TZ=' then
        r.problem := 'a time zone is not part of the cron expression (CRON_TZ= or TZ=); give it as the schedule''s time zone';
        return r;
    end if;
    v_fields := regexp_split_to_array(v_expr, '[ \t\r\n]+');
    if cardinality(v_fields) <> 5 then
        r.problem := format('a cron expression has 5 fields (minute hour day-of-month month day-of-week), got %s',
                            cardinality(v_fields));
        return r;
    end if;

    -- Every field is read; the first problem, in the fields' order, is told.
    v_min := workflow.cron_field(v_fields[1], 'minute', 0, 59, null, false);
    v_hour := workflow.cron_field(v_fields[2], 'hour', 0, 23, null, false);
    v_day := workflow.cron_field(v_fields[3], 'day-of-month', 1, 31, null, true);
    v_mon := workflow.cron_field(v_fields[4], 'month', 1, 12, c_months, false);
    -- 0-7, 7 being Sunday again; names SUN..SAT are 0..6.
    v_dow := workflow.cron_field(v_fields[5], 'day-of-week', 0, 7, c_weekdays, true);
    r.problem := coalesce(v_min.problem, v_hour.problem, v_day.problem, v_mon.problem, v_dow.problem);
    if r.problem is not null then
        return r;
    end if;
    r.minutes := v_min.vals;
    r.hours := v_hour.vals;
    r.days := v_day.vals;
    r.days_star := v_day.star;
    r.months := v_mon.vals;
    r.weekdays := v_dow.vals;
    if 7 = any (r.weekdays) then
        r.weekdays := array_remove(r.weekdays, 7);
        if r.weekdays[1] is distinct from 0 then
            r.weekdays := 0 || r.weekdays;
        end if;
    end if;
    r.weekdays_star := v_dow.star;
    if not r.days_star and r.weekdays_star then
        -- The days of the month alone decide (the weekday field is *): some
        -- month of the month field must have the first of them.
        r.problem := format('the expression never fires: no month of the month field (%s) has day %s (day-of-month field)',
                            array_to_string(r.months, ','), r.days[1]);
        foreach v_month in array r.months loop
            if r.days[1] <= c_max_days[v_month] then
                r.problem := null;
                exit;
            end if;
        end loop;
    end if;
    if r.problem is not null then
        return row(null, null, null, null, null, null, null, r.problem)::workflow.cron_spec;
    end if;
    return r;
end $$;

-- cron_instant is the instant of a local wall-clock time in a zone, as a
-- schedule fires it: a time that exists once is that instant; a time that
-- exists twice (clocks fell back) is its first occurrence; a time that does
-- not exist (clocks sprang forward over it) is the instant the gap ends.
-- It compares the zone's UTC offsets a day before and after (no zone
-- changes its offset twice within two days) and, in a gap, finds the
-- transition to the second by bisection (at most 17 steps for an 18-hour
-- gap). Pure; no locks.
create or replace function workflow.cron_instant(p_local timestamp, p_zone text) returns timestamptz
language plpgsql immutable parallel safe set search_path = pg_catalog, pg_temp as $$
declare
    v_u timestamptz := p_local at time zone 'UTC';
    v_before interval := ((v_u - interval '1 day') at time zone p_zone) - ((v_u - interval '1 day') at time zone 'UTC');
    v_after interval := ((v_u + interval '1 day') at time zone p_zone) - ((v_u + interval '1 day') at time zone 'UTC');
    v_early timestamptz := v_u - v_before;   -- p_local read with the offset before
    v_late timestamptz := v_u - v_after;     -- and with the offset after
    v_early_ok boolean := (v_early at time zone p_zone) = p_local;
    v_late_ok boolean := (v_late at time zone p_zone) = p_local;
    v_lo bigint;
    v_hi bigint;
    v_mid bigint;
begin
    if v_early_ok and v_late_ok then
        return least(v_early, v_late);   -- one instant, or the first of two
    elsif v_early_ok then
        return v_early;
    elsif v_late_ok then
        return v_late;
    end if;
    -- A gap: the offset grew from v_before to v_after at an instant in
    -- (v_late, v_early]; the first second that has the new offset.
    v_lo := floor(extract(epoch from least(v_early, v_late)))::bigint;
    v_hi := ceil(extract(epoch from greatest(v_early, v_late)))::bigint;
    while v_hi - v_lo > 1 loop
        v_mid := (v_lo + v_hi) / 2;
        if (to_timestamp(v_mid) at time zone p_zone) - (to_timestamp(v_mid) at time zone 'UTC') = v_after then
            v_hi := v_mid;
        else
            v_lo := v_mid;
        end if;
    end loop;
    return to_timestamp(v_hi);
end $$;

-- cron_tick is the first tick of a parsed cron expression in a time zone
-- strictly after p_after (cron_instant places local ticks in time). The two
-- day fields combine as in Kubernetes CronJob (robfig/cron) and Vixie cron:
-- when both are restricted a day matches either; when one is unrestricted
-- only the other decides. It walks months (skipping those the month field
-- excludes), then the days of a month that may fire (only those of the
-- day-of-month field when the weekday field is unrestricted), then the
-- hours and minutes of a matching day: a few steps, never a
-- minute-by-minute scan.
-- The walk is bounded by 10 years of months (121): every expression
-- cron_fields accepts fires within 8 years (a 29 February: none from 2096
-- to 2104), and past the bound it raises. Raises for an unknown zone.
-- No locks.
create or replace function workflow.cron_tick(p_spec workflow.cron_spec, p_zone text, p_after timestamptz)
returns timestamptz
language plpgsql immutable parallel safe set search_path = pg_catalog, pg_temp as $$
declare
    v_start timestamp;       -- the first local minute that may be the tick
    v_start_day date;
    v_start_hour integer;
    v_start_minute integer;
    v_either boolean := not (p_spec.days_star or p_spec.weekdays_star);
    c_days constant integer[] := array_positions(array_fill(true, array[31], array[1]), true);
    v_month date;
    v_first integer;
    v_last integer;
    v_d integer;
    v_day date;
    v_dom boolean;
    v_dow boolean;
    v_h integer;
    v_m integer;
    v_tick timestamptz;
begin
    -- Every local tick before the local time of p_after fires at or before
    -- p_after (ticks' instants grow with their local times), so the search
    -- starts at its minute.
    v_start := date_trunc('minute', p_after at time zone p_zone);
    v_start_day := v_start::date;
    v_start_hour := extract(hour from v_start)::integer;
    v_start_minute := extract(minute from v_start)::integer;
    v_month := date_trunc('month', v_start)::date;
    for i in 0 .. 120 loop
        if extract(month from v_month)::integer = any (p_spec.months) then
            v_first := extract(day from greatest(v_month, v_start_day))::integer;
            v_last := extract(day from (v_month + interval '1 month')::date - 1)::integer;
            -- The weekday field unrestricted: the days of the month field
            -- are the candidates; otherwise every day, checked.
            foreach v_d in array case when p_spec.weekdays_star then p_spec.days else c_days end loop
                continue when v_d < v_first;
                exit when v_d > v_last;
                v_day := v_month + (v_d - 1);
                if not p_spec.weekdays_star then
                    v_dom := v_d = any (p_spec.days);
                    v_dow := extract(dow from v_day)::integer = any (p_spec.weekdays);
                    continue when not ((v_dom and v_dow) or (v_either and (v_dom or v_dow)));
                end if;
                foreach v_h in array p_spec.hours loop
                    continue when v_day = v_start_day and v_h < v_start_hour;
                    foreach v_m in array p_spec.minutes loop
                        continue when v_day = v_start_day and v_h = v_start_hour and v_m < v_start_minute;
                        v_tick := workflow.cron_instant(v_day + make_interval(hours => v_h, mins => v_m), p_zone);
                        if v_tick > p_after then
                            return v_tick;
                        end if;
                    end loop;
                end loop;
            end loop;
        end if;
        v_month := (v_month + interval '1 month')::date;
    end loop;
    raise exception 'the cron expression has no tick within 10 years after %', p_after using errcode = 'SW001';
end $$;

-- cron_next is the first tick of a cron expression (cron_fields) in a time
-- zone strictly after p_after: local wall-clock ticks, daylight saving as
-- the section's header says (cron_instant), the day fields combined as in
-- Kubernetes CronJob, found by walking months, days, hours and minutes
-- (cron_tick, at most 10 years). Raises for an invalid expression, an
-- unknown zone or an infinite p_after (22023).
-- Measured (TestCronNextCost, Postgres 15 on a 2-core machine): 10,000
-- calls of 0 0 29 2 1 in Europe/Berlin take about 0.53 s, 53 us a call,
-- most of it parsing the expression; 0 0 29 2 * (up to four years to the
-- next tick) 0.62 s; */5 * * * * 0.58 s. fire_due_schedules parses once per
-- schedule and calls cron_tick.
-- No locks.
create or replace function workflow.cron_next(p_expr text, p_zone text, p_after timestamptz) returns timestamptz
language plpgsql stable parallel safe security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_spec workflow.cron_spec := workflow.cron_fields(p_expr);
    v_zone_problem text := workflow.time_zone_problem(p_zone, false);
begin
    if v_spec.problem is not null then
        raise exception 'invalid cron expression %: %', left(p_expr, 100), v_spec.problem using errcode = 'SW001';
    end if;
    if v_zone_problem is not null then
        raise exception 'cron_next: %', v_zone_problem using errcode = 'SW001';
    end if;
    if p_after is null or not isfinite(p_after) then
        raise exception 'cron_next: the time to start from must be a finite timestamp, got %', p_after
            using errcode = 'SW001';
    end if;
    return workflow.cron_tick(v_spec, p_zone, p_after);
end $$;

-- time_zone_problem says what is wrong with a time zone name, or null. A
-- zone is a name of pg_timezone_names (America/New_York, UTC, ...),
-- exactly as listed: no abbreviation, offset or POSIX rule. Reading
-- pg_timezone_names takes tens of milliseconds, so with p_listed false
-- only the name's form and that Postgres can load it are checked (cheap;
-- an abbreviation or a POSIX rule passes). No locks.
create or replace function workflow.time_zone_problem(p_zone text, p_listed boolean) returns text
language plpgsql stable parallel safe
set search_path = pg_catalog, pg_temp
as $_$
declare
    v_known boolean;
begin
    if p_zone is null or p_zone = '' then
        return 'time zone is missing';
    end if;
    v_known := char_length(p_zone) <= 64 and p_zone ~ '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$';
    if v_known then
        begin
            perform pg_catalog.now() at time zone p_zone;
        exception when invalid_parameter_value then
            v_known := false;
        end;
    end if;
    if v_known and p_listed then
        v_known := exists (select 1 from pg_catalog.pg_timezone_names z where z.name = p_zone);
    end if;
    if not v_known then
        return format('unknown time zone %s (time zones are names such as UTC or Europe/Berlin, as in pg_timezone_names)',
                      left(p_zone, 80));
    end if;
    return null;
end
$_$;

-- cron_problem says what is wrong with a cron expression and a time zone,
-- in words naming the bad field, or null when a schedule may use them
-- (cron_fields, time_zone_problem with the zone looked up in
-- pg_timezone_names: tens of milliseconds, so it is called when a
-- schedule's expression or zone is written, not when it fires). No locks.
create or replace function workflow.cron_problem(p_expr text, p_zone text) returns text
language sql stable parallel safe security definer
set search_path = pg_catalog, pg_temp
return coalesce((workflow.cron_fields(p_expr)).problem, workflow.time_zone_problem(p_zone, true));


-- ---------------------------------------------------------------------------
-- The table
-- ---------------------------------------------------------------------------

-- One row per schedule. Its identity is (source_namespace, name): a
-- schedule mirrored from a Kubernetes WorkflowSchedule has the object's
-- namespace, name and UID; one made with SQL has no namespace (its name is
-- unique among those). The run it records: type, payload, priority,
-- max_attempts, deadline (the run's deadline_at is the firing time plus
-- this), retry_base_delay and retry_max_delay (its retry policy),
-- concurrency_key (its key for the flow limits of its type). next_tick_at
-- is the next tick to fire (stale while suspended: resuming recomputes
-- it); last_tick_at the last tick dealt with, and last_outcome what became
-- of it; last_fired_run the run of the last tick that recorded one. Written
-- by the functions below; the checks and the trigger hold for plain SQL
-- too.
create table if not exists workflow.workflow_schedule (
    id uuid not null default gen_random_uuid(),
    name text not null,
    source_namespace text,                          -- a mirrored WorkflowSchedule
    source_uid text,
    cron text not null,
    time_zone text not null default 'UTC',
    type text not null,
    payload jsonb not null default '{}',
    priority integer not null default 100,
    max_attempts integer not null default 3,
    deadline interval,                              -- null: none
    retry_base_delay interval,                      -- null: the run's default (one minute)
    retry_max_delay interval,                       -- null: no cap
    concurrency_key text,                           -- the flow limits' key of each run; null: none
    concurrency_policy text not null default 'Allow',
    starting_deadline_seconds integer,              -- null: no deadline
    suspend boolean not null default false,
    next_tick_at timestamptz not null,
    last_tick_at timestamptz,
    last_outcome text,
    last_error text,
    last_fired_run uuid,
    created_by text not null default session_user,  -- the database user that made it
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    namespace workflow.namespace_name not null default 'default', -- where its runs are recorded
    busy_at timestamptz,                            -- when its tick was last found busy (fire_due_schedules)
    constraint workflow_schedule_pkey primary key (id),
    constraint workflow_schedule_name_format
        check (char_length(name) <= 253 and name ~ '^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$'),
    constraint workflow_schedule_source_namespace_format
        check (char_length(source_namespace) <= 63 and source_namespace ~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?$'),
    constraint workflow_schedule_source_uid_set
        check ((source_namespace is null) = (source_uid is null) and char_length(source_uid) between 1 and 128),
    constraint workflow_schedule_cron_valid
        check (char_length(cron) <= 1024 and (workflow.cron_fields(cron)).problem is null),
    constraint workflow_schedule_time_zone_format
        check (char_length(time_zone) <= 64 and time_zone ~ '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$'),
    constraint workflow_schedule_type_format
        check (char_length(type) <= 253 and type ~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'),
    constraint workflow_schedule_payload_object check (jsonb_typeof(payload) = 'object'),
    constraint workflow_schedule_priority_range check (priority >= 0 and priority <= 1000000),
    constraint workflow_schedule_max_attempts_range check (max_attempts >= 1 and max_attempts <= 1000),
    constraint workflow_schedule_deadline_range check (deadline > '0' and deadline <= '100 years'),
    constraint workflow_schedule_retry_range
        check (retry_base_delay > '0' and retry_max_delay > '0' and retry_max_delay >= retry_base_delay),
    constraint workflow_schedule_concurrency_key_length
        check (char_length(concurrency_key) >= 1 and char_length(concurrency_key) <= 255),
    constraint workflow_schedule_concurrency_policy_valid check (concurrency_policy in ('Allow', 'Forbid', 'Replace')),
    constraint workflow_schedule_starting_deadline_range check (starting_deadline_seconds >= 0),
    constraint workflow_schedule_last_outcome_valid
        check (last_outcome in ('fired', 'missed', 'skipped_forbid', 'replaced', 'failed')),
    constraint workflow_schedule_last_error_length check (char_length(last_error) <= 8192),
    constraint workflow_schedule_created_by_length check (char_length(created_by) <= 128),
    constraint workflow_schedule_times_finite check (isfinite(next_tick_at))
);
comment on table workflow.workflow_schedule is
    'Cron schedules: each tick of cron in time_zone records one run of type and payload (workflow.fire_due_schedules).';
comment on column workflow.workflow_schedule.next_tick_at is
    'The next tick to fire; stale while suspended (resuming, or a new cron or time zone, recomputes it from workflow.now()).';
-- A schedule's name is its namespace's: a SQL schedule's (source
-- namespace '') is unique among its namespace's SQL schedules, a mirrored
-- one's among its namespace's WorkflowSchedules.
create unique index if not exists idx_workflow_schedule_name
    on workflow.workflow_schedule (namespace, (coalesce(source_namespace, '')), name);
create index if not exists idx_workflow_schedule_due on workflow.workflow_schedule (next_tick_at) where not suspend;
create index if not exists idx_workflow_schedule_namespace on workflow.workflow_schedule (namespace);

-- The unfinished runs of a schedule, found by the prefix of their
-- idempotency keys. In the "C" collation, whatever the database's: a range
-- on the key in a linguistic collation would not hold every key of a
-- prefix. Partial: only unfinished runs with a schedule's key, so other
-- runs cost it one predicate test per write.
create index if not exists idx_workflow_run_schedule_key on workflow.workflow_run (idempotency_key collate "C")
    where status in ('pending', 'leased')
      and (starts_with(idempotency_key, 'schedule:')
           or (starts_with(idempotency_key, 'k8s:') and strpos(idempotency_key, ':schedule/') > 0));

-- What is wrong with a schedule's payload (not an object, over
-- workflow_settings.max_payload_bytes, nested too deep), or null: the
-- limits of a run's payload, told when the schedule is written rather than
-- at every tick.
create or replace function workflow.schedule_payload_problem(p_payload jsonb) returns text
language sql stable parallel safe
set search_path = pg_catalog, pg_temp
return case
    when p_payload is null or jsonb_typeof(p_payload) <> 'object' then 'payload must be a JSON object'
    when octet_length(p_payload::text) > (select st.max_payload_bytes from workflow.workflow_settings st)
        then format('payload is %s bytes; the limit is %s (workflow_settings.max_payload_bytes)',
                    octet_length(p_payload::text), (select st.max_payload_bytes from workflow.workflow_settings st))
    when workflow.json_too_deep(p_payload)
        then 'payload nests deeper than 64 levels (objects and arrays), the most a stored value may' end;

-- Every write of a schedule's expression, zone or payload, by the
-- functions below or plain SQL: what the table's checks cannot say (the
-- zone is in pg_timezone_names, the payload within the owner's limits) is
-- refused here, with the reason (cron_problem, schedule_payload_problem).
-- Only what changed is checked; updates that leave those three columns as
-- they were (a firing, a put that changes other fields) skip it.
create or replace function workflow.on_schedule_written() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_problem text;
begin
    v_problem := coalesce(
        case when tg_op = 'INSERT' or new.cron is distinct from old.cron or new.time_zone is distinct from old.time_zone
             then workflow.cron_problem(new.cron, new.time_zone) end,
        case when tg_op = 'INSERT' or new.payload is distinct from old.payload
             then workflow.schedule_payload_problem(new.payload) end);
    if v_problem is not null then
        raise exception 'schedule %: %', new.name, v_problem using errcode = 'SW001';
    end if;
    return new;
end $$;
create or replace trigger workflow_schedule_inserted before insert on workflow.workflow_schedule
    for each row execute function workflow.on_schedule_written();
create or replace trigger workflow_schedule_changed
    before update of cron, time_zone, payload on workflow.workflow_schedule
    for each row when (new.cron is distinct from old.cron or new.time_zone is distinct from old.time_zone
                       or new.payload is distinct from old.payload)
    execute function workflow.on_schedule_written();


-- ---------------------------------------------------------------------------
-- Keys and callers
-- ---------------------------------------------------------------------------

-- schedule_key is the idempotency key of the run a schedule records for a
-- tick (see the section's header). Pure.
create or replace function workflow.schedule_key(p_id uuid, p_namespace text, p_name text, p_tick timestamptz)
returns text
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
return case when p_namespace is null
            then 'schedule:' || p_id::text || ':' || to_char(p_tick at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            else 'k8s:' || p_namespace || ':schedule/' || p_name || '/' || floor(extract(epoch from p_tick))::bigint::text
       end;

-- schedule_key_range is the range [lo, hi) of the keys of one schedule's
-- runs in the "C" collation: the prefix every key of the schedule has, and
-- the prefix with its last character (':' or '/') raised by one. Pure.
create or replace function workflow.schedule_key_range(p_id uuid, p_namespace text, p_name text,
                                                        out lo text, out hi text)
language sql immutable parallel safe set search_path = pg_catalog, pg_temp as $$
    select p, left(p, -1) || chr(ascii(right(p, 1)) + 1)
    from (select case when p_namespace is null then 'schedule:' || p_id::text || ':'
                      else 'k8s:' || p_namespace || ':schedule/' || p_name || '/' end as p) k
$$;

-- schedule_namespace is the namespace of the schedule (p_source_namespace,
-- p_name) that put_schedule and delete_schedule act on: a mirrored one's
-- object's; for a producer, the one it produces for (default_namespace);
-- for the owner (p_owner), the namespace of the one SQL schedule of that
-- name ('default' when there is none; refused when several namespaces
-- have one, 22023).
create or replace function workflow.schedule_namespace(p_name text, p_source_namespace text, p_owner boolean)
returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    v_found text[];
begin
    if p_source_namespace is not null then
        return p_source_namespace;
    elsif not p_owner then
        return workflow.default_namespace();
    end if;
    select array_agg(distinct sc.namespace::text order by sc.namespace::text) into v_found
    from workflow.workflow_schedule sc
    where sc.source_namespace is null and sc.name = p_name;
    if cardinality(v_found) > 1 then
        raise exception 'schedule %: namespaces % each have a SQL schedule of that name; act on it as a login of its namespace',
            p_name, array_to_string(v_found, ', ') using errcode = 'SW001';
    end if;
    return coalesce(v_found[1], 'default');
end $$;

-- Whether the database user of this session may act as the owner of the
-- schedules (the operator, a DBA): only such a user writes a schedule
-- mirrored from Kubernetes, or another user's SQL schedule. session_user,
-- not current_user: the functions asking run as the owner.
create or replace function workflow.schedule_caller_is_owner() returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
return pg_has_role(session_user,
                   (select c.relowner from pg_catalog.pg_class c where c.oid = 'workflow.workflow_schedule'::regclass),
                   'usage');


-- ---------------------------------------------------------------------------
-- Writing schedules
-- ---------------------------------------------------------------------------

-- put_schedule creates the schedule (p_source_namespace, p_name) of the
-- namespace it belongs to (the mirrored object's, or the one the caller
-- produces for: a SQL schedule's name is its namespace's) or updates it,
-- after checking every field (each refusal names the field,
-- errcode 22023; a schedule another may not write, 42501). next_tick_at is
-- the first tick after workflow.now() for a new schedule, and when the
-- cron expression or the time zone changed or the schedule is resumed
-- (suspend from true to false); otherwise it stays. A put that changes
-- nothing writes nothing. Returns the schedule's id and next tick.
-- A schedule with p_source_namespace mirrors a Kubernetes WorkflowSchedule
-- (p_source_uid its UID) and is written by the owner only; a SQL schedule
-- by the database user that created it, or the owner. p_retry_base_delay,
-- p_retry_max_delay and p_concurrency_key are given to each run as
-- create_run's retry policy and concurrency key (null: none).
-- Fires: workflow_schedule_inserted, workflow_schedule_changed (zone,
-- payload limits).
-- Locks: the schedule row.
create or replace function workflow.put_schedule(
    p_name text,
    p_cron text,
    p_type text,
    p_payload jsonb default '{}',
    p_time_zone text default 'UTC',
    p_priority integer default 100,
    p_max_attempts integer default 3,
    p_deadline interval default null,
    p_concurrency_policy text default 'Allow',
    p_starting_deadline_seconds integer default null,
    p_suspend boolean default false,
    p_source_namespace text default null,
    p_source_uid text default null,
    p_retry_base_delay interval default null,
    p_retry_max_delay interval default null,
    p_concurrency_key text default null
) returns table (id uuid, next_tick_at timestamptz)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $_$
#variable_conflict use_column
declare
    v_now timestamptz := workflow.now();
    v_owner boolean := workflow.schedule_caller_is_owner();
    v_label text;
    v_problem text;
    v_old workflow.workflow_schedule;
    v_id uuid;
    v_next timestamptz;
    v_ns text;
    v_max integer;
begin
    if p_name is null or char_length(p_name) > 253 or p_name !~ '^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$' then
        raise exception 'schedule name %: a name is lowercase letters, digits, ''.'', ''_'' and ''-'', starting and ending with a letter or digit, at most 253 characters',
            coalesce(quote_literal(left(p_name, 300)), 'null') using errcode = 'SW001';
    end if;
    if p_source_namespace is not null then
        if char_length(p_source_namespace) > 63 or p_source_namespace !~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?$' then
            raise exception 'schedule %: source namespace % is not a Kubernetes namespace name', p_name,
                quote_literal(left(p_source_namespace, 100)) using errcode = 'SW001';
        end if;
        if p_source_uid is null or char_length(p_source_uid) not between 1 and 128 then
            raise exception 'schedule %/%: a schedule mirrored from Kubernetes needs the object''s UID (1 to 128 characters)',
                p_source_namespace, p_name using errcode = 'SW001';
        end if;
        if not v_owner then
            raise exception 'schedule %/%: a schedule with a source namespace mirrors a Kubernetes WorkflowSchedule, and only the operator (the schema''s owner) writes it',
                p_source_namespace, p_name using errcode = 'SW002';
        end if;
    elsif p_source_uid is not null then
        raise exception 'schedule %: a source UID is given without a source namespace', p_name using errcode = 'SW001';
    end if;
    v_label := coalesce(p_source_namespace || '/', '') || p_name;

    -- The zone's form here; that it is in pg_timezone_names, once, by the
    -- trigger the write fires (the same message).
    v_problem := case
        when (workflow.cron_fields(p_cron)).problem is not null
            then (workflow.cron_fields(p_cron)).problem
        when workflow.time_zone_problem(p_time_zone, false) is not null
            then workflow.time_zone_problem(p_time_zone, false)
        when p_type is null or char_length(p_type) > 253 or p_type !~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'
            then format('type %s: a type is lowercase dot-separated words ending in a version, like billing.invoice.v1 (at most 253 characters)',
                        coalesce(quote_literal(left(p_type, 300)), 'null'))
        when workflow.schedule_payload_problem(p_payload) is not null
            then workflow.schedule_payload_problem(p_payload)
        when p_priority is null or p_priority not between 0 and 1000000
            then format('priority must be between 0 and 1000000, got %s', coalesce(p_priority::text, 'null'))
        when p_max_attempts is null or p_max_attempts not between 1 and 1000
            then format('max attempts must be between 1 and 1000, got %s', coalesce(p_max_attempts::text, 'null'))
        when p_deadline <= '0' or p_deadline > '100 years'
            then format('deadline must be positive and at most 100 years, got %s', p_deadline)
        when p_concurrency_policy is null or p_concurrency_policy not in ('Allow', 'Forbid', 'Replace')
            then format('concurrency policy must be Allow, Forbid or Replace, got %s',
                        coalesce(quote_literal(left(p_concurrency_policy, 100)), 'null'))
        when p_starting_deadline_seconds < 0
            then format('starting deadline seconds must be at least 0, got %s', p_starting_deadline_seconds)
        when p_suspend is null
            then 'suspend must be true or false'
        when p_retry_base_delay <= '0'
            then format('retry base delay must be positive, got %s', p_retry_base_delay)
        when p_retry_max_delay <= '0'
            then format('retry max delay must be positive, got %s', p_retry_max_delay)
        when p_retry_max_delay < p_retry_base_delay
            then format('retry max delay %s is below the retry base delay %s', p_retry_max_delay, p_retry_base_delay)
        when char_length(p_concurrency_key) not between 1 and 255
            then format('concurrency key must be 1 to 255 characters, got %s', char_length(p_concurrency_key))
    end;
    if v_problem is not null then
        raise exception 'schedule %: %', v_label, v_problem using errcode = 'SW001';
    end if;

    -- A mirrored schedule's runs belong to its object's namespace; a
    -- producer's, to the one it produces for; the owner's SQL schedule is
    -- the one of that name, whatever its namespace (else 'default').
    v_ns := workflow.schedule_namespace(p_name, p_source_namespace, v_owner);
    loop
        select * into v_old from workflow.workflow_schedule sc
        where sc.namespace = v_ns and coalesce(sc.source_namespace, '') = coalesce(p_source_namespace, '')
          and sc.name = p_name
        for update;
        if found then
            if v_old.source_namespace is null and v_old.created_by <> session_user and not v_owner then
                raise exception 'schedule %: another database user of namespace % created it; only that user or the schema''s owner may change it',
                    v_label, v_ns using errcode = 'SW002';
            end if;
            v_next := case when v_old.cron <> p_cron or v_old.time_zone <> p_time_zone
                                or (v_old.suspend and not p_suspend)
                           then workflow.cron_next(p_cron, p_time_zone, v_now)
                           else v_old.next_tick_at end;
            update workflow.workflow_schedule sc
            set cron = p_cron, time_zone = p_time_zone, type = p_type, payload = p_payload, priority = p_priority,
                max_attempts = p_max_attempts, deadline = p_deadline, retry_base_delay = p_retry_base_delay,
                retry_max_delay = p_retry_max_delay, concurrency_key = p_concurrency_key,
                concurrency_policy = p_concurrency_policy,
                starting_deadline_seconds = p_starting_deadline_seconds, suspend = p_suspend,
                source_uid = p_source_uid, next_tick_at = v_next, updated_at = now()
            where sc.id = v_old.id
              and (sc.cron, sc.time_zone, sc.type, sc.payload, sc.priority, sc.max_attempts, sc.deadline,
                   sc.retry_base_delay, sc.retry_max_delay, sc.concurrency_key,
                   sc.concurrency_policy, sc.starting_deadline_seconds, sc.suspend, sc.source_uid, sc.next_tick_at)
                  is distinct from
                  (p_cron, p_time_zone, p_type, p_payload, p_priority, p_max_attempts, p_deadline,
                   p_retry_base_delay, p_retry_max_delay, p_concurrency_key,
                   p_concurrency_policy, p_starting_deadline_seconds, p_suspend, p_source_uid, v_next);
            return query select v_old.id, v_next;
            return;
        end if;
        -- A namespace has at most max_schedules_per_namespace schedules
        -- (the owner's setting). Counted without a lock (one a producer
        -- could hold): puts committing at the same instant may pass it by
        -- as many as there are of them.
        v_max := (select st.max_schedules_per_namespace from workflow.workflow_settings st);
        if (select count(*) from (select 1 from workflow.workflow_schedule sc
                                  where sc.namespace = v_ns limit v_max) x) >= v_max then
            raise exception 'schedule %: namespace % has % schedules, the most workflow_settings.max_schedules_per_namespace allows',
                v_label, v_ns, v_max using errcode = 'SW005';
        end if;
        insert into workflow.workflow_schedule as sc (
            name, source_namespace, source_uid, cron, time_zone, type, payload, priority, max_attempts, deadline,
            retry_base_delay, retry_max_delay, concurrency_key,
            concurrency_policy, starting_deadline_seconds, suspend, next_tick_at, namespace)
        values (p_name, p_source_namespace, p_source_uid, p_cron, p_time_zone, p_type, p_payload, p_priority,
                p_max_attempts, p_deadline, p_retry_base_delay, p_retry_max_delay, p_concurrency_key,
                p_concurrency_policy, p_starting_deadline_seconds, p_suspend,
                workflow.cron_next(p_cron, p_time_zone, v_now),
                v_ns)
        on conflict (namespace, (coalesce(source_namespace, '')), name) do nothing
        returning sc.id, sc.next_tick_at into v_id, v_next;
        if v_id is not null then
            return query select v_id, v_next;
            return;
        end if;
        -- Created at this instant by another put (now committed): update it.
    end loop;
end
$_$;

-- delete_schedule deletes the schedule (p_source_namespace, p_name) of
-- the same namespace as put_schedule and reports whether there was one. Its runs stay, finished or not. The same
-- callers as put_schedule may delete (42501 otherwise).
-- Locks: the schedule row.
create or replace function workflow.delete_schedule(p_name text, p_source_namespace text default null)
returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_owner boolean := workflow.schedule_caller_is_owner();
    v_old workflow.workflow_schedule;
begin
    if p_source_namespace is not null and not v_owner then
        raise exception 'schedule %/%: a schedule with a source namespace mirrors a Kubernetes WorkflowSchedule, and only the operator (the schema''s owner) deletes it',
            left(p_source_namespace, 100), left(p_name, 300) using errcode = 'SW002';
    end if;
    select * into v_old from workflow.workflow_schedule sc
    where sc.namespace = workflow.schedule_namespace(p_name, p_source_namespace, v_owner)
      and coalesce(sc.source_namespace, '') = coalesce(p_source_namespace, '') and sc.name = p_name
    for update;
    if not found then
        return false;
    end if;
    if v_old.source_namespace is null and v_old.created_by <> session_user and not v_owner then
        raise exception 'schedule %: another database user of namespace % created it; only that user or the schema''s owner may delete it',
            p_name, v_old.namespace using errcode = 'SW002';
    end if;
    delete from workflow.workflow_schedule sc where sc.id = v_old.id;
    return true;
end $$;


-- ---------------------------------------------------------------------------
-- Firing
-- ---------------------------------------------------------------------------

-- fire_due_schedules fires up to p_limit due schedules (not suspended,
-- next_tick_at <= workflow.now()), oldest tick first, and returns one row
-- per tick it dealt with:
--   fired           the tick's run was recorded (run_id; an existing run
--                   that already held the tick's key counts as recorded)
--   replaced        the same, after cancelling the schedule's unfinished
--                   runs (concurrency_policy Replace)
--   skipped_forbid  a run of the schedule is unfinished (Forbid): none
--   missed          not started: an older due tick (only the most recent
--                   may start), or one more than starting_deadline_seconds
--                   old
--   failed          recording the run failed (the error, say a payload
--                   over a since lowered workflow_settings.max_payload_bytes,
--                   is kept in last_error); the tick is not retried
--   busy            a lock it needed (a run to cancel, say, that another
--                   transaction holds) was not free within lock_timeout
--                   (500 ms): nothing of it was done, the schedule stays
--                   due and is not written, and the next call tries again
-- then (but for busy) sets last_tick_at, last_outcome, last_error,
-- last_fired_run and next_tick_at (the first tick after the one dealt
-- with).
-- Due ticks are found by walking from next_tick_at with cron_next, at most
-- 100 steps (each older tick reported missed); when more are due, the most
-- recent is found by bisection between the 100th and now (about 25
-- cron_next calls for years of minutes) and the ticks between are not
-- listed. A schedule whose next tick cannot be computed (its zone left the
-- time zone database) is failed and parked at workflow.far_future() until
-- a put changes it.
-- Each schedule is fired in a subtransaction, so one that fails leaves the
-- others fired; errors of concurrency or resources (classes 40, 53, 55P03,
-- 57, 58, XX) are raised instead, and the whole call is retried by its
-- caller with every tick still due. (Past 64 subtransactions that write,
-- other sessions' snapshots cost more while the call runs: p_limit bounds
-- them; keep it near the default.)
-- Runs are recorded by workflow.create_run and cancelled by
-- workflow.cancel_run (workflow.cancelled_by 'schedule <name>'), so every
-- rule, event and trigger of a producer's run and cancel applies.
-- Fires: workflow_run_inserted ('created', payload limits, DAG start),
-- workflow_run_wake, workflow_run_cancelled, workflow_parent_ended,
-- workflow_child_finished, workflow_source_run_changed (cancel_run).
-- Locks: the schedules, skipping locked ones (two callers never fire one
-- schedule at once; a caller that read a schedule another then fired finds
-- it no longer due); per schedule, then, its unfinished runs in id order
-- (Replace), then the new run's key.
create or replace function workflow.fire_due_schedules(p_limit integer default 100)
returns table (schedule_id uuid, tick timestamptz, run_id uuid, outcome text)
language plpgsql security definer set search_path = pg_catalog, pg_temp
-- A schedule whose firing waits for a lock (a run another transaction
-- holds) waits at most this long: it is 'busy', stays due, and the others
-- fire.
set lock_timeout = '500ms'
as $$
#variable_conflict use_column
declare
    c_walk constant integer := 100;
    v_now timestamptz := workflow.now();
    v_by text := coalesce(current_setting('workflow.cancelled_by', true), '');
    s workflow.workflow_schedule;
    v_tick timestamptz;
    v_next timestamptz;
    v_missed timestamptz[];
    v_lo timestamptz;
    v_hi timestamptz;
    v_mid timestamptz;
    v_range record;
    v_spec workflow.cron_spec;
    v_unfinished uuid[];
    v_cancel uuid;
    v_run uuid;
    v_outcome text;
    v_error text;
    v_state text;
begin
    if p_limit is null or p_limit < 1 or p_limit > 10000 then
        raise exception 'fire_due_schedules: the limit must be between 1 and 10000, got %', p_limit using errcode = 'SW001';
    end if;
    for s in
        select * from workflow.workflow_schedule sc
        where not sc.suspend and sc.next_tick_at <= v_now
        -- Schedules found busy go after the others (the longest busy
        -- first): busy ones never crowd the others out of a batch.
        order by sc.busy_at nulls first, sc.next_tick_at, sc.id
        limit p_limit
        for update skip locked
    loop
        v_tick := s.next_tick_at;
        v_next := null;
        v_missed := '{}';
        v_run := null;
        v_outcome := null;
        v_error := null;
        begin
            v_spec := workflow.cron_fields(s.cron);
            if v_spec.problem is not null then
                raise exception 'invalid cron expression %: %', left(s.cron, 100), v_spec.problem using errcode = 'SW001';
            end if;
            -- The most recent due tick: walk (v_tick is due, v_next the
            -- tick after it), then bisect if more are due.
            v_next := workflow.cron_tick(v_spec, s.time_zone, v_tick);
            while v_next <= v_now and cardinality(v_missed) < c_walk loop
                v_missed := v_missed || v_tick;
                v_tick := v_next;
                v_next := workflow.cron_tick(v_spec, s.time_zone, v_tick);
            end loop;
            if v_next <= v_now then
                -- cron_tick(v_lo) <= now < cron_tick(v_hi) throughout.
                v_lo := v_tick;
                v_hi := v_now;
                for i in 1 .. 100 loop
                    v_tick := workflow.cron_tick(v_spec, s.time_zone, v_lo);
                    v_next := workflow.cron_tick(v_spec, s.time_zone, v_tick);
                    exit when v_next > v_now;
                    v_mid := v_lo + (v_hi - v_lo) / 2;
                    if workflow.cron_tick(v_spec, s.time_zone, v_mid) <= v_now then
                        v_lo := v_mid;
                    else
                        v_hi := v_mid;
                    end if;
                end loop;
                if v_next <= v_now then
                    raise exception 'schedule %: the most recent due tick was not found', s.name;
                end if;
            end if;

            if s.starting_deadline_seconds is not null
               and v_tick < v_now - make_interval(secs => s.starting_deadline_seconds) then
                v_outcome := 'missed';
            end if;
            if v_outcome is null and s.concurrency_policy <> 'Allow' then
                select * into v_range from workflow.schedule_key_range(s.id, s.source_namespace, s.name);
                select array_agg(r.id order by r.id) into v_unfinished
                from workflow.workflow_run r
                where r.idempotency_key collate "C" >= v_range.lo and r.idempotency_key collate "C" < v_range.hi
                  and r.status in ('pending', 'leased') and r.namespace = s.namespace
                  and (starts_with(r.idempotency_key, 'schedule:')
                       or (starts_with(r.idempotency_key, 'k8s:') and strpos(r.idempotency_key, ':schedule/') > 0));
                if v_unfinished is not null and s.concurrency_policy = 'Forbid' then
                    v_outcome := 'skipped_forbid';
                elsif v_unfinished is not null then
                    -- Busy at once, not after lock_timeout, when another
                    -- transaction holds one of them.
                    perform 1 from workflow.workflow_run r where r.id = any (v_unfinished) order by r.id for update nowait;
                    perform set_config('workflow.cancelled_by',
                                       'schedule ' || coalesce(s.source_namespace || '/', '') || s.name, true);
                    foreach v_cancel in array v_unfinished loop
                        perform workflow.cancel_run(v_cancel);
                    end loop;
                    perform set_config('workflow.cancelled_by', v_by, true);
                    v_outcome := 'replaced';
                end if;
            end if;
            if v_outcome is null or v_outcome = 'replaced' then
                select c.id into v_run
                from workflow.create_run(
                    p_type => s.type, p_payload => s.payload, p_priority => s.priority,
                    p_idempotency_key => workflow.schedule_key(s.id, s.source_namespace, s.name, v_tick),
                    p_max_attempts => s.max_attempts, p_deadline_at => v_now + s.deadline,
                    p_retry_base_ms => (extract(epoch from s.retry_base_delay) * 1000)::bigint,
                    p_retry_max_ms => (extract(epoch from s.retry_max_delay) * 1000)::bigint,
                    p_source_namespace => s.source_namespace, p_source_uid => s.source_uid,
                    p_source_name => case when s.source_namespace is not null and char_length(s.name) <= 242
                                          then s.name || '-' || floor(extract(epoch from v_tick))::bigint::text end,
                    p_concurrency_key => s.concurrency_key, p_namespace => s.namespace) c;
                v_outcome := coalesce(v_outcome, 'fired');
            end if;
        exception when others then
            get stacked diagnostics v_state = returned_sqlstate, v_error = message_text;
            if v_state = '55P03' then
                v_outcome := 'busy';
            elsif left(v_state, 2) in ('40', '53', '57', '58', 'XX') then
                raise;
            else
                v_outcome := 'failed';
                v_run := null;
                v_missed := '{}';
                if v_next is null or v_next <= v_tick then
                    v_next := workflow.far_future();
                end if;
            end if;
        end;
        if v_outcome = 'busy' then
            -- Nothing of it was done (the block rolled back): it stays due,
            -- for a later call, after the schedules that are not busy.
            update workflow.workflow_schedule sc set busy_at = clock_timestamp() where sc.id = s.id;
            return query select s.id, v_tick, null::uuid, 'busy'::text;
            continue;
        end if;

        return query select s.id, m.t, null::uuid, 'missed'::text from unnest(v_missed) m(t) order by m.t;
        return query select s.id, v_tick, v_run, v_outcome;
        update workflow.workflow_schedule sc
        set last_tick_at = v_tick, last_outcome = v_outcome, last_error = left(v_error, 8192),
            last_fired_run = coalesce(v_run, sc.last_fired_run), next_tick_at = v_next, busy_at = null
        where sc.id = s.id;
    end loop;
end $$;


-- ---------------------------------------------------------------------------
-- Reading schedules
-- ---------------------------------------------------------------------------

-- list_schedules lists schedules of the namespaces the caller reads
-- (every one for the owner) for the console and the operator, by
-- namespace then name: every one (p_source_namespace null), the SQL ones
-- (''), or one namespace's; one name (p_name) or all; and, when
-- p_namespaces is not null, only schedules of those namespaces (a SQL
-- schedule is of none). Each with its next and last tick and how many of
-- its runs are unfinished (pending or leased), counted by key prefix on
-- idx_workflow_run_schedule_key. Reads only; no locks.
create or replace function workflow.list_schedules(
    p_source_namespace text default null,
    p_name text default null,
    p_namespaces text[] default null
) returns table (
    id uuid, name text, source_namespace text, source_uid text, cron text, time_zone text, type text,
    payload jsonb, priority integer, max_attempts integer, deadline interval, concurrency_policy text,
    starting_deadline_seconds integer, suspend boolean, next_tick_at timestamptz, last_tick_at timestamptz,
    last_outcome text, last_error text, last_fired_run uuid, unfinished_runs bigint, created_by text,
    created_at timestamptz, updated_at timestamptz, retry_base_delay interval, retry_max_delay interval,
    concurrency_key text
)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select sc.id, sc.name, sc.source_namespace, sc.source_uid, sc.cron, sc.time_zone, sc.type, sc.payload,
           sc.priority, sc.max_attempts, sc.deadline, sc.concurrency_policy, sc.starting_deadline_seconds,
           sc.suspend, sc.next_tick_at, sc.last_tick_at, sc.last_outcome, sc.last_error, sc.last_fired_run,
           (select count(*) from workflow.workflow_run r
            where r.idempotency_key collate "C" >= k.lo and r.idempotency_key collate "C" < k.hi
              and r.status in ('pending', 'leased') and r.namespace = sc.namespace
              and (starts_with(r.idempotency_key, 'schedule:')
                   or (starts_with(r.idempotency_key, 'k8s:') and strpos(r.idempotency_key, ':schedule/') > 0))),
           sc.created_by, sc.created_at, sc.updated_at, sc.retry_base_delay, sc.retry_max_delay, sc.concurrency_key
    from workflow.workflow_schedule sc
    cross join lateral workflow.schedule_key_range(sc.id, sc.source_namespace, sc.name) k
    cross join (select workflow.caller_namespaces('read') as ns) v
    where (p_source_namespace is null or coalesce(sc.source_namespace, '') = p_source_namespace)
      and (p_name is null or sc.name = p_name)
      and (p_namespaces is null or sc.namespace = any (p_namespaces))
      -- Only the namespaces the caller reads (every one for the owner).
      and (v.ns is null or sc.namespace = any (v.ns))
    order by coalesce(sc.source_namespace, ''), sc.name
$$;


-- schedule_latest_runs lists the latest p_limit runs of the schedule
-- (p_namespace, p_name), p_namespace null for a SQL schedule, newest first
-- (by creation, then id), whatever their status: the runs whose
-- idempotency key lies in the schedule's key range (schedule_key_range;
-- the key names the tick, see the section's header). Nothing when there is
-- no such schedule. For the console's schedule page (workflow_reader may
-- call it).
--   A mirrored schedule's runs all carry its namespace (a k8s: key is held
--   only by a run of that namespace: workflow_run_reserved_key), so its
--   namespace's runs are read newest first on
--   idx_workflow_run_namespace_created until p_limit of them are the
--   schedule's: every run, read further the busier the namespace is with
--   other runs between the schedule's.
--   A SQL schedule's runs carry no source: its unfinished runs are read by
--   key on idx_workflow_run_schedule_key, its finished ones among the
--   finished runs of its type, newest first, on
--   idx_workflow_run_type_created. A finished run of another type (one the
--   schedule recorded before its type was changed, or another writer's
--   under its key) is not listed.
-- Reads only; no locks.
create or replace function workflow.schedule_latest_runs(p_namespace text, p_name text, p_limit integer)
returns table (id uuid, status text, created_at timestamptz, finished_at timestamptz, idempotency_key text)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select r.id, r.status, r.created_at, r.finished_at, r.idempotency_key
    from workflow.workflow_schedule sc
    cross join lateral workflow.schedule_key_range(sc.id, sc.source_namespace, sc.name) k
    cross join lateral (
        (select n.id, n.status, n.created_at, n.finished_at, n.idempotency_key
         from workflow.workflow_run n
         where sc.source_namespace is not null and n.namespace = sc.source_namespace
           and n.idempotency_key collate "C" >= k.lo and n.idempotency_key collate "C" < k.hi
         order by n.created_at desc, n.id desc
         limit p_limit)
        union all
        (select u.id, u.status, u.created_at, u.finished_at, u.idempotency_key
         from workflow.workflow_run u
         where sc.source_namespace is null and u.namespace = sc.namespace
           and u.idempotency_key collate "C" >= k.lo and u.idempotency_key collate "C" < k.hi
           and u.status in ('pending', 'leased')
           and (starts_with(u.idempotency_key, 'schedule:')
                or (starts_with(u.idempotency_key, 'k8s:') and strpos(u.idempotency_key, ':schedule/') > 0))
         order by u.created_at desc, u.id desc
         limit p_limit)
        union all
        (select f.id, f.status, f.created_at, f.finished_at, f.idempotency_key
         from workflow.workflow_run f
         where sc.source_namespace is null and f.type collate "C" = sc.type and f.namespace = sc.namespace
           and f.status in ('succeeded', 'failed', 'cancelled')
           and f.idempotency_key collate "C" >= k.lo and f.idempotency_key collate "C" < k.hi
         order by f.created_at desc, f.id desc
         limit p_limit)
    ) r
    where coalesce(sc.source_namespace, '') = coalesce(p_namespace, '') and sc.name = p_name
      and workflow.acts_on(sc.namespace, 'read')
    order by r.created_at desc, r.id desc
    limit p_limit
$$;


-- Nothing here is callable by PUBLIC; see the list at the top for who
-- should be granted what.
revoke all on function
    workflow.cron_field(text, text, integer, integer, text[], boolean),
    workflow.cron_fields(text),
    workflow.cron_instant(timestamp, text),
    workflow.cron_tick(workflow.cron_spec, text, timestamptz),
    workflow.cron_next(text, text, timestamptz),
    workflow.cron_problem(text, text),
    workflow.time_zone_problem(text, boolean),
    workflow.schedule_payload_problem(jsonb),
    workflow.on_schedule_written(),
    workflow.schedule_key(uuid, text, text, timestamptz),
    workflow.schedule_key_range(uuid, text, text),
    workflow.schedule_caller_is_owner(),
    workflow.schedule_namespace(text, text, boolean),
    workflow.run_sources(text[]),
    workflow.put_schedule(text, text, text, jsonb, text, integer, integer, interval, text, integer, boolean, text, text,
                          interval, interval, text),
    workflow.delete_schedule(text, text),
    workflow.fire_due_schedules(integer),
    workflow.list_schedules(text, text, text[]),
    workflow.schedule_latest_runs(text, text, integer)
from public;


-- ===========================================================================
-- 9. PLANNING OF THE HOT CALLS
-- ===========================================================================

-- The calls workers and the autoscaler make many times a second plan once
-- per session and never by scanning a whole table. Left to choose, the
-- server planned their statements anew on every call, even lock_parents'
-- for an empty array, so they force generic plans. A session keeps those
-- plans until the table's statistics change, and plans made while
-- workflow_run was small or never analyzed (a fresh install whose workers
-- connected before the first runs) read every run by a sequential scan on
-- each call until the next autoanalyze, so they plan without sequential
-- scans. And without JIT: a scan made costly that way
-- (the one-row settings table has no other path) would cross
-- jit_above_cost and compile the statement on every call (the figures of
-- all three are in decision 0008). The three
-- settings stand at each such function's definition, beside its own
-- (such as claim_runs' join methods): active_types, claim_runs,
-- heartbeat_runs, lock_parents, complete_runs, fail_runs, release_runs,
-- record_steps and queue_depth; TestGenericPlansNeverScanWholeTables keeps
-- the rule.


-- ===========================================================================
-- 10. ROLES
-- ===========================================================================

-- Nothing here is callable by PUBLIC; roles.sql grants workflow_worker,
-- workflow_producer and workflow_reader what each needs. The trigger
-- functions and internal helpers are granted to no one.
revoke all on function
    workflow.active_types(text, text[]),
    workflow.active_namespace_types(text[]),
    workflow.session_is_owner(),
    workflow.caller_namespaces(text),
    workflow.acts_on(text, text),
    workflow.default_namespace(),
    workflow.producer_namespace(text),
    workflow.type_shared(text, text, text),
    workflow.grant_namespace(text, text, text),
    workflow.revoke_namespace(text, text, text),
    workflow.cancel_run(uuid),
    workflow.retry_run(uuid, integer, text),
    workflow.created_attempts(uuid),
    workflow.claim_runs(text, text[], text, integer, bigint, text[], text, uuid[], boolean),
    workflow.hand_off_candidates(text, text, uuid[], text[], text[], text[], text, integer, timestamptz),
    workflow.claim_bucket(text, text[], text[]),
    workflow.claim_pick(text, text[], text[], text, integer, timestamptz),
    workflow.claim_lease(text, tid[], bigint, timestamptz, bigint, interval),
    workflow.complete_runs(text, uuid[], bigint[], jsonb[]),
    workflow.create_runs(text[], text[], integer[], timestamptz[], text[], integer[], bigint[], bigint[], bigint[],
                         text[], text[], text, text),
    workflow.dag_advance(uuid),
    workflow.dag_final_started(workflow.workflow_run, jsonb),
    workflow.dag_step_failed(workflow.workflow_run),
    workflow.dag_fan_out(workflow.workflow_run, record, bigint),
    workflow.dag_all_done(workflow.workflow_run, jsonb, integer, jsonb),
    workflow.dags_advance(uuid[]),
    workflow.children_finished(uuid[]),
    workflow.dag_unshared_step(workflow.workflow_run),
    workflow.new_lease_token(bytea, uuid),
    workflow.lease_fence(bigint),
    workflow.dag_path_value(jsonb, text, boolean),
    workflow.path_cost_problem(text),
    workflow.dag_end(workflow.workflow_run, text, jsonb, text, jsonb),
    workflow.dag_fail(workflow.workflow_run, text, jsonb),
    workflow.dag_finally(workflow.workflow_run, jsonb, timestamptz),
    workflow.dag_succeed(workflow.workflow_run, jsonb, integer),
    workflow.expire_deadlines(uuid[], integer),
    workflow.fail_runs(text, uuid[], bigint[], text[], boolean[]),
    workflow.flow_admit(text, text, integer, timestamptz),
    workflow.flow_pass(text, workflow.workflow_registry, timestamptz, timestamptz, integer, integer, boolean, text[],
                       integer[], uuid[], text[]),
    workflow.flow_park_full(text, text, integer, timestamptz, text[], timestamptz[], uuid[], text[]),
    workflow.flow_count_starts(text, workflow.workflow_registry, timestamptz, text[], integer[], tid[], integer, integer),
    workflow.flow_recheck(integer),
    workflow.free_slots(text[], text[], text[]),
    workflow.heartbeat_runs(text, uuid[], bigint[], bigint),
    workflow.inbox_version(),
    workflow.lock_parents(uuid[]),
    workflow.on_child_finished(),
    workflow.on_run_inserting(),
    workflow.on_run_committing(),
    workflow.on_flow_slot_freed(),
    workflow.on_parent_ended(),
    workflow.on_run_cancelled(),
    workflow.on_run_history_rewritten(),
    workflow.on_run_inserted(),
    workflow.on_run_soft_deleted(),
    workflow.on_runs_deleted(),
    workflow.on_status_changed_by_sql(),
    workflow.park_run(text, uuid, bigint, text, text, integer, timestamptz, bigint, text),
    workflow.queue_depth(text[], text, bigint, text),
    workflow.reap_expired_leases(integer),
    workflow.resolve_child_entry(workflow.workflow_run),
    workflow.run_trail(uuid),
    workflow.record_steps(text, uuid[], bigint[], text[], integer[], jsonb[]),
    workflow.release_runs(text, uuid[], bigint[]),
    workflow.send_signal(uuid, text, jsonb, text, text),
    workflow.set_marks(boolean),
    workflow.restore_marks(text, boolean),
    workflow.start_child(text, uuid, bigint, text, integer, text, jsonb, integer, integer, bigint),
    workflow.type_depths(),
    workflow.delete_finished_runs(interval, integer),
    workflow.history_partitions(),
    workflow.create_history_partition(timestamptz, timestamptz),
    workflow.prepare_history_partitions(integer),
    workflow.drop_history_partitions(interval),
    workflow.append_run_logs(text, uuid[], bigint[], bigint[], uuid[], timestamptz[], text[], text[]),
    workflow.run_log_visible(uuid),
    workflow.run_logs(uuid, integer, bigint, integer),
    workflow.run_log_attempts(uuid),
    workflow.schema_version(),
    workflow.begin_schema(integer),
    workflow.finish_schema()
from public;


-- The last statement: record the version and drop what the file no longer
-- defines (section 0).
select workflow.finish_schema();
