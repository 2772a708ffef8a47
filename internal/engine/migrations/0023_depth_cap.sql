-- A pool's depth counted up to what the pool can use.
--
-- An exact count reads one index entry per queued run: with 1,000,000
-- runs pending over 20 pools, every evaluation of the autoscaler read them
-- all (about a tenth of a second per evaluation, every few seconds, and
-- growing with the backlog). The autoscaler never needs more than
-- maxReplicas × runsPerReplica: past it, the desired count is the maximum
-- whatever the backlog. workflow.queue_depth takes that bound (p_cap) and
-- stops counting there; without it (null, the default) the count is exact,
-- as before, so a KEDA query or a dashboard written for the two-argument
-- form reads the same numbers.
--
-- The pool's types are found as before (one index probe per type) and
-- counted type by type from the index alone, until the cap is reached.

drop function workflow.queue_depth(text[], text);

-- The depth of a worker pool's queue: what the autoscaler scales by, and
-- what a KEDA PostgreSQL scaler or a dashboard can read.
--   runnable  pending runs that are due (run_at has passed; parked runs wait
--             in the future), not soft-deleted, whose type is under one of
--             the prefixes and not registered as disabled or for a runtime
--             other than p_runtime (null: any runtime);
--   leased    leased runs whose type is under one of the prefixes.
-- Each is counted up to p_cap (null: no bound; otherwise at least 1): a
-- value equal to p_cap means "p_cap or more". A run under several of the
-- prefixes counts once. Prefixes are literal, as in claim_runs.
create function workflow.queue_depth(p_type_prefixes text[], p_runtime text default null,
                                     p_cap bigint default null)
returns table (runnable bigint, leased bigint)
language plpgsql stable security definer
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
set jit = off as $$
#variable_conflict use_column
declare
    v_types text[];
    v_claimable text[];
    v_runnable bigint;
    v_leased bigint;
    v_type text;
begin
    if p_cap is not null and p_cap < 1 then
        raise exception 'queue_depth: the cap must be at least 1 (or null for an exact count), got %', p_cap
            using errcode = '22023';
    end if;
    select array_agg(t) into v_types from workflow.active_types(p_type_prefixes) t;
    if v_types is null then
        return query select 0::bigint, 0::bigint;
        return;
    end if;
    select array_agg(t) into v_claimable
    from unnest(v_types) t
    where not exists (
        select 1 from workflow.workflow_registry g
        where g.workflow_name = t
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
        v_runnable := v_runnable + (
            select count(*) from (
                select 1 from workflow.workflow_run r
                where r.type collate "C" = v_type and r.status = 'pending'
                  and r.deleted_at is null and r.run_at <= now()
                order by r.type collate "C", r.status, r.run_at
                limit p_cap - v_runnable) x);
    end loop;
    foreach v_type in array v_types loop
        exit when v_leased >= p_cap;
        v_leased := v_leased + (
            select count(*) from (
                select 1 from workflow.workflow_run r
                where r.type collate "C" = v_type and r.status = 'leased' and r.deleted_at is null
                order by r.type collate "C", r.status, r.run_at
                limit p_cap - v_leased) x);
    end loop;
    return query select v_runnable, v_leased;
end
$$;
revoke execute on function workflow.queue_depth(text[], text, bigint) from public;

comment on function workflow.queue_depth(text[], text, bigint) is
    'Runnable and leased runs of a worker pool (its type prefixes and runtime), each counted up to p_cap (null: exactly): the numbers the autoscaler scales by.';

-- The function was dropped with its grant: give it back to the console's
-- and scalers' role, when that role exists (roles.sql, re-run after every
-- upgrade, grants it too).
do $$
begin
    if exists (select 1 from pg_roles where rolname = 'workflow_reader') then
        grant execute on function workflow.queue_depth(text[], text, bigint) to workflow_reader;
    end if;
end
$$;
