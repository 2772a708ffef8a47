-- A journal write that waits, after inserting the entry of the step named
-- 'transfer', on the advisory lock (0, 4242) a test holds: the worker has
-- written its ledger row and its journal entry and has not sent its
-- commit. Shared by the Go and the Python crash tests of transactional
-- steps (cmd/example-worker/transfer_process_test.go,
-- sdk/python/tests/test_step_tx.py).
create function public.hold_journal() returns trigger language plpgsql as $$
begin
    perform pg_advisory_xact_lock(0, 4242);
    return null;
end $$;
create trigger hold_journal after insert on workflow.workflow_step
    for each row when (new.name = 'transfer') execute function public.hold_journal();
