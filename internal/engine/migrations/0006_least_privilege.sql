-- Least privilege: workers, producers and consoles connect with roles that
-- can do their job and no more (internal/engine/roles.sql creates them and
-- grants what each needs). A worker has no privilege on the tables: every
-- write it makes goes through the functions below, which run with the
-- privileges of their owner (SECURITY DEFINER). A producer inserts and
-- cancels with plain SQL; the triggers that write the audit events for those
-- statements run as the owner too, so the producer needs no privilege on the
-- events table.
--
-- A function that runs as its owner must not be steered by its caller:
-- every function here that touches a table (and every trigger function) runs
-- with search_path pinned to pg_catalog, then pg_temp last, so a caller's
-- own now(), operator or temporary table can never stand in for the real
-- one. The bodies name every object of ours with its schema (workflow.).
--
-- The small SQL helpers (prefix_pattern, retry_delay, far_future,
-- step_name_problem, output_problem, nondeterminism_message) touch no table
-- and are left alone: a SET clause would stop Postgres from inlining them.
--
-- For whoever writes the next migration: CREATE OR REPLACE FUNCTION keeps a
-- function's owner and grants but replaces its SET clauses and SECURITY
-- DEFINER with what the new text says, and DROP + CREATE loses the grants
-- too. A function redefined later must say "security definer set search_path
-- = pg_catalog, pg_temp" itself (or be altered again as below), and a new
-- security-definer function must revoke EXECUTE from PUBLIC;
-- TestFunctionsPinSearchPath fails otherwise. After such a migration, run
-- roles.sql again to grant the new function to its role.

-- Worker functions: called by the workflow_worker role.
alter function workflow.claim_runs(text, text[], text, integer, bigint, text[])
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.heartbeat_runs(text, uuid[], bigint[], bigint)
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.complete_runs(text, uuid[], bigint[], jsonb[])
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.fail_runs(text, uuid[], bigint[], text[], boolean[])
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.release_runs(text, uuid[], bigint[])
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.record_steps(text, uuid[], bigint[], text[], integer[], jsonb[])
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.park_run(text, uuid, bigint, text, text, integer, timestamptz, bigint, text)
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.start_child(text, uuid, bigint, text, integer, text, jsonb, integer, integer, bigint)
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.reap_expired_leases(integer)
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.expire_deadlines(uuid[], integer)
    security definer set search_path = pg_catalog, pg_temp;

-- Producer functions: called by the workflow_producer role.
alter function workflow.cancel_run(uuid)
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.send_signal(uuid, text, jsonb, text)
    security definer set search_path = pg_catalog, pg_temp;

-- Trigger functions that write beside a producer's plain INSERT or UPDATE
-- (the created and cancelled events, a soft delete, a parent's journal and
-- wake-up, a cancelled parent's children) or beside retention's DELETE.
alter function workflow.on_run_inserted()
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.on_run_cancelled()
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.on_run_soft_deleted()
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.on_child_finished()
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.on_parent_ended()
    security definer set search_path = pg_catalog, pg_temp;
alter function workflow.on_runs_deleted()
    security definer set search_path = pg_catalog, pg_temp;

-- Functions that keep their caller's privileges but still pin the path:
-- the helpers of park_run and start_child (reached as the owner from there;
-- a direct caller needs privileges on the tables), retention (run by the
-- operator, which owns the schema), and the triggers that write nothing.
alter function workflow.held_run(text, uuid, bigint)
    set search_path = pg_catalog, pg_temp;
alter function workflow.journal_conflict(uuid, text, text, integer)
    set search_path = pg_catalog, pg_temp;
alter function workflow.delete_finished_runs(timestamptz, integer)
    set search_path = pg_catalog, pg_temp;
alter function workflow.on_source_run_changed()
    set search_path = pg_catalog, pg_temp;
alter function workflow.on_finished_run_changed()
    set search_path = pg_catalog, pg_temp;

-- Only the roles granted them by roles.sql (and the owner) may call the
-- functions that run as the owner. A trigger function is never called
-- directly, and firing a trigger checks no EXECUTE privilege.
revoke execute on function
    workflow.claim_runs(text, text[], text, integer, bigint, text[]),
    workflow.heartbeat_runs(text, uuid[], bigint[], bigint),
    workflow.complete_runs(text, uuid[], bigint[], jsonb[]),
    workflow.fail_runs(text, uuid[], bigint[], text[], boolean[]),
    workflow.release_runs(text, uuid[], bigint[]),
    workflow.record_steps(text, uuid[], bigint[], text[], integer[], jsonb[]),
    workflow.park_run(text, uuid, bigint, text, text, integer, timestamptz, bigint, text),
    workflow.start_child(text, uuid, bigint, text, integer, text, jsonb, integer, integer, bigint),
    workflow.reap_expired_leases(integer),
    workflow.expire_deadlines(uuid[], integer),
    workflow.cancel_run(uuid),
    workflow.send_signal(uuid, text, jsonb, text),
    workflow.on_run_inserted(),
    workflow.on_run_cancelled(),
    workflow.on_run_soft_deleted(),
    workflow.on_child_finished(),
    workflow.on_parent_ended(),
    workflow.on_runs_deleted()
from public;
