-- name: RunCreateMany :one
-- Records a batch of runs by workflow.create_runs; one row back: the ids and
-- created flags in input order. An array a batch leaves unset goes as null;
-- an element as null leaves that run's value to its default (sqlc.yaml maps
-- this file's arrays to slices of pointers).
select coalesce(array_agg(c.id order by c.ord), '{}')::uuid[] as ids,
       coalesce(array_agg(c.created order by c.ord), '{}')::boolean[] as created
from workflow.create_runs(@types::text[], @payloads::text[], @priorities::integer[], @run_ats::timestamptz[],
                          @idempotency_keys::text[], @max_attempts::integer[], @deadline_ms::bigint[],
                          @retry_base_ms::bigint[], @retry_max_ms::bigint[], @traceparents::text[],
                          @concurrency_keys::text[], @namespace::text, @type_namespace::text) c;
