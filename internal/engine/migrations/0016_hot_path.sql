-- The hot path of a run (claim, then complete), measured with make bench
-- -pg-stats (pg_stat_statements, WAL per run, pg_waldump) against River.
--
-- 1. complete_runs finds its batch by primary key. Its guard named
--    status = 'leased', which the partial index on lease_until matches; with
--    statistics gathered while few runs were leased (a burn-down's queue
--    analyzed before it starts, or any large table of finished runs), the
--    planner walked every leased run through that index and tested each
--    against the whole batch (id = any (p_ids)): quadratic, about 10 ms for a
--    batch of 500 among 4,000 leased runs against 1 ms by primary key. The
--    guard is now written so that the partial index cannot serve it
--    (coalesce(r.status, '') = 'leased': status is never null, so the
--    meaning is the same). The parents it locks first (DAG runs, durable
--    parents) are looked up by primary key too: as a hash join (nested
--    loops are off in this function) they were found by reading the whole
--    table, 20 ms per batch of 50,000 runs, whenever a batch held a step.
--
-- 2. workflow_run keeps half of each page free (fillfactor 50). A run is
--    updated twice (claimed, finished); on a full page each new version goes
--    to another page, which costs an extra WAL record (a tuple lock while
--    the page is changed) and more pages dirtied. With room on the page the
--    new version stays beside the old one. Existing pages keep their fill
--    until they are rewritten; new rows get the free space.
--
-- 3. workflow_registry is analyzed after any change. It is tiny, so
--    autovacuum's default threshold (50 changed rows) is never reached and
--    it stayed unanalyzed; the planner then assumed ten pages of types and
--    expected most pending runs to be excluded by the registry check of
--    claim_runs, so a claim sorted every pending run (a sequential scan and
--    an on-disk sort of 50,000 rows, 25-90 ms per claim) instead of reading
--    the first ones from the claim index (1-2 ms).

create or replace function workflow.complete_runs(p_worker_id text, p_ids uuid[], p_tokens bigint[], p_results jsonb[])
returns table (id uuid)
language sql security definer
set enable_nestloop = off
set search_path = pg_catalog, pg_temp
as $$
    -- The workflows (DAG runs, durable parents) of the runs finishing here,
    -- locked first and in id order: ending a workflow locks it before its
    -- steps, so a step's end must not lock them the other way round.
    -- Looked up by primary key: as a join (enable_nestloop is off here) the
    -- parents were found by reading the whole table.
    select 1 from workflow.workflow_run p
    where p.id = any (array(select c.parent_id from workflow.workflow_run c
                            where c.id = any (p_ids) and c.parent_id is not null))
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
          -- status = 'leased', written so that the batch is found by primary
          -- key and never through the partial index of leased runs.
          and coalesce(r.status, '') = 'leased'
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

alter table workflow.workflow_run set (fillfactor = 50);

alter table workflow.workflow_registry set (autovacuum_analyze_threshold = 0, autovacuum_analyze_scale_factor = 0);
analyze workflow.workflow_registry;
