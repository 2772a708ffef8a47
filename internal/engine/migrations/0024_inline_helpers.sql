-- Small SQL helpers on the hot path, made inlinable.
--
-- An SQL function the planner cannot inline is run by the SQL-function
-- executor, which parses and plans its body again in every statement that
-- calls it: about 50 microseconds for new_run_id (every run's id, one call
-- per inserted row) and for prefix_pattern (every claim by prefix) on an
-- idle server, and about 10 microseconds a row in a batch; more than the
-- rest of those statements' own work.
--
-- new_run_id could not be inlined because of its SET search_path clause;
-- prefix_pattern because it is STRICT and its body (a CASE) is not;
-- step_name_problem and output_problem (every journal write checks each
-- step with them) because they were declared IMMUTABLE around format(),
-- which is only STABLE. new_run_id and prefix_pattern now have standard SQL
-- bodies (BEGIN ATOMIC): the body is parsed once, when the function is
-- created, with every name bound then, so no caller's search_path can
-- redirect it and no SET clause is needed. prefix_pattern is no longer
-- STRICT (it still returns null for null: every branch of its body does);
-- the two checks are STABLE, as their bodies are. The values are unchanged.

create or replace function workflow.new_run_id()
returns uuid
language sql volatile
begin atomic
    select encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint) from 3)
                    from 1 for 6),
            52, 1), 53, 1),  -- version 7: the version nibble 0100 becomes 0111
        'hex')::uuid;
end;

comment on function workflow.new_run_id() is
    'A new run id: a UUID (version 7 layout) whose first 48 bits are the time in milliseconds, the rest random.';

-- prefix_pattern turns a type prefix into a LIKE pattern that matches it
-- literally: '\', '_' and '%' inside the prefix are escaped, and a single
-- trailing '%' is accepted as a synonym for the bare prefix.
create or replace function workflow.prefix_pattern(p_prefix text) returns text
language sql immutable parallel safe
begin atomic
    select replace(replace(replace(
               case when right(p_prefix, 1) = '%' then left(p_prefix, -1) else p_prefix end,
               chr(92), chr(92) || chr(92)), '%', chr(92) || '%'), '_', chr(92) || '_') || '%';
end;

alter function workflow.step_name_problem(text) stable;
alter function workflow.output_problem(jsonb) stable;
alter function workflow.nondeterminism_message(text, text, integer, text, text) stable;
