-- Depth and claims that do not depend on the rest of the queue.
--
-- Both look runs up by type through an index whose first column is the
-- type in byte order (collation "C"): a literal type prefix is then the
-- range [prefix, prefix || chr(127)) (a type's characters, [a-z0-9_.], all
-- sort below chr(127)), and the distinct types under a prefix are found by
-- skipping from one type to the next in that index, one probe per type.
-- The work of a depth count or a claim is then proportional to the runs of
-- the pool's own types, not to the runs queued for everyone else.
--
-- idx_workflow_run_depth replaces idx_workflow_run_type_prefix (same rows,
-- plus the status and run_at that a depth count reads without visiting the
-- table); idx_workflow_run_claim_type holds pending runs of each type in
-- claim order.

drop index if exists workflow.idx_workflow_run_type_prefix;
create index if not exists idx_workflow_run_depth
    on workflow.workflow_run (type collate "C", status, run_at)
    where status in ('pending', 'leased') and deleted_at is null;
-- Its predicate names the status as coalesce(status, '') (status is never
-- null, so the rows are the same): a claim of given types states it that
-- way, which only this index's predicate matches, so that the claim never
-- walks idx_workflow_run_claim (all pending runs in claim order) filtering
-- by type, whatever the statistics say.
create index if not exists idx_workflow_run_claim_type
    on workflow.workflow_run (type collate "C", priority, created_at)
    where coalesce(status, '') = 'pending' and deleted_at is null;

-- The types of pending or leased runs under the given literal type prefixes
-- (a trailing "%" is dropped, as prefix_pattern does; "_" and "%" inside are
-- literal). Each prefix costs one index probe per type found under it.
create function workflow.active_types(p_type_prefixes text[])
returns setof text
language plpgsql stable security definer rows 10
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
set jit = off as $$
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
                        and r.type collate "C" >= b.lo and r.type collate "C" < b.hi
                      order by r.type collate "C" limit 1) as type
        from bounds b
        union all
        select f.hi, (select r.type collate "C" from workflow.workflow_run r
                      where r.status in ('pending', 'leased') and r.deleted_at is null
                        and r.type collate "C" > f.type and r.type collate "C" < f.hi
                      order by r.type collate "C" limit 1)
        from found f
        where f.type is not null
    )
    select distinct f.type::text from found f where f.type is not null;
end
$$;
revoke execute on function workflow.active_types(text[]) from public;

comment on function workflow.active_types(text[]) is
    'Types of pending or leased runs under literal type prefixes.';

-- The depth of a worker pool's queue: what the autoscaler scales by, and
-- what a KEDA PostgreSQL scaler or a dashboard can read.
--   runnable  pending runs that are due (run_at has passed; parked runs wait
--             in the future), not soft-deleted, whose type is under one of
--             the prefixes and not registered as disabled or for a runtime
--             other than p_runtime (null: any runtime);
--   leased    leased runs whose type is under one of the prefixes.
-- A run under several of the prefixes counts once. Prefixes are literal, as
-- in claim_runs. The cost is one index probe per type plus an index-only
-- count of the pool's own runs. (PL/pgSQL with generic plans, so that a
-- connection that asks again reuses them instead of planning again, and
-- without JIT, which would compile those plans for longer than they run.)
create function workflow.queue_depth(p_type_prefixes text[], p_runtime text default null)
returns table (runnable bigint, leased bigint)
language plpgsql stable security definer
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
set jit = off as $$
#variable_conflict use_column
begin
    return query
    select coalesce(sum(d.runnable), 0)::bigint, coalesce(sum(d.leased), 0)::bigint
    from workflow.active_types(p_type_prefixes) t(type)
    cross join lateral (
        select case when exists (
                   select 1 from workflow.workflow_registry g
                   where g.workflow_name = t.type
                     and (not g.is_enabled or (p_runtime is not null and g.runtime <> p_runtime)))
               then 0
               else (select count(*) from workflow.workflow_run r
                     where r.type collate "C" = t.type and r.status = 'pending'
                       and r.deleted_at is null and r.run_at <= now())
               end as runnable,
               (select count(*) from workflow.workflow_run r
                where r.type collate "C" = t.type and r.status = 'leased'
                  and r.deleted_at is null) as leased
    ) d;
end
$$;
revoke execute on function workflow.queue_depth(text[], text) from public;

comment on function workflow.queue_depth(text[], text) is
    'Runnable and leased runs of a worker pool (its type prefixes and runtime): the numbers the autoscaler scales by.';

-- claim_runs, with the selection reading each claimable type's own runs in
-- claim order (idx_workflow_run_claim_type) instead of walking the whole
-- queue in claim order and skipping the runs of other types. The claimable
-- types are the worker's own (p_types) under its prefixes, or, without
-- p_types, the types found under its prefixes; either way without those
-- registered as disabled or for another runtime. Each type gives at most
-- p_limit runs, locked with SKIP LOCKED; the best p_limit of them are
-- claimed. A worker with neither prefixes nor types reads the whole queue
-- in claim order, as before. The rest (the lease, the timers, the events,
-- the journal) is unchanged.
create or replace function workflow.claim_runs(p_worker_id text, p_type_prefixes text[], p_runtime text,
                                               p_limit integer, p_lease_ms bigint, p_types text[] default null)
returns table (id uuid, type text, payload jsonb, attempt integer, max_attempts integer,
               lease_until timestamptz, created_at timestamptz, lease_token bigint,
               deadline_at timestamptz, journal jsonb)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
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
