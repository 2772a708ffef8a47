-- A cancelled run's audit event says how it was cancelled:
--
--   reason 'requested'     workflow.cancel_run (the SDKs, the operator)
--   reason 'plain_sql'     the seed's UPDATE ... SET status = 'cancelled'
--   reason 'parent_ended'  its parent run failed or was cancelled
--   reason 'deleted'       its row was soft-deleted (unchanged, 0009)
--
-- and, when the canceller set it, by whom: the transaction setting
-- workflow.cancelled_by (e.g. set local workflow.cancelled_by =
-- 'billing-api'), at most 256 characters, recorded as 'by' (a soft delete
-- records it too). It is a label the canceller chooses, not an identity the
-- database checked. So is the difference between 'requested' and
-- 'plain_sql': a role that may UPDATE the row could set the setting
-- cancel_run uses. 'parent_ended' is believed only when the run's parent
-- has ended, and 'deleted' only comes from the soft-delete trigger.

create or replace function workflow.cancel_run(p_id uuid) returns boolean
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    v_done boolean;
begin
    perform set_config('workflow.cancel_reason', 'requested', true);
    update workflow.workflow_run
    set status = 'cancelled', updated_at = now()
    where id = p_id and status in ('pending', 'leased');
    v_done := found;
    perform set_config('workflow.cancel_reason', '', true);
    return v_done;
end
$$;

create or replace function workflow.on_parent_ended() returns trigger
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    v_outer text := coalesce(current_setting('workflow.cancel_reason', true), '');
begin
    perform set_config('workflow.cancel_reason', 'parent_ended', true);
    update workflow.workflow_run c
    set status = 'cancelled', updated_at = now()
    where c.parent_id = new.id and c.status in ('pending', 'leased');
    perform set_config('workflow.cancel_reason', v_outer, true);
    return null;
end
$$;

create or replace function workflow.on_run_cancelled() returns trigger
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    v_by text := left(nullif(current_setting('workflow.cancelled_by', true), ''), 256);
    v_reason text := coalesce(nullif(current_setting('workflow.cancel_reason', true), ''), 'plain_sql');
begin
    if v_reason not in ('requested', 'parent_ended')
       or v_reason = 'parent_ended'
          and not exists (select 1 from workflow.workflow_run p
                          where p.id = new.parent_id and p.status in ('failed', 'cancelled')) then
        v_reason := 'plain_sql';
    end if;
    new.finished_at := coalesce(new.finished_at, now());
    new.lease_until := null;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (new.id, 'cancelled',
            jsonb_strip_nulls(jsonb_build_object(
                'previous_status', old.status, 'attempt', old.attempt,
                'parked', old.wait_kind, 'parent_id', new.parent_id,
                'worker_id', case when old.status = 'leased' then old.leased_by end,
                'reason', v_reason, 'by', v_by)));
    new.wait_kind := null;
    new.wait_step := null;
    new.wait_signal := null;
    perform pg_notify('workflow_run_cancelled', new.id::text);
    return new;
end
$$;

create or replace function workflow.on_run_soft_deleted() returns trigger
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    new.status := 'cancelled';
    new.finished_at := coalesce(new.finished_at, now());
    new.lease_until := null;
    new.wait_kind := null;
    new.wait_step := null;
    new.wait_signal := null;
    new.updated_at := now();
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (new.id, 'cancelled',
            jsonb_strip_nulls(jsonb_build_object(
                'previous_status', old.status, 'attempt', old.attempt, 'reason', 'deleted',
                'parked', old.wait_kind,
                'worker_id', case when old.status = 'leased' then old.leased_by end,
                'by', left(nullif(current_setting('workflow.cancelled_by', true), ''), 256))));
    perform pg_notify('workflow_run_cancelled', new.id::text);
    return new;
end
$$;
