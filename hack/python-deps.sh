#!/usr/bin/env bash
# Prints the Python interpreter that has psycopg 3, installing Debian's
# python3-psycopg with apt-get when it is missing and the script runs as root.
set -euo pipefail
for py in /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import psycopg' 2>/dev/null; then
    command -v "$py"
    exit 0
  fi
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "python-deps.sh: installing Debian's python3-psycopg" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-psycopg >/dev/null) >&2
  if /usr/bin/python3 -c 'import psycopg' 2>/dev/null; then
    echo /usr/bin/python3
    exit 0
  fi
fi
echo "python-deps.sh: psycopg 3 for Python is missing; install python3-psycopg" >&2
exit 1
