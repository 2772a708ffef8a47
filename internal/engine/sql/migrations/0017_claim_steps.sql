-- Version 17: claim_runs is split into named steps: claim_bucket (the turn
-- of a woken claim), claim_pick (the runs no flow limit governs, by
-- address, as flow_admit and hand_off_candidates give theirs) and
-- claim_lease (the lease, its events and the journals). No table changes;
-- the file defines the new functions and replaces claim_runs.
-- from: version 16 at 74c218300697cdc07d6f36a488bacf22033d29c9

-- Only over version 16: an earlier database runs the migrations before
-- this one first.
do $$ begin
    if (select max(v.version) from workflow.schema_version v) is distinct from 16 then
        raise exception 'migration 0017 upgrades version 16; this database is at version %',
            (select max(v.version) from workflow.schema_version v) using errcode = 'SW007';
    end if;
end $$;

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (17);
