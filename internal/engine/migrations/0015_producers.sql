-- Producers.
--
-- 1. Wake-ups that do not serialise producers. NOTIFY makes a committing
--    transaction take one lock for the whole database and hold it until its
--    commit record is on disk, so producers that each notify commit one at a
--    time (no group commit): with 8 clients doing single-row inserts, less
--    than half the throughput of the same inserts without the notification.
--    The wake-up now happens at commit (a deferred constraint trigger, once
--    per type and transaction), and only one committing transaction per type
--    notifies at a time: it holds a transaction-scoped advisory lock for
--    the type (pg_try_advisory_xact_lock, never waiting) until its commit
--    ends. A transaction that finds the lock taken does not notify: the
--    holder's notification is delivered after the holder's commit, that is
--    after this transaction reached its own commit, and a worker that
--    receives a notification claims again shortly after it (the SDKs'
--    pollers do, see ChannelRunCreated), by which time this transaction's
--    runs are visible. The first insert on a quiet queue always notifies at
--    once, as before; a plain SQL INSERT still wakes workers.
--
-- 2. workflow.create_runs: many runs in one call (the SDKs' CreateMany /
--    create_many), idempotency keys honoured per row.

-- on_run_inserted, without its pg_notify (the rest unchanged).
create or replace function workflow.on_run_inserted() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_limit bigint := coalesce(nullif(current_setting('workflow.max_payload_bytes', true), '')::bigint, 1048576);
    v_big record;
    v_dag record;
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

    if exists (select 1 from new_runs n where n.dag is not null)
       or exists (select 1 from workflow.workflow_registry g where g.definition is not null) then
        for v_dag in
            select n.id, n.type, n.run_at, coalesce(n.dag, g.definition) as def, n.dag is not null as inline,
                   exists (select 1 from workflow.workflow_run p where p.id = n.parent_id and p.dag is not null) as parent_dag
            from new_runs n
            left join workflow.workflow_registry g on g.workflow_name = n.type and g.definition is not null
            where n.status = 'pending' and (n.dag is not null or g.definition is not null)
            order by n.created_at, n.id
        loop
            if v_dag.inline and workflow.definition_problem(v_dag.def) is not null then
                raise exception 'invalid definition of run %: %', v_dag.id, workflow.definition_problem(v_dag.def)
                    using errcode = '22023';
            end if;
            if v_dag.run_at > now() + interval '1 second' then
                raise exception 'a run of %, a workflow with steps, starts at once: run_at is not supported for it', v_dag.type
                    using errcode = '22023';
            end if;
            if v_dag.parent_dag then
                -- A step whose type has steps (possible only if the registry
                -- changed under a running workflow): it fails, and so does
                -- its workflow, instead of nesting without end.
                update workflow.workflow_run r
                set status = 'failed', finished_at = now(), updated_at = now(),
                    last_error = format('%s has steps of its own; a step must be a type that workers run', v_dag.type)
                where r.id = v_dag.id;
                insert into workflow.workflow_event (workflow_id, event_type, data)
                values (v_dag.id, 'failed', jsonb_build_object('reason', 'nested_workflow',
                        'error', format('%s has steps of its own; a step must be a type that workers run', v_dag.type)));
                continue;
            end if;
            update workflow.workflow_run r
            set dag = v_dag.def, run_at = workflow.far_future(), wait_kind = 'dag', updated_at = now()
            where r.id = v_dag.id;
            insert into workflow.workflow_event (workflow_id, event_type, data)
            values (v_dag.id, 'waiting', jsonb_build_object('kind', 'dag',
                                                            'steps', jsonb_array_length(v_dag.def->'steps')));
            perform workflow.dag_advance(v_dag.id);
        end loop;
    end if;
    return null;
end
$$;

-- The wake-up of a committing transaction's workers, one call per type (the
-- trigger's WHEN clause lets only the first run of each type through, by
-- noting the type in a transaction-local setting; a rolled-back savepoint
-- forgets both the note and the queued call).
create function workflow.on_run_committing() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    if pg_try_advisory_xact_lock(hashtext('workflow_run_created:' || new.type), hashtext(new.type)) then
        perform pg_notify('workflow_run_created', new.type);
    end if;
    return null;
end
$$;

create constraint trigger workflow_run_wake
    after insert on workflow.workflow_run
    deferrable initially deferred
    for each row
    when (strpos(coalesce(current_setting('workflow.wake_types', true), ''), ',' || new.type || ',') = 0
          and set_config('workflow.wake_types',
                         coalesce(current_setting('workflow.wake_types', true), '') || ',' || new.type || ',',
                         true) <> '')
    execute function workflow.on_run_committing();

comment on trigger workflow_run_wake on workflow.workflow_run is
    'Notifies workflow_run_created once per type at commit; one committing transaction per type at a time (see on_run_committing).';

-- Records many runs in one call: row i of the batch is (p_types[i],
-- p_payloads[i], and the i-th element of each other array that is given;
-- a null array, or a null element, takes the default: priority 100, run
-- now, no idempotency key, 3 attempts, the default retry policy, no
-- deadline). An idempotency key works per row as in a single insert: a key
-- already taken, or repeated earlier in the same batch, records nothing and
-- returns the run that holds it, with created false. Returns one row per
-- input row, in input order (ord counts from 1). Input is checked before
-- anything is written, and a bad row fails the whole call with an error
-- that names it ("row 3: ..."); the rows are committed or rolled back with
-- the caller's transaction. At most 10000 rows per call.
--
-- Runs as its owner (a producer has no privilege on the id column it sets)
-- and so checks what row-level security checks for a producer's own
-- INSERT: no idempotency key of the operator's reserved forms.
create function workflow.create_runs(p_types text[], p_payloads text[],
                                     p_priorities integer[] default null,
                                     p_run_ats timestamptz[] default null,
                                     p_idempotency_keys text[] default null,
                                     p_max_attempts integer[] default null,
                                     p_deadline_ms bigint[] default null,
                                     p_retry_base_ms bigint[] default null,
                                     p_retry_max_ms bigint[] default null)
returns table (ord integer, id uuid, created boolean)
language plpgsql security definer
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    c_max constant integer := 10000;
    n integer := coalesce(cardinality(p_types), 0);
    v_payloads jsonb[];
    v_keys text[];
    v_ids uuid[];
    v_bad record;
    v_text text;
begin
    if n = 0 then
        return;
    end if;
    if n > c_max then
        raise exception 'create_runs: at most % runs per call, got %', c_max, n using errcode = '22023';
    end if;
    select a.name, a.len into v_bad
    from (values ('payloads', cardinality(p_payloads)), ('priorities', cardinality(p_priorities)),
                 ('run_ats', cardinality(p_run_ats)), ('idempotency_keys', cardinality(p_idempotency_keys)),
                 ('max_attempts', cardinality(p_max_attempts)), ('deadline_ms', cardinality(p_deadline_ms)),
                 ('retry_base_ms', cardinality(p_retry_base_ms)), ('retry_max_ms', cardinality(p_retry_max_ms))) a(name, len)
    where a.len is not null and a.len <> n
    limit 1;
    if found then
        raise exception 'create_runs: % has % elements, types has %', v_bad.name, v_bad.len, n using errcode = '22023';
    end if;

    -- Types, keys and numbers, row by row (the first bad row is named).
    select t.ord, t.type, t.key, t.max_attempts, t.deadline_ms, t.base_ms, t.max_ms into v_bad
    from unnest(p_types, p_idempotency_keys, p_max_attempts, p_deadline_ms, p_retry_base_ms, p_retry_max_ms)
         with ordinality t(type, key, max_attempts, deadline_ms, base_ms, max_ms, ord)
    where t.type is null or char_length(t.type) > 253 or t.type !~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'
       or char_length(t.key) > 512 or starts_with(t.key, 'k8s:') or starts_with(t.key, 'k8s-uid:')
       or t.max_attempts < 1 or t.max_attempts > 1000
       or t.deadline_ms < 1 or t.base_ms < 1 or t.max_ms < 1 or t.max_ms < t.base_ms
    order by t.ord
    limit 1;
    if found then
        raise exception 'create_runs: row %: %', v_bad.ord,
            case
                when v_bad.type is null or char_length(v_bad.type) > 253
                     or v_bad.type !~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'
                    then format('type %L: a type is lowercase dot-separated words ending in a version, like billing.invoice.v1 (at most 253 characters)',
                                left(v_bad.type, 300))
                when char_length(v_bad.key) > 512
                    then format('idempotency key is %s characters, at most 512 are allowed', char_length(v_bad.key))
                when starts_with(v_bad.key, 'k8s:') or starts_with(v_bad.key, 'k8s-uid:')
                    then 'idempotency keys starting with k8s: or k8s-uid: are reserved for runs mirrored from Kubernetes'
                when v_bad.max_attempts < 1 or v_bad.max_attempts > 1000
                    then format('max attempts must be between 1 and 1000, got %s', v_bad.max_attempts)
                when v_bad.deadline_ms < 1
                    then format('deadline must be at least 1 ms, got %s ms', v_bad.deadline_ms)
                else 'retry delays must be at least 1 ms, and the max delay at least the base delay'
            end
            using errcode = '22023';
    end if;

    -- Payloads: all at once, and row by row only to name a bad one.
    begin
        select array_agg(coalesce(p::jsonb, '{}'::jsonb) order by o) into v_payloads
        from unnest(coalesce(p_payloads, array_fill(null::text, array[n]))) with ordinality u(p, o);
    exception when others then
        for i in 1 .. n loop
            begin
                perform p_payloads[i]::jsonb;
            exception when others then
                get stacked diagnostics v_text = message_text;
                raise exception 'create_runs: row %: payload is not valid JSON: %', i, v_text using errcode = '22023';
            end;
        end loop;
        raise;
    end;
    select u.o into v_bad from unnest(v_payloads) with ordinality u(p, o)
    where jsonb_typeof(u.p) <> 'object' order by u.o limit 1;
    if found then
        raise exception 'create_runs: row %: payload must be a JSON object', v_bad.o using errcode = '22023';
    end if;

    select array_agg(gen_random_uuid()) into v_ids from generate_series(1, n);
    if p_idempotency_keys is null or not exists (select 1 from unnest(p_idempotency_keys) k where k <> '') then
        -- No keys: every row is a new run.
        insert into workflow.workflow_run (id, type, payload, priority, run_at, max_attempts,
                                           retry_base_delay, retry_max_delay, deadline_at)
        select t.id, t.type, t.payload, coalesce(t.priority, 100), coalesce(t.run_at, now()),
               coalesce(t.max_attempts, 3),
               t.base_ms * interval '1 millisecond', t.max_ms * interval '1 millisecond',
               now() + t.deadline_ms * interval '1 millisecond'
        from unnest(v_ids, p_types, v_payloads, p_priorities, p_run_ats, p_max_attempts,
                    p_retry_base_ms, p_retry_max_ms, p_deadline_ms)
             with ordinality t(id, type, payload, priority, run_at, max_attempts, base_ms, max_ms, deadline_ms, ord)
        order by t.ord;
        return query select u.o::integer, u.id, true from unnest(v_ids) with ordinality u(id, o);
        return;
    end if;
    select array_agg(nullif(k, '') order by o) into v_keys
    from unnest(p_idempotency_keys) with ordinality u(k, o);

    -- The first row of each key (a later row with the same key gets its
    -- run); a key already taken records nothing.
    insert into workflow.workflow_run (id, type, payload, priority, run_at, idempotency_key, max_attempts,
                                       retry_base_delay, retry_max_delay, deadline_at)
    select t.id, t.type, t.payload, coalesce(t.priority, 100), coalesce(t.run_at, now()), t.key,
           coalesce(t.max_attempts, 3),
           t.base_ms * interval '1 millisecond', t.max_ms * interval '1 millisecond',
           now() + t.deadline_ms * interval '1 millisecond'
    from (
        select u.*, row_number() over (partition by u.key order by u.ord) as nth
        from unnest(v_ids, p_types, v_payloads, p_priorities, p_run_ats, v_keys, p_max_attempts,
                    p_retry_base_ms, p_retry_max_ms, p_deadline_ms)
             with ordinality u(id, type, payload, priority, run_at, key, max_attempts, base_ms, max_ms, deadline_ms, ord)
    ) t
    where t.key is null or t.nth = 1
    -- In key order: two batches sharing keys wait for each other's keys in
    -- the same order, never in a cycle.
    order by t.key, t.ord
    on conflict (idempotency_key) do nothing;

    -- A new statement, so a key taken by a transaction that committed while
    -- this one waited on it is seen.
    return query
    select i.ord::integer,
           case when i.key is null then i.id else r.id end,
           i.key is null or r.id = i.id
    from unnest(v_keys, v_ids) with ordinality i(key, id, ord)
    left join workflow.workflow_run r on r.idempotency_key = i.key
    order by i.ord;
end
$$;
revoke execute on function workflow.create_runs(text[], text[], integer[], timestamptz[], text[], integer[],
                                                bigint[], bigint[], bigint[]) from public;

comment on function workflow.create_runs(text[], text[], integer[], timestamptz[], text[], integer[], bigint[], bigint[], bigint[]) is
    'Records many runs in one call; idempotency keys per row; returns (ord, id, created) per input row.';
