#!/usr/bin/env bash
# Times the prototype of narrow_hot_path.sql against the schema's own claim
# and completion, with pgbench, in two databases of one server, alternately.
#
#   hack/proto/narrow_hot_path.sh URL [PAIRS] [RUNS]
#
# URL names a server (its database is only used to create the two others:
# proto_wide and proto_narrow, dropped first). Each database gets the schema
# file, the prototype and RUNS pending runs (default 350,000); then PAIRS
# (default 3) times, for 1 and 4 clients, each database burns down 50,000
# runs in claims of 500 (a claim and its completion are two transactions,
# as a worker makes them). Prints runs/s per database and client count.
set -euo pipefail
url=$1 pairs=${2:-3} runs=${3:-350000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pgbench=$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -V | tail -1)
pgbench=${pgbench:-pgbench}
db_url() { echo "$url" | sed -E "s#/[^/?]+(\?|$)#/$1\1#"; }
for v in wide narrow; do
  psql "$url" -qc "drop database if exists proto_$v" -c "create database proto_$v"
  u=$(db_url "proto_$v")
  psql "$u" -q -v ON_ERROR_STOP=1 -f "$root/internal/engine/sql/workflow.sql" >/dev/null 2>&1
  psql "$u" -q -v ON_ERROR_STOP=1 -c "insert into workflow.workflow_run (type, payload)
    select 'proto.job.v1', jsonb_build_object('n', g) from generate_series(1, $runs) g"
  psql "$u" -q -v ON_ERROR_STOP=1 -f "$here/narrow_hot_path.sql"
  psql "$u" -q -c "vacuum analyze"
done
script=$(mktemp)
for p in $(seq "$pairs"); do
  for c in 1 4; do
    for v in wide narrow; do
      echo "call workflow.proto_cycle_$v(500);" > "$script"
      out=$("$pgbench" -n -c "$c" -j "$c" -t $((100 / c)) -f "$script" "$(db_url "proto_$v")" 2>&1)
      tps=$(echo "$out" | sed -nE 's/^tps = ([0-9.]+) .*/\1/p')
      [ -n "$tps" ] || { echo "$out" >&2; exit 1; }
      echo "pair $p clients $c $v: $(echo "$tps * 500" | bc) runs/s"
    done
  done
done
rm -f "$script"
