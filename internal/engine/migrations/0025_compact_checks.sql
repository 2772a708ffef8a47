-- Smaller CHECK constraints on workflow_run, with the same rules.
--
-- PostgreSQL reads a table's CHECK constraints back from their stored node
-- trees in every statement that inserts or updates a row of it: for
-- workflow_run 27.5 kB of text, parsed and prepared once per statement
-- before any row is checked (perf of a single-run insert and claim: about a
-- fifth of the server's time under ExecConstraints, most of it in
-- stringToNode). Seven constraints are written again more compactly and say
-- the same thing, each row checked with no more work than before (no
-- regular expression where a prefix comparison decided, no function call).
-- A CHECK passes when its expression is null, which the shorter forms rely
-- on in place of explicit "is null or" guards:
--
-- * workflow_run_reserved_key: the two owner cases in one coalesce (a k8s:
--   key can never equal k8s-uid:<uid>, nor the reverse), the namespace's
--   prefix by starts_with;
-- * workflow_run_dag_key, workflow_run_traceparent_format,
--   workflow_run_idempotency_key_length: without the null guard;
-- * workflow_run_retry_policy_valid: a comparison with a null delay is null,
--   which passes, exactly as the explicit guards did;
-- * workflow_run_status_valid, workflow_run_wait_kind_valid: one array
--   constant instead of an array built of one constant per value.
--
-- The constraints keep their names (the engine's error messages key on
-- them). The three added NOT VALID before stay so (rows stored before them
-- were never checked); the four others are added validated, in one read of
-- the table under the lock this statement takes anyway.
-- TestCompactChecksKeepTheirRules compares the old and new forms over the
-- cases that tell them apart.
alter table workflow.workflow_run
    drop constraint workflow_run_reserved_key,
    drop constraint workflow_run_dag_key,
    drop constraint workflow_run_traceparent_format,
    drop constraint workflow_run_retry_policy_valid,
    drop constraint workflow_run_status_valid,
    drop constraint workflow_run_wait_kind_valid,
    drop constraint workflow_run_idempotency_key_length,
    add constraint workflow_run_reserved_key check (
        left(idempotency_key, 4) <> 'k8s:' and left(idempotency_key, 8) <> 'k8s-uid:'
        or coalesce(source_uid is not null and starts_with(idempotency_key, 'k8s:' || source_namespace || ':')
                    or idempotency_key = 'k8s-uid:' || source_uid, false)) not valid,
    add constraint workflow_run_dag_key check (
        left(idempotency_key, 4) <> 'dag:'
        or idempotency_key !~ '^dag:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:'
        or coalesce(idempotency_key = 'dag:' || parent_id::text || ':' || parent_step, false)) not valid,
    add constraint workflow_run_traceparent_format check (
        octet_length(traceparent) = 55
        and traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
        and substr(traceparent, 4, 32) <> '00000000000000000000000000000000'
        and substr(traceparent, 37, 16) <> '0000000000000000') not valid,
    add constraint workflow_run_retry_policy_valid check (
        retry_base_delay > interval '0' and retry_max_delay > interval '0'
        and retry_max_delay >= retry_base_delay),
    add constraint workflow_run_status_valid check (
        status = any ('{pending,leased,succeeded,failed,cancelled}'::text[])),
    add constraint workflow_run_wait_kind_valid check (
        wait_kind = any ('{sleep,signal,child,dag}'::text[])),
    add constraint workflow_run_idempotency_key_length check (
        char_length(idempotency_key) between 1 and 512);
