-- Version 5: the console's count of runs finished in the last hour is one
-- function with an optional list of namespaces (finished_last_hour(text[])),
-- and the list of runs filters through list_filter_match; the file
-- replaces the functions, and the upgrade drops the two it no longer
-- defines (finished_last_hour() and namespace_finished_last_hour). The
-- index of unfinished children's parents takes a predicate of its own
-- (the file makes it again: a read of the whole run table, while workers
-- wait on its lock). flow_admit returns the addresses of the runs it
-- admits (tid[], was uuid[]): the upgrade drops the old one, which the
-- file cannot replace.
-- from: version 4 at d0d0922cc5e549558dcc8afc1b10823dd75fee1c
drop index if exists workflow.idx_workflow_run_child;
drop function if exists workflow.flow_admit(text, integer, timestamptz);

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (5);
