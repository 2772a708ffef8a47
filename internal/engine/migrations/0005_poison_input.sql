-- Poison input must never stop a queue: rows that every claim of their
-- prefix would trip over are refused when written, and nothing unbounded
-- goes into a notification.

-- A mirrored run's source names a Kubernetes object: a namespace (63), a name
-- (253) and a UID. NOT VALID: rows already stored are left alone; every new
-- or changed row is checked.
alter table workflow.workflow_run add constraint workflow_run_source_bounded check (
    char_length(source_namespace) <= 63 and char_length(source_name) <= 253
    and char_length(source_uid) <= 128) not valid;

-- A pending run always has an attempt left: claiming it increments attempt,
-- which must stay within max_attempts. Every function keeps this; the
-- constraint refuses a plain-SQL row that would make every claim fail.
alter table workflow.workflow_run add constraint workflow_run_pending_has_attempt_left check (
    status <> 'pending' or attempt < max_attempts) not valid;

-- The notification payload is bounded whatever a stored row holds.
create or replace function workflow.on_source_run_changed() returns trigger
language plpgsql as $$
begin
    if octet_length(new.source_namespace) + octet_length(new.source_name) < 4000 then
        perform pg_notify('workflow_run_changed', new.source_namespace || '/' || new.source_name);
    end if;
    return null;
end
$$;

-- prefix_pattern without backslash literals, so that its meaning does not
-- depend on the session's standard_conforming_strings (an SQL function's
-- body is parsed when it runs).
create or replace function workflow.prefix_pattern(p_prefix text) returns text
language sql immutable strict parallel safe as $$
    select replace(replace(replace(
               case when right(p_prefix, 1) = '%' then left(p_prefix, -1) else p_prefix end,
               chr(92), chr(92) || chr(92)), '%', chr(92) || '%'), '_', chr(92) || '_') || '%'
$$;

-- Soft delete ends a run: setting deleted_at on a pending (or parked) or
-- leased run cancels it, with a 'cancelled' event saying so, so it never
-- lives for ever; retention then removes it (and frees its idempotency key)
-- like any finished run. A worker holding it sees the cancellation at once.
create function workflow.on_run_soft_deleted() returns trigger
language plpgsql as $$
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
                'worker_id', case when old.status = 'leased' then old.leased_by end)));
    perform pg_notify('workflow_run_cancelled', new.id::text);
    return new;
end
$$;

create trigger workflow_run_soft_deleted
    before update of deleted_at on workflow.workflow_run
    for each row
    when (old.deleted_at is null and new.deleted_at is not null
          and old.status in ('pending', 'leased') and new.status in ('pending', 'leased'))
    execute function workflow.on_run_soft_deleted();

-- retry_delay in seconds as double precision, capped at 100 years: a huge
-- base delay or attempt count can no longer overflow an interval and fail a
-- whole batch of outcomes.
create or replace function workflow.retry_delay(
    p_attempt integer, p_base interval, p_max interval, p_jitter double precision)
returns interval
language sql immutable parallel safe as $$
    select make_interval(secs => least(
               s.d,
               coalesce(extract(epoch from p_max)::double precision, s.d),
               3153600000::double precision))
    from (select extract(epoch from coalesce(p_base, interval '1 minute'))::double precision
                 * p_attempt::double precision * p_attempt::double precision
                 * (1 + 0.1 * greatest(0, least(p_jitter, 1))) as d) s
$$;
