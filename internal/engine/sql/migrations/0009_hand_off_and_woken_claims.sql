-- Version 9: a worker that completes runs can claim, in the same
-- transaction, the runs their completion made runnable (the next steps of
-- their DAGs, their durable parents woken): claim_runs takes p_after and
-- returns each run's parent_id; a claim woken by a notification (p_woken)
-- goes on only when no other of the same worker bucket is under way, the
-- buckets being rows of the new table workflow_claimer. The file creates
-- the table, claim_runs with its new signature and hand_off_candidates;
-- the upgrade drops the claim_runs of version 8, which the file no longer
-- defines. Nothing is rebuilt.
-- from: version 8 at 39655a08a4ce5aeb381abe39801f5a7077dfa993
select 1;

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (9);
