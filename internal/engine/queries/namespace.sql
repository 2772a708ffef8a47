-- name: NamespaceGrant
-- Binds a role to a namespace as producer, worker or reader (the schema
-- owner's call).
select workflow.grant_namespace(@role::text, @namespace::text, @as::text);

-- name: NamespaceRevoke
select workflow.revoke_namespace(@role::text, @namespace::text, @as::text);
