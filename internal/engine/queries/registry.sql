-- name: RegistryUpsert
insert into workflow.workflow_registry (
    workflow_name, runtime, is_enabled, description, owner_namespace, owner_name)
values (@workflow_name, @runtime, @is_enabled, @description, @owner_namespace, @owner_name)
on conflict (workflow_name) do update
set runtime     = excluded.runtime,
    is_enabled  = excluded.is_enabled,
    description = excluded.description,
    updated_at  = now()
where workflow.workflow_registry.owner_namespace is not distinct from excluded.owner_namespace
  and workflow.workflow_registry.owner_name is not distinct from excluded.owner_name
returning workflow_name;

-- name: RegistryGet
select workflow_name, runtime, is_enabled, description, owner_namespace, owner_name,
       created_at, updated_at
from workflow.workflow_registry
where workflow_name = @workflow_name;

-- name: RegistryDelete
delete from workflow.workflow_registry
where workflow_name = @workflow_name
  and owner_namespace is not distinct from @owner_namespace
  and owner_name is not distinct from @owner_name;

-- name: RegistryListByOwner
select workflow_name, runtime, is_enabled, description, owner_namespace, owner_name,
       created_at, updated_at
from workflow.workflow_registry
where owner_namespace = @owner_namespace and owner_name = @owner_name
order by workflow_name;
