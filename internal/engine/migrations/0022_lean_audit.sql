-- What a run costs on the hot path: fewer index entries and event rows per
-- run, and no notification on every status change.
--
-- 1. The audit trail's primary key is (workflow_id, id): every reader of
--    the trail reads one run's events in order, which is what the index
--    by run held beside the primary key on id alone. One index instead of
--    two: each event writes one index entry, not two. The new key is
--    built while writes to workflow_event wait (once, at upgrade).
create unique index workflow_event_run_key on workflow.workflow_event (workflow_id, id);
alter table workflow.workflow_event drop constraint workflow_event_pkey;
alter table workflow.workflow_event add constraint workflow_event_pkey
    primary key using index workflow_event_run_key;
drop index workflow.idx_workflow_event_workflow;

-- 2. A claim writes one 'started' event per run, with the worker, the
--    attempt and the lease's end: it used to write a 'leased' and a
--    'started' event with the same data in the same statement. 'leased'
--    stays a valid event type (older trails have it); nothing writes it.

create or replace function workflow.claim_runs(p_worker_id text, p_type_prefixes text[], p_runtime text,
                                               p_limit integer, p_lease_ms bigint, p_types text[] default null)
returns table (id uuid, type text, payload jsonb, attempt integer, max_attempts integer,
               lease_until timestamptz, created_at timestamptz, lease_token bigint,
               deadline_at timestamptz, journal jsonb, traceparent text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
set workflow.via_function = on
-- One plan per connection: planning this statement afresh on every call
-- would cost more than running it. No JIT: compiling a generic plan's
-- expressions (its row estimates are guesses) takes hundreds of
-- milliseconds, for a statement that runs in one.
set plan_cache_mode = force_generic_plan
set jit = off
-- A generic plan guesses how many candidates there are; they are at most
-- p_limit, each found by primary key: never hash the whole table for them.
set enable_hashjoin = off
set enable_mergejoin = off as $$
#variable_conflict use_column
declare
    v_patterns text[];
    v_types text[];
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
           (select jsonb_agg(jsonb_build_object(
                       'name', s.name, 'position', s.position, 'kind', s.kind,
                       'outcome', case when s.name = c.wait_step and s.finished_at is null
                                       then case when c.wait_kind = 'sleep' then 'ok' else 'timeout' end
                                       else s.outcome end,
                       'output', s.output, 'error', s.error, 'child_id', s.child_id)
                   order by s.position)
            from workflow.workflow_step s where s.run_id = c.id),
           c.traceparent
    from claimed c
    order by c.priority, c.created_at;
end
$$;


comment on function workflow.claim_runs(text, text[], text, integer, bigint, text[]) is
    'Leases up to p_limit runnable runs of a worker''s types; returns each with its journal and traceparent.';

-- 3. No notification on every status change (0021's workflow_run_status):
--    it cost every claiming and completing transaction a trigger and a
--    NOTIFY (which all listening sessions are woken for) whether or not a
--    console was open. The console looks at the queue's counts instead, on
--    its own time and only while a page is open.
drop trigger workflow_run_status_notify on workflow.workflow_run;
drop function workflow.on_run_status_committing();

-- ... and what it looks at: a marker that moves whenever a run makes a
-- transition the audit trail records (every event takes the next number of
-- workflow_event_id_seq) or finishes. Reading it costs two index probes,
-- whatever the inbox holds. A sequence moves before its transaction commits
-- (and even when it rolls back): a reader that sees the marker move looks
-- once more a little later.
create function workflow.inbox_version()
returns text
language sql stable security definer
set search_path = pg_catalog, pg_temp as $$
    select (select case when s.is_called then s.last_value else 0 end
            from workflow.workflow_event_id_seq s)::text || '/' ||
           coalesce((select max(r.finished_at) from workflow.workflow_run r
                     where r.finished_at is not null)::text, '')
$$;
revoke execute on function workflow.inbox_version() from public;

comment on function workflow.inbox_version() is
    'A marker that moves whenever a run makes an audited transition or finishes (for a reader deciding when to look again).';
