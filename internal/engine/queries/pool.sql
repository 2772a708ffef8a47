-- name: PoolQueueDepth
-- Runnable and leased runs of every worker pool in one query. A pool is
-- given as one row per (pool, prefix); a run matching several prefixes of a
-- pool counts once. Runnable runs are pending, due, not deleted, and not
-- registered as disabled or for a runtime other than the pool's.
with pools as (
    select * from unnest(@pool_ids::integer[], @prefixes::text[], @runtimes::text[])
        as p(pool, prefix, runtime)
), matches as (
    select distinct p.pool, r.id, r.status
    from pools p
    join workflow.workflow_run r
      on r.type like workflow.prefix_pattern(p.prefix)
     and r.deleted_at is null
     and (r.status = 'leased' or (r.status = 'pending' and r.run_at <= now()))
    where r.status = 'leased'
       or not exists (
           select 1 from workflow.workflow_registry g
           where g.workflow_name = r.type and (not g.is_enabled or g.runtime <> p.runtime))
)
select pool,
       count(*) filter (where status = 'pending') as runnable,
       count(*) filter (where status = 'leased') as leased
from matches
group by pool;
