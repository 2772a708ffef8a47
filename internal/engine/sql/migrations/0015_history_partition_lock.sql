-- Version 15: create_history_partition locks the audit trail alone in
-- share update exclusive mode (self-conflicting, writers go on) before it
-- reads anything, so that two calls at once go one after the other instead
-- of deadlocking; a span begun or beginning within a minute still takes
-- share mode after the checks. Only a function body changed: the file
-- replaces it; nothing is rebuilt.
-- from: version 14 at b43ec0419fc0e637922fdffd693dd87905ccff9c

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (15);
