-- What a run costs on the hot path: fewer index entries and event rows per
-- run, index entries close to each other, and no notification on every
-- status change.
--
-- 1. The audit trail's primary key is (workflow_id, id): every reader of
--    the trail reads one run's events in order, which is what the index
--    by run held beside the primary key on id alone. One index instead of
--    two: each event writes one index entry, not two. The new key is
--    built while writes to workflow_event wait (once, at upgrade).
create unique index workflow_event_run_key on workflow.workflow_event (workflow_id, id);
alter table workflow.workflow_event drop constraint workflow_event_pkey;
alter table workflow.workflow_event add constraint workflow_event_pkey
    primary key using index workflow_event_run_key;
drop index workflow.idx_workflow_event_workflow;
-- The metrics count the transitions since the last event they saw (id >
-- n, every few seconds): a block-range index over the ids, which grow with
-- the table, finds the newest pages without a B-tree entry per event.
create index idx_workflow_event_id on workflow.workflow_event using brin (id);

-- 2. A claim writes one 'started' event per run, with the worker, the
--    attempt and the lease's end: it used to write a 'leased' and a
--    'started' event with the same data in the same statement. 'leased'
--    stays a valid event type (older trails have it); nothing writes it.

create or replace function workflow.claim_runs(p_worker_id text, p_type_prefixes text[], p_runtime text,
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
        -- woken, then started: each run's events are emitted (and numbered)
        -- in order. 'started' is the lease: who holds it, for which attempt,
        -- until when.
        cross join lateral (values
            ('woken', jsonb_build_object('reason', case when c.wait_kind = 'sleep' then 'timer' else 'timeout' end,
                                         'step', c.wait_step, 'wait_kind', c.wait_kind)),
            ('started', jsonb_build_object('worker_id', p_worker_id, 'attempt', c.attempt,
                                           'lease_until', c.lease_until))) e(event_type, data)
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


comment on function workflow.claim_runs(text, text[], text, integer, bigint, text[]) is
    'Leases up to p_limit runnable runs of a worker''s types; returns each with its journal and traceparent.';

-- 3. No notification on every status change (0021's workflow_run_status):
--    it cost every claiming and completing transaction a trigger and a
--    NOTIFY (which all listening sessions are woken for) whether or not a
--    console was open. The console looks at the queue's counts instead, on
--    its own time and only while a page is open.
drop trigger workflow_run_status_notify on workflow.workflow_run;
drop function workflow.on_run_status_committing();

-- ... and what it looks at: a marker that moves whenever a run makes a
-- transition the audit trail records (every event takes the next number of
-- workflow_event_id_seq) or finishes. Reading it costs two index probes,
-- whatever the inbox holds. A sequence moves before its transaction commits
-- (and even when it rolls back): a reader that sees the marker move looks
-- once more a little later.
create function workflow.inbox_version()
returns text
language sql stable security definer
set search_path = pg_catalog, pg_temp as $$
    select (select case when s.is_called then s.last_value else 0 end
            from workflow.workflow_event_id_seq s)::text || '/' ||
           coalesce((select max(r.finished_at) from workflow.workflow_run r
                     where r.finished_at is not null)::text, '')
$$;
revoke execute on function workflow.inbox_version() from public;

comment on function workflow.inbox_version() is
    'A marker that moves whenever a run makes an audited transition or finishes (for a reader deciding when to look again).';

-- 4. Run ids in creation order: a UUID whose first 48 bits are the Unix time
--    in milliseconds (the layout of RFC 9562's version 7), the other 74 bits
--    random. Every write of a run adds an entry to the primary key, and each
--    of its events one to the trail's key, which starts with the run's id:
--    with random ids each entry lands on a page of its own, anywhere in the
--    index; with ids in creation order, the runs of one burst share pages
--    (fewer pages read, dirtied and logged whole after a checkpoint). Ids
--    stay unguessable (74 random bits); they now tell when a run was made,
--    which created_at says anyway. Runs recorded before keep their ids.
create function workflow.new_run_id()
returns uuid
language sql volatile
set search_path = pg_catalog, pg_temp as $$
    select encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint) from 3)
                    from 1 for 6),
            52, 1), 53, 1),  -- version 7: the version nibble 0100 becomes 0111
        'hex')::uuid
$$;

comment on function workflow.new_run_id() is
    'A new run id: a UUID (version 7 layout) whose first 48 bits are the time in milliseconds, the rest random.';

alter table workflow.workflow_run alter column id set default workflow.new_run_id();

-- create_runs draws its ids the same way (unchanged otherwise).
create or replace function workflow.create_runs(p_types text[], p_payloads text[],
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

    select array_agg(workflow.new_run_id()) into v_ids from generate_series(1, n);
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
