-- Trace context: the W3C traceparent of whoever recorded a run, kept with
-- the run so that the spans of its attempts can link back to the producer's.
--
--   * workflow_run.traceparent: null, or a W3C traceparent of version 00
--     (00-<trace id>-<parent id>-<flags>, lowercase hex, neither id all
--     zeros). Nothing else is accepted: not a later version, not uppercase,
--     no tracestate, no padding. A producer sets it in its plain INSERT like
--     any other column it may set (roles.sql grants it), or per row through
--     workflow.create_runs (p_traceparents).
--   * A child run (workflow.start_child, a DAG's step) that was given none
--     takes its parent's, so every run started for one recorded intent
--     belongs to the producer's trace.
--   * workflow.claim_runs returns it with each claimed run.

-- traceparent_valid says whether p is null or a traceparent the column
-- accepts: the rule of workflow_run_traceparent_format, for create_runs to
-- name a bad row.
create function workflow.traceparent_valid(p text) returns boolean
language sql immutable parallel safe as $$
    select p is null
        or (octet_length(p) = 55
            and p ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
            and substr(p, 4, 32) <> '00000000000000000000000000000000'
            and substr(p, 37, 16) <> '0000000000000000')
$$;

alter table workflow.workflow_run add column traceparent text;
-- NOT VALID: every row stored before has none; a full scan under the lock
-- that adding the column takes would check nothing. Every new or updated
-- row is checked. The expression is traceparent_valid's, written out so
-- that the constraint depends on no function.
alter table workflow.workflow_run add constraint workflow_run_traceparent_format check (
    traceparent is null
    or (octet_length(traceparent) = 55
        and traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
        and substr(traceparent, 4, 32) <> '00000000000000000000000000000000'
        and substr(traceparent, 37, 16) <> '0000000000000000')) not valid;

comment on column workflow.workflow_run.traceparent is
    'W3C traceparent of the context that recorded the run (a child''s is its parent''s); null when none was given.';

-- A child run without a traceparent of its own takes its parent's.
create function workflow.on_child_inserting() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
    select p.traceparent into new.traceparent from workflow.workflow_run p where p.id = new.parent_id;
    return new;
end
$$;
revoke execute on function workflow.on_child_inserting() from public;

create trigger workflow_run_child_traceparent
    before insert on workflow.workflow_run
    for each row when (new.parent_id is not null and new.traceparent is null)
    execute function workflow.on_child_inserting();

-- claim_runs returns each run's traceparent as its last column (unchanged
-- otherwise). A new return type: drop and create; roles.sql grants it again.
drop function workflow.claim_runs(text, text[], text, integer, bigint, text[]);

create function workflow.claim_runs(p_worker_id text, p_type_prefixes text[], p_runtime text,
                                               p_limit integer, p_lease_ms bigint, p_types text[] default null)
returns table (id uuid, type text, payload jsonb, attempt integer, max_attempts integer,
               lease_until timestamptz, created_at timestamptz, lease_token bigint,
               deadline_at timestamptz, journal jsonb, traceparent text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
-- One plan per connection: planning this statement afresh on every call
-- would cost more than running it. No JIT: compiling a generic plan's
-- expressions (its row estimates are guesses) takes hundreds of
-- milliseconds, for a statement that runs in one.
set plan_cache_mode = force_generic_plan
set jit = off
-- A generic plan guesses how many candidates there are; they are at most
-- p_limit, each found by primary key: never hash the whole table for them.
set enable_hashjoin = off
set enable_mergejoin = off as $$
#variable_conflict use_column
declare
    v_patterns text[];
    v_types text[];
begin
    if p_worker_id is null or p_worker_id = '' or char_length(p_worker_id) > 253 then
        raise exception 'claim_runs: worker id must be 1 to 253 characters' using errcode = '22023';
    end if;
    if p_limit is null or p_limit < 1 or p_limit > 10000 then
        raise exception 'claim_runs: limit must be between 1 and 10000, got %', p_limit using errcode = '22023';
    end if;
    if p_lease_ms is null or p_lease_ms < 1000 or p_lease_ms > 86400000 then
        raise exception 'claim_runs: lease must be between 1000 ms and 24 h, got % ms', p_lease_ms using errcode = '22023';
    end if;
    -- '' and '%' would both mean "every type": say so with an empty list.
    if exists (select 1 from unnest(p_type_prefixes) p where p is null or p = '' or p = '%') then
        raise exception 'claim_runs: a type prefix must not be empty or "%%"; pass no prefixes to claim every type'
            using errcode = '22023';
    end if;
    if cardinality(p_type_prefixes) > 0 then
        select array_agg(workflow.prefix_pattern(p)) into v_patterns from unnest(p_type_prefixes) p;
    end if;
    -- The claimable types; null means every type (no prefixes, no types).
    if p_types is not null or v_patterns is not null then
        select coalesce(array_agg(distinct c.t), '{}') into v_types
        from (select t from unnest(p_types) t
              where t is not null and (v_patterns is null or t like any (v_patterns))
              union all
              select t from workflow.active_types(p_type_prefixes) t
              where p_types is null) c
        where not exists (
            select 1 from workflow.workflow_registry g
            where g.workflow_name = c.t
              and (not g.is_enabled or (p_runtime is not null and g.runtime <> p_runtime)));
    end if;

    return query
    with candidates as (
        select c.id, c.wait_kind, c.wait_step
        from (
            select r.id, r.wait_kind, r.wait_step, r.priority, r.created_at
            from unnest(v_types) t(type)
            cross join lateral (
                select r.id, r.wait_kind, r.wait_step, r.priority, r.created_at
                from workflow.workflow_run r
                where r.type collate "C" = t.type
                  and coalesce(r.status, '') = 'pending' -- idx_workflow_run_claim_type's predicate
                  and r.deleted_at is null
                  and r.run_at <= now()
                  and (r.deadline_at is null or r.deadline_at > now())
                order by r.priority, r.created_at
                limit p_limit
                for update of r skip locked
            ) r
            union all
            select a.id, a.wait_kind, a.wait_step, a.priority, a.created_at
            from (
                select r.id, r.wait_kind, r.wait_step, r.priority, r.created_at
                from workflow.workflow_run r
                where v_types is null
                  and r.status = 'pending'
                  and r.deleted_at is null
                  and r.run_at <= now()
                  and (r.deadline_at is null or r.deadline_at > now())
                  and not exists (
                      select 1 from workflow.workflow_registry g
                      where g.workflow_name = r.type
                        and (not g.is_enabled or (p_runtime is not null and g.runtime <> p_runtime)))
                order by r.priority, r.created_at
                limit p_limit
                for update of r skip locked
            ) a
        ) c
        order by c.priority, c.created_at
        limit p_limit
    ), claimed as (
        update workflow.workflow_run r
        set status      = 'leased',
            attempt     = r.attempt + 1,
            leased_by   = p_worker_id,
            lease_until = now() + p_lease_ms * interval '1 millisecond',
            lease_token = nextval('workflow.lease_token_seq'),
            heartbeat_count = 0,
            wait_kind   = null,
            wait_step   = null,
            wait_signal = null,
            started_at  = coalesce(r.started_at, now()),
            updated_at  = now()
        from candidates c
        where r.id = c.id
        returning r.id, r.type, r.payload, r.attempt, r.max_attempts, r.lease_until,
                  r.created_at, r.priority, r.lease_token, r.deadline_at, c.wait_kind, c.wait_step,
                  r.traceparent
    ), timers as (
        -- The timer resolves the wait it ends: a sleep is done, any other wait
        -- timed out.
        update workflow.workflow_step s
        set outcome     = case when c.wait_kind = 'sleep' then 'ok' else 'timeout' end,
            finished_at = now()
        from claimed c
        where c.wait_kind is not null
          and s.run_id = c.id and s.name = c.wait_step and s.finished_at is null
        returning s.run_id
    ), events as (
        insert into workflow.workflow_event (workflow_id, event_type, data)
        select c.id, e.event_type, e.data
        from claimed c
        cross join lateral (
            select jsonb_build_object('worker_id', p_worker_id, 'attempt', c.attempt,
                                      'lease_until', c.lease_until) as d) j
        -- woken, leased, then started: each run's events are emitted (and
        -- numbered) in order
        cross join lateral (values
            ('woken', jsonb_build_object('reason', case when c.wait_kind = 'sleep' then 'timer' else 'timeout' end,
                                         'step', c.wait_step, 'wait_kind', c.wait_kind)),
            ('leased', j.d), ('started', j.d)) e(event_type, data)
        where e.event_type <> 'woken' or c.wait_kind is not null
    )
    select c.id, c.type, c.payload, c.attempt, c.max_attempts, c.lease_until, c.created_at,
           c.lease_token, c.deadline_at,
           (select jsonb_agg(jsonb_build_object(
                       'name', s.name, 'position', s.position, 'kind', s.kind,
                       'outcome', case when s.name = c.wait_step and s.finished_at is null
                                       then case when c.wait_kind = 'sleep' then 'ok' else 'timeout' end
                                       else s.outcome end,
                       'output', s.output, 'error', s.error, 'child_id', s.child_id)
                   order by s.position)
            from workflow.workflow_step s where s.run_id = c.id),
           c.traceparent
    from claimed c
    order by c.priority, c.created_at;
end
$$;

revoke execute on function workflow.claim_runs(text, text[], text, integer, bigint, text[]) from public;

comment on function workflow.claim_runs(text, text[], text, integer, bigint, text[]) is
    'Leases up to p_limit runnable runs of a worker''s types; returns each with its journal and traceparent.';

-- create_runs takes a traceparent per row (p_traceparents, last, optional;
-- a null element records none). A new argument: drop and create; roles.sql
-- grants it again. Callers that pass nine arguments are unaffected.
drop function workflow.create_runs(text[], text[], integer[], timestamptz[], text[], integer[],
                                   bigint[], bigint[], bigint[]);

create function workflow.create_runs(p_types text[], p_payloads text[],
                                     p_priorities integer[] default null,
                                     p_run_ats timestamptz[] default null,
                                     p_idempotency_keys text[] default null,
                                     p_max_attempts integer[] default null,
                                     p_deadline_ms bigint[] default null,
                                     p_retry_base_ms bigint[] default null,
                                     p_retry_max_ms bigint[] default null,
                                     p_traceparents text[] default null)
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
                 ('retry_base_ms', cardinality(p_retry_base_ms)), ('retry_max_ms', cardinality(p_retry_max_ms)),
                 ('traceparents', cardinality(p_traceparents))) a(name, len)
    where a.len is not null and a.len <> n
    limit 1;
    if found then
        raise exception 'create_runs: % has % elements, types has %', v_bad.name, v_bad.len, n using errcode = '22023';
    end if;

    -- Types, keys and numbers, row by row (the first bad row is named).
    select t.ord, t.type, t.key, t.max_attempts, t.deadline_ms, t.base_ms, t.max_ms, t.traceparent into v_bad
    from unnest(p_types, p_idempotency_keys, p_max_attempts, p_deadline_ms, p_retry_base_ms, p_retry_max_ms,
                p_traceparents)
         with ordinality t(type, key, max_attempts, deadline_ms, base_ms, max_ms, traceparent, ord)
    where t.type is null or char_length(t.type) > 253 or t.type !~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'
       or char_length(t.key) > 512 or starts_with(t.key, 'k8s:') or starts_with(t.key, 'k8s-uid:')
       or t.max_attempts < 1 or t.max_attempts > 1000
       or t.deadline_ms < 1 or t.base_ms < 1 or t.max_ms < 1 or t.max_ms < t.base_ms
       or not workflow.traceparent_valid(t.traceparent)
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
                when not workflow.traceparent_valid(v_bad.traceparent)
                    then 'traceparent must be a W3C traceparent: 00-<32 lowercase hex trace id>-<16 lowercase hex parent id>-<2 hex flags>, neither id all zeros'
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
                                           retry_base_delay, retry_max_delay, deadline_at, traceparent)
        select t.id, t.type, t.payload, coalesce(t.priority, 100), coalesce(t.run_at, now()),
               coalesce(t.max_attempts, 3),
               t.base_ms * interval '1 millisecond', t.max_ms * interval '1 millisecond',
               now() + t.deadline_ms * interval '1 millisecond', t.traceparent
        from unnest(v_ids, p_types, v_payloads, p_priorities, p_run_ats, p_max_attempts,
                    p_retry_base_ms, p_retry_max_ms, p_deadline_ms, p_traceparents)
             with ordinality t(id, type, payload, priority, run_at, max_attempts, base_ms, max_ms, deadline_ms,
                               traceparent, ord)
        order by t.ord;
        return query select u.o::integer, u.id, true from unnest(v_ids) with ordinality u(id, o);
        return;
    end if;
    select array_agg(nullif(k, '') order by o) into v_keys
    from unnest(p_idempotency_keys) with ordinality u(k, o);

    -- The first row of each key (a later row with the same key gets its
    -- run); a key already taken records nothing.
    insert into workflow.workflow_run (id, type, payload, priority, run_at, idempotency_key, max_attempts,
                                       retry_base_delay, retry_max_delay, deadline_at, traceparent)
    select t.id, t.type, t.payload, coalesce(t.priority, 100), coalesce(t.run_at, now()), t.key,
           coalesce(t.max_attempts, 3),
           t.base_ms * interval '1 millisecond', t.max_ms * interval '1 millisecond',
           now() + t.deadline_ms * interval '1 millisecond', t.traceparent
    from (
        select u.*, row_number() over (partition by u.key order by u.ord) as nth
        from unnest(v_ids, p_types, v_payloads, p_priorities, p_run_ats, v_keys, p_max_attempts,
                    p_retry_base_ms, p_retry_max_ms, p_deadline_ms, p_traceparents)
             with ordinality u(id, type, payload, priority, run_at, key, max_attempts, base_ms, max_ms, deadline_ms,
                               traceparent, ord)
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
                                                bigint[], bigint[], bigint[], text[]) from public;

comment on function workflow.create_runs(text[], text[], integer[], timestamptz[], text[], integer[], bigint[], bigint[], bigint[], text[]) is
    'Records many runs in one call; idempotency keys and traceparents per row; returns (ord, id, created) per input row.';
