-- Version 18: no function of a run's way is planned at every call. The
-- ones a SQL body kept from being inlined (a SET clause, a subquery, a
-- body more volatile than its function, a FROM list, a row that is not a
-- set) are PL/pgSQL, whose plans a session keeps (now, caller_namespaces,
-- type_shared, dag_final_step, dag_unshared_step, dag_step_input), or
-- inlinable SQL (run_id_at, history_span_start,
-- history_span_bounds, retry_delay); statements that use the clock for
-- many rows read it once. No table changes. history_span_bounds returns a
-- set now, so it is dropped here and the file makes it again.
-- from: version 17 at c9d0ecac8c646a14097bdad2918e640ccb3fcd35

-- Only over version 17: an earlier database runs the migrations before
-- this one first.
do $$ begin
    if (select max(v.version) from workflow.schema_version v) is distinct from 17 then
        raise exception 'migration 0018 upgrades version 17; this database is at version %',
            (select max(v.version) from workflow.schema_version v) using errcode = 'SW007';
    end if;
end $$;

drop function if exists workflow.history_span_bounds(uuid, interval);

-- Recorded here; the schema file, which runs next, checks it.
insert into workflow.schema_version (version) values (18);
