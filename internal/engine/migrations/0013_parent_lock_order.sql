-- Every path that ends a run locks the runs it may move on — its parent
-- (a DAG run or a durable parent) — first, in id order, before the run
-- itself, as ending a parent does (parent, then its children, through
-- workflow_parent_ended). Steps of one workflow ending together, from
-- completions, failures, the lease reaper or deadline expiry, therefore
-- never deadlock. The parents are found through a small partial index of
-- the runs that have one.

create index if not exists idx_workflow_run_child on workflow.workflow_run (id) include (parent_id)
    where parent_id is not null;

create or replace function workflow.complete_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[], p_results jsonb[])
returns table (id uuid)
language sql security definer
set enable_nestloop = off
set search_path = pg_catalog, pg_temp
as $$
    -- The workflows (DAG runs, durable parents) of the runs finishing here,
    -- locked first and in id order: ending a workflow locks it before its
    -- steps, so a step's end must not lock them the other way round.
    select 1 from workflow.workflow_run p
    where p.id in (select c.parent_id from workflow.workflow_run c
                   where c.id = any (p_ids) and c.parent_id is not null)
    order by p.id
    for update of p;
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
        returning r.id, r.attempt, r.parent_id
    ), events as (
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select d.id, 'succeeded', jsonb_build_object('worker_id', p_worker_id, 'attempt', d.attempt)
        from done d
    )
    select d.id from done d
$$;

create or replace function workflow.fail_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[], p_errors text[], p_retryable boolean[])
returns table (id uuid, status text, run_at timestamptz)
language sql security definer
set enable_nestloop = off
set search_path = pg_catalog, pg_temp
as $$
    -- The workflows (DAG runs, durable parents) of the runs finishing here,
    -- locked first and in id order: ending a workflow locks it before its
    -- steps, so a step's end must not lock them the other way round.
    select 1 from workflow.workflow_run p
    where p.id in (select c.parent_id from workflow.workflow_run c
                   where c.id = any (p_ids) and c.parent_id is not null)
    order by p.id
    for update of p;
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
    select f.id, f.status, f.run_at from failed f
$$;

CREATE OR REPLACE FUNCTION workflow.reap_expired_leases(p_limit integer) RETURNS TABLE(id uuid, status text)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    -- The workflows of the runs about to be reaped, locked first and in id
    -- order, as a worker's completions do.
    select 1 from workflow.workflow_run p
    where p.id in (select r.parent_id from workflow.workflow_run r
                   where r.status = 'leased' and r.lease_until < now() and r.parent_id is not null
                   order by r.lease_until
                   limit p_limit)
    order by p.id
    for update of p;
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

CREATE OR REPLACE FUNCTION workflow.expire_deadlines(p_ids uuid[], p_limit integer) RETURNS TABLE(id uuid, previous_status text)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    -- The workflows of the runs about to expire, locked first and in id
    -- order, as a worker's completions do.
    select 1 from workflow.workflow_run p
    where p.id in (select r.parent_id from workflow.workflow_run r
                   where r.deadline_at <= now() and r.deadline_at is not null
                     and r.status in ('pending', 'leased') and r.parent_id is not null
                     and (p_ids is null or r.id = any (p_ids))
                   order by r.deadline_at
                   limit p_limit)
    order by p.id
    for update of p;
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
