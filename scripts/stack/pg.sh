# shellcheck shell=bash
# scripts/stack.sh's PostgreSQL from Debian's packages: a cluster, its standby (region b's), synchronous names, a rejoin by pg_rewind.
# Sourced by scripts/stack.sh, whose settings (ROOT, CACHE, the ports) it reads.

# postgres refuses to run as root: run it as the postgres user when we are root.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_up() {
  local dir=$1 port=$2
  ensure_packages
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
  # Text compares byte by byte (the "C" collation: memcmp and abbreviated keys instead of
  # strcoll, 9% of the projector's backends), in the same order as C.UTF-8's code points;
  # character classes stay UTF-8's (lower(), the search's word parsing).
  as_pg "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --lc-collate=C --lc-ctype=C.UTF-8 >"$dir/initdb.log" 2>&1
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
wal_level = logical
synchronous_commit = on
max_connections = ${PG_MAX_CONNECTIONS:-300}
shared_buffers = 256MB
# Each relay streams its slot on a walsender of its own (docs/adr/028), beside the standbys.
max_wal_senders = 40
max_replication_slots = 200
# Every peek of the relay's slot logs "starting logical decoding" at LOG.
log_min_messages = warning
CONF
  # A region's cluster may have to be rewound onto a promoted standby's timeline: pg_rewind
  # needs the hint bits logged, and the WAL since the last checkpoint the two timelines share.
  if [ "${PG_REWINDABLE:-0}" = 1 ]; then printf "wal_log_hints = on\nwal_keep_size = 1GB\n" >>"$dir/data/postgresql.conf"; fi
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null
  psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE ROLE onsale LOGIN SUPERUSER" >/dev/null
  psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE onsale OWNER onsale" >/dev/null
  echo "postgresql on 127.0.0.1:$port (data in $dir)"
}

# A standby of the cluster on `upstream`: its base backup with the WAL streamed, replaying
# and answering reads (hot standby), streaming as `name` (the name the upstream's
# synchronous_standby_names lists). Regions (docs/adr/024): region b's copy of region a's.
pg_standby_up() {
  local dir=$1 port=$2 upstream=$3 name=$4
  ensure_packages
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
  as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$upstream" -U onsale -D "$dir/data" \
    -X stream -R -c fast >"$dir/basebackup.log" 2>&1 || { cat "$dir/basebackup.log" >&2; return 1; }
  pg_local_conf "$dir" "$port" "$name"
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null
  echo "postgresql standby $name on 127.0.0.1:$port of :$upstream (data in $dir)"
}

# A copied data directory (a base backup, a rewind) carries its source's port, socket
# directory and standby settings: this cluster's own, streaming as `name`.
pg_local_conf() {
  local dir=$1 port=$2 name=$3
  cat >>"$dir/data/postgresql.conf" <<CONF
# This cluster's own (the lines above were copied from its upstream).
port = $port
unix_socket_directories = '$dir'
hot_standby = on
CONF
  # Only the writer waits for a synchronous standby; pg_basebackup -R and pg_rewind -R wrote
  # primary_conninfo: named, so the writer can list it.
  sed -i -e '/^synchronous_standby_names/d' \
    -e "s/^primary_conninfo = '/primary_conninfo = 'application_name=$name /" \
    "$dir/data/postgresql.auto.conf"
}

# The cluster on `port` commits synchronously to the standbys named (quoted list, '' for none).
pg_sync() {
  local port=$1 names=$2
  psql -h 127.0.0.1 -p "$port" -U onsale -d postgres -qAt \
    -c "ALTER SYSTEM SET synchronous_standby_names = '$names'" -c "SELECT pg_reload_conf()" >/dev/null
}

# The old writer's cluster rejoins as a standby of the new writer on `writer`: stopped,
# rewound onto the writer's timeline (what it wrote past the split, never acknowledged under
# synchronous commit, is thrown away), and following it as `name`.
pg_rejoin() {
  local dir=$1 port=$2 writer=$3 name=$4
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
  fi
  # A writer promoted moments ago names its timeline in its control file at its next
  # checkpoint: without one, pg_rewind sees one timeline and rewinds nothing.
  psql -h 127.0.0.1 -p "$writer" -U onsale -d postgres -qc CHECKPOINT
  as_pg "$PG_BIN/pg_rewind" -D "$dir/data" -R \
    --source-server="host=127.0.0.1 port=$writer user=onsale dbname=postgres" >"$dir/rewind.log" 2>&1 \
    || { cat "$dir/rewind.log" >&2; return 1; }
  pg_local_conf "$dir" "$port" "$name"
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null
  echo "postgresql on 127.0.0.1:$port follows :$writer as $name"
}

pg_stop() {
  local dir=$1 mode=${2:-fast}
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m "$mode" -w stop >/dev/null || true
  fi
}

pg_start() {
  local dir=$1
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null
}

# Region a's cluster and region b's synchronous standby of it: every commit in a is flushed in
# b before it is acknowledged (docs/adr/024).
region_pair_up() {
  local dir=$1 a=$2 b=$3
  PG_REWINDABLE=1 pg_up "$dir/a" "$a" >/dev/null
  pg_standby_up "$dir/b" "$b" "$a" b_main >/dev/null
  pg_sync "$a" '"b_main"'
  echo "region a on :$a, region b's standby on :$b (synchronous)"
}

pg_restart() {
  local dir=$1
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -m fast -w -t 60 restart >/dev/null
}

pg_down() {
  local dir=$1
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
  fi
  rm -rf "$dir"
}
