-- DAG workflows: a workflow type defined as data, a graph of steps whose
-- types are ordinary workflow types, orchestrated by the database itself.
--
-- workflow_registry.definition holds {"steps": [{"name", "type",
-- "dependsOn"?, "payload"?, "maxAttempts"?, "retryBaseDelayMs"?,
-- "retryMaxDelayMs"?}, ...]}, validated on every write. A run of such a type
-- (however it is inserted: operator, SDK or plain SQL) takes a snapshot of
-- the definition into workflow_run.dag and is parked with wait kind 'dag':
-- no worker ever claims it. Its steps become child runs (parent_id,
-- parent_step = the step's name, idempotency key dag:<run>:<step>), each
-- started as soon as every step it depends on succeeded, with the run's
-- payload, the step's own payload merged over it, and the results of its
-- dependencies under "steps". When every step succeeded the run succeeds
-- with {"steps": {name: result}}; the first step that fails for good (or is
-- cancelled) fails it, which cancels the unfinished steps (the parent-ended
-- trigger). Cancelling the run cancels them too; its deadline is theirs.

alter table workflow.workflow_registry add column definition jsonb;
alter table workflow.workflow_registry alter column runtime drop not null;
alter table workflow.workflow_registry add constraint workflow_registry_runtime_or_steps
    check ((runtime is null) <> (definition is null));
comment on column workflow.workflow_registry.definition is
    'A DAG workflow''s steps ({"steps": [...]}); runtime is null then: the database runs it.';

alter table workflow.workflow_run add column dag jsonb;
comment on column workflow.workflow_run.dag is
    'The definition a DAG run started with (a snapshot: editing the registry changes new runs only).';
alter table workflow.workflow_run drop constraint workflow_run_wait_kind_valid;
alter table workflow.workflow_run add constraint workflow_run_wait_kind_valid
    check (wait_kind is null or wait_kind in ('sleep', 'signal', 'child', 'dag'));

-- dag:<run id>:<step> keys belong to the steps of that run: nobody can take
-- a step's key first and keep it from starting. Only keys of that exact
-- shape (a run id after "dag:") are reserved, so a key such as
-- dag:nightly:… written before this migration still lets its run change.
alter table workflow.workflow_run add constraint workflow_run_dag_key check (
    idempotency_key is null
    or left(idempotency_key, 4) <> 'dag:'
    or idempotency_key !~ '^dag:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:'
    or coalesce(idempotency_key = 'dag:' || parent_id::text || ':' || parent_step, false)
) not valid;

-- definition_problem says what is wrong with a definition, or null.
create or replace function workflow.definition_problem(p_def jsonb) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
declare
    v_steps jsonb;
    v_n integer;
    v_step record;
    v_key text;
    v_done text[] := '{}';
    v_ready text[];
    v_path text[];
    v_cur text;
    v_next text;
begin
    if p_def is null or jsonb_typeof(p_def) <> 'object' or not p_def ? 'steps' then
        return 'a definition is an object with "steps"';
    end if;
    select k into v_key from jsonb_object_keys(p_def) k where k <> 'steps' limit 1;
    if found then
        return format('unknown field %s', to_jsonb(left(v_key, 64)));
    end if;
    v_steps := p_def->'steps';
    if jsonb_typeof(v_steps) <> 'array' then
        return '"steps" must be a list';
    end if;
    v_n := jsonb_array_length(v_steps);
    if v_n < 1 or v_n > 100 then
        return format('a workflow has 1 to 100 steps, not %s', v_n);
    end if;
    for v_step in select s, i from jsonb_array_elements(v_steps) with ordinality x(s, i) loop
        if jsonb_typeof(v_step.s) <> 'object' then
            return format('step %s is not an object', v_step.i);
        end if;
        select k into v_key from jsonb_object_keys(v_step.s) k
        where k not in ('name', 'type', 'dependsOn', 'payload', 'maxAttempts', 'retryBaseDelayMs', 'retryMaxDelayMs')
        limit 1;
        if found then
            return format('step %s: unknown field %s', v_step.i, to_jsonb(left(v_key, 64)));
        end if;
        if jsonb_typeof(v_step.s->'name') is distinct from 'string'
           or (v_step.s->>'name') !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$' then
            return format('step %s: name must be 1 to 63 letters, digits, ".", "_" or "-", starting with a letter or digit', v_step.i);
        end if;
        if jsonb_typeof(v_step.s->'type') is distinct from 'string'
           or char_length(v_step.s->>'type') > 253
           or (v_step.s->>'type') !~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$' then
            return format('step "%s": type must be a workflow type such as billing.charge.v1', v_step.s->>'name');
        end if;
        if v_step.s ? 'dependsOn' and (jsonb_typeof(v_step.s->'dependsOn') <> 'array'
            or jsonb_array_length(v_step.s->'dependsOn') > 100
            or exists (select 1 from jsonb_array_elements(v_step.s->'dependsOn') d where jsonb_typeof(d) <> 'string')) then
            return format('step "%s": dependsOn must be a list of at most 100 step names', v_step.s->>'name');
        end if;
        if v_step.s ? 'payload' and jsonb_typeof(v_step.s->'payload') <> 'object' then
            return format('step "%s": payload must be an object', v_step.s->>'name');
        end if;
        if v_step.s ? 'maxAttempts' and (jsonb_typeof(v_step.s->'maxAttempts') <> 'number'
            or (v_step.s->>'maxAttempts') !~ '^[0-9]{1,4}$'
            or (v_step.s->>'maxAttempts')::integer not between 1 and 1000) then
            return format('step "%s": maxAttempts must be 1 to 1000', v_step.s->>'name');
        end if;
        foreach v_key in array array['retryBaseDelayMs', 'retryMaxDelayMs'] loop
            if v_step.s ? v_key and (jsonb_typeof(v_step.s->v_key) <> 'number'
                or (v_step.s->>v_key) !~ '^[0-9]{1,11}$'
                or (v_step.s->>v_key)::bigint not between 1 and 31622400000) then
                return format('step "%s": %s must be 1 to 31622400000 (366 days)', v_step.s->>'name', v_key);
            end if;
        end loop;
        if (v_step.s->>'retryBaseDelayMs')::bigint > (v_step.s->>'retryMaxDelayMs')::bigint then
            return format('step "%s": retryMaxDelayMs must be at least retryBaseDelayMs', v_step.s->>'name');
        end if;
    end loop;

    select s->>'name' into v_key from jsonb_array_elements(v_steps) s
    group by s->>'name' having count(*) > 1 limit 1;
    if found then
        return format('step name "%s" is used twice', v_key);
    end if;
    select format('step "%s" depends on "%s", which is not a step of this workflow', s->>'name', d) into v_key
    from jsonb_array_elements(v_steps) s, jsonb_array_elements_text(coalesce(s->'dependsOn', '[]')) d
    where not exists (select 1 from jsonb_array_elements(v_steps) t where t->>'name' = d)
    limit 1;
    if found then
        return v_key;
    end if;

    -- Peel off steps whose dependencies are all peeled; what is left holds a cycle.
    loop
        select array_agg(s->>'name') into v_ready
        from jsonb_array_elements(v_steps) s
        where not (s->>'name') = any (v_done)
          and array(select jsonb_array_elements_text(coalesce(s->'dependsOn', '[]'))) <@ v_done;
        exit when v_ready is null;
        v_done := v_done || v_ready;
    end loop;
    if cardinality(v_done) = v_n then
        return null;
    end if;
    -- Every step left depends on another step left: follow them until one repeats.
    select s->>'name' into v_cur from jsonb_array_elements(v_steps) with ordinality x(s, i)
    where not (s->>'name') = any (v_done) order by i limit 1;
    v_path := array[v_cur];
    loop
        select d into v_next
        from jsonb_array_elements(v_steps) s, jsonb_array_elements_text(s->'dependsOn') with ordinality y(d, j)
        where s->>'name' = v_cur and not d = any (v_done)
        order by j limit 1;
        if v_next = any (v_path) then
            return format('cycle: %s (each step depends on the next)',
                          array_to_string(v_path[array_position(v_path, v_next):] || v_next, ' → '));
        end if;
        v_path := v_path || v_next;
        v_cur := v_next;
    end loop;
end
$$;

-- A registry entry's definition is checked on every write, against the
-- others: a step's type may not itself have steps, nor may a type that is
-- some workflow's step get steps.
create or replace function workflow.on_registry_written() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_problem text;
begin
    -- Definitions are checked against each other: one writer at a time.
    perform pg_advisory_xact_lock(hashtext('workflow.workflow_registry.definition'));
    if new.definition is null then
        -- A type that is some workflow's step keeps no steps; a renamed
        -- entry is checked like a new one.
        return new;
    end if;
    v_problem := workflow.definition_problem(new.definition);
    if v_problem is null then
        select format('step "%s" runs %s, which has steps of its own; a step is a type that workers run',
                      s->>'name', s->>'type')
        into v_problem
        from jsonb_array_elements(new.definition->'steps') s
        where s->>'type' = new.workflow_name
           or exists (select 1 from workflow.workflow_registry g
                      where g.workflow_name = s->>'type' and g.definition is not null)
        limit 1;
    end if;
    if v_problem is null then
        select format('it is step "%s" of %s, and a step is a type that workers run', s->>'name', g.workflow_name)
        into v_problem
        from workflow.workflow_registry g, jsonb_array_elements(g.definition->'steps') s
        where g.definition is not null and g.workflow_name <> new.workflow_name
          and s->>'type' = new.workflow_name
        limit 1;
    end if;
    if v_problem is not null then
        raise exception 'invalid definition of %: %', new.workflow_name, v_problem using errcode = '22023';
    end if;
    return new;
end
$$;

create trigger workflow_registry_written
    before insert or update of definition, workflow_name on workflow.workflow_registry
    for each row execute function workflow.on_registry_written();

-- dag_ready_steps lists the steps of a DAG run that can start now (not
-- started, every dependency succeeded) with the payload each receives: the
-- run's payload, the step's payload merged over it, and the results of its
-- dependencies under "steps".
create or replace function workflow.dag_ready_steps(p_run workflow.workflow_run, p_results jsonb)
returns table (name text, type text, payload jsonb, max_attempts integer, base_delay interval, max_delay interval)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select s->>'name', s->>'type',
           (p_run.payload || coalesce(s->'payload', '{}'::jsonb))
               || jsonb_build_object('steps', coalesce(
                      (select jsonb_object_agg(d, p_results->d)
                       from jsonb_array_elements_text(coalesce(s->'dependsOn', '[]')) d), '{}'::jsonb)),
           coalesce((s->>'maxAttempts')::integer, 3),
           make_interval(secs => (s->>'retryBaseDelayMs')::bigint / 1000.0),
           make_interval(secs => (s->>'retryMaxDelayMs')::bigint / 1000.0)
    from jsonb_array_elements(p_run.dag->'steps') with ordinality x(s, i)
    where not exists (select 1 from workflow.workflow_run c
                      where c.parent_id = p_run.id and c.parent_step = s->>'name')
      and not exists (select 1 from jsonb_array_elements_text(coalesce(s->'dependsOn', '[]')) d
                      where not p_results ? d)
    order by x.i
$$;

-- dag_advance moves a DAG run on: it ends the run when a step failed for
-- good or every step succeeded, and otherwise starts every step whose
-- dependencies all succeeded. It is called when the run is inserted and
-- whenever one of its steps ends; the run's row lock serialises the calls.
create or replace function workflow.dag_advance(p_run uuid) returns void
language plpgsql set search_path = pg_catalog, pg_temp
as $$
declare
    v_run workflow.workflow_run;
    v_limit bigint := coalesce(nullif(current_setting('workflow.max_payload_bytes', true), '')::bigint, 1048576);
    v_bad record;
    v_results jsonb;
    v_total integer;
    v_ok integer;
    v_result jsonb;
begin
    select * into v_run from workflow.workflow_run r where r.id = p_run for update;
    if not found or v_run.status <> 'pending' or v_run.dag is null then
        return;
    end if;

    select c.id, c.parent_step, c.type, c.status, c.last_error into v_bad
    from workflow.workflow_run c
    where c.parent_id = p_run and c.status in ('failed', 'cancelled')
    order by c.finished_at, c.parent_step
    limit 1;
    if found then
        perform workflow.dag_end(v_run, 'failed', null,
            format('step "%s" (%s) %s: %s', v_bad.parent_step, v_bad.type,
                   case v_bad.status when 'failed' then 'failed' else 'was cancelled' end,
                   left(coalesce(v_bad.last_error, v_bad.status), 4000)),
            jsonb_build_object('reason', 'step_failed', 'step', v_bad.parent_step,
                               'step_run_id', v_bad.id, 'step_status', v_bad.status));
        return;
    end if;

    select coalesce(jsonb_object_agg(c.parent_step, coalesce(c.result, 'null'::jsonb)), '{}'::jsonb), count(*)
    into v_results, v_ok
    from workflow.workflow_run c
    where c.parent_id = p_run and c.status = 'succeeded';
    v_total := jsonb_array_length(v_run.dag->'steps');
    if v_ok = v_total then
        v_result := jsonb_build_object('steps', v_results);
        if octet_length(v_result::text) > 1048576 then
            perform workflow.dag_end(v_run, 'failed', null,
                format('the steps'' results together are %s bytes; a result is at most 1048576', octet_length(v_result::text)),
                jsonb_build_object('reason', 'result_too_large'));
        else
            perform workflow.dag_end(v_run, 'succeeded', v_result, null, jsonb_build_object('steps', v_total));
        end if;
        return;
    end if;

    -- A step whose payload would be too large fails the run.
    select r.name, octet_length(r.payload::text) as bytes into v_bad
    from workflow.dag_ready_steps(v_run, v_results) r
    where octet_length(r.payload::text) > v_limit limit 1;
    if found then
        perform workflow.dag_end(v_run, 'failed', null,
            format('the payload of step "%s" would be %s bytes; the limit is %s (workflow.max_payload_bytes)',
                   v_bad.name, v_bad.bytes, v_limit),
            jsonb_build_object('reason', 'payload_too_large', 'step', v_bad.name));
        return;
    end if;

    insert into workflow.workflow_run (type, payload, priority, idempotency_key, max_attempts,
                                       retry_base_delay, retry_max_delay, parent_id, parent_step, deadline_at)
    select r.type, r.payload, v_run.priority, 'dag:' || p_run::text || ':' || r.name, r.max_attempts,
           r.base_delay, r.max_delay, p_run, r.name, v_run.deadline_at
    from workflow.dag_ready_steps(v_run, v_results) r
    on conflict do nothing;
end
$$;

revoke execute on function workflow.dag_advance(uuid) from public;

-- dag_end finishes a DAG run (succeeded or failed) with its event.
create or replace function workflow.dag_end(p_run workflow.workflow_run, p_status text, p_result jsonb,
                                            p_error text, p_data jsonb) returns void
language plpgsql set search_path = pg_catalog, pg_temp
as $$
begin
    update workflow.workflow_run r
    set status = p_status, result = p_result, last_error = p_error,
        wait_kind = null, wait_step = null, wait_signal = null,
        finished_at = now(), updated_at = now()
    where r.id = p_run.id;
    insert into workflow.workflow_event (workflow_id, event_type, data)
    values (p_run.id, p_status, jsonb_strip_nulls(p_data || jsonb_build_object('error', p_error)));
end
$$;

revoke execute on function workflow.dag_end(workflow.workflow_run, text, jsonb, text, jsonb) from public;

-- A DAG run's step that ends moves the run on.
create or replace function workflow.on_child_finished() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_parent workflow.workflow_run;
begin
    if exists (select 1 from workflow.workflow_run p where p.id = new.parent_id and p.dag is not null) then
        perform workflow.dag_advance(new.parent_id);
        return null;
    end if;

    update workflow.workflow_step s
    set outcome     = case new.status when 'succeeded' then 'ok' else 'error' end,
        output      = case when new.status = 'succeeded' then new.result end,
        error       = case new.status when 'failed' then left(coalesce(new.last_error, 'child run failed'), 8192)
                                      when 'cancelled' then 'child run cancelled' end,
        finished_at = now()
    where s.run_id = new.parent_id and s.name = new.parent_step and s.finished_at is null;

    update workflow.workflow_run p
    set run_at = now(), wait_kind = null, wait_step = null, wait_signal = null, updated_at = now()
    where p.id = new.parent_id and p.status = 'pending'
      and p.wait_kind = 'child' and p.wait_step = new.parent_step
    returning * into v_parent;
    if v_parent.id is not null then
        insert into workflow.workflow_event (workflow_id, event_type, data)
        values (v_parent.id, 'woken', jsonb_build_object('reason', 'child_finished', 'step', new.parent_step,
                                                         'child_id', new.id, 'child_status', new.status));
        perform pg_notify('workflow_run_created', v_parent.type);
    end if;
    return null;
end
$$;

-- A run of a type with steps takes the definition and is parked for the
-- database to run; its first steps start in the same transaction.
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

    perform pg_notify('workflow_run_created', t.type)
    from (select distinct n.type from new_runs n) t;
    return null;
end
$$;

-- Retention keeps the finished steps of a DAG run as long as the run itself:
-- their results are what the next steps receive and what says they ran.
create or replace function workflow.delete_finished_runs(p_before timestamptz, p_limit integer) returns bigint
language sql set search_path = pg_catalog, pg_temp as $$
    with doomed as (
        select r.id from workflow.workflow_run r
        where r.finished_at < p_before
          and r.status in ('succeeded', 'failed', 'cancelled')
          and not exists (select 1 from workflow.workflow_run p
                          where p.id = r.parent_id and p.dag is not null)
        order by r.finished_at
        limit p_limit
        for update skip locked
    ), deleted as (
        delete from workflow.workflow_run r using doomed d where r.id = d.id returning 1
    )
    select count(*) from deleted
$$;

-- A step's run that changes status or attempt announces its DAG run's
-- Kubernetes object (namespace/name, as workflow_source_run_changed does),
-- so the operator shows step progress at once. One notification per
-- object and transaction: Postgres folds identical ones.
create or replace function workflow.on_dag_step_changed() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_ns text;
    v_name text;
begin
    select p.source_namespace, p.source_name into v_ns, v_name
    from workflow.workflow_run p
    where p.id = new.parent_id and p.dag is not null and p.source_name is not null;
    if found and octet_length(v_ns) + octet_length(v_name) < 4000 then
        perform pg_notify('workflow_run_changed', v_ns || '/' || v_name);
    end if;
    return null;
end
$$;

create trigger workflow_dag_step_changed
    after update on workflow.workflow_run
    for each row
    when (new.parent_id is not null
          and (old.status is distinct from new.status or old.attempt is distinct from new.attempt))
    execute function workflow.on_dag_step_changed();
