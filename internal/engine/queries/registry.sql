-- name: RegistryUpsert
insert into workflow.workflow_registry (
    workflow_name, runtime, is_enabled, description, owner_namespace, owner_name, definition)
values (@workflow_name, @runtime, @is_enabled, @description, @owner_namespace, @owner_name, @definition)
on conflict (workflow_name) do update
set runtime     = excluded.runtime,
    is_enabled  = excluded.is_enabled,
    description = excluded.description,
    definition  = excluded.definition,
    updated_at  = now()
where workflow.workflow_registry.owner_namespace is not distinct from excluded.owner_namespace
  and workflow.workflow_registry.owner_name is not distinct from excluded.owner_name
returning workflow_name;

-- name: RegistryGet
select workflow_name, runtime, is_enabled, description, owner_namespace, owner_name,
       created_at, updated_at, definition
from workflow.workflow_registry
where workflow_name = @workflow_name;

-- name: RegistryDelete
delete from workflow.workflow_registry
where workflow_name = @workflow_name
  and owner_namespace is not distinct from @owner_namespace
  and owner_name is not distinct from @owner_name;

-- name: RegistryListByOwner
select workflow_name, runtime, is_enabled, description, owner_namespace, owner_name,
       created_at, updated_at, definition
from workflow.workflow_registry
where owner_namespace = @owner_namespace and owner_name = @owner_name
order by workflow_name;

-- name: DAGSteps
select s.step->>'name' as name,
       s.step->>'type' as type,
       coalesce((select array_agg(d order by o) from jsonb_array_elements_text(s.step->'dependsOn') with ordinality x(d, o)),
                '{}') as depends_on,
       c.id::text, c.status, coalesce(c.attempt, 0), coalesce(c.max_attempts, 0),
       c.started_at, c.finished_at, left(c.last_error, 1024), c.wait_kind,
       p.status as workflow_status
from workflow.workflow_run p
cross join lateral jsonb_array_elements(p.dag->'steps') with ordinality s(step, ord)
left join workflow.workflow_run c on c.parent_id = p.id and c.parent_step = s.step->>'name'
where p.id = @id and p.dag is not null
order by s.ord;
