-- Version 11: the parents of the runs one completion or failure ends move
-- on together: complete_runs and fail_runs call children_finished once for
-- their batch, which advances every DAG the batch touched in set-based
-- statements (dags_advance), and workflow_child_finished leaves their rows
-- alone (workflow.ends_children). The file creates the two functions and
-- replaces the trigger; nothing is rebuilt.
-- from: version 10 at fa4c565ec985f9d7edd728603e0f1efda2a335ad
select 1;

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (11);
