-- A prototype of the hot path with the runnable and leased state in narrow
-- tables (issue: the run table stops being the queue), for measurement
-- only: hack/proto/narrow_hot_path.sh installs it beside a copy of the
-- schema and times it against claim_runs and complete_runs with pgbench.
-- Nothing of it is part of the schema.
--
-- proto_queue holds one row per runnable run (what a claim reads),
-- proto_lease one per leased run (what a heartbeat, a completion and the
-- reaper read). A claim deletes queue rows and inserts lease rows and
-- leaves the run row alone; a completion deletes the lease rows and writes
-- the run row once, with everything the claim and the completion changed.
create table workflow.proto_queue (
    id uuid primary key,
    type_namespace text not null,
    type text collate "C" not null,
    priority integer not null,
    created_at timestamptz not null,
    run_at timestamptz not null
);
create index proto_queue_claim on workflow.proto_queue (type_namespace, type, priority, created_at);
create table workflow.proto_lease (
    id uuid primary key,
    type_namespace text not null,
    type text collate "C" not null,
    attempt integer not null,
    leased_by text not null,
    lease_until timestamptz not null,
    lease_fence bigint not null,
    started_at timestamptz not null,
    heartbeat_count integer not null default 0
);
create index proto_lease_until on workflow.proto_lease (lease_until);

-- The runnable runs recorded so far enter the queue.
insert into workflow.proto_queue
select r.id, r.type_namespace, r.type, r.priority, r.created_at, r.run_at
from workflow.workflow_run r where r.status = 'pending' and r.wait_kind is null;

create function workflow.proto_claim(p_worker text, p_type text, p_limit integer, p_lease_ms bigint)
returns table (id uuid, payload jsonb, attempt integer, token bigint, journal jsonb)
language plpgsql set enable_seqscan = off as $$
#variable_conflict use_column
begin
    return query
    with taken as (
        delete from workflow.proto_queue q
        where q.id in (select x.id from workflow.proto_queue x
                       where x.type_namespace = 'default' and x.type = p_type and x.run_at <= now()
                       order by x.priority, x.created_at
                       limit p_limit for update skip locked)
        returning q.id, q.type_namespace, q.type
    ), tok as (
        select t.*, workflow.new_lease_token(uuid_send(gen_random_uuid()), t.id) as token, r.attempt + 1 as attempt, r.payload, r.namespace
        from taken t join workflow.workflow_run r on r.id = t.id
    ), leased as (
        insert into workflow.proto_lease (id, type_namespace, type, attempt, leased_by, lease_until, lease_fence, started_at)
        select t.id, t.type_namespace, t.type, t.attempt, p_worker, now() + p_lease_ms * interval '1 millisecond',
               workflow.lease_fence(t.token), now()
        from tok t
    ), started as (
        insert into workflow.workflow_event (workflow_id, event_type, data, run_ids, attempts)
        select (array_agg(t.id order by t.id))[1], 'started',
               jsonb_build_object('worker_id', p_worker, 'lease_until', now() + p_lease_ms * interval '1 millisecond'),
               array_agg(t.id order by t.id), array_agg(t.attempt order by t.id)
        from tok t group by t.namespace
    )
    select t.id, t.payload, t.attempt, t.token,
           (select jsonb_agg(s.output order by s.position) from workflow.workflow_step s where s.run_id = t.id)
    from tok t;
end $$;

create function workflow.proto_complete(p_worker text, p_ids uuid[], p_tokens bigint[], p_results jsonb[])
returns table (id uuid)
language plpgsql set enable_seqscan = off as $$
#variable_conflict use_column
begin
    return query
    with req as (
        select * from unnest(p_ids, p_tokens, p_results) t(id, token, result)
    ), ended as (
        delete from workflow.proto_lease l using req
        where l.id = req.id and l.leased_by = p_worker
          and l.lease_fence = workflow.lease_fence(req.token)
        returning l.id, l.attempt, l.leased_by, l.started_at, l.lease_until, req.result
    ), done as (
        update workflow.workflow_run r
        set status = 'succeeded', attempt = e.attempt, leased_by = e.leased_by, result = e.result,
            started_at = coalesce(r.started_at, e.started_at), finished_at = now(), updated_at = now()
        from ended e where r.id = e.id
        returning r.id, r.attempt, r.namespace
    ), succeeded as (
        insert into workflow.workflow_event (workflow_id, event_type, data, run_ids, attempts)
        select (array_agg(d.id order by d.id))[1], 'succeeded', jsonb_build_object('worker_id', p_worker),
               array_agg(d.id order by d.id), array_agg(d.attempt order by d.id)
        from done d group by d.namespace
    )
    select d.id from done d;
end $$;

-- One worker's cycle, as pgbench calls it: claim and commit, then
-- complete and commit (two transactions, as a worker makes them).
create procedure workflow.proto_cycle_narrow(p_limit integer) language plpgsql as $$
declare
    v_ids uuid[];
    v_tokens bigint[];
begin
    -- The marks the schema's functions set: their own writes are not
    -- plain SQL's (no trigger records them again).
    perform workflow.set_marks();
    select array_agg(c.id), array_agg(c.token) into v_ids, v_tokens
    from workflow.proto_claim('w' || pg_backend_pid(), 'proto.job.v1', p_limit, 30000) c;
    commit;
    if v_ids is not null then
        perform workflow.set_marks(true);
        perform workflow.proto_complete('w' || pg_backend_pid(), v_ids, v_tokens,
                                        array_fill('{}'::jsonb, array[cardinality(v_ids)]));
    end if;
    commit;
end $$;

-- The same cycle through the schema's own functions.
create procedure workflow.proto_cycle_wide(p_limit integer) language plpgsql as $$
declare
    v_ids uuid[];
    v_tokens bigint[];
begin
    select array_agg(c.id), array_agg(c.lease_token) into v_ids, v_tokens
    from workflow.claim_runs('w' || pg_backend_pid(), '{proto.}', null, p_limit, 30000) c;
    commit;
    if v_ids is not null then
        perform workflow.complete_runs('w' || pg_backend_pid(), v_ids, v_tokens,
                                       array_fill('{}'::jsonb, array[cardinality(v_ids)]));
    end if;
    commit;
end $$;

-- Variant "leased": the claim also marks the run row leased (status,
-- holder, lease end), so that the row says what the narrow rows say. With
-- no index of the run table naming those columns (narrow_hot_path_indexes.sql)
-- the update is HOT.
create function workflow.proto_claim_leased(p_worker text, p_type text, p_limit integer, p_lease_ms bigint)
returns table (id uuid, token bigint)
language plpgsql set enable_seqscan = off as $$
#variable_conflict use_column
begin
    return query
    with c as (
        select * from workflow.proto_claim(p_worker, p_type, p_limit, p_lease_ms)
    ), marked as (
        update workflow.workflow_run r
        set status = 'leased', attempt = c.attempt, leased_by = p_worker,
            lease_until = now() + p_lease_ms * interval '1 millisecond', lease_token = workflow.lease_fence(c.token),
            started_at = coalesce(r.started_at, now()), updated_at = now()
        from c where r.id = c.id
        returning r.id, c.token
    )
    select m.id, m.token from marked m;
end $$;

create procedure workflow.proto_cycle_leased(p_limit integer) language plpgsql as $$
declare
    v_ids uuid[];
    v_tokens bigint[];
begin
    perform workflow.set_marks();
    select array_agg(c.id), array_agg(c.token) into v_ids, v_tokens
    from workflow.proto_claim_leased('w' || pg_backend_pid(), 'proto.job.v1', p_limit, 30000) c;
    commit;
    if v_ids is not null then
        perform workflow.set_marks(true);
        perform workflow.proto_complete('w' || pg_backend_pid(), v_ids, v_tokens,
                                        array_fill('{}'::jsonb, array[cardinality(v_ids)]));
    end if;
    commit;
end $$;
