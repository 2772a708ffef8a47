-- The lease reaper and deadline expiry lock the workflows of the runs they
-- end first, in id order, like complete_runs and fail_runs (0014): a step
-- whose lease expires, or whose deadline passes, while its workflow ends no
-- longer deadlocks with it.

CREATE OR REPLACE FUNCTION workflow.reap_expired_leases(p_limit integer) RETURNS TABLE(id uuid, status text)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET "workflow.via_function" TO 'on'
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
    SET "workflow.via_function" TO 'on'
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
