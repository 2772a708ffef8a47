#!/usr/bin/env bash
# Prints the Python interpreter that has psycopg 3, installing Debian's
# python3-psycopg with apt-get when it is missing and the script runs as root.
#
#   usage: hack/python-deps.sh [--dev]
#   --dev: also the SDK's test tools for /usr/bin/python3 (Debian's
#          python3-venv for the install test, python3-mypy for the type
#          check, black for the formatting check of make lint), when
#          missing and the script runs as root; their tests skip, saying
#          why, where they cannot be installed.
set -euo pipefail
dev=false
[ "${1:-}" = --dev ] && dev=true

apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  echo "python-deps.sh: installing Debian's $*" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null) >&2
}

py=""
for cand in /usr/bin/python3 python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import psycopg' 2>/dev/null; then
    py=$(command -v "$cand")
    break
  fi
done
if [ -z "$py" ] && apt_install python3-psycopg && /usr/bin/python3 -c 'import psycopg' 2>/dev/null; then
  py=/usr/bin/python3
fi
if [ -z "$py" ]; then
  echo "python-deps.sh: psycopg 3 for Python is missing; install python3-psycopg" >&2
  exit 1
fi

if $dev && [ "$py" = /usr/bin/python3 ]; then
  missing=()
  # Debian's python3 has ensurepip (which venv needs for pip) only with python3-venv.
  "$py" -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
  "$py" -c 'import mypy' 2>/dev/null || missing+=(python3-mypy)
  command -v black >/dev/null 2>&1 || missing+=(black)
  if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}" || echo "python-deps.sh: ${missing[*]} missing; their tests skip" >&2
  fi
fi
echo "$py"
