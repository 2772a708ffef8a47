-- name: RunStepSummary
-- What a mirrored run's status shows of its journal and its children: how
-- many entries finished, the name of the one that finished last, and how many
-- child runs it started. Outputs are not read.
select (select count(*) from workflow.workflow_step s
        where s.run_id = @run_id and s.finished_at is not null),
       (select s.name from workflow.workflow_step s
        where s.run_id = @run_id and s.finished_at is not null
        order by s.finished_at desc, s.position desc
        limit 1),
       (select count(*) from workflow.workflow_run c where c.parent_id = @run_id);
