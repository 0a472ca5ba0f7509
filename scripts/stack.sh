#!/usr/bin/env bash
# The local stack, started from Debian's binaries: a throwaway PostgreSQL cluster (and, with
# `up`, the onsale service). Installs what is missing with apt.
#
#   scripts/stack.sh pg-up DIR PORT     start a cluster in DIR on 127.0.0.1:PORT
#   scripts/stack.sh pg-down DIR        stop it and remove DIR
#   scripts/stack.sh up                 cluster + service on the default ports (make up)
#   scripts/stack.sh down               stop everything `up` started (make down)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STACK_DIR=${ONSALE_STACK_DIR:-/tmp/onsale-stack}
PG_PORT=${ONSALE_PG_PORT:-54329}
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
PG_BIN=/usr/lib/postgresql/15/bin

ensure_packages() {
  local missing=()
  # postgresql-15 also brings pgbench (make bench-holds); the client brings psql.
  [ -x "$PG_BIN/postgres" ] || missing+=(postgresql-15)
  command -v psql >/dev/null || missing+=(postgresql-client-15)
  command -v curl >/dev/null || missing+=(curl)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# postgres refuses to run as root: run it as the postgres user when we are root.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_up() {
  local dir=$1 port=$2
  ensure_packages
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
  as_pg "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
wal_level = logical
synchronous_commit = on
max_connections = ${PG_MAX_CONNECTIONS:-300}
shared_buffers = 256MB
max_wal_senders = 10
max_replication_slots = 10
CONF
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null
  psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE ROLE onsale LOGIN SUPERUSER" >/dev/null
  psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE onsale OWNER onsale" >/dev/null
  echo "postgresql on 127.0.0.1:$port (data in $dir)"
}

pg_down() {
  local dir=$1
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
  fi
  rm -rf "$dir"
}

up() {
  if [ -d "$STACK_DIR" ]; then down; fi
  pg_up "$STACK_DIR" "$PG_PORT"
  (cd "$ROOT" && cargo build --release -q -p onsale-command)
  DATABASE_URL="postgres://onsale@127.0.0.1:$PG_PORT/onsale" ONSALE_LISTEN=$LISTEN RUST_LOG=${RUST_LOG:-warn} \
    nohup "$ROOT/target/release/onsale" serve >"$STACK_DIR/onsale.log" 2>&1 &
  echo $! >"$STACK_DIR/onsale.pid"
  for _ in $(seq 1 120); do
    if curl -fsS "http://$LISTEN/readyz" >/dev/null 2>&1; then
      echo "onsale ready on http://$LISTEN"
      return 0
    fi
    sleep 0.5
  done
  echo "onsale did not become ready; see $STACK_DIR/onsale.log" >&2
  tail -20 "$STACK_DIR/onsale.log" >&2 || true
  return 1
}

down() {
  if [ -f "$STACK_DIR/onsale.pid" ]; then
    kill "$(cat "$STACK_DIR/onsale.pid")" 2>/dev/null || true
    sleep 0.5
  fi
  pg_down "$STACK_DIR"
  echo "stack stopped"
}

case "${1:-}" in
  pg-up) pg_up "$2" "$3" ;;
  pg-down) pg_down "$2" ;;
  up) up ;;
  down) down ;;
  *) echo "usage: $0 pg-up DIR PORT | pg-down DIR | up | down" >&2; exit 2 ;;
esac
