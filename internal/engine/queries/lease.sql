-- name: RunClaim
select id, type, payload, attempt, max_attempts, lease_until, created_at, lease_token, deadline_at, journal,
       traceparent, parent_id
from workflow.claim_runs(@worker_id, @type_prefixes, @runtime, @limit, @lease_ms, @types, @namespace::text,
                         @after::uuid[], @woken::boolean);

-- name: RunHeartbeat
select id, status, owned, deadline_exceeded
from workflow.heartbeat_runs(@worker_id, @ids, @tokens, @lease_ms);

-- name: RunComplete
select id, status, error from workflow.complete_runs(@worker_id, @ids, @tokens, @results);

-- name: RunFail
select id, status, run_at
from workflow.fail_runs(@worker_id, @ids, @tokens, @errors, @retryable);

-- name: RunRelease
select id from workflow.release_runs(@worker_id, @ids, @tokens);

-- name: RunReapExpired
select id, status from workflow.reap_expired_leases(@limit);

-- name: RunExpireDeadlines
select id, previous_status from workflow.expire_deadlines(null, @limit);

-- name: RunDeleteFinished
select workflow.delete_finished_runs(@retention::bigint * interval '1 millisecond', @limit);
