#!/usr/bin/env bash
# Starts and stops a throwaway PostgreSQL cluster for tests, benchmarks and the
# local demo.
#
#   hack/pg.sh start DIR [--watch PID]   initdb (once) and start a server whose
#                                        data and socket live in DIR; prints the
#                                        connection URL on stdout. With --watch,
#                                        the server is stopped when PID exits.
#   hack/pg.sh stop DIR                  stop the server and remove DIR.
#   hack/pg.sh restart DIR               crash-restart it (pg_ctl restart -m
#                                        immediate), same port, for outage tests.
#   hack/pg.sh halt DIR                  stop the server, keeping its files.
#   hack/pg.sh resume DIR                start a halted server on its port.
#   hack/pg.sh pause DIR SECONDS         freeze every server process (SIGSTOP)
#                                        for SECONDS, then let them go on.
#
# The server binaries are taken from PATH or /usr/lib/postgresql/*/bin; when
# they are missing and the script runs as root, Debian's postgresql package is
# installed with apt-get. As root, the server runs as the "postgres" user.
# PG_FSYNC=off trades durability for speed (tests only; the default is on).
# PG_EXTRA_OPTS adds server options (e.g. "-c shared_preload_libraries=pg_stat_statements").
set -euo pipefail

log() { printf 'pg.sh: %s\n' "$*" >&2; }

find_bindir() {
  if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"
    return 0
  fi
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/pg_ctl" ] && [ -x "$d/initdb" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

ensure_bindir() {
  local d
  if d=$(find_bindir); then
    echo "$d"
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "PostgreSQL server binaries not found; installing Debian's postgresql package"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) >&2
    if d=$(find_bindir); then
      echo "$d"
      return 0
    fi
  fi
  log "PostgreSQL server binaries (initdb, pg_ctl) not found; install PostgreSQL or set DATABASE_URL"
  return 1
}

free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  else
    echo $((20000 + RANDOM % 30000))
  fi
}

# as_owner runs a command as the user owning the cluster (postgres when root).
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# server_opts are the server's options on a port, its socket in a directory.
server_opts() {
  echo "-p $1 -k $2 -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=${PG_FSYNC:-on} -c shared_buffers=256MB ${PG_EXTRA_OPTS:-}"
}

start() {
  local dir=$1 watch=${2:-}
  local bindir port
  bindir=$(ensure_bindir)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local state=$dir
  if [ "$(id -u)" = 0 ]; then
    # The server runs as postgres, which may not be able to reach DIR: keep the
    # cluster in a directory of its own and remember where.
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    if [ -f "$dir/cluster" ]; then
      dir=$(cat "$state/cluster")
    else
      dir=$(mktemp -d /tmp/simple-workflow-pg.XXXXXX)
      chmod 0755 "$dir"
      chown postgres "$dir"
      echo "$dir" >"$state/cluster"
    fi
  fi
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_owner "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; return 1; }
  fi
  local tries=0
  while :; do
    port=$(free_port)
    if as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "$(server_opts "$port" "$dir")" start >/dev/null 2>&1; then
      break
    fi
    tries=$((tries + 1))
    if [ $tries -ge 5 ]; then
      tail -n 20 "$dir/server.log" >&2 || true
      log "could not start PostgreSQL"
      return 1
    fi
  done
  echo "$port" >"$state/port"
  if [ -n "$watch" ]; then
    # Stop the server when the watched process goes away, even if it was killed.
    (
      trap '' HUP INT
      while kill -0 "$watch" 2>/dev/null; do sleep 1; done
      as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
      rm -rf "$dir" "$state"
    ) </dev/null >/dev/null 2>&1 &
  fi
  echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
}

stop() {
  local dir=$1 state=$1 bindir
  [ -d "$dir" ] || return 0
  [ -f "$state/cluster" ] && dir=$(cat "$state/cluster")
  if [ -f "$dir/data/postmaster.pid" ] && bindir=$(find_bindir); then
    as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir" "$state"
}

cluster_dir() {
  local dir=$1
  [ -f "$dir/cluster" ] && dir=$(cat "$dir/cluster")
  echo "$dir"
}

restart() {
  local dir bindir
  dir=$(cluster_dir "$1")
  bindir=$(find_bindir)
  as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m immediate -w -t 60 restart >/dev/null
}

# halt stops the server and keeps its files (resume starts it again).
halt() {
  local dir bindir
  dir=$(cluster_dir "$1")
  bindir=$(find_bindir)
  as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
}

# resume starts a halted server again on its port.
resume() {
  local dir bindir port
  dir=$(cluster_dir "$1")
  bindir=$(find_bindir)
  port=$(cat "$1/port")
  as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$(server_opts "$port" "$dir")" start >/dev/null
}

pause() {
  local dir pid pids
  dir=$(cluster_dir "$1")
  pid=$(head -n 1 "$dir/data/postmaster.pid")
  pids="$pid $(pgrep -P "$pid" | tr '\n' ' ')"
  # shellcheck disable=SC2086
  kill -STOP $pids
  sleep "$2"
  # shellcheck disable=SC2086
  kill -CONT $pids
}

case "${1:-}" in
start)
  [ $# -ge 2 ] || { log "usage: $0 start DIR [--watch PID]"; exit 2; }
  if [ "${3:-}" = "--watch" ]; then start "$2" "${4:?--watch needs a PID}"; else start "$2"; fi
  ;;
stop)
  [ $# -ge 2 ] || { log "usage: $0 stop DIR"; exit 2; }
  stop "$2"
  ;;
restart)
  [ $# -ge 2 ] || { log "usage: $0 restart DIR"; exit 2; }
  restart "$2"
  ;;
halt)
  [ $# -ge 2 ] || { log "usage: $0 halt DIR"; exit 2; }
  halt "$2"
  ;;
resume)
  [ $# -ge 2 ] || { log "usage: $0 resume DIR"; exit 2; }
  resume "$2"
  ;;
pause)
  [ $# -ge 3 ] || { log "usage: $0 pause DIR SECONDS"; exit 2; }
  pause "$2" "$3"
  ;;
*)
  log "usage: $0 start DIR [--watch PID] | stop DIR | restart DIR | halt DIR | resume DIR | pause DIR SECONDS"
  exit 2
  ;;
esac
