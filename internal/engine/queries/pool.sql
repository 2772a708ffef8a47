-- name: PoolQueueDepth :many
-- Runnable and leased runs of every worker pool in one query, by
-- workflow.queue_depth (the definition a KEDA scaler or a dashboard uses
-- too). A pool is given as one row per (pool, prefix), with the pool's cap
-- (0: count exactly) and namespace; a run matching several prefixes of a
-- pool counts once.
select p.pool, d.runnable, d.leased
from (
    select pool, array_agg(prefix) as prefixes, min(runtime) as runtime, nullif(min(cap), 0) as cap,
           min(namespace) as namespace
    from unnest(@pool_ids::integer[], @prefixes::text[], @runtimes::text[], @caps::bigint[], @namespaces::text[])
        as p(pool, prefix, runtime, cap, namespace)
    group by pool
) p
cross join lateral workflow.queue_depth(p.prefixes, p.runtime, p.cap, p.namespace) d;
