-- Version 13: event_counts_after also counts, per event type, the events
-- that ended an expired lease (for the metric
-- simpleworkflow_lease_expiries_total). Its return type changed: dropped
-- here, the file makes it again; nothing is rebuilt.
-- from: version 12 at da9d2786f195a103000dd0868fbb04cceafa1218
drop function if exists workflow.event_counts_after(bigint);

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (13);
