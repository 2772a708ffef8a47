-- Tenants cannot hurt each other.
--
-- * Limits belong to the database's owner, not to the caller: the payload
--   limit moves from the caller's own setting (workflow.max_payload_bytes,
--   which any session could raise) to workflow.workflow_settings, a table
--   only the owner writes. A value set with ALTER DATABASE … SET
--   workflow.max_payload_bytes is carried over once, here.
-- * JSON that a client decodes nests at most 64 levels (objects and
--   arrays): payloads, results, step outputs, signal payloads, DAG step
--   payloads and results, registry definitions. Deeper values are refused
--   where they are written; a worker's result that breaks a limit fails
--   that run alone (complete_runs no longer raises for it, so the other
--   completions of the batch stand).
-- * One limit along every path: a step output (where a child's result and
--   a DAG's result are copied into a parent's journal) is at most 1 MiB,
--   like the result it copies.
-- * The functions mark their own writes with workflow.via_function set in
--   their bodies (set_config), not with a SET clause: a SET clause of a
--   custom parameter needs a superuser, and the schema's owner should not be
--   one. The previous value is put back before each function returns.
-- * Floods: a signal a run waits for is never refused for the backlog of
--   others (the backlog is bounded per name, and the awaited name is
--   delivered at once); deadlines expire a fair share of every type in each
--   batch; priority is 0 to 1000000; a registry definition is at most
--   256 KiB; a producer cannot restore a soft-deleted run nor move
--   updated_at back.

-- The owner's limits. One row; readable by every role (nothing in it is
-- secret), written only by the owner.
create table workflow.workflow_settings (
    singleton boolean primary key default true
        constraint workflow_settings_one_row check (singleton),
    max_payload_bytes integer not null default 1048576
        constraint workflow_settings_max_payload_bytes_range check (max_payload_bytes between 1024 and 67108864),
    max_journal_bytes bigint not null default 67108864
        constraint workflow_settings_max_journal_bytes_range check (max_journal_bytes between 1048576 and 134217728)
);
comment on table workflow.workflow_settings is
    'Limits set by the database owner (one row): max_payload_bytes bounds a run''s payload as JSON text (1 KiB to 64 MiB, default 1 MiB); max_journal_bytes the step outputs a claim loads for one run (1 to 128 MiB, default 64 MiB).';
insert into workflow.workflow_settings (max_payload_bytes)
select least(greatest(v::bigint, 1024), 67108864)::integer
from (select nullif(btrim(current_setting('workflow.max_payload_bytes', true)), '') as v) s
where v ~ '^[0-9]{1,12}$'
union all
select 1048576
where coalesce(nullif(btrim(current_setting('workflow.max_payload_bytes', true)), ''), 'x') !~ '^[0-9]{1,12}$';

-- Whether a JSON value nests more than 64 containers (objects and arrays)
-- deep: true when a container sits at level 64 (the value itself is level
-- 0). Visits only the first 64 levels, so a deep value is told cheaply.
create function workflow.json_too_deep(p_value jsonb) returns boolean
language sql immutable parallel safe
return jsonb_path_exists(p_value, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")');

-- A step output's problem (a journaled value: a step's output, a child's or
-- a DAG's result copied into its parent's journal), or null.
create or replace function workflow.output_problem(p_output jsonb) returns text
language sql stable parallel safe
return case when p_output is not null and octet_length(p_output::text) > 1048576
            then format('output is %s bytes; the limit is 1048576 (1 MiB)', octet_length(p_output::text))
            when workflow.json_too_deep(p_output)
            then 'output nests deeper than 64 levels (objects and arrays), the most a stored value may' end;

-- A run's result's problem, or null: the same bounds as a step output, so
-- that a child's result always fits in its parent's journal.
create function workflow.result_problem(p_result jsonb) returns text
language sql stable parallel safe
return case when p_result is not null and octet_length(p_result::text) > 1048576
            then format('result is %s bytes; the limit is 1048576 (1 MiB)', octet_length(p_result::text))
            when workflow.json_too_deep(p_result)
            then 'result nests deeper than 64 levels (objects and arrays), the most a stored value may' end;

-- Each journal entry's output size, kept by the database itself, so a
-- claim can tell a journal too large to load without reading it.
alter table workflow.workflow_step
    add column output_bytes integer generated always as (coalesce(octet_length(output::text), 0)) stored;

alter table workflow.workflow_step drop constraint workflow_step_output_size;
alter table workflow.workflow_step add constraint workflow_step_output_size
    check (output is null or octet_length(output::text) <= 1048576) not valid;

-- Priority: what the WorkflowRun CRD allows. Rows outside it (none could be
-- meant) are brought to the nearest bound first.
update workflow.workflow_run set priority = least(greatest(priority, 0), 1000000)
where priority not between 0 and 1000000;
alter table workflow.workflow_run add constraint workflow_run_priority_range
    check (priority between 0 and 1000000) not valid;
alter table workflow.workflow_run validate constraint workflow_run_priority_range;

alter table workflow.workflow_registry add constraint workflow_registry_definition_size
    check (definition is null or octet_length(definition::text) <= 262144) not valid;

-- What only the owner may do to a run's history: a soft delete is final
-- (deleted_at, once set, never changes: a producer's UPDATE that tries is
-- refused), and updated_at never moves back (a producer's earlier value is
-- replaced by the row's own). The functions run as the owner.
create function workflow.on_run_history_rewritten() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp as $$
begin
    if pg_has_role(current_user, (select c.relowner from pg_catalog.pg_class c where c.oid = tg_relid), 'usage') then
        return new;
    end if;
    if old.deleted_at is not null and new.deleted_at is distinct from old.deleted_at then
        raise exception 'workflow run % was deleted at %; a soft delete is final', old.id, old.deleted_at
            using errcode = '55000';
    end if;
    -- updated_at keeps the later time (a cancel that waited on a worker's
    -- write may carry an earlier now(); that is no error, and no rewrite).
    new.updated_at := old.updated_at;
    return new;
end
$$;
revoke execute on function workflow.on_run_history_rewritten() from public;

create trigger workflow_run_history_rewritten
    before update of deleted_at, updated_at on workflow.workflow_run
    for each row
    when ((old.deleted_at is not null and new.deleted_at is distinct from old.deleted_at)
          or new.updated_at < old.updated_at)
    execute function workflow.on_run_history_rewritten();

-- The functions below keep their bodies; each now marks its writes with
-- workflow.via_function in the body (see above) and puts the old value back.

CREATE OR REPLACE FUNCTION workflow.claim_runs(p_worker_id text, p_type_prefixes text[], p_runtime text, p_limit integer, p_lease_ms bigint, p_types text[] DEFAULT NULL::text[]) RETURNS TABLE(id uuid, type text, payload jsonb, attempt integer, max_attempts integer, lease_until timestamp with time zone, created_at timestamp with time zone, lease_token bigint, deadline_at timestamp with time zone, journal jsonb, traceparent text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET jit TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    AS $$
#variable_conflict use_column
declare
    v_via text := coalesce(current_setting('workflow.via_function', true), '');
    v_patterns text[];
    v_types text[];
    v_journal_cap bigint := (select st.max_journal_bytes from workflow.workflow_settings st);
begin
    perform set_config('workflow.via_function', 'on', true);
    if p_worker_id is null or p_worker_id = '' or char_length(p_worker_id) > 253 then
        raise exception 'claim_runs: worker id must be 1 to 253 characters' using errcode = '22023';
    end if;
    if p_limit is null or p_limit < 1 or p_limit > 10000 then
        raise exception 'claim_runs: limit must be between 1 and 10000, got %', p_limit using errcode = '22023';
    end if;
    if p_lease_ms is null or p_lease_ms < 1000 or p_lease_ms > 86400000 then
        raise exception 'claim_runs: lease must be between 1000 ms and 24 h, got % ms', p_lease_ms using errcode = '22023';
    end if;
    -- '' and '%' would both mean "every type": say so with an empty list.
    if exists (select 1 from unnest(p_type_prefixes) p where p is null or p = '' or p = '%') then
        raise exception 'claim_runs: a type prefix must not be empty or "%%"; pass no prefixes to claim every type'
            using errcode = '22023';
    end if;
    if cardinality(p_type_prefixes) > 0 then
        select array_agg(workflow.prefix_pattern(p)) into v_patterns from unnest(p_type_prefixes) p;
    end if;
    -- The claimable types; null means every type (no prefixes, no types).
    if p_types is not null or v_patterns is not null then
        select coalesce(array_agg(distinct c.t), '{}') into v_types
        from (select t from unnest(p_types) t
              where t is not null and (v_patterns is null or t like any (v_patterns))
              union all
              select t from workflow.active_types(p_type_prefixes) t
              where p_types is null) c
        where not exists (
            select 1 from workflow.workflow_registry g
            where g.workflow_name = c.t
              and (not g.is_enabled or (p_runtime is not null and g.runtime <> p_runtime)));
    end if;

    return query
    with candidates as (
        select c.id, c.wait_kind, c.wait_step
        from (
            select r.id, r.wait_kind, r.wait_step, r.priority, r.created_at
            from unnest(v_types) t(type)
            cross join lateral (
                select r.id, r.wait_kind, r.wait_step, r.priority, r.created_at
                from workflow.workflow_run r
                where r.type collate "C" = t.type
                  and coalesce(r.status, '') = 'pending' -- idx_workflow_run_claim_type's predicate
                  and r.deleted_at is null
                  and r.run_at <= now()
                  and (r.deadline_at is null or r.deadline_at > now())
                order by r.priority, r.created_at
                limit p_limit
                for update of r skip locked
            ) r
            union all
            select a.id, a.wait_kind, a.wait_step, a.priority, a.created_at
            from (
                select r.id, r.wait_kind, r.wait_step, r.priority, r.created_at
                from workflow.workflow_run r
                where v_types is null
                  and r.status = 'pending'
                  and r.deleted_at is null
                  and r.run_at <= now()
                  and (r.deadline_at is null or r.deadline_at > now())
                  and not exists (
                      select 1 from workflow.workflow_registry g
                      where g.workflow_name = r.type
                        and (not g.is_enabled or (p_runtime is not null and g.runtime <> p_runtime)))
                order by r.priority, r.created_at
                limit p_limit
                for update of r skip locked
            ) a
        ) c
        order by c.priority, c.created_at
        limit p_limit
    ), claimed as (
        update workflow.workflow_run r
        set status      = 'leased',
            attempt     = r.attempt + 1,
            leased_by   = p_worker_id,
            lease_until = now() + p_lease_ms * interval '1 millisecond',
            lease_token = nextval('workflow.lease_token_seq'),
            heartbeat_count = 0,
            wait_kind   = null,
            wait_step   = null,
            wait_signal = null,
            started_at  = coalesce(r.started_at, now()),
            updated_at  = now()
        from candidates c
        where r.id = c.id
        returning r.id, r.type, r.payload, r.attempt, r.max_attempts, r.lease_until,
                  r.created_at, r.priority, r.lease_token, r.deadline_at, c.wait_kind, c.wait_step,
                  r.traceparent
    ), timers as (
        -- The timer resolves the wait it ends: a sleep is done, any other wait
        -- timed out.
        update workflow.workflow_step s
        set outcome     = case when c.wait_kind = 'sleep' then 'ok' else 'timeout' end,
            finished_at = now()
        from claimed c
        where c.wait_kind is not null
          and s.run_id = c.id and s.name = c.wait_step and s.finished_at is null
        returning s.run_id
    ), events as (
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select c.id, e.event_type, e.data
        from claimed c
        -- woken, then started: each run's events are emitted (and numbered)
        -- in order. 'started' is the lease: who holds it, for which attempt,
        -- until when.
        cross join lateral (values
            ('woken', jsonb_build_object('reason', case when c.wait_kind = 'sleep' then 'timer' else 'timeout' end,
                                         'step', c.wait_step, 'wait_kind', c.wait_kind)),
            ('started', jsonb_build_object('worker_id', p_worker_id, 'attempt', c.attempt,
                                           'lease_until', c.lease_until))) e(event_type, data)
        where e.event_type <> 'woken' or c.wait_kind is not null
    )
    select c.id, c.type, c.payload, c.attempt, c.max_attempts, c.lease_until, c.created_at,
           c.lease_token, c.deadline_at,
           -- A journal too large to load is handed over as a JSON string
           -- saying so (the client fails that run alone), never aggregated:
           -- an aggregate over jsonb's limit would fail the whole claim.
           case when (select sum(s.output_bytes) from workflow.workflow_step s where s.run_id = c.id) > v_journal_cap
                then to_jsonb(format('the journal holds %s bytes of step outputs; a claim loads at most %s (workflow_settings.max_journal_bytes), so the run cannot be replayed',
                                     (select sum(s.output_bytes) from workflow.workflow_step s where s.run_id = c.id),
                                     v_journal_cap))
                else (select jsonb_agg(jsonb_build_object(
                       'name', s.name, 'position', s.position, 'kind', s.kind,
                       'outcome', case when s.name = c.wait_step and s.finished_at is null
                                       then case when c.wait_kind = 'sleep' then 'ok' else 'timeout' end
                                       else s.outcome end,
                       'output', s.output, 'error', s.error, 'child_id', s.child_id)
                   order by s.position)
            from workflow.workflow_step s where s.run_id = c.id) end,
           c.traceparent
    from claimed c
    order by c.priority, c.created_at;
    perform set_config('workflow.via_function', v_via, true);
end
$$;

CREATE OR REPLACE FUNCTION workflow.heartbeat_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[], p_lease_ms bigint) RETURNS TABLE(id uuid, status text, owned boolean, deadline_exceeded boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_nestloop TO 'off'
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
    v_via text := coalesce(current_setting('workflow.via_function', true), '');
begin
    perform set_config('workflow.via_function', 'on', true);
    if p_lease_ms is null or p_lease_ms < 1000 or p_lease_ms > 86400000 then
        raise exception 'heartbeat_runs: lease must be between 1000 ms and 24 h, got % ms', p_lease_ms using errcode = '22023';
    end if;
    perform 1 from workflow.expire_deadlines(p_ids, cardinality(p_ids));
    return query
    with req as (
        select * from unnest(p_ids, p_tokens) as t(id, token)
    ), extended as (
        update workflow.workflow_run r
        set lease_until = now() + p_lease_ms * interval '1 millisecond',
            heartbeat_count = r.heartbeat_count + 1,
            updated_at  = now()
        from req
        where r.id = any (p_ids)
          and r.id = req.id
          and r.status = 'leased'
          and r.leased_by = p_worker_id
          and r.lease_token = req.token
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
    left join workflow.workflow_run cur on cur.id = req.id;
    perform set_config('workflow.via_function', v_via, true);
end
$$;

CREATE OR REPLACE FUNCTION workflow.park_run(p_worker_id text, p_id uuid, p_token bigint, p_kind text, p_step text, p_position integer, p_wake_at timestamp with time zone, p_delay_ms bigint, p_signal text) RETURNS TABLE(status text, outcome text, output jsonb, error text, wake_at timestamp with time zone, message text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
    v_via text := coalesce(current_setting('workflow.via_function', true), '');
    v_run workflow.workflow_run;
    v_step workflow.workflow_step;
    v_problem text;
    v_wake timestamptz;
    v_signal workflow.workflow_signal;
begin
    perform set_config('workflow.via_function', 'on', true);
    if p_kind is null or p_kind not in ('sleep', 'signal', 'child') then
        raise exception 'park_run: kind must be sleep, signal or child, got %', p_kind using errcode = '22023';
    end if;
    v_problem := coalesce(workflow.step_name_problem(p_step),
                          case when p_position is null or p_position not between 0 and 999
                               then 'a run has at most 1000 steps (positions 0 to 999)' end,
                          case when p_kind = 'signal' then workflow.step_name_problem(p_signal) end,
                          case when p_delay_ms < 0 then 'a delay must not be negative' end);
    if v_problem is not null then
        return query select 'invalid', null::text, null::jsonb, null::text, null::timestamptz, v_problem;
        perform set_config('workflow.via_function', v_via, true);
        return;
    end if;
    if p_delay_ms is not null then
        if p_delay_ms > 3153600000000 then  -- 100 years
            return query select 'invalid', null::text, null::jsonb, null::text, null::timestamptz,
                                'a wait may last at most 100 years';
            perform set_config('workflow.via_function', v_via, true);
            return;
        end if;
        v_wake := now() + p_delay_ms * interval '1 millisecond';
    else
        v_wake := p_wake_at;
    end if;
    if p_kind = 'sleep' and v_wake is null then
        return query select 'invalid', null::text, null::jsonb, null::text, null::timestamptz,
                            'a sleep needs a wake-up time or a delay';
        perform set_config('workflow.via_function', v_via, true);
        return;
    end if;

    v_run := workflow.held_run(p_worker_id, p_id, p_token);
    if v_run.id is null then
        return query select 'lease_lost', null::text, null::jsonb, null::text, null::timestamptz, null::text;
        perform set_config('workflow.via_function', v_via, true);
        return;
    end if;
    v_problem := workflow.journal_conflict(p_id, p_step, p_kind, p_position);
    if v_problem is not null then
        return query select 'nondeterministic', null::text, null::jsonb, null::text, null::timestamptz, v_problem;
        perform set_config('workflow.via_function', v_via, true);
        return;
    end if;

    -- The entry is locked: a child finishing now updates it before it looks
    -- for a parked parent to wake, so either this sees the child's end or
    -- the child sees this run parked (never neither).
    select * into v_step from workflow.workflow_step s where s.run_id = p_id and s.name = p_step for update;
    if found and v_step.finished_at is not null then
        return query select 'resolved', v_step.outcome, v_step.output, v_step.error, v_step.wake_at, null::text;
        perform set_config('workflow.via_function', v_via, true);
        return;
    end if;
    if p_kind = 'child' and not found then
        return query select 'invalid', null::text, null::jsonb, null::text, null::timestamptz,
                            format('no child run was started at step "%s"', p_step);
        perform set_config('workflow.via_function', v_via, true);
        return;
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
            update workflow.workflow_signal set consumed_at = now(), consumed_by = p_step where id = v_signal.id;
            update workflow.workflow_step s set outcome = 'ok', output = v_signal.payload, finished_at = now()
            where s.run_id = p_id and s.name = p_step;
            return query select 'resolved', 'ok'::text, v_signal.payload, null::text, v_wake, null::text;
            perform set_config('workflow.via_function', v_via, true);
            return;
        end if;
    end if;
    if p_kind in ('sleep', 'signal') and v_wake <= now() then
        update workflow.workflow_step s
        set outcome = case when p_kind = 'sleep' then 'ok' else 'timeout' end, finished_at = now()
        where s.run_id = p_id and s.name = p_step;
        return query select 'resolved', case when p_kind = 'sleep' then 'ok' else 'timeout' end,
                            null::jsonb, null::text, v_wake, null::text;
        perform set_config('workflow.via_function', v_via, true);
        return;
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
        updated_at  = now()
    where r.id = p_id;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (p_id, 'waiting', jsonb_strip_nulls(jsonb_build_object(
        'wait_kind', p_kind, 'step', p_step, 'signal', case when p_kind = 'signal' then p_signal end,
        'until', v_wake, 'child_id', v_step.child_id,
        'worker_id', p_worker_id, 'attempt', v_run.attempt, 'attempt_counted', false)));
    return query select 'parked', null::text, null::jsonb, null::text, v_wake, null::text;
    perform set_config('workflow.via_function', v_via, true);
end
$$;

CREATE OR REPLACE FUNCTION workflow.dag_end(p_run workflow.workflow_run, p_status text, p_result jsonb, p_error text, p_data jsonb) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
    v_via text := coalesce(current_setting('workflow.via_function', true), '');
begin
    perform set_config('workflow.via_function', 'on', true);
    update workflow.workflow_run r
    set status = p_status, result = p_result, last_error = p_error,
        wait_kind = null, wait_step = null, wait_signal = null,
        finished_at = now(), updated_at = now()
    where r.id = p_run.id;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (p_run.id, p_status, jsonb_strip_nulls(p_data || jsonb_build_object('error', p_error)));
    perform set_config('workflow.via_function', v_via, true);
end
$$;

CREATE OR REPLACE FUNCTION workflow.dag_advance(p_run uuid) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
    v_via text := coalesce(current_setting('workflow.via_function', true), '');
    v_run workflow.workflow_run;
    v_limit bigint := (select st.max_payload_bytes from workflow.workflow_settings st);
    v_bad record;
    v_results jsonb;
    v_total integer;
    v_ok integer;
    v_result jsonb;
begin
    perform set_config('workflow.via_function', 'on', true);
    select * into v_run from workflow.workflow_run r where r.id = p_run for update;
    if not found or v_run.status <> 'pending' or v_run.dag is null then
        perform set_config('workflow.via_function', v_via, true);
        return;
    end if;

    select c.id, c.parent_step, c.type, c.status, c.last_error into v_bad
    from workflow.workflow_run c
    where c.parent_id = p_run and c.status in ('failed', 'cancelled')
    order by c.finished_at, c.parent_step
    limit 1;
    if found then
        perform workflow.dag_end(v_run, 'failed', null,
            format('step "%s" (%s) %s: %s', v_bad.parent_step, v_bad.type,
                   case v_bad.status when 'failed' then 'failed' else 'was cancelled' end,
                   left(coalesce(v_bad.last_error, v_bad.status), 4000)),
            jsonb_build_object('reason', 'step_failed', 'step', v_bad.parent_step,
                               'step_run_id', v_bad.id, 'step_status', v_bad.status));
        perform set_config('workflow.via_function', v_via, true);
        return;
    end if;

    select coalesce(jsonb_object_agg(c.parent_step, coalesce(c.result, 'null'::jsonb)), '{}'::jsonb), count(*)
    into v_results, v_ok
    from workflow.workflow_run c
    where c.parent_id = p_run and c.status = 'succeeded';
    v_total := jsonb_array_length(v_run.dag->'steps');
    if v_ok = v_total then
        v_result := jsonb_build_object('steps', v_results);
        if octet_length(v_result::text) > 1048576 then
            perform workflow.dag_end(v_run, 'failed', null,
                format('the steps'' results together are %s bytes; a result is at most 1048576', octet_length(v_result::text)),
                jsonb_build_object('reason', 'result_too_large'));
        elsif workflow.json_too_deep(v_result) then
            perform workflow.dag_end(v_run, 'failed', null,
                'the steps'' results together nest deeper than 64 levels, the most a result may',
                jsonb_build_object('reason', 'result_too_deep'));
        else
            perform workflow.dag_end(v_run, 'succeeded', v_result, null, jsonb_build_object('steps', v_total));
        end if;
        perform set_config('workflow.via_function', v_via, true);
        return;
    end if;

    -- A step whose payload would be too large fails the run.
    select r.name, octet_length(r.payload::text) as bytes into v_bad
    from workflow.dag_ready_steps(v_run, v_results) r
    where octet_length(r.payload::text) > v_limit limit 1;
    if found then
        perform workflow.dag_end(v_run, 'failed', null,
            format('the payload of step "%s" would be %s bytes; the limit is %s (workflow_settings.max_payload_bytes)',
                   v_bad.name, v_bad.bytes, v_limit),
            jsonb_build_object('reason', 'payload_too_large', 'step', v_bad.name));
        perform set_config('workflow.via_function', v_via, true);
        return;
    end if;
    select r.name into v_bad
    from workflow.dag_ready_steps(v_run, v_results) r
    where workflow.json_too_deep(r.payload) limit 1;
    if found then
        perform workflow.dag_end(v_run, 'failed', null,
            format('the payload of step "%s" would nest deeper than 64 levels, the most a payload may', v_bad.name),
            jsonb_build_object('reason', 'payload_too_deep', 'step', v_bad.name));
        perform set_config('workflow.via_function', v_via, true);
        return;
    end if;

    insert into workflow.workflow_run (type, payload, priority, idempotency_key, max_attempts,
                                       retry_base_delay, retry_max_delay, parent_id, parent_step, deadline_at)
    select r.type, r.payload, v_run.priority, 'dag:' || p_run::text || ':' || r.name, r.max_attempts,
           r.base_delay, r.max_delay, p_run, r.name, v_run.deadline_at
    from workflow.dag_ready_steps(v_run, v_results) r
    on conflict do nothing;
    perform set_config('workflow.via_function', v_via, true);
end
$$;

-- complete_runs: a result that breaks a limit fails its run alone, for good
-- (status failed, the reason in last_error and in the failed event); the
-- other completions of the batch stand. Returns each finished run with its
-- status and, when it failed, why.
drop function workflow.complete_runs(text, uuid[], bigint[], jsonb[]);
create function workflow.complete_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[], p_results jsonb[])
returns table(id uuid, status text, error text)
language plpgsql security definer
set enable_nestloop = off
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    v_via text := coalesce(current_setting('workflow.via_function', true), '');
begin
    perform set_config('workflow.via_function', 'on', true);
    -- The workflows (DAG runs, durable parents) of the runs finishing here,
    -- locked first and in id order: ending a workflow locks it before its
    -- steps, so a step's end must not lock them the other way round.
    -- Looked up by primary key: as a join (enable_nestloop is off here) the
    -- parents were found by reading the whole table.
    perform 1 from workflow.workflow_run p
    where p.id = any (array(select c.parent_id from workflow.workflow_run c
                            where c.id = any (p_ids) and c.parent_id is not null))
    order by p.id
    for update of p;
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
            finished_at = now(),
            updated_at  = now()
        from req
        where r.id = any (p_ids)
          and r.id = req.id
          -- status = 'leased', written so that the batch is found by primary
          -- key and never through the partial index of leased runs.
          and coalesce(r.status, '') = 'leased'
          and r.leased_by = p_worker_id
          and r.lease_token = req.token
        returning r.id, r.attempt, r.status, r.last_error
    ), events as (
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select d.id, d.status,
               case when d.status = 'succeeded'
                    then jsonb_build_object('worker_id', p_worker_id, 'attempt', d.attempt)
                    else jsonb_build_object('worker_id', p_worker_id, 'attempt', d.attempt,
                                            'reason', 'result_refused', 'error', d.last_error) end
        from done d
    )
    select d.id, d.status, d.last_error from done d;
    perform set_config('workflow.via_function', v_via, true);
end
$$;
revoke execute on function workflow.complete_runs(text, uuid[], bigint[], jsonb[]) from public;
do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'workflow_worker') then
        grant execute on function workflow.complete_runs(text, uuid[], bigint[], jsonb[]) to workflow_worker;
    end if;
end
$$;
comment on function workflow.complete_runs(text, uuid[], bigint[], jsonb[]) is
    'Records the results of runs a worker holds; a result over the limits fails its run alone. Returns (id, status, error) per finished run.';

create or replace function workflow.fail_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[], p_errors text[],
                                              p_retryable boolean[])
returns table(id uuid, status text, run_at timestamptz)
language plpgsql security definer
set enable_nestloop = off
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    v_via text := coalesce(current_setting('workflow.via_function', true), '');
begin
    perform set_config('workflow.via_function', 'on', true);
    -- The workflows (DAG runs, durable parents) of the runs finishing here,
    -- locked first and in id order: ending a workflow locks it before its
    -- steps, so a step's end must not lock them the other way round.
    perform 1 from workflow.workflow_run p
    where p.id in (select c.parent_id from workflow.workflow_run c
                   where c.id = any (p_ids) and c.parent_id is not null)
    order by p.id
    for update of p;
    return query
    with req as (
        select * from unnest(p_ids, p_tokens, p_errors, p_retryable)
            as t(id, token, error, retryable)
    ), failed as (
        update workflow.workflow_run r
        set status      = case when req.retryable and r.attempt < r.max_attempts
                               then 'pending' else 'failed' end,
            run_at      = case when req.retryable and r.attempt < r.max_attempts
                               then now() + workflow.retry_delay(r.attempt, r.retry_base_delay,
                                                                 r.retry_max_delay, random())
                               else r.run_at end,
            leased_by   = case when req.retryable and r.attempt < r.max_attempts
                               then null else r.leased_by end,
            lease_until = null,
            last_error  = left(coalesce(req.error, 'unknown error'), 8192),
            finished_at = case when req.retryable and r.attempt < r.max_attempts
                               then null else now() end,
            updated_at  = now()
        from req
        where r.id = any (p_ids)
          and r.id = req.id
          and r.status = 'leased'
          and r.leased_by = p_worker_id
          and r.lease_token = req.token
        returning r.id, r.status, r.run_at, r.attempt, r.max_attempts, r.last_error, r.parent_id
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
    )
    select f.id, f.status, f.run_at from failed f;
    perform set_config('workflow.via_function', v_via, true);
end
$$;

create or replace function workflow.release_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[])
returns table(id uuid)
language plpgsql security definer
set enable_nestloop = off
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    v_via text := coalesce(current_setting('workflow.via_function', true), '');
begin
    perform set_config('workflow.via_function', 'on', true);
    return query
    with req as (
        select * from unnest(p_ids, p_tokens) as t(id, token)
    ), released as (
        update workflow.workflow_run r
        set status      = 'pending',
            attempt     = r.attempt - 1,
            run_at      = now(),
            leased_by   = null,
            lease_until = null,
            updated_at  = now()
        from req
        where r.id = any (p_ids)
          and r.id = req.id
          and r.status = 'leased'
          and r.leased_by = p_worker_id
          and r.lease_token = req.token
        returning r.id, r.attempt
    ), events as (
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select x.id, 'retried',
               jsonb_build_object('worker_id', p_worker_id, 'attempt', x.attempt + 1,
                                  'reason', 'released', 'attempt_counted', false)
        from released x
    )
    select x.id from released x;
    perform set_config('workflow.via_function', v_via, true);
end
$$;

create or replace function workflow.reap_expired_leases(p_limit integer)
returns table(id uuid, status text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    v_via text := coalesce(current_setting('workflow.via_function', true), '');
begin
    perform set_config('workflow.via_function', 'on', true);
    -- The workflows of the runs about to be reaped, locked first and in id
    -- order, as a worker's completions do.
    perform 1 from workflow.workflow_run p
    where p.id in (select r.parent_id from workflow.workflow_run r
                   where r.status = 'leased' and r.lease_until < now() and r.parent_id is not null
                   order by r.lease_until
                   limit p_limit)
    order by p.id
    for update of p;
    return query
    with expired as (
        select r.id, r.leased_by, r.lease_until
        from workflow.workflow_run r
        where r.status = 'leased' and r.lease_until < now()
        order by r.lease_until
        limit p_limit
        for update skip locked
    ), reaped as (
        update workflow.workflow_run r
        set status      = case when r.attempt < r.max_attempts then 'pending' else 'failed' end,
            run_at      = case when r.attempt < r.max_attempts then now() else r.run_at end,
            last_error  = format('lease expired: worker %s stopped heartbeating', e.leased_by),
            leased_by   = case when r.attempt < r.max_attempts then null else r.leased_by end,
            lease_until = null,
            finished_at = case when r.attempt < r.max_attempts then null else now() end,
            updated_at  = now()
        from expired e
        where r.id = e.id
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
    perform set_config('workflow.via_function', v_via, true);
end
$$;

-- expire_deadlines: each batch takes a fair share of every type's overdue
-- runs (the most overdue of each type first, then round by round), so a
-- flood of runs of one type with deadlines long past does not hold back the
-- expiry of every other type's runs.
create or replace function workflow.expire_deadlines(p_ids uuid[], p_limit integer)
returns table(id uuid, previous_status text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    v_via text := coalesce(current_setting('workflow.via_function', true), '');
    v_ids uuid[];
begin
    perform set_config('workflow.via_function', 'on', true);
    select array_agg(d.id) into v_ids
    from (
        select o.id
        from (select r.id, r.deadline_at,
                     row_number() over (partition by r.type order by r.deadline_at, r.id) as round
              from workflow.workflow_run r
              where r.deadline_at <= now()
                and r.deadline_at is not null
                and r.status in ('pending', 'leased')
                and (p_ids is null or r.id = any (p_ids))) o
        order by o.round, o.deadline_at, o.id
        limit p_limit
    ) d;
    if v_ids is null then
        perform set_config('workflow.via_function', v_via, true);
        return;
    end if;
    -- The workflows of the runs about to expire, locked first and in id
    -- order, as a worker's completions do.
    perform 1 from workflow.workflow_run p
    where p.id in (select r.parent_id from workflow.workflow_run r
                   where r.id = any (v_ids) and r.parent_id is not null)
    order by p.id
    for update of p;
    return query
    with doomed as (
        select r.id, r.status, r.leased_by, r.wait_kind
        from workflow.workflow_run r
        where r.id = any (v_ids)
          and r.deadline_at <= now()
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
            finished_at = now(),
            updated_at  = now()
        from doomed d
        where r.id = d.id
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
    perform set_config('workflow.via_function', v_via, true);
end
$$;

-- Payloads, definitions, children and signals under the new limits.

CREATE OR REPLACE FUNCTION workflow.on_run_inserted() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
    v_limit bigint := (select st.max_payload_bytes from workflow.workflow_settings st);
    v_big record;
    v_dag record;
begin
    select n.type, octet_length(n.payload::text) as bytes into v_big
    from new_runs n where octet_length(n.payload::text) > v_limit limit 1;
    if found then
        raise exception 'payload of a % run is % bytes; the limit is % (workflow_settings.max_payload_bytes)',
            v_big.type, v_big.bytes, v_limit using errcode = '22023';
    end if;
    select n.type into v_big from new_runs n where workflow.json_too_deep(n.payload) limit 1;
    if found then
        raise exception 'payload of a % run nests deeper than 64 levels (objects and arrays), the most a stored value may',
            v_big.type using errcode = '22023';
    end if;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    select n.id, 'created',
           jsonb_strip_nulls(jsonb_build_object(
               'type', n.type, 'priority', n.priority, 'run_at', n.run_at,
               'max_attempts', n.max_attempts, 'idempotency_key', n.idempotency_key,
               'source_namespace', n.source_namespace, 'source_name', n.source_name,
               'parent_id', n.parent_id, 'parent_step', n.parent_step, 'deadline_at', n.deadline_at))
    from new_runs n
    order by n.created_at;

    if exists (select 1 from new_runs n where n.dag is not null)
       or exists (select 1 from workflow.workflow_registry g where g.definition is not null) then
        for v_dag in
            select n.id, n.type, n.run_at, coalesce(n.dag, g.definition) as def, n.dag is not null as inline,
                   exists (select 1 from workflow.workflow_run p where p.id = n.parent_id and p.dag is not null) as parent_dag
            from new_runs n
            left join workflow.workflow_registry g on g.workflow_name = n.type and g.definition is not null
            where n.status = 'pending' and (n.dag is not null or g.definition is not null)
            order by n.created_at, n.id
        loop
            if v_dag.inline and workflow.definition_problem(v_dag.def) is not null then
                raise exception 'invalid definition of run %: %', v_dag.id, workflow.definition_problem(v_dag.def)
                    using errcode = '22023';
            end if;
            if v_dag.run_at > now() + interval '1 second' then
                raise exception 'a run of %, a workflow with steps, starts at once: run_at is not supported for it', v_dag.type
                    using errcode = '22023';
            end if;
            if v_dag.parent_dag then
                -- A step whose type has steps (possible only if the registry
                -- changed under a running workflow): it fails, and so does
                -- its workflow, instead of nesting without end.
                update workflow.workflow_run r
                set status = 'failed', finished_at = now(), updated_at = now(),
                    last_error = format('%s has steps of its own; a step must be a type that workers run', v_dag.type)
                where r.id = v_dag.id;
                insert into workflow.workflow_event (workflow_id, event_type, data)
                values (v_dag.id, 'failed', jsonb_build_object('reason', 'nested_workflow',
                        'error', format('%s has steps of its own; a step must be a type that workers run', v_dag.type)));
                continue;
            end if;
            update workflow.workflow_run r
            set dag = v_dag.def, run_at = workflow.far_future(), wait_kind = 'dag', updated_at = now()
            where r.id = v_dag.id;
            insert into workflow.workflow_event (workflow_id, event_type, data)
            values (v_dag.id, 'waiting', jsonb_build_object('kind', 'dag',
                                                            'steps', jsonb_array_length(v_dag.def->'steps')));
            perform workflow.dag_advance(v_dag.id);
        end loop;
    end if;
    return null;
end
$$;


CREATE OR REPLACE FUNCTION workflow.start_child(p_worker_id text, p_id uuid, p_token bigint, p_step text, p_position integer, p_type text, p_payload jsonb, p_priority integer, p_max_attempts integer, p_deadline_ms bigint) RETURNS TABLE(status text, child_id uuid, outcome text, output jsonb, error text, message text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
        when v_run.deadline_at is null then now() + p_deadline_ms * interval '1 millisecond'
        else least(v_run.deadline_at, now() + p_deadline_ms * interval '1 millisecond') end;
    insert into workflow.workflow_run (type, payload, priority, max_attempts, parent_id, parent_step, deadline_at)
    values (p_type, coalesce(p_payload, '{}'::jsonb), coalesce(p_priority, v_run.priority),
            coalesce(p_max_attempts, 3), p_id, p_step, v_deadline)
    on conflict (parent_id, parent_step) where parent_id is not null do nothing
    returning id into v_child;
    if v_child is null then
        select r.id into v_child from workflow.workflow_run r where r.parent_id = p_id and r.parent_step = p_step;
    end if;
    insert into workflow.workflow_step (run_id, name, position, kind, attempt, child_id)
    values (p_id, p_step, p_position, 'child', v_run.attempt, v_child);
    -- A child that already ended (it existed before its journal entry) is
    -- written in at once.
    update workflow.workflow_step s
    set outcome     = case c.status when 'succeeded' then 'ok' else 'error' end,
        output      = case when c.status = 'succeeded' then c.result end,
        error       = case c.status when 'failed' then left(coalesce(c.last_error, 'child run failed'), 8192)
                                    when 'cancelled' then 'child run cancelled' end,
        finished_at = now()
    from workflow.workflow_run c
    where c.id = v_child and c.status in ('succeeded', 'failed', 'cancelled')
      and s.run_id = p_id and s.name = p_step;
    select * into v_step from workflow.workflow_step s where s.run_id = p_id and s.name = p_step;
    return query select 'started', v_child, v_step.outcome, v_step.output, v_step.error, null::text;
end
$$;


CREATE OR REPLACE FUNCTION workflow.send_signal(p_run_id uuid, p_name text, p_payload jsonb, p_idempotency_key text) RETURNS TABLE(signal_id bigint, duplicate boolean, delivered boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
        raise exception 'send_signal: %', v_problem using errcode = '22023';
    end if;
    select * into v_run from workflow.workflow_run r where r.id = p_run_id for update;
    if not found or v_run.deleted_at is not null then
        raise exception 'send_signal: run % does not exist', p_run_id using errcode = 'P0002';
    end if;
    if v_run.status not in ('pending', 'leased') then
        raise exception 'send_signal: run % is %; signals reach only unfinished runs', p_run_id, v_run.status
            using errcode = '55000';
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
            using errcode = '54000';
    end if;
    if not (v_run.status = 'pending' and v_run.wait_kind = 'signal' and v_run.wait_signal = p_name)
       and (select count(*) from (select 1 from workflow.workflow_signal g
                                  where g.run_id = p_run_id and g.consumed_at is null
                                  limit 10001) w) > 10000 then
        raise exception 'send_signal: run % already has 10000 signals waiting to be consumed', p_run_id
            using errcode = '54000';
    end if;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (p_run_id, 'signal_received', jsonb_strip_nulls(jsonb_build_object(
        'signal', p_name, 'signal_id', v_id, 'idempotency_key', p_idempotency_key)));

    if v_run.status = 'pending' and v_run.wait_kind = 'signal' and v_run.wait_signal = p_name then
        select * into v_oldest from workflow.workflow_signal g
        where g.run_id = p_run_id and g.name = p_name and g.consumed_at is null
        order by g.id limit 1;
        update workflow.workflow_signal set consumed_at = now(), consumed_by = v_run.wait_step
        where id = v_oldest.id;
        update workflow.workflow_step s set outcome = 'ok', output = v_oldest.payload, finished_at = now()
        where s.run_id = p_run_id and s.name = v_run.wait_step and s.finished_at is null;
        update workflow.workflow_run r
        set run_at = now(), wait_kind = null, wait_step = null, wait_signal = null, updated_at = now()
        where r.id = p_run_id;
        insert into workflow.workflow_event (workflow_id, event_type, data)
        values (p_run_id, 'woken', jsonb_build_object('reason', 'signal', 'step', v_run.wait_step,
                                                      'signal', p_name, 'signal_id', v_oldest.id));
        perform pg_notify('workflow_run_created', v_run.type);
        return query select v_id, false, true;
        return;
    end if;
    return query select v_id, false, false;
end
$$;


CREATE OR REPLACE FUNCTION workflow.definition_problem(p_def jsonb) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
        where k not in ('name', 'type', 'dependsOn', 'payload', 'maxAttempts', 'retryBaseDelayMs', 'retryMaxDelayMs')
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
        if v_step.s ? 'dependsOn' and (jsonb_typeof(v_step.s->'dependsOn') <> 'array'
            or jsonb_array_length(v_step.s->'dependsOn') > 100
            or exists (select 1 from jsonb_array_elements(v_step.s->'dependsOn') d where jsonb_typeof(d) <> 'string')) then
            return format('step "%s": dependsOn must be a list of at most 100 step names', v_step.s->>'name');
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


CREATE OR REPLACE FUNCTION workflow.on_registry_written() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
    v_problem text;
begin
    -- Bounded before the lock below: an oversized definition never holds
    -- up the writers of other registries.
    if new.definition is not null and octet_length(new.definition::text) > 262144 then
        raise exception 'invalid definition of %: it is % bytes; a definition is at most 262144 (256 KiB)',
            left(new.workflow_name, 253), octet_length(new.definition::text) using errcode = '22023';
    end if;
    if workflow.json_too_deep(new.definition) then
        raise exception 'invalid definition of %: it nests deeper than 64 levels (objects and arrays)',
            left(new.workflow_name, 253) using errcode = '22023';
    end if;
    -- Definitions are checked against each other: one writer at a time.
    perform pg_advisory_xact_lock(hashtext('workflow.workflow_registry.definition'));
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
        where s->>'type' = new.workflow_name
           or exists (select 1 from workflow.workflow_registry g
                      where g.workflow_name = s->>'type' and g.definition is not null)
        limit 1;
    end if;
    if v_problem is null then
        select format('it is step "%s" of %s, and a step is a type that workers run', s->>'name', g.workflow_name)
        into v_problem
        from workflow.workflow_registry g, jsonb_array_elements(g.definition->'steps') s
        where g.definition is not null and g.workflow_name <> new.workflow_name
          and s->>'type' = new.workflow_name
        limit 1;
    end if;
    if v_problem is not null then
        raise exception 'invalid definition of %: %', new.workflow_name, v_problem using errcode = '22023';
    end if;
    return new;
end
$$;


