-- Version 16: the schema's bookkeeping moves into SQL. The file opens with
-- workflow.begin_schema(16) and closes with workflow.finish_schema(), which
-- record a fresh install's version and drop the routines the file no
-- longer defines; every migration records its own version (as this one
-- does, last); workflow.schema_version() answers any client. The hot
-- calls' planner settings stand at each function's definition instead of
-- being set again after the file. No table changes; nothing is rebuilt.
-- from: version 15 at 5b209598f17de6f936b5b160aafaa40363a1622b

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (16);
