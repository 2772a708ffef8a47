-- The durable inbox: runs, their audit trail, and the workflow registry.

create schema if not exists workflow;

create table workflow.workflow_run (
    id               uuid        primary key default gen_random_uuid(),
    type             text        not null,
    payload          jsonb       not null default '{}'::jsonb,
    status           text        not null default 'pending',
    priority         integer     not null default 100,
    run_at           timestamptz not null default now(),
    idempotency_key  text,
    attempt          integer     not null default 0,
    max_attempts     integer     not null default 3,
    leased_by        text,
    lease_until      timestamptz,
    last_error       text,
    result           jsonb,
    -- Optional per-run retry policy; null means the default (attempt² minutes).
    retry_base_delay interval,
    retry_max_delay  interval,
    -- The Kubernetes object a run was mirrored from, when it came from one.
    source_namespace text,
    source_name      text,
    source_uid       text,
    started_at       timestamptz,
    finished_at      timestamptz,
    created_at       timestamptz not null default now(),
    updated_at       timestamptz not null default now(),
    deleted_at       timestamptz,

    constraint workflow_run_type_format check (
        char_length(type) <= 253
        and type ~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'),
    constraint workflow_run_status_valid check (
        status in ('pending', 'leased', 'succeeded', 'failed', 'cancelled')),
    constraint workflow_run_payload_object check (jsonb_typeof(payload) = 'object'),
    constraint workflow_run_max_attempts_range check (max_attempts between 1 and 1000),
    constraint workflow_run_attempt_range check (attempt >= 0 and attempt <= max_attempts),
    constraint workflow_run_idempotency_key_length check (
        idempotency_key is null or char_length(idempotency_key) between 1 and 512),
    constraint workflow_run_lease_held check (
        status <> 'leased' or (leased_by is not null and lease_until is not null)),
    constraint workflow_run_retry_policy_valid check (
        (retry_base_delay is null or retry_base_delay > interval '0')
        and (retry_max_delay is null or retry_max_delay > interval '0')
        and (retry_base_delay is null or retry_max_delay is null
             or retry_max_delay >= retry_base_delay))
);

comment on table workflow.workflow_run is
    'The durable inbox: one row per recorded intent. A pending row always runs eventually.';

-- Claiming walks pending rows in priority, then age order. Partial, so that
-- leased and finished rows cost the index nothing.
create index idx_workflow_run_claim
    on workflow.workflow_run (priority, created_at, run_at)
    where status = 'pending' and deleted_at is null;
-- Type-prefix routing and queue depth per prefix (LIKE 'prefix%'). Partial,
-- so that finishing a run costs this index nothing.
create index idx_workflow_run_type_prefix
    on workflow.workflow_run (type text_pattern_ops)
    where status in ('pending', 'leased');
-- Deduplication; the seed's "on conflict (idempotency_key)" infers this index.
create unique index idx_workflow_run_idempotency
    on workflow.workflow_run (idempotency_key);
-- Soft-deleted rows, and the reaper's scan of expired leases.
create index idx_workflow_run_deleted_at
    on workflow.workflow_run (deleted_at) where deleted_at is not null;
create index idx_workflow_run_lease_until
    on workflow.workflow_run (lease_until) where status = 'leased';
-- Retention of finished rows.
create index idx_workflow_run_finished_at
    on workflow.workflow_run (finished_at) where finished_at is not null;
-- Status flowing back to Kubernetes objects.
create index idx_workflow_run_source
    on workflow.workflow_run (source_uid) where source_uid is not null;

create table workflow.workflow_event (
    id          bigint      generated always as identity primary key,
    -- No foreign key: checking one on every event would cost the hot path a
    -- row lock per transition. Events are written only by the functions and
    -- triggers of this schema, always beside their run, and deleted with it
    -- (see workflow.on_runs_deleted).
    workflow_id uuid        not null,
    event_type  text        not null,
    data        jsonb       not null default '{}'::jsonb,
    created_at  timestamptz not null default now(),

    constraint workflow_event_type_valid check (event_type in (
        'created', 'leased', 'started', 'heartbeat',
        'succeeded', 'failed', 'retried', 'cancelled'))
);

comment on table workflow.workflow_event is
    'Audit trail: one row per transition of a workflow_run, written in the same transaction.';

create index idx_workflow_event_workflow on workflow.workflow_event (workflow_id, id);

create table workflow.workflow_registry (
    workflow_name text        primary key,
    intent_type   text        not null default 'workflow',
    runtime       text        not null,
    is_enabled    boolean     not null default true,
    description   text        not null default '',
    -- The WorkflowRegistry object that owns the row, when it came from one.
    owner_namespace text,
    owner_name      text,
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now(),

    constraint workflow_registry_name_format check (
        char_length(workflow_name) <= 253
        and workflow_name ~ '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'),
    constraint workflow_registry_runtime_valid check (runtime in ('go', 'python'))
);

comment on table workflow.workflow_registry is
    'Which runtime executes a workflow type, and whether it may run at all.';
