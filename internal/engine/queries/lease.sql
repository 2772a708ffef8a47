-- name: RunClaim :many
select id, type, payload, attempt, max_attempts, lease_until, created_at, lease_token, deadline_at, journal,
       traceparent, parent_id
from workflow.claim_runs(@worker_id, @type_prefixes, sqlc.narg(runtime)::text, @max_rows, @lease_ms,
                         sqlc.narg(types)::text[], sqlc.narg(namespace)::text, sqlc.narg(after)::uuid[],
                         @woken::boolean);

-- name: RunHeartbeat :many
select id, status, owned, deadline_exceeded
from workflow.heartbeat_runs(@worker_id, @ids, @tokens, @lease_ms);

-- name: RunComplete :many
select id, status, error from workflow.complete_runs(@worker_id, @ids, @tokens, @results);

-- name: RunFail :many
select id, status, run_at
from workflow.fail_runs(@worker_id, @ids, @tokens, @errors, @retryable);

-- name: RunRelease :many
select id from workflow.release_runs(@worker_id, @ids, @tokens);

-- name: RunReapExpired :many
select id, status from workflow.reap_expired_leases(@max_rows);

-- name: RunExpireDeadlines :many
select id, previous_status from workflow.expire_deadlines(null, @max_rows);

-- name: RunDeleteFinished :one
select workflow.delete_finished_runs(sqlc.arg(retention_ms)::bigint * interval '1 millisecond', @max_rows);
