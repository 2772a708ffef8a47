-- name: RegistryUpsert
select workflow.put_registry(@workflow_name, @runtime, @is_enabled, @description, @owner_namespace,
                             @owner_name, @definition, @max_leased, @max_leased_per_key, @rate_limit,
                             @rate_period_ms, @rate_per_key, @shared_with::text[]);

-- name: RegistryGet
select workflow_name, runtime, is_enabled, description, owner_namespace, owner_name,
       created_at, updated_at, definition, max_leased, max_leased_per_key, rate_limit, rate_period_ms,
       rate_per_key, namespace, shared_with
from workflow.registry_entries(@workflow_name, null, null)
where namespace = @namespace::text;

-- name: RegistryDelete
select workflow.delete_registry(@workflow_name, @owner_namespace, @owner_name);

-- name: RegistryListByOwner
select workflow_name, runtime, is_enabled, description, owner_namespace, owner_name,
       created_at, updated_at, definition, max_leased, max_leased_per_key, rate_limit, rate_period_ms,
       rate_per_key, namespace, shared_with
from workflow.registry_entries(null, @owner_namespace, @owner_name);

-- name: DAGSteps
select name, type, depends_on, run_id::text, status, attempt, max_attempts, started_at, finished_at,
       last_error, wait_kind, workflow_status, final, elements, elements_done
from workflow.dag_steps(@id);
