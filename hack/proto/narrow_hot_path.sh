#!/usr/bin/env bash
# Times the prototype of narrow_hot_path.sql against the schema's own claim
# and completion, with pgbench, in two databases of one server, alternately.
#
#   hack/proto/narrow_hot_path.sh URL [PAIRS] [RUNS]
#
# URL names a server (its database is only used to create the two others:
# proto_wide and proto_narrow, dropped first). Each database gets the schema
# file, the prototype and RUNS pending runs (default 300,000 in proto_wide, twice that in proto_narrow);
# proto_narrow loses the run table's indexes the narrow tables replace
# (narrow_hot_path_indexes.sql). Then PAIRS (default 3) times, for 1 and 4
# clients, each variant burns down 50,000 runs in claims of 500 (a claim and
# its completion are two transactions, as a worker makes them): "wide", the
# schema's claim_runs and complete_runs; "narrow", the claim touching only
# the narrow tables and the completion writing the run row once; "leased",
# narrow with the run row marked leased at the claim. Prints runs/s per
# variant and client count.
set -euo pipefail
url=$1 pairs=${2:-3} runs=${3:-300000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pgbench=$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -V | tail -1)
pgbench=${pgbench:-pgbench}
db_url() { echo "$url" | sed -E "s#/[^/?]+(\?|$)#/$1\1#"; }
for v in wide narrow; do
  psql "$url" -qc "drop database if exists proto_$v" -c "create database proto_$v"
  u=$(db_url "proto_$v")
  psql "$u" -q -v ON_ERROR_STOP=1 --single-transaction -f "$root/internal/engine/sql/workflow.sql" >/dev/null 2>&1
  psql "$u" -q -v ON_ERROR_STOP=1 -c "insert into workflow.workflow_run (type, payload)
    select 'proto.job.v1', jsonb_build_object('n', g)
    from generate_series(1, case when '$v' = 'narrow' then 2 * $runs else $runs end) g"
  psql "$u" -q -v ON_ERROR_STOP=1 -f "$here/narrow_hot_path.sql"
  if [ "$v" = narrow ]; then
    psql "$u" -q -v ON_ERROR_STOP=1 -f "$here/narrow_hot_path_indexes.sql"
  fi
  psql "$u" -q -c "vacuum analyze"
done
script=$(mktemp)
for p in $(seq "$pairs"); do
  for c in 1 4; do
    for v in wide narrow leased; do
      db=proto_narrow
      [ "$v" = wide ] && db=proto_wide
      echo "call workflow.proto_cycle_$v(500);" > "$script"
      out=$("$pgbench" -n -c "$c" -j "$c" -t $((100 / c)) -f "$script" "$(db_url "$db")" 2>&1)
      tps=$(echo "$out" | sed -nE 's/^tps = ([0-9.]+) .*/\1/p')
      [ -n "$tps" ] || { echo "$out" >&2; exit 1; }
      echo "pair $p clients $c $v: $(echo "$tps * 500" | bc) runs/s"
    done
  done
done
rm -f "$script"
