-- What the web console reads, and how it learns that something changed.
--
-- 1. Listing runs newest first, a page at a time (keyset pagination on
--    created_at, id), with or without a filter, reads indexes in that order
--    instead of sorting the table, and costs claims and completions as
--    little as can be: a run's row is written anew on every status change
--    (status is indexed by the queue), and each index that holds the row
--    gets a new entry each time. So the list's own index per type holds
--    finished runs only (one entry per run, when it ends); pending runs come
--    from the claim index (type, priority, created_at), leased ones (as
--    many as workers hold) from the queue's depth index. One more over the
--    runs of each namespace (only runs mirrored from a WorkflowRun have
--    one), and a small one over the runs that ended badly (the filter a
--    user reaches for first, and the rarest rows).
--    Building them locks writes to workflow_run once, while they are built.

-- A run's children in creation order (its page lists the first ones): the
-- index by parent, with the order added.
drop index workflow.idx_workflow_run_parent;
create index idx_workflow_run_parent on workflow.workflow_run (parent_id, created_at, id)
    where parent_id is not null;

create index idx_workflow_run_type_created on workflow.workflow_run (type collate "C", created_at, id)
    where status in ('succeeded', 'failed', 'cancelled');
create index idx_workflow_run_namespace_created on workflow.workflow_run (source_namespace, created_at, id)
    where source_namespace is not null;
create index idx_workflow_run_ended_badly on workflow.workflow_run (created_at, id)
    where status in ('failed', 'cancelled');

-- A run's times are finite: 'infinity' in run_at or deadline_at is no time
-- a run can start or end at, and no reader can show it. NOT VALID: rows
-- already stored are left alone; every new or changed row is checked.
alter table workflow.workflow_run add constraint workflow_run_times_finite check (
    isfinite(run_at) and (deadline_at is null or isfinite(deadline_at))) not valid;

-- 2. A notification when runs change status: at most one per committing
--    transaction (the first status change of the transaction queues it),
--    sent at commit, and only by one committing transaction at a time (the
--    others find the advisory lock taken and leave it to the holder, whose
--    notification is delivered after they began their own commit; a
--    listener looks again shortly after the last notification, as the
--    console does, and a commit slower than that is seen at the next
--    notification). The payload is empty: a listener re-reads what it shows.

create function workflow.on_run_status_committing() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    if pg_try_advisory_xact_lock(hashtext('workflow_run_status'), 0) then
        perform pg_notify('workflow_run_status', '');
    end if;
    return null;
end
$$;

create constraint trigger workflow_run_status_notify
    after update of status on workflow.workflow_run
    deferrable initially deferred
    for each row
    when (old.status is distinct from new.status
          and current_setting('workflow.status_notified', true) is distinct from 'on'
          and set_config('workflow.status_notified', 'on', true) = 'on')
    execute function workflow.on_run_status_committing();

comment on trigger workflow_run_status_notify on workflow.workflow_run is
    'Notifies workflow_run_status once per transaction that changes a run''s status, at commit; one committing transaction at a time.';

-- 3. The queue of every type that has unfinished runs, for an overview:
--      runnable  pending, due, not parked;
--      leased    held by a worker;
--      parked    pending and waiting (a durable sleep, a signal, a child,
--                a workflow's steps) or not due yet (run_at in the future);
--      oldest_due when the longest-waiting runnable run became due.
--    One index probe per type (workflow.active_types) and index-only counts
--    of each type's unfinished runs: the cost follows the unfinished runs,
--    not the history.
create function workflow.type_depths()
returns table (type text, runnable bigint, leased bigint, parked bigint, oldest_due timestamptz)
language plpgsql stable security definer
set search_path = pg_catalog, pg_temp
set jit = off as $$
#variable_conflict use_column
begin
    return query
    select t.type,
           (select count(*) from workflow.workflow_run r
            where r.type collate "C" = t.type and r.status = 'pending'
              and r.deleted_at is null and r.run_at <= now()),
           (select count(*) from workflow.workflow_run r
            where r.type collate "C" = t.type and r.status = 'leased' and r.deleted_at is null),
           (select count(*) from workflow.workflow_run r
            where r.type collate "C" = t.type and r.status = 'pending'
              and r.deleted_at is null and r.run_at > now()),
           (select min(r.run_at) from workflow.workflow_run r
            where r.type collate "C" = t.type and r.status = 'pending'
              and r.deleted_at is null and r.run_at <= now())
    from workflow.active_types(array['']) t(type)
    order by t.type;
end
$$;
revoke execute on function workflow.type_depths() from public;

comment on function workflow.type_depths() is
    'Runnable, leased and parked runs of every type with unfinished runs, and when its oldest runnable run became due.';
