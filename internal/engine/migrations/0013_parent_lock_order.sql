-- A step that ends moves its DAG run on, under the run's row lock, from a
-- trigger that fires when the completing statement ends. Two batches
-- finishing steps of the same runs in different orders would take those
-- locks in different orders and deadlock (each costing deadlock_timeout).
-- complete_runs and fail_runs now lock the parents of the runs they finish,
-- in id order, before the triggers fire; a batch without children locks
-- nothing.

create or replace function workflow.complete_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[], p_results jsonb[])
returns table (id uuid)
language sql security definer
set enable_nestloop = off
set search_path = pg_catalog, pg_temp
set workflow.via_function = on as $$
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
    ), parents as (
        select p.id from workflow.workflow_run p
        where p.id in (select d.parent_id from done d where d.parent_id is not null)
        order by p.id
        for update
    )
    select d.id from done d where (select count(*) from parents) >= 0
$$;

create or replace function workflow.fail_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[], p_errors text[], p_retryable boolean[])
returns table (id uuid, status text, run_at timestamptz)
language sql security definer
set enable_nestloop = off
set search_path = pg_catalog, pg_temp
set workflow.via_function = on as $$
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
    ), parents as (
        select p.id from workflow.workflow_run p
        where p.id in (select f.parent_id from failed f where f.parent_id is not null and f.status = 'failed')
        order by p.id
        for update
    )
    select f.id, f.status, f.run_at from failed f where (select count(*) from parents) >= 0
$$;
