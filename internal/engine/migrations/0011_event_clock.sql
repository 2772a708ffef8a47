-- An event's time is when it was written, not when its transaction began.
-- Two writers of one run take its row lock in turn; with now() (the start of
-- each transaction) the one that started first but waited for the lock could
-- appear before an event written ahead of it. clock_timestamp() at insert,
-- after the row lock is held, keeps each run's trail in time order, the same
-- order as the event ids.
alter table workflow.workflow_event alter column created_at set default clock_timestamp();
