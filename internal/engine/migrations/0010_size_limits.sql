-- Size limits that fail loudly instead of filling the inbox:
--   a payload is at most workflow.max_payload_bytes of JSON text (default
--   1 MiB; change it with ALTER DATABASE … SET workflow.max_payload_bytes =
--   '4194304', or per role or session);
--   a result is at most 1 MiB (a worker whose result is larger fails that run
--   for good, saying why).

create or replace function workflow.on_run_inserted() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_limit bigint := coalesce(nullif(current_setting('workflow.max_payload_bytes', true), '')::bigint, 1048576);
    v_big record;
begin
    select n.type, octet_length(n.payload::text) as bytes into v_big
    from new_runs n where octet_length(n.payload::text) > v_limit limit 1;
    if found then
        raise exception 'payload of a % run is % bytes; the limit is % (workflow.max_payload_bytes)',
            v_big.type, v_big.bytes, v_limit using errcode = '22023';
    end if;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    select n.id, 'created',
           jsonb_strip_nulls(jsonb_build_object(
               'type', n.type, 'priority', n.priority, 'run_at', n.run_at,
               'max_attempts', n.max_attempts, 'idempotency_key', n.idempotency_key,
               'source_namespace', n.source_namespace, 'source_name', n.source_name,
               'parent_id', n.parent_id, 'parent_step', n.parent_step, 'deadline_at', n.deadline_at))
    from new_runs n
    order by n.created_at;
    perform pg_notify('workflow_run_created', t.type)
    from (select distinct n.type from new_runs n) t;
    return null;
end
$$;

alter table workflow.workflow_run add constraint workflow_run_result_size check (
    result is null or octet_length(result::text) <= 1048576) not valid;
