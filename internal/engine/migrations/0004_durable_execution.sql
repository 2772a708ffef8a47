-- Durable execution: a lease fence that never repeats, the step journal,
-- parked runs (durable sleep, waits for signals and children), buffered
-- signals, child runs and deadlines.
--
-- The rule that keeps every runtime alike: the journal and the waits change
-- only through the functions and triggers below, and whoever resolves a wait
-- writes that wait's journal entry (the timer through the claim, the sender of
-- a signal, a finishing child). A worker only replays what it finds.
--
-- Lock order, wherever two rows are locked: a run before its journal and its
-- signals; a child run before its parent (a child's end wakes the parent);
-- cancelling a parent locks the parent, then its children, and a deadlock
-- with a child finishing at that instant is resolved by Postgres aborting one
-- of the two, which its caller retries.

-- The fence. Every claim draws a new token; every write by a worker names the
-- token it holds, so a worker that lost its lease (even one that then claims
-- the same run again) can never write into the attempt that followed.
create sequence workflow.lease_token_seq as bigint;

alter table workflow.workflow_run
    add column lease_token bigint,
    -- Heartbeats of the current attempt; the audit trail keeps the first and
    -- every tenth, so a long run's trail stays bounded.
    add column heartbeat_count integer not null default 0,
    -- Child runs: the parent and the parent's step that started them.
    add column parent_id   uuid,
    add column parent_step text,
    -- Past this instant the run fails with "deadline exceeded".
    add column deadline_at timestamptz,
    -- A parked run is pending with run_at at its wake-up time (far in the
    -- future for an open wait) and says here what it waits for.
    add column wait_kind   text,
    add column wait_step   text,
    add column wait_signal text,
    add constraint workflow_run_wait_kind_valid check (
        wait_kind is null or wait_kind in ('sleep', 'signal', 'child')),
    add constraint workflow_run_wait_not_leased check (
        wait_kind is null or status <> 'leased'),
    add constraint workflow_run_parent_step_set check (
        (parent_id is null) = (parent_step is null));

comment on column workflow.workflow_run.lease_token is
    'Drawn from workflow.lease_token_seq by every claim; guards every write of the lease holder.';

-- One child per (parent, step): starting a child again in a replay finds it.
create unique index idx_workflow_run_parent_step
    on workflow.workflow_run (parent_id, parent_step) where parent_id is not null;
-- Deadlines to enforce: unfinished runs that carry one.
create index idx_workflow_run_deadline
    on workflow.workflow_run (deadline_at)
    where deadline_at is not null and status in ('pending', 'leased');

alter table workflow.workflow_event drop constraint workflow_event_type_valid;
alter table workflow.workflow_event add constraint workflow_event_type_valid check (event_type in (
    'created', 'leased', 'started', 'heartbeat', 'succeeded', 'failed', 'retried', 'cancelled',
    'waiting', 'woken', 'signal_received'));

-- The journal: one row per step of a run, keyed by its name, at the position
-- the run's code reached it. A row whose outcome is null is a wait still
-- open (a sleep, a signal, a child); the resolver fills it in exactly once.
create table workflow.workflow_step (
    run_id      uuid        not null,
    name        text        not null,
    position    integer     not null,
    kind        text        not null,
    -- ok, error (a child that failed or was cancelled) or timeout (a signal
    -- wait that ran out); null while the wait is open.
    outcome     text,
    output      jsonb,
    error       text,
    -- The attempt that reached the step.
    attempt     integer     not null,
    -- For kind child: the child run.
    child_id    uuid,
    -- For a sleep or a wait with a timeout: when it ends.
    wake_at     timestamptz,
    started_at  timestamptz not null default now(),
    finished_at timestamptz,

    primary key (run_id, name),
    constraint workflow_step_name_format check (
        char_length(name) between 1 and 128 and name ~ '^[A-Za-z0-9._:-]+$'),
    constraint workflow_step_position_range check (position between 0 and 999),
    constraint workflow_step_kind_valid check (kind in ('step', 'sleep', 'signal', 'child')),
    constraint workflow_step_outcome_valid check (
        outcome is null or outcome in ('ok', 'error', 'timeout')),
    constraint workflow_step_finished check ((outcome is null) = (finished_at is null)),
    constraint workflow_step_output_size check (
        output is null or octet_length(output::text) <= 262144),
    constraint workflow_step_error_length check (error is null or char_length(error) <= 8192)
);

comment on table workflow.workflow_step is
    'The step journal: what each run already did, replayed by later attempts instead of redone.';

create unique index idx_workflow_step_position on workflow.workflow_step (run_id, position);

-- Signals, buffered per run until a wait consumes them.
create table workflow.workflow_signal (
    id              bigint      generated always as identity primary key,
    run_id          uuid        not null,
    name            text        not null,
    payload         jsonb,
    idempotency_key text,
    created_at      timestamptz not null default now(),
    -- Set when a wait took the signal: the waiting step's name.
    consumed_at     timestamptz,
    consumed_by     text,

    constraint workflow_signal_name_format check (
        char_length(name) between 1 and 128 and name ~ '^[A-Za-z0-9._:-]+$'),
    constraint workflow_signal_payload_size check (
        payload is null or octet_length(payload::text) <= 262144),
    constraint workflow_signal_idempotency_key_length check (
        idempotency_key is null or char_length(idempotency_key) between 1 and 512)
);

comment on table workflow.workflow_signal is
    'Signals sent to runs; each is delivered to at most one wait, oldest first.';

create unique index idx_workflow_signal_key
    on workflow.workflow_signal (run_id, idempotency_key) where idempotency_key is not null;
create index idx_workflow_signal_pending
    on workflow.workflow_signal (run_id, name, id) where consumed_at is null;

-- Limits every function enforces, in one place.
create function workflow.step_name_problem(p_name text) returns text
language sql immutable parallel safe as $$
    select case
        when p_name is null or char_length(p_name) not between 1 and 128
            then format('step name must be 1 to 128 characters, got %s', coalesce(char_length(p_name), 0))
        when p_name !~ '^[A-Za-z0-9._:-]+$'
            then format('step name %s may contain only letters, digits and . _ : -', left(quote_literal(p_name), 140))
    end
$$;

create function workflow.output_problem(p_output jsonb) returns text
language sql immutable parallel safe as $$
    select case when p_output is not null and octet_length(p_output::text) > 262144
        then format('output is %s bytes; the limit is 262144 (256 KiB)', octet_length(p_output::text)) end
$$;

-- far_future is the run_at of a run parked on an open wait: beyond any real
-- time, yet representable by every client library.
create function workflow.far_future() returns timestamptz
language sql immutable parallel safe as $$ select timestamptz '9999-01-01 00:00:00+00' $$;

-- The old attempt-guarded signatures give way to token-guarded ones.
drop function workflow.claim_runs(text, text[], text, integer, bigint);
drop function workflow.heartbeat_runs(text, uuid[], integer[], bigint);
drop function workflow.complete_runs(text, uuid[], integer[], jsonb[]);
drop function workflow.fail_runs(text, uuid[], integer[], text[], boolean[]);
drop function workflow.release_runs(text, uuid[], integer[]);

-- claim_runs leases up to p_limit runnable runs whose type starts with one of
-- p_type_prefixes (all types when the array is null or empty), in priority,
-- then age order. Types registered as disabled, or for a runtime other than
-- p_runtime, are skipped, and so are runs past their deadline. Each claimed
-- run gets its attempt incremented, a new lease token and a 'leased' and a
-- 'started' event. With p_types, only those exact types are claimed: a worker
-- names the types it has handlers for, so a type it cannot run (a v2 reaching
-- an old worker during a rolling deploy) stays pending for one that can. A parked run whose time came is the timer's business: its
-- sleep is recorded as done (or its wait as timed out) before it is handed
-- out, with a 'woken' event. Each run comes with its journal.
create function workflow.claim_runs(
    p_worker_id text, p_type_prefixes text[], p_runtime text, p_limit integer, p_lease_ms bigint,
    p_types text[] default null)
returns table (id uuid, type text, payload jsonb, attempt integer, max_attempts integer,
               lease_until timestamptz, created_at timestamptz, lease_token bigint,
               deadline_at timestamptz, journal jsonb)
language plpgsql as $$
#variable_conflict use_column
declare
    v_patterns text[];
begin
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

    return query
    with candidates as (
        select r.id, r.wait_kind, r.wait_step
        from workflow.workflow_run r
        where r.status = 'pending'
          and r.deleted_at is null
          and r.run_at <= now()
          and (r.deadline_at is null or r.deadline_at > now())
          and (v_patterns is null or r.type like any (v_patterns))
          and (p_types is null or r.type = any (p_types))
          and not exists (
              select 1 from workflow.workflow_registry g
              where g.workflow_name = r.type
                and (not g.is_enabled or (p_runtime is not null and g.runtime <> p_runtime)))
        order by r.priority, r.created_at
        limit p_limit
        for update of r skip locked
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
                  r.created_at, r.priority, r.lease_token, r.deadline_at, c.wait_kind, c.wait_step
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
        cross join lateral (
            select jsonb_build_object('worker_id', p_worker_id, 'attempt', c.attempt,
                                      'lease_until', c.lease_until) as d) j
        -- woken, leased, then started: each run's events are emitted (and
        -- numbered) in order
        cross join lateral (values
            ('woken', jsonb_build_object('reason', case when c.wait_kind = 'sleep' then 'timer' else 'timeout' end,
                                         'step', c.wait_step, 'wait_kind', c.wait_kind)),
            ('leased', j.d), ('started', j.d)) e(event_type, data)
        where e.event_type <> 'woken' or c.wait_kind is not null
    )
    select c.id, c.type, c.payload, c.attempt, c.max_attempts, c.lease_until, c.created_at,
           c.lease_token, c.deadline_at,
           (select jsonb_agg(jsonb_build_object(
                       'name', s.name, 'position', s.position, 'kind', s.kind,
                       'outcome', case when s.name = c.wait_step and s.finished_at is null
                                       then case when c.wait_kind = 'sleep' then 'ok' else 'timeout' end
                                       else s.outcome end,
                       'output', s.output, 'error', s.error, 'child_id', s.child_id)
                   order by s.position)
            from workflow.workflow_step s where s.run_id = c.id)
    from claimed c
    order by c.priority, c.created_at;
end
$$;

-- expire_deadlines fails unfinished runs past their deadline (reason
-- "deadline exceeded"), wherever they are: pending, parked or leased. With
-- p_ids it looks only at those runs; otherwise at up to p_limit of the
-- oldest deadlines. Safe to call from many processes at once.
create function workflow.expire_deadlines(p_ids uuid[], p_limit integer)
returns table (id uuid, previous_status text)
language sql as $$
    with doomed as (
        select r.id, r.status, r.leased_by, r.wait_kind
        from workflow.workflow_run r
        where r.deadline_at <= now()
          and r.deadline_at is not null
          and r.status in ('pending', 'leased')
          and (p_ids is null or r.id = any (p_ids))
        order by r.deadline_at
        limit p_limit
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
    select x.id, x.status from expired x
$$;

-- heartbeat_runs extends the leases a worker still holds (by token). For each
-- requested run it answers whether the lease is still the caller's (owned),
-- the run's current status, and whether its deadline passed, so a worker
-- learns at once that a run was cancelled, failed by its deadline, or that its
-- lease was lost. Runs past their deadline are failed here rather than
-- extended.
create function workflow.heartbeat_runs(
    p_worker_id text, p_ids uuid[], p_tokens bigint[], p_lease_ms bigint)
returns table (id uuid, status text, owned boolean, deadline_exceeded boolean)
-- A batch is looked up by primary key (id = any (p_ids)) and matched to its
-- request rows by hash: a nested loop over the batch would be quadratic.
language plpgsql
set enable_nestloop = off
as $$
#variable_conflict use_column
begin
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
end
$$;

-- complete_runs records successful attempts. Only runs still leased by the
-- caller under the given token change; the ids of those are returned.
create function workflow.complete_runs(
    p_worker_id text, p_ids uuid[], p_tokens bigint[], p_results jsonb[])
returns table (id uuid)
language sql
set enable_nestloop = off
as $$
    with req as (
        select * from unnest(p_ids, p_tokens, p_results) as t(id, token, result)
    ), done as (
        update workflow.workflow_run r
        set status      = 'succeeded',
            result      = req.result,
            lease_until = null,
            finished_at = now(),
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
        select d.id, 'succeeded', jsonb_build_object('worker_id', p_worker_id, 'attempt', d.attempt)
        from done d
    )
    select d.id from done d
$$;

-- fail_runs records failed attempts. A retryable failure with attempts left
-- goes back to pending after the run's backoff (event 'retried'); otherwise
-- the run is failed for good (event 'failed'). Guarded like complete_runs.
create function workflow.fail_runs(
    p_worker_id text, p_ids uuid[], p_tokens bigint[], p_errors text[], p_retryable boolean[])
returns table (id uuid, status text, run_at timestamptz)
language sql
set enable_nestloop = off
as $$
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
        returning r.id, r.status, r.run_at, r.attempt, r.max_attempts, r.last_error
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
    select f.id, f.status, f.run_at from failed f
$$;

-- release_runs hands runs back unfinished (a worker shutting down): they are
-- pending again at once, and the attempt is not counted. The next claim draws
-- a new token, so the releasing worker can never write into it.
create function workflow.release_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[])
returns table (id uuid)
language sql
set enable_nestloop = off
as $$
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
    select x.id from released x
$$;

-- record_steps journals completed steps of runs the caller holds, a batch at
-- a time (one row per request, idx numbering the requests from 1). A step is
-- written once, by the first writer: a later write of the same step gets the
-- stored output back (status 'duplicate'). Each request's status is
--   recorded          written now;
--   duplicate         already journaled at the same position; output is the stored one;
--   lease_lost        the caller no longer holds the run under that token: nothing written;
--   nondeterministic  the journal has another step at that position, or this
--                     step at another one; message says which;
--   invalid           a limit was broken (name, position, output size); message says which.
-- A bad request never fails its neighbours in the batch.
create function workflow.record_steps(
    p_worker_id text, p_ids uuid[], p_tokens bigint[], p_names text[], p_positions integer[],
    p_outputs jsonb[])
returns table (idx integer, status text, output jsonb, message text)
language plpgsql
set enable_nestloop = off
as $$
#variable_conflict use_column
declare
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
        join req on req.id = r.id and req.token = r.lease_token
        where r.id = any (p_ids)
          and r.status = 'leased'
          and r.leased_by = p_worker_id
        for share of r
    ), ins as (
        insert into workflow.workflow_step (run_id, name, position, kind, outcome, output,
                                            attempt, started_at, finished_at)
        select req.id, req.name, req.position, 'step', 'ok', req.output, o.attempt, now(), now()
        from req
        join (select distinct on (o.id) o.id, o.attempt, o.token from owned o) o
          on o.id = req.id and o.token = req.token
        where req.problem is null
        on conflict do nothing
        returning run_id, name
    )
    select array_agg(o.id is not null order by req.idx),
           array_agg(i.run_id is not null order by req.idx),
           -- Runs whose journal must be read to answer: the usual batch,
           -- every step new, reads none.
           coalesce(array_agg(req.id) filter (where o.id is not null and i.run_id is null
                                                 and req.problem is null), '{}')
    into v_owned, v_inserted, v_unresolved
    from req
    left join (select distinct on (o.id, o.token) o.id, o.token from owned o) o
      on o.id = req.id and o.token = req.token
    left join ins i on i.run_id = req.id and i.name = req.name;

    -- A new statement sees what concurrent writers committed meanwhile.
    return query
    with req as (
        select t.*, coalesce(workflow.step_name_problem(t.name),
                             case when t.position is null or t.position not between 0 and 999
                                  then format('a run has at most 1000 steps (positions 0 to 999), got position %s',
                                              coalesce(t.position::text, 'null')) end,
                             workflow.output_problem(t.output)) as problem
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
end
$$;

-- nondeterminism_message says what the journal expected at a position and
-- what the run's code reached instead:
--   non-deterministic: expected step "charge" at position 2, got "refund"
--   non-deterministic: expected sleep "nap" at position 2, got step "refund"
create function workflow.nondeterminism_message(
    p_kind text, p_name text, p_position integer, p_got_kind text, p_got_name text)
returns text
language sql immutable parallel safe as $$
    select format('non-deterministic: expected %s "%s" at position %s, got %s', p_kind, p_name, p_position,
                  case when p_kind = p_got_kind then format('"%s"', p_got_name)
                       else format('%s "%s"', p_got_kind, p_got_name) end)
$$;

-- held_run locks a run for one of its lease holder's writes and says whether
-- the caller holds it under that token.
create function workflow.held_run(p_worker_id text, p_id uuid, p_token bigint)
returns workflow.workflow_run
language plpgsql as $$
declare
    v_run workflow.workflow_run;
begin
    select * into v_run from workflow.workflow_run r where r.id = p_id for update;
    if not found or v_run.status <> 'leased' or v_run.leased_by is distinct from p_worker_id
       or v_run.lease_token is distinct from p_token then
        return null;
    end if;
    return v_run;
end
$$;

-- journal_conflict names the non-determinism, if any, of reaching step p_name
-- of kind p_kind at p_position, given the run's journal.
create function workflow.journal_conflict(p_run uuid, p_name text, p_kind text, p_position integer)
returns text
language sql stable as $$
    select coalesce(
        (select workflow.nondeterminism_message(s.kind, s.name, p_position, p_kind, p_name)
         from workflow.workflow_step s
         where s.run_id = p_run and s.position = p_position and (s.name <> p_name or s.kind <> p_kind)),
        (select format('non-deterministic: step "%s" is recorded at position %s, reached again at position %s',
                       p_name, s.position, p_position)
         from workflow.workflow_step s
         where s.run_id = p_run and s.name = p_name and s.position <> p_position))
$$;

-- park_run is reached by a handler at a wait: a durable sleep (p_kind
-- 'sleep', until p_wake_at or for p_delay_ms), a wait for signal p_signal
-- ('signal', with an optional timeout the same way), or a wait for the child
-- started at step p_step ('child'). When the wait is already resolved it
-- returns 'resolved' with the journal entry (a sleep whose time passed, a
-- signal already buffered, a child already finished). Otherwise the run is
-- parked: pending, its lease given up, the attempt not counted, run_at at the
-- wake-up time (far away for an open wait), with a 'waiting' event; status
-- 'parked'. 'lease_lost' and 'nondeterministic' as for record_steps.
create function workflow.park_run(
    p_worker_id text, p_id uuid, p_token bigint, p_kind text, p_step text, p_position integer,
    p_wake_at timestamptz, p_delay_ms bigint, p_signal text)
returns table (status text, outcome text, output jsonb, error text, wake_at timestamptz, message text)
language plpgsql as $$
#variable_conflict use_column
declare
    v_run workflow.workflow_run;
    v_step workflow.workflow_step;
    v_problem text;
    v_wake timestamptz;
    v_signal workflow.workflow_signal;
begin
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
        return;
    end if;
    if p_delay_ms is not null then
        if p_delay_ms > 3153600000000 then  -- 100 years
            return query select 'invalid', null::text, null::jsonb, null::text, null::timestamptz,
                                'a wait may last at most 100 years';
            return;
        end if;
        v_wake := now() + p_delay_ms * interval '1 millisecond';
    else
        v_wake := p_wake_at;
    end if;
    if p_kind = 'sleep' and v_wake is null then
        return query select 'invalid', null::text, null::jsonb, null::text, null::timestamptz,
                            'a sleep needs a wake-up time or a delay';
        return;
    end if;

    v_run := workflow.held_run(p_worker_id, p_id, p_token);
    if v_run.id is null then
        return query select 'lease_lost', null::text, null::jsonb, null::text, null::timestamptz, null::text;
        return;
    end if;
    v_problem := workflow.journal_conflict(p_id, p_step, p_kind, p_position);
    if v_problem is not null then
        return query select 'nondeterministic', null::text, null::jsonb, null::text, null::timestamptz, v_problem;
        return;
    end if;

    -- The entry is locked: a child finishing now updates it before it looks
    -- for a parked parent to wake, so either this sees the child's end or
    -- the child sees this run parked (never neither).
    select * into v_step from workflow.workflow_step s where s.run_id = p_id and s.name = p_step for update;
    if found and v_step.finished_at is not null then
        return query select 'resolved', v_step.outcome, v_step.output, v_step.error, v_step.wake_at, null::text;
        return;
    end if;
    if p_kind = 'child' and not found then
        return query select 'invalid', null::text, null::jsonb, null::text, null::timestamptz,
                            format('no child run was started at step "%s"', p_step);
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
            return;
        end if;
    end if;
    if p_kind in ('sleep', 'signal') and v_wake <= now() then
        update workflow.workflow_step s
        set outcome = case when p_kind = 'sleep' then 'ok' else 'timeout' end, finished_at = now()
        where s.run_id = p_id and s.name = p_step;
        return query select 'resolved', case when p_kind = 'sleep' then 'ok' else 'timeout' end,
                            null::jsonb, null::text, v_wake, null::text;
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
end
$$;

-- start_child starts, once, the child run of step p_step of a run the caller
-- holds: a run of p_type (any type, routed by prefix as usual) with a parent
-- link and a deadline no later than the parent's. Reaching the same step again
-- (a replay) finds the same child. The journal gets a 'child' entry that the
-- child's end fills in. Returns the child's id with status 'started' or
-- 'duplicate' (and the outcome when the child already finished); 'lease_lost',
-- 'nondeterministic' and 'invalid' as for record_steps.
create function workflow.start_child(
    p_worker_id text, p_id uuid, p_token bigint, p_step text, p_position integer,
    p_type text, p_payload jsonb, p_priority integer, p_max_attempts integer, p_deadline_ms bigint)
returns table (status text, child_id uuid, outcome text, output jsonb, error text, message text)
language plpgsql as $$
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
                               then 'a child''s deadline must be positive' end);
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

-- send_signal delivers signal p_name (with an optional JSON payload) to a
-- run. Signals are buffered: one sent before the run waits is kept until a
-- wait for that name takes it, oldest first. With an idempotency key, sending
-- again is a no-op (duplicate true). A run parked waiting for this name is
-- woken here, its wait's journal entry written with the payload. Sending to
-- an unknown or finished run is an error.
create function workflow.send_signal(p_run_id uuid, p_name text, p_payload jsonb, p_idempotency_key text)
returns table (signal_id bigint, duplicate boolean, delivered boolean)
language plpgsql as $$
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
        replace(workflow.output_problem(p_payload), 'output', 'signal payload'));
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
    if (select count(*) from workflow.workflow_signal g
        where g.run_id = p_run_id and g.consumed_at is null) > 1000 then
        raise exception 'send_signal: run % already has 1000 signals waiting to be consumed', p_run_id
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

-- A child's end is written into its parent's journal, and wakes the parent
-- when it waits for that child.
create function workflow.on_child_finished() returns trigger
language plpgsql as $$
declare
    v_parent workflow.workflow_run;
begin
    update workflow.workflow_step s
    set outcome     = case new.status when 'succeeded' then 'ok' else 'error' end,
        output      = case when new.status = 'succeeded' then new.result end,
        error       = case new.status when 'failed' then left(coalesce(new.last_error, 'child run failed'), 8192)
                                      when 'cancelled' then 'child run cancelled' end,
        finished_at = now()
    where s.run_id = new.parent_id and s.name = new.parent_step and s.finished_at is null;

    update workflow.workflow_run p
    set run_at = now(), wait_kind = null, wait_step = null, wait_signal = null, updated_at = now()
    where p.id = new.parent_id and p.status = 'pending'
      and p.wait_kind = 'child' and p.wait_step = new.parent_step
    returning * into v_parent;
    if v_parent.id is not null then
        insert into workflow.workflow_event (workflow_id, event_type, data)
        values (v_parent.id, 'woken', jsonb_build_object('reason', 'child_finished', 'step', new.parent_step,
                                                         'child_id', new.id, 'child_status', new.status));
        perform pg_notify('workflow_run_created', v_parent.type);
    end if;
    return null;
end
$$;

-- Not "update of status": a status changed by another trigger (a soft
-- delete) counts too; the WHEN clause keeps it free for every other update.
create trigger workflow_child_finished
    after update on workflow.workflow_run
    for each row
    when (new.parent_id is not null
          and old.status in ('pending', 'leased')
          and new.status in ('succeeded', 'failed', 'cancelled'))
    execute function workflow.on_child_finished();

-- A run that ends cancelled or failed cancels its unfinished children (and
-- they theirs).
create function workflow.on_parent_ended() returns trigger
language plpgsql as $$
begin
    update workflow.workflow_run c
    set status = 'cancelled', updated_at = now()
    where c.parent_id = new.id and c.status in ('pending', 'leased');
    return null;
end
$$;

create index idx_workflow_run_parent
    on workflow.workflow_run (parent_id) where parent_id is not null;

create trigger workflow_parent_ended
    after update on workflow.workflow_run
    for each row
    when (old.status in ('pending', 'leased') and new.status in ('failed', 'cancelled'))
    execute function workflow.on_parent_ended();

-- A cancelled run is no longer parked.
create or replace function workflow.on_run_cancelled() returns trigger
language plpgsql as $$
begin
    new.finished_at := coalesce(new.finished_at, now());
    new.lease_until := null;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (new.id, 'cancelled',
            jsonb_strip_nulls(jsonb_build_object(
                'previous_status', old.status, 'attempt', old.attempt,
                'parked', old.wait_kind, 'parent_id', new.parent_id,
                'worker_id', case when old.status = 'leased' then old.leased_by end)));
    new.wait_kind := null;
    new.wait_step := null;
    new.wait_signal := null;
    perform pg_notify('workflow_run_cancelled', new.id::text);
    return new;
end
$$;

-- Journal and signals go with their run (retention).
create or replace function workflow.on_runs_deleted() returns trigger
language plpgsql as $$
begin
    delete from workflow.workflow_event e using old_runs o where e.workflow_id = o.id;
    delete from workflow.workflow_step s using old_runs o where s.run_id = o.id;
    delete from workflow.workflow_signal g using old_runs o where g.run_id = o.id;
    return null;
end
$$;

-- The created event names the parent and the deadline.
create or replace function workflow.on_run_inserted() returns trigger
language plpgsql as $$
begin
    insert into workflow.workflow_event (workflow_id, event_type, data)
    select n.id, 'created',
           jsonb_strip_nulls(jsonb_build_object(
               'type', n.type, 'priority', n.priority, 'run_at', n.run_at,
               'max_attempts', n.max_attempts, 'idempotency_key', n.idempotency_key,
               'source_namespace', n.source_namespace, 'source_name', n.source_name,
               'parent_id', n.parent_id, 'parent_step', n.parent_step, 'deadline_at', n.deadline_at))
    from new_runs n
    order by n.created_at;
    perform pg_notify('workflow_run_created', t.type)
    from (select distinct n.type from new_runs n) t;
    return null;
end
$$;

-- Mirrored runs also announce parking and waking.
drop trigger workflow_source_run_changed on workflow.workflow_run;
create trigger workflow_source_run_changed
    after update on workflow.workflow_run
    for each row
    when (new.source_name is not null
          and (old.status is distinct from new.status
               or old.attempt is distinct from new.attempt
               or old.leased_by is distinct from new.leased_by
               or old.wait_kind is distinct from new.wait_kind))
    execute function workflow.on_source_run_changed();
