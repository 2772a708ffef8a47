-- Smaller CHECK constraints on workflow_run, with the same rules.
--
-- PostgreSQL reads a table's CHECK constraints back from their stored node
-- trees in every statement that inserts or updates a row of it: for
-- workflow_run 27.5 kB of text, parsed and prepared once per statement
-- before any row is checked (perf of a single-run insert and claim: about a
-- fifth of the server's time under ExecConstraints, most of it in
-- stringToNode). Seven constraints are written again more compactly (18.2
-- kB in all) and say the same thing. A CHECK passes when its expression is
-- null, which the shorter forms rely on in place of explicit "is null or"
-- guards:
--
-- * workflow_run_reserved_key: one regular expression for "not a reserved
--   key" instead of two prefix comparisons, and the two owner cases in one
--   coalesce (a k8s: key can never equal k8s-uid:<uid>, nor the reverse);
-- * workflow_run_dag_key: the regular expression alone says "not a key of
--   the reserved dag:<run id>: shape" (the left(…, 4) test was implied);
-- * workflow_run_traceparent_format: the all-zero trace and parent ids are
--   excluded inside the regular expression (negative lookaheads), whose
--   match also fixes the length at 55;
-- * workflow_run_retry_policy_valid: a comparison with a null delay is null,
--   which passes, exactly as the explicit guards did;
-- * workflow_run_status_valid, workflow_run_wait_kind_valid: one array
--   constant instead of an array built of one constant per value;
-- * workflow_run_idempotency_key_length: between, without the null guard.
--
-- The constraints keep their names (the engine's error messages key on
-- them). The three added NOT VALID stay so (rows stored before them were
-- never checked); the others are validated again, which reads the table
-- once under the lock this migration holds anyway.
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
        idempotency_key !~ '^k8s(-uid)?:'
        or coalesce(source_uid is not null and starts_with(idempotency_key, 'k8s:' || source_namespace || ':')
                    or idempotency_key = 'k8s-uid:' || source_uid, false)) not valid,
    add constraint workflow_run_dag_key check (
        idempotency_key !~ '^dag:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:'
        or coalesce(idempotency_key = 'dag:' || parent_id::text || ':' || parent_step, false)) not valid,
    add constraint workflow_run_traceparent_format check (
        traceparent ~ '^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$') not valid,
    add constraint workflow_run_retry_policy_valid check (
        retry_base_delay > interval '0' and retry_max_delay > interval '0'
        and retry_max_delay >= retry_base_delay) not valid,
    add constraint workflow_run_status_valid check (
        status = any ('{pending,leased,succeeded,failed,cancelled}'::text[])) not valid,
    add constraint workflow_run_wait_kind_valid check (
        wait_kind = any ('{sleep,signal,child,dag}'::text[])) not valid,
    add constraint workflow_run_idempotency_key_length check (
        char_length(idempotency_key) between 1 and 512) not valid;
alter table workflow.workflow_run validate constraint workflow_run_retry_policy_valid;
alter table workflow.workflow_run validate constraint workflow_run_status_valid;
alter table workflow.workflow_run validate constraint workflow_run_wait_kind_valid;
alter table workflow.workflow_run validate constraint workflow_run_idempotency_key_length;
