-- Every change of a run's status leaves an audit event, whoever makes it.
-- The functions of this schema write their own, richer events; they say so
-- by setting workflow.via_function = on while they run (so it also holds
-- inside the triggers their statements fire; 0026 sets it in their bodies). A status changed by plain SQL
-- outside them (an operator's manual fix, a producer's tool) gets an event
-- from the trigger below, with reason plain_sql. Cancellations and soft
-- deletes already have theirs (on_run_cancelled, on_run_soft_deleted).


create function workflow.on_status_changed_by_sql() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (new.id,
            case new.status when 'pending' then 'retried' when 'leased' then 'leased'
                            when 'succeeded' then 'succeeded' else 'failed' end,
            jsonb_strip_nulls(jsonb_build_object(
                'reason', 'plain_sql', 'previous_status', old.status, 'attempt', new.attempt,
                'database_user', session_user)));
    return null;
end
$$;
revoke execute on function workflow.on_status_changed_by_sql() from public;

create trigger workflow_status_changed_by_sql
    after update on workflow.workflow_run
    for each row
    when (old.status is distinct from new.status
          and new.status <> 'cancelled'
          and coalesce(current_setting('workflow.via_function', true), '') <> 'on')
    execute function workflow.on_status_changed_by_sql();
