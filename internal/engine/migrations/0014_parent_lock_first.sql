-- A step's end locks its workflow before its own row, in id order, as the
-- end of a workflow does (workflow first, then its steps): a step failing
-- for good no longer deadlocks with a sibling finishing at the same moment.
-- (0013 locked the workflows after the steps, which kept sibling
-- completions apart but not a failure from a completion.) The lookup of the
-- workflows reads a small partial index of the runs that have one.

create index if not exists idx_workflow_run_child on workflow.workflow_run (id) include (parent_id)
    where parent_id is not null;

create or replace function workflow.complete_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[], p_results jsonb[])
returns table (id uuid)
language sql security definer
set enable_nestloop = off
set search_path = pg_catalog, pg_temp
set workflow.via_function = on as $$
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
set workflow.via_function = on as $$
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
