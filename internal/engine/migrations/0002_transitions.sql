-- The state machine: every transition of a run is one of these functions or
-- triggers, so every runtime that can call SQL gets the same semantics and the
-- same audit events. All functions are set-based: one call claims, extends,
-- completes or fails a whole batch.

-- prefix_pattern turns a type prefix into a LIKE pattern that matches it
-- literally: '_' and '%' inside the prefix are escaped, and a single trailing
-- '%' (the seed's 'billing.%') is accepted as a synonym for the bare prefix.
create function workflow.prefix_pattern(p_prefix text) returns text
language sql immutable strict parallel safe as $$
    select replace(replace(replace(
               case when right(p_prefix, 1) = '%' then left(p_prefix, -1) else p_prefix end,
               '\', '\\'), '%', '\%'), '_', '\_') || '%'
$$;

-- retry_delay is the backoff before the next attempt: attempt² × base (one
-- minute by default) plus up to 10 % jitter, capped at max when one is set.
-- p_jitter is a number in [0, 1); callers pass random().
create function workflow.retry_delay(
    p_attempt integer, p_base interval, p_max interval, p_jitter double precision)
returns interval
language sql immutable parallel safe as $$
    select case when p_max is null then d else least(d, p_max) end
    from (select coalesce(p_base, interval '1 minute') * (p_attempt * p_attempt)
                 * (1 + 0.1 * greatest(0, least(p_jitter, 1))) as d) s
$$;

-- claim_runs leases up to p_limit runnable runs whose type starts with one of
-- p_type_prefixes (all types when the array is null or empty), in priority,
-- then age order. Types registered as disabled, or for a runtime other than
-- p_runtime, are skipped. Each claimed run gets its attempt incremented and a
-- 'leased' and a 'started' event.
create function workflow.claim_runs(
    p_worker_id text, p_type_prefixes text[], p_runtime text, p_limit integer, p_lease_ms bigint)
returns table (id uuid, type text, payload jsonb, attempt integer, max_attempts integer,
               lease_until timestamptz, created_at timestamptz)
language plpgsql as $$
#variable_conflict use_column
declare
    v_patterns text[];
begin
    if p_worker_id is null or p_worker_id = '' then
        raise exception 'claim_runs: worker id must not be empty' using errcode = '22023';
    end if;
    if p_limit is null or p_limit < 1 then
        raise exception 'claim_runs: limit must be at least 1, got %', p_limit using errcode = '22023';
    end if;
    if p_lease_ms is null or p_lease_ms < 1000 then
        raise exception 'claim_runs: lease must be at least 1000 ms, got %', p_lease_ms using errcode = '22023';
    end if;
    if cardinality(p_type_prefixes) > 0 then
        select array_agg(workflow.prefix_pattern(p)) into v_patterns from unnest(p_type_prefixes) p;
    end if;

    return query
    with candidates as (
        select r.id
        from workflow.workflow_run r
        where r.status = 'pending'
          and r.deleted_at is null
          and r.run_at <= now()
          and (v_patterns is null or r.type like any (v_patterns))
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
            started_at  = coalesce(r.started_at, now()),
            updated_at  = now()
        from candidates c
        where r.id = c.id
        returning r.id, r.type, r.payload, r.attempt, r.max_attempts, r.lease_until,
                  r.created_at, r.priority
    ), events as (
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select c.id, e.event_type, e.data
        from claimed c
        cross join lateral (
            select jsonb_build_object('worker_id', p_worker_id, 'attempt', c.attempt,
                                      'lease_until', c.lease_until) as d) j
        -- leased, then started: each run's pair is emitted (and numbered) in order
        cross join lateral (values ('leased', j.d), ('started', j.d)) e(event_type, data)
    )
    select c.id, c.type, c.payload, c.attempt, c.max_attempts, c.lease_until, c.created_at
    from claimed c
    order by c.priority, c.created_at;
end
$$;

-- heartbeat_runs extends the leases a worker still holds. For each requested
-- run it answers whether the lease is still the caller's (owned) and the run's
-- current status, so a worker learns at once that a run was cancelled or that
-- its lease was lost.
create function workflow.heartbeat_runs(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_lease_ms bigint)
returns table (id uuid, status text, owned boolean)
-- A batch is looked up by primary key (id = any (p_ids)) and matched to its
-- request rows by hash: a nested loop over the batch would be quadratic.
language plpgsql
set enable_nestloop = off
as $$
#variable_conflict use_column
begin
    if p_lease_ms is null or p_lease_ms < 1000 then
        raise exception 'heartbeat_runs: lease must be at least 1000 ms, got %', p_lease_ms using errcode = '22023';
    end if;
    return query
    with req as (
        select * from unnest(p_ids, p_attempts) as t(id, attempt)
    ), extended as (
        update workflow.workflow_run r
        set lease_until = now() + p_lease_ms * interval '1 millisecond',
            updated_at  = now()
        from req
        where r.id = any (p_ids)
          and r.id = req.id
          and r.status = 'leased'
          and r.leased_by = p_worker_id
          and r.attempt = req.attempt
        returning r.id, r.attempt, r.lease_until
    ), events as (
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select e.id, 'heartbeat',
               jsonb_build_object('worker_id', p_worker_id, 'attempt', e.attempt,
                                  'lease_until', e.lease_until,
                                  'extended_by_seconds', p_lease_ms::double precision / 1000)
        from extended e
    )
    select req.id, coalesce(cur.status, 'missing'), (x.id is not null)
    from req
    left join extended x on x.id = req.id
    left join workflow.workflow_run cur on cur.id = req.id;
end
$$;

-- complete_runs records successful attempts. Only runs still leased by the
-- caller at the given attempt change; the ids of those are returned.
create function workflow.complete_runs(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_results jsonb[])
returns table (id uuid)
-- A batch is looked up by primary key (id = any (p_ids)) and matched to its
-- request rows by hash: a nested loop over the batch would be quadratic.
language sql
set enable_nestloop = off
as $$
    with req as (
        select * from unnest(p_ids, p_attempts, p_results) as t(id, attempt, result)
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
          and r.attempt = req.attempt
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
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_errors text[], p_retryable boolean[])
returns table (id uuid, status text, run_at timestamptz)
-- A batch is looked up by primary key (id = any (p_ids)) and matched to its
-- request rows by hash: a nested loop over the batch would be quadratic.
language sql
set enable_nestloop = off
as $$
    with req as (
        select * from unnest(p_ids, p_attempts, p_errors, p_retryable)
            as t(id, attempt, error, retryable)
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
          and r.attempt = req.attempt
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
-- pending again at once, and the attempt is not counted.
create function workflow.release_runs(p_worker_id text, p_ids uuid[], p_attempts integer[])
returns table (id uuid)
-- A batch is looked up by primary key (id = any (p_ids)) and matched to its
-- request rows by hash: a nested loop over the batch would be quadratic.
language sql
set enable_nestloop = off
as $$
    with req as (
        select * from unnest(p_ids, p_attempts) as t(id, attempt)
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
          and r.attempt = req.attempt
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

-- cancel_run is the seed's cancel UPDATE; the trigger below writes the event.
create function workflow.cancel_run(p_id uuid) returns boolean
language sql as $$
    with c as (
        update workflow.workflow_run
        set status = 'cancelled', updated_at = now()
        where id = p_id and status in ('pending', 'leased')
        returning 1
    )
    select exists (select 1 from c)
$$;

-- reap_expired_leases returns runs whose lease ran out (their worker died or
-- hung) to pending, or fails them when they have no attempts left. Safe to
-- call from many processes at once.
create function workflow.reap_expired_leases(p_limit integer)
returns table (id uuid, status text)
language sql as $$
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
    select x.id, x.status from reaped x
$$;

-- delete_finished_runs removes finished runs (and, through the delete trigger,
-- their events)
-- that finished before p_before, at most p_limit at a time.
create function workflow.delete_finished_runs(p_before timestamptz, p_limit integer)
returns bigint
language sql as $$
    with doomed as (
        select r.id from workflow.workflow_run r
        where r.finished_at < p_before
          and r.status in ('succeeded', 'failed', 'cancelled')
        order by r.finished_at
        limit p_limit
        for update skip locked
    ), deleted as (
        delete from workflow.workflow_run r using doomed d where r.id = d.id returning 1
    )
    select count(*) from deleted
$$;

-- Triggers: transitions made by plain SQL get their events and notifications
-- too, so producers that never call a function leave a complete trail.

create function workflow.on_run_inserted() returns trigger
language plpgsql as $$
begin
    insert into workflow.workflow_event (workflow_id, event_type, data)
    select n.id, 'created',
           jsonb_strip_nulls(jsonb_build_object(
               'type', n.type, 'priority', n.priority, 'run_at', n.run_at,
               'max_attempts', n.max_attempts, 'idempotency_key', n.idempotency_key,
               'source_namespace', n.source_namespace, 'source_name', n.source_name))
    from new_runs n
    order by n.created_at;
    perform pg_notify('workflow_run_created', t.type)
    from (select distinct n.type from new_runs n) t;
    return null;
end
$$;

create trigger workflow_run_inserted
    after insert on workflow.workflow_run
    referencing new table as new_runs
    for each statement execute function workflow.on_run_inserted();

create function workflow.on_runs_deleted() returns trigger
language plpgsql as $$
begin
    delete from workflow.workflow_event e using old_runs o where e.workflow_id = o.id;
    return null;
end
$$;

create trigger workflow_runs_deleted
    after delete on workflow.workflow_run
    referencing old table as old_runs
    for each statement execute function workflow.on_runs_deleted();

create function workflow.on_run_cancelled() returns trigger
language plpgsql as $$
begin
    new.finished_at := coalesce(new.finished_at, now());
    new.lease_until := null;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (new.id, 'cancelled',
            jsonb_strip_nulls(jsonb_build_object(
                'previous_status', old.status, 'attempt', old.attempt,
                'worker_id', case when old.status = 'leased' then old.leased_by end)));
    perform pg_notify('workflow_run_cancelled', new.id::text);
    return new;
end
$$;

create trigger workflow_run_cancelled
    before update of status on workflow.workflow_run
    for each row
    when (new.status = 'cancelled' and old.status in ('pending', 'leased'))
    execute function workflow.on_run_cancelled();

create function workflow.on_finished_run_changed() returns trigger
language plpgsql as $$
begin
    raise exception 'workflow run % is % and cannot become %', old.id, old.status, new.status
        using errcode = '55000', hint = 'finished runs (succeeded, failed, cancelled) never change status';
end
$$;

create trigger workflow_run_finished_is_final
    before update of status on workflow.workflow_run
    for each row
    when (old.status in ('succeeded', 'failed', 'cancelled') and new.status <> old.status)
    execute function workflow.on_finished_run_changed();
