-- Version 14: run logs. The settings gain max_log_lines and max_log_bytes
-- (the limits of one attempt's log); the file makes the tables
-- workflow_run_log, workflow_run_log_attempt and
-- workflow_namespace_settings and the functions. Nothing is rebuilt.
-- from: version 13 at c8b2e280292218e83c0a55b06b7bbff872de5eda
alter table workflow.workflow_settings
    add column if not exists max_log_lines integer not null default 1000,
    add column if not exists max_log_bytes integer not null default 262144,
    drop constraint if exists workflow_settings_max_log_lines_range,
    drop constraint if exists workflow_settings_max_log_bytes_range,
    add constraint workflow_settings_max_log_lines_range check (max_log_lines between 0 and 100000),
    add constraint workflow_settings_max_log_bytes_range check (max_log_bytes between 0 and 16777216);

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (14);
