-- Runs mirrored from Kubernetes objects announce every change of status,
-- attempt or lease holder on workflow_run_changed, with the payload
-- "namespace/name", so the operator can write status back at once. Rows
-- without a source (plain producers) pay nothing: the trigger's WHEN clause
-- filters them before any function runs.

create function workflow.on_source_run_changed() returns trigger
language plpgsql as $$
begin
    perform pg_notify('workflow_run_changed', new.source_namespace || '/' || new.source_name);
    return null;
end
$$;

create trigger workflow_source_run_changed
    after update on workflow.workflow_run
    for each row
    when (new.source_name is not null
          and (old.status is distinct from new.status
               or old.attempt is distinct from new.attempt
               or old.leased_by is distinct from new.leased_by))
    execute function workflow.on_source_run_changed();

-- Registry entries by owner, for the registry controller.
create index idx_workflow_registry_owner
    on workflow.workflow_registry (owner_namespace, owner_name);
