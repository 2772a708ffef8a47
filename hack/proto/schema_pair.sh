#!/usr/bin/env bash
# Times a claim-and-completion cycle of the schema file at a git commit
# against the working tree's, with pgbench, in two databases of one
# server, alternately (the server's time alone: no client, no network).
#
#   hack/proto/schema_pair.sh URL COMMIT [PAIRS] [RUNS]
#
# URL names a server (its database is only used to create the two others:
# pair_before and pair_after, dropped first). Each gets its schema file and
# RUNS pending runs (default 480,000). Then PAIRS (default 6) times, for 1
# and 4 clients, each burns down 40,000 runs in claims of CLAIM (default
# 500; 10 weighs what a claim costs whatever its size) through
# claim_runs and complete_runs (a claim and its completion are two
# transactions, as a worker makes them), the two databases alternately
# (which goes first alternates too).
# Prints runs/s per schema and client count, and the ratio after/before.
set -euo pipefail
url=$1 commit=$2 pairs=${3:-6} runs=${4:-480000} claim=${CLAIM:-500}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pgbench=$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -V | tail -1)
pgbench=${pgbench:-pgbench}
db_url() { echo "$url" | sed -E "s#/[^/?]+(\?|$)#/$1\1#"; }
before=$(mktemp)
git -C "$root" show "$commit:internal/engine/sql/workflow.sql" > "$before"
for v in before after; do
  psql "$url" -qc "drop database if exists pair_$v" -c "create database pair_$v"
  u=$(db_url "pair_$v")
  f=$root/internal/engine/sql/workflow.sql
  [ "$v" = before ] && f=$before
  psql "$u" -q -v ON_ERROR_STOP=1 --single-transaction -f "$f" >/dev/null 2>&1
  psql "$u" -q -v ON_ERROR_STOP=1 -c "insert into workflow.workflow_run (type, payload)
    select 'pair.job.v1', jsonb_build_object('n', g) from generate_series(1, $runs) g"
  psql "$u" -q -v ON_ERROR_STOP=1 -c "create procedure public.pair_cycle(p_limit integer) language plpgsql as \$\$
    declare v_ids uuid[]; v_tokens bigint[];
    begin
        select array_agg(c.id), array_agg(c.lease_token) into v_ids, v_tokens
        from workflow.claim_runs('w' || pg_backend_pid(), '{pair.}', null, p_limit, 30000) c;
        commit;
        if v_ids is not null then
            perform workflow.complete_runs('w' || pg_backend_pid(), v_ids, v_tokens,
                                           array_fill('{}'::jsonb, array[cardinality(v_ids)]));
        end if;
        commit;
    end \$\$"
  psql "$u" -q -c "vacuum analyze"
done
rm -f "$before"
script=$(mktemp)
echo "call public.pair_cycle($claim);" > "$script"
for p in $(seq "$pairs"); do
  for c in 1 4; do
    line="pair $p clients $c:"
    declare -A rate=()
    order="before after"
    [ $((p % 2)) = 0 ] && order="after before"
    for v in $order; do
      out=$("$pgbench" -n -c "$c" -j "$c" -t $((40000 / claim / c)) -f "$script" "$(db_url "pair_$v")" 2>&1)
      tps=$(echo "$out" | sed -nE 's/^tps = ([0-9.]+) .*/\1/p')
      [ -n "$tps" ] || { echo "$out" >&2; exit 1; }
      rate[$v]=$(echo "$tps * $claim" | bc)
    done
    echo "$line before ${rate[before]} after ${rate[after]} runs/s, ratio $(echo "scale=2; ${rate[after]} / ${rate[before]}" | bc)"
  done
done
rm -f "$script"
