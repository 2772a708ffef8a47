-- Version 9: a worker that completes runs can claim, in the same
-- transaction, the runs their completion made runnable (the next steps of
-- their DAGs, their durable parents woken): claim_runs takes p_after and
-- returns each run's parent_id. The file creates claim_runs with its new
-- signature and hand_off_candidates; the upgrade drops the claim_runs of
-- version 8, which the file no longer defines. A claim woken by a
-- notification (p_woken) goes on only when no other of the same worker
-- types is under way: workflow_lock gets rows 4097 to 8192 for that (the
-- file inserts them once its check allows them).
-- from: version 8 at 39655a08a4ce5aeb381abe39801f5a7077dfa993
-- (A database of version 6 has no workflow_lock yet: the file makes it.)
do $$ begin
    if to_regclass('workflow.workflow_lock') is not null then
        alter table workflow.workflow_lock drop constraint if exists workflow_lock_id_check;
        alter table workflow.workflow_lock add constraint workflow_lock_id_check check (id between 0 and 8192);
    end if;
end $$;
