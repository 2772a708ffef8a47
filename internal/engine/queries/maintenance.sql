-- name: MaintenanceBlockers :many
-- Other sessions holding a lock on the audit trail (workflow_event and its
-- partitions), the run table or workflow.schema_version.
select a.pid, coalesce(a.usename, '')::text as usename, coalesce(a.application_name, '') as application_name,
       coalesce(a.state, '') as state, a.xact_start, min(l.relation::regclass::text)::text as relation
from pg_catalog.pg_locks l
join pg_catalog.pg_stat_activity a on a.pid = l.pid
where l.granted and l.pid <> pg_backend_pid() and l.locktype = 'relation'
  and l.database = (select oid from pg_catalog.pg_database where datname = current_database())
  and (l.relation in ('workflow.workflow_event'::regclass, 'workflow.workflow_run'::regclass,
                      'workflow.schema_version'::regclass)
       or l.relation in (select i.inhrelid from pg_catalog.pg_inherits i
                         where i.inhparent = 'workflow.workflow_event'::regclass))
group by a.pid, a.usename, a.application_name, a.state, a.xact_start
order by a.xact_start nulls last, a.pid;
