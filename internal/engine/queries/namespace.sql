-- name: NamespaceGrant :exec
-- Binds a role to a namespace as producer, worker or reader (the schema
-- owner's call).
select workflow.grant_namespace(@role::text, @namespace::text, @grant_as::text);

-- name: NamespaceRevoke :one
select workflow.revoke_namespace(@role::text, @namespace::text, @grant_as::text);
