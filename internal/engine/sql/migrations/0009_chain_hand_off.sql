-- Version 9: a worker that completes runs can claim, in the same
-- transaction, the runs their completion made runnable (the next steps of
-- their DAGs, their durable parents woken): claim_runs takes p_after and
-- returns each run's parent_id. The file creates claim_runs with its new
-- signature and hand_off_candidates; the upgrade drops the claim_runs of
-- version 8, which the file no longer defines. Nothing else changes.
-- from: version 8 at 39655a08a4ce5aeb381abe39801f5a7077dfa993
select 1;
