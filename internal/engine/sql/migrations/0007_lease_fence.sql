-- Version 7: lease tokens nobody else can read. A claim draws its token at
-- random and hands it to the claimer alone; the run keeps only its fence
-- (workflow.lease_fence, a one-way digest of the token), so a login that
-- reads the row cannot write as the holder. Every event records the
-- database login that made it (workflow_event.db_user).
-- from: version 6 at f7059f7a5093701b146649f346daf9ef40543f7a
--
-- The leases held while the upgrade runs keep working: their tokens (from
-- the old sequence) are replaced by their fences, which the holders' next
-- writes match. Rewrites the leased rows only (a finished run's old token
-- fences nothing); events recorded before the upgrade keep db_user null
-- (who made them was not recorded).

update workflow.workflow_run
set lease_token = ('x' || left(encode(sha256(int8send(lease_token)), 'hex'), 16))::bit(64)::bigint
where status = 'leased' and lease_token is not null;

alter table workflow.workflow_event add column if not exists db_user text;
alter table workflow.workflow_event alter column db_user set default session_user;

drop sequence if exists workflow.lease_token_seq cascade;
