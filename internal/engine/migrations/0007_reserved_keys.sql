-- Idempotency keys of the operator's reserved form belong to runs mirrored
-- from a Kubernetes object of the matching namespace (k8s:<namespace>:<key>)
-- or with the matching UID (k8s-uid:<uid>). A plain-SQL producer that
-- inserts such a key first can no longer hold the key of another
-- namespace's WorkflowRun. NOT VALID: rows stored before are left alone.
alter table workflow.workflow_run add constraint workflow_run_reserved_key check (
    idempotency_key is null
    or (left(idempotency_key, 4) <> 'k8s:' and left(idempotency_key, 8) <> 'k8s-uid:')
    or coalesce(left(idempotency_key, 4) = 'k8s:' and source_uid is not null
                and left(idempotency_key, char_length(source_namespace) + 5) = 'k8s:' || source_namespace || ':',
                false)
    or coalesce(left(idempotency_key, 8) = 'k8s-uid:' and idempotency_key = 'k8s-uid:' || source_uid, false)
) not valid;
