#!/usr/bin/env bash
# Generates the typed query methods of internal/engine/queries (sqlc.yaml):
# starts a throwaway PostgreSQL (hack/pg.sh), installs the schema file in
# one transaction, runs sqlc against it, and stops the server.
#
#   hack/gen-queries.sh SQLC
set -euo pipefail
sqlc=${1:?usage: hack/gen-queries.sh SQLC}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/sw-gen-queries.XXXXXX")
trap 'bash "$root/hack/pg.sh" stop "$dir" >/dev/null 2>&1 || true' EXIT
psql=$(command -v psql || ls -d /usr/lib/postgresql/*/bin/psql | sort -V | tail -1)
url=$(PG_FSYNC=off bash "$root/hack/pg.sh" start "$dir")
PGOPTIONS="-c client_min_messages=warning" "$psql" "$url" -q -X -v ON_ERROR_STOP=1 --single-transaction -f "$root/internal/engine/sql/workflow.sql" >/dev/null
cd "$root"
SQLC_DATABASE_URL=$url "$sqlc" generate
