#!/usr/bin/env bash
# Shows, on scratch tables of the server at URL, why a claim must write the
# run row of workflow.workflow_run (decision 0019): the inbox contract's
# producer insert, `insert ... on conflict (idempotency_key) do nothing`,
# is refused by every form of the run table that would let the claim leave
# the row alone, and by a partial idempotency index.
#
#   hack/proto/run_row_contract.sh URL
#
# Prints one line per form: "refused: <PostgreSQL's message>" or
# "accepted"; exits non-zero when a form answers otherwise than recorded in
# the decision (the check to run again on a newer PostgreSQL).
set -euo pipefail
url=$1
schema=proto_contract_$$
psql "$url" -qX -v ON_ERROR_STOP=1 <<SQL
create schema $schema;
set search_path = $schema;
create table run_core (id bigserial primary key, idempotency_key text unique, payload jsonb);
create table run_state (id bigint primary key references run_core, status text not null default 'pending');
-- A view over the core and the state, written through an INSTEAD OF trigger.
create view run_by_trigger as
    select c.id, c.idempotency_key, c.payload, s.status from run_core c join run_state s using (id);
create function insert_run() returns trigger language plpgsql as \$\$
begin
    insert into run_core (id, idempotency_key, payload) values (default, new.idempotency_key, new.payload)
        returning id into new.id;
    insert into run_state (id) values (new.id);
    return new;
end \$\$;
create trigger insert_run instead of insert on run_by_trigger for each row execute function insert_run();
-- The same view written through a rule.
create view run_by_rule as select * from run_by_trigger;
create rule insert_run as on insert to run_by_rule do instead
    insert into run_core (idempotency_key, payload) values (new.idempotency_key, new.payload);
-- The table with its idempotency index partial (no entry for keyless runs).
create table run_partial (id bigserial primary key, idempotency_key text, payload jsonb);
create unique index on run_partial (idempotency_key) where idempotency_key is not null;
SQL
fail=0
try() { # form, expected (refused|accepted)
  local out
  if out=$(psql "$url" -qX -v ON_ERROR_STOP=1 -c "set search_path = $schema" \
      -c "insert into $1 (idempotency_key, payload) values ('k', '{}') on conflict (idempotency_key) do nothing" 2>&1); then
    echo "$1: accepted"; [ "$2" = accepted ] || fail=1
  else
    echo "$1: refused: $(echo "$out" | grep -m1 ERROR | sed 's/^.*ERROR: *//')"; [ "$2" = refused ] || fail=1
  fi
}
try run_by_trigger refused
try run_by_rule refused
try run_partial refused
try run_core accepted
psql "$url" -qX -c "set client_min_messages = warning" -c "drop schema $schema cascade" >/dev/null
exit $fail
