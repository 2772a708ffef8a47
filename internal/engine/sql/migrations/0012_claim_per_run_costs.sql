-- Version 12: less server work per run in a claim and a completion. A
-- claim draws one random secret and derives each run's lease token from
-- it (new_lease_token takes the secret and the run id), and places a
-- batch row's runs in their history span by comparing ids with the span
-- of its oldest run; a completion places its batch row the same way. The
-- file replaces the functions (the upgrade drops new_lease_token()
-- without arguments); nothing is rebuilt.
-- from: version 11 at bf00aab850f3568f6f40d3abb9d43394c8fa2cd2
select 1;

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (12);
