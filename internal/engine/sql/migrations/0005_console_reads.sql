-- Version 5: the console's count of runs finished in the last hour is one
-- function with an optional list of namespaces (finished_last_hour(text[])),
-- and the list of runs filters through list_filter_match.
-- from: version 4 at d0d0922cc5e549558dcc8afc1b10823dd75fee1c
drop function workflow.finished_last_hour();
drop function workflow.namespace_finished_last_hour(text[]);
