-- Retention that keeps up with the load (make soak).
--
-- Under steady load with retention at one minute, deleting a batch of 1,000
-- finished runs took 300-700 ms: the batch was deleted through a hash join
-- that read the whole run table, and the check that a run is not the step
-- of a DAG run (whose steps stay as long as it does) read the whole table
-- for the DAG runs. Retention fell behind and the tables grew. Now
--
-- * the batch is deleted by the rows' addresses (a TID scan);
-- * DAG runs are found through a partial index of their own (only runs with
--   a DAG definition are in it, so plain runs never write to it);
-- * the hot tables are vacuumed as soon as 2 % of them is dead and without
--   the cost delay that throttles autovacuum by default: a queue replaces
--   its rows all the time, and a throttled vacuum that starts at 20 % dead
--   lets them bloat.

create index if not exists idx_workflow_run_dag on workflow.workflow_run (id) where dag is not null;

create or replace function workflow.delete_finished_runs(p_before timestamptz, p_limit integer) returns bigint
language sql set search_path = pg_catalog, pg_temp as $$
    with doomed as (
        select r.ctid from workflow.workflow_run r
        where r.finished_at < p_before
          and r.status in ('succeeded', 'failed', 'cancelled')
          and (r.parent_id is null
               or not exists (select 1 from workflow.workflow_run p
                              where p.id = r.parent_id and p.dag is not null))
        order by r.finished_at
        limit p_limit
        for update skip locked
    ), deleted as (
        -- By the row's address: the row is locked (above) until the end of
        -- this statement, so it cannot move.
        delete from workflow.workflow_run r
        where r.ctid = any (array(select d.ctid from doomed d))
        returning 1
    )
    select count(*) from deleted
$$;

alter table workflow.workflow_run set (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
alter table workflow.workflow_event set (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0,
                                         autovacuum_vacuum_insert_scale_factor = 0.02);
