-- Version 2: one clock for every rule (workflow.now(), moved by the owner's
-- workflow_settings.clock_offset), and retention given as an age.
-- from: version 1 at 1fb9024837a4faea6f255cdf64bf6a8c3752281f
alter table workflow.workflow_settings
    add column clock_offset interval not null default '0',
    add constraint workflow_settings_clock_offset_forward check (clock_offset >= '0' and clock_offset <= '100 years');
-- Its argument is now an age (p_retention interval), not an instant.
drop function if exists workflow.delete_finished_runs(timestamptz, integer);

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (2);
