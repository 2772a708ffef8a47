-- name: RegistryUpsert :one
-- The name back, or null when another object owns it.
select workflow.put_registry(@workflow_name, sqlc.narg(runtime)::text, @is_enabled, @description,
                             sqlc.narg(owner_namespace)::text, sqlc.narg(owner_name)::text,
                             sqlc.narg(definition)::jsonb, sqlc.narg(max_leased)::integer,
                             sqlc.narg(max_leased_per_key)::integer, sqlc.narg(rate_limit)::integer,
                             sqlc.narg(rate_period_ms)::bigint, @rate_per_key, @shared_with::text[]);

-- name: RegistryGet :one
select workflow_name, runtime, is_enabled, description, owner_namespace, owner_name,
       created_at, updated_at, definition, max_leased, max_leased_per_key, rate_limit, rate_period_ms,
       rate_per_key, namespace, shared_with
from workflow.registry_entries(@workflow_name, null, null)
where namespace = @namespace::text;

-- name: RegistryDelete :one
select workflow.delete_registry(@workflow_name, sqlc.narg(owner_namespace)::text, sqlc.narg(owner_name)::text);

-- name: RegistryListByOwner :many
select workflow_name, runtime, is_enabled, description, owner_namespace, owner_name,
       created_at, updated_at, definition, max_leased, max_leased_per_key, rate_limit, rate_period_ms,
       rate_per_key, namespace, shared_with
from workflow.registry_entries(null, @owner_namespace, @owner_name);

-- name: DAGSteps :many
select name, type, depends_on, run_id::text, status, attempt, max_attempts, started_at, finished_at,
       last_error, wait_kind, workflow_status, final, elements, elements_done
from workflow.dag_steps(@id);
