# shellcheck shell=bash
# scripts/stack.sh's Replicated PostgreSQL: etcd, Patroni and HAProxy, a trio started, stopped, killed and waited for (ADR 010).
# Sourced by scripts/stack.sh, whose settings (ROOT, CACHE, the ports) it reads.

# --- The replicated PostgreSQL of `make up HA=1` and the failover tests (docs/adr/010) ---
# Three PostgreSQL 15 nodes managed by Patroni (PyPI) over one etcd (Debian), synchronous quorum
# commit `ANY 1 (two standbys)` in strict mode (no standby: commits wait, never asynchronous),
# and HAProxy (Debian) in front routing to whichever node Patroni's REST API calls the primary.
# Ports from BASE: HAProxy BASE (the read-write address every onsale process uses), node i's
# PostgreSQL BASE+i, its Patroni API BASE+20+i, etcd BASE+10 (peers BASE+11).
# Patroni runs as the postgres user, so its venv lives where that user can read it.
if [ "$(id -u)" = 0 ]; then PATRONI_VENV=${ONSALE_PATRONI_VENV:-/var/lib/onsale/patroni}; else PATRONI_VENV=${ONSALE_PATRONI_VENV:-$CACHE/patroni}; fi

ensure_ha() {
  local missing=()
  ensure_packages
  command -v etcd >/dev/null || missing+=(etcd-server)
  command -v haproxy >/dev/null || missing+=(haproxy)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  local req=$ROOT/scripts/ha/requirements.txt key
  key=$(sha256sum "$req" | cut -c1-12)
  if [ "$(cat "$PATRONI_VENV/.complete" 2>/dev/null)" != "$key" ] || ! as_pg "$PATRONI_VENV/bin/patroni" --version >/dev/null 2>&1; then
    echo "installing Patroni into $PATRONI_VENV" >&2
    rm -rf "$PATRONI_VENV"
    mkdir -p "$PATRONI_VENV"
    # Debian's Python: a venv of a Python under root's home would not run as postgres.
    /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null \
      || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    /usr/bin/python3 -m venv "$PATRONI_VENV" >&2
    "$PATRONI_VENV/bin/pip" install -q -r "$req" >&2
    echo "$key" >"$PATRONI_VENV/.complete"
    chmod -R a+rX "$PATRONI_VENV"
  fi
}

ha_node_conf() {
  local dir=$1 base=$2 i=$3 node=$1/pg-$3
  cat <<YAML
scope: onsale
namespace: /onsale-$base/
name: pg$i
log:
  dir: $node
  level: INFO
restapi:
  listen: 127.0.0.1:$((base + 20 + i))
  connect_address: 127.0.0.1:$((base + 20 + i))
etcd3:
  hosts: 127.0.0.1:$((base + 10))
bootstrap:
  dcs:
    # Patroni's floor for the leader lease is 20 s: a primary whose machine died is replaced
    # about that long after its agent last renewed it (loop_wait + 2 * retry_timeout <= ttl).
    ttl: 20
    loop_wait: 1
    retry_timeout: 9
    synchronous_mode: quorum
    synchronous_mode_strict: true
    synchronous_node_count: 1
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: logical
        synchronous_commit: "on"
        max_connections: ${PG_MAX_CONNECTIONS:-300}
        shared_buffers: 256MB
        max_wal_senders: 20
        max_replication_slots: 200
        wal_log_hints: "on"
        hot_standby: "on"
        log_min_messages: warning
  initdb:
    - encoding: UTF8
    - lc-collate: C
    - lc-ctype: C.UTF-8
    - auth: trust
  post_bootstrap: $dir/post-bootstrap.sh
postgresql:
  listen: 127.0.0.1:$((base + i))
  connect_address: 127.0.0.1:$((base + i))
  data_dir: $node/data
  bin_dir: $PG_BIN
  pgpass: $node/pgpass
  # A standby's clone starts at once (the default spread checkpoint takes minutes).
  basebackup:
    - checkpoint: fast
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: $node
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
YAML
}

ha_up() {
  local dir=$1 base=$2 i
  ensure_ha
  for p in $base $((base + 10)) $((base + 11)) $((base + 1)) $((base + 2)) $((base + 3)) $((base + 21)) $((base + 22)) $((base + 23)); do
    if (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "port $p is already in use; is another cluster running?" >&2
      return 1
    fi
  done
  mkdir -p "$dir/etcd"
  nohup etcd --name etcd1 --data-dir "$dir/etcd/data" \
    --listen-client-urls "http://127.0.0.1:$((base + 10))" --advertise-client-urls "http://127.0.0.1:$((base + 10))" \
    --listen-peer-urls "http://127.0.0.1:$((base + 11))" --initial-advertise-peer-urls "http://127.0.0.1:$((base + 11))" \
    --initial-cluster "etcd1=http://127.0.0.1:$((base + 11))" >"$dir/etcd/etcd.log" 2>&1 &
  echo $! >"$dir/etcd/pid"
  cat >"$dir/post-bootstrap.sh" <<'SH'
#!/bin/sh
# Patroni calls this once, on the first primary, with a connection string.
set -e
psql "$1" -qc "CREATE ROLE onsale LOGIN SUPERUSER"
psql "$1" -qc "CREATE DATABASE onsale OWNER onsale"
SH
  chmod a+rx "$dir/post-bootstrap.sh"
  for i in 1 2 3; do
    mkdir -p "$dir/pg-$i"
    ha_node_conf "$dir" "$base" "$i" >"$dir/pg-$i/patroni.yml"
  done
  if [ "$(id -u)" = 0 ]; then
    chown -R postgres:postgres "$dir"/pg-*
    # The postgres user must reach its nodes' directories (a mktemp parent is 0700).
    chmod o+x "$(dirname "$dir")" "$dir"
  fi
  cat >"$dir/haproxy.cfg" <<CFG
# The read-write address: the node whose Patroni answers 200 on /primary. A node marked down
# has its sessions cut, so no client keeps writing to a demoted or dead primary.
global
  maxconn 4000
  log stderr format raw local0 warning
defaults
  mode tcp
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 1s
listen primary
  bind 127.0.0.1:$base
  option httpchk GET /primary
  http-check expect status 200
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
  server pg1 127.0.0.1:$((base + 1)) maxconn 2000 check port $((base + 21))
  server pg2 127.0.0.1:$((base + 2)) maxconn 2000 check port $((base + 22))
  server pg3 127.0.0.1:$((base + 3)) maxconn 2000 check port $((base + 23))
CFG
  nohup haproxy -f "$dir/haproxy.cfg" -db >"$dir/haproxy.log" 2>&1 &
  echo $! >"$dir/haproxy.pid"
  # The first node bootstraps and becomes the primary; the others clone it.
  ha_start "$dir" 1
  ha_wait "$dir" primary 60 || return 1
  ha_start "$dir" 2
  ha_start "$dir" 3
  ha_wait "$dir" replicated 90 || return 1
  echo "postgresql HA: primary behind HAProxy on 127.0.0.1:$base, nodes on $((base + 1))-$((base + 3)), Patroni API $((base + 21))-$((base + 23)) (data in $dir)"
}

ha_base() { sed -n 's/^  bind 127.0.0.1://p' "$1/haproxy.cfg"; }

# Starts node I's Patroni (which starts its PostgreSQL: a returning old primary is rewound and
# rejoins as a standby).
ha_start() {
  local dir=$1 i=$2 node=$1/pg-$2
  [ -f "$node/patroni.yml" ] || { echo "no node $i in $dir" >&2; return 1; }
  if [ -f "$node/patroni.pid" ] && kill -0 "$(cat "$node/patroni.pid")" 2>/dev/null; then return 0; fi
  # The pid written is Patroni's own (not runuser's), so a kill reaches the agent.
  rm -f "$node/patroni.pid"
  as_pg sh -c 'echo $$ >"$1/patroni.pid"; exec "$2/bin/patroni" "$1/patroni.yml"' sh "$node" "$PATRONI_VENV" \
    >>"$node/patroni.out" 2>&1 </dev/null &
  for _ in $(seq 1 50); do [ -s "$node/patroni.pid" ] && return 0; sleep 0.1; done
  echo "node $i's Patroni did not start; see $node/patroni.out" >&2
  return 1
}

# The cluster as Patroni sees it (JSON), from the first API that answers.
ha_cluster() {
  local dir=$1 base i
  base=$(ha_base "$dir")
  for i in 1 2 3; do
    curl -fsS -m 1 "http://127.0.0.1:$((base + 20 + i))/cluster" 2>/dev/null && return 0
  done
  return 1
}

# The number of the node that is the running primary (empty if none).
ha_leader() {
  local dir=$1 base i
  base=$(ha_base "$dir")
  for i in 1 2 3; do
    if curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$((base + 20 + i))/primary" 2>/dev/null; then echo "$i"; return 0; fi
  done
}

# Waits (at most SECS) until: primary (a primary serves through HAProxy), replicated (a primary
# and two streaming standbys that Patroni's /sync key lists as quorum standbys: until it does, a
# primary killed would leave no standby Patroni may promote, and none would be).
ha_wait() {
  local dir=$1 what=$2 secs=${3:-60} base n
  base=$(ha_base "$dir")
  for _ in $(seq 1 $((secs * 5))); do
    if psql -h 127.0.0.1 -p "$base" -U postgres -d postgres -Atqc "SELECT NOT pg_is_in_recovery()" 2>/dev/null | grep -q t; then
      if [ "$what" = primary ]; then return 0; fi
      n=$(ha_cluster "$dir" | python3 -c 'import json,sys; print(sum(1 for m in json.load(sys.stdin)["members"] if m["role"] in ("quorum_standby","sync_standby") and m["state"] == "streaming"))' 2>/dev/null || echo 0)
      if [ "$n" -ge 2 ]; then return 0; fi
    fi
    sleep 0.2
  done
  echo "the replicated cluster is not $what after $secs s; see $dir/pg-*/patroni.log" >&2
  return 1
}

# The operator's drill: the current primary's machine dies. SIGKILL to its Patroni (so nothing
# restarts PostgreSQL in place) and to its postmaster and every backend (so a standby must be
# promoted). Says which node it killed.
ha_kill_primary() {
  local dir=$1 i
  i=$(ha_leader "$dir")
  [ -n "$i" ] || { echo "no primary is running in $dir" >&2; return 1; }
  ha_kill "$dir" "$i"
  echo "killed node $i (the primary): its Patroni and its PostgreSQL; bring it back with make start-db N=$i"
}

ha_kill() {
  local dir=$1 i=$2 node=$1/pg-$2 pm
  [ -f "$node/patroni.pid" ] && kill -9 "$(cat "$node/patroni.pid")" 2>/dev/null || true
  if [ -f "$node/data/postmaster.pid" ]; then
    pm=$(head -1 "$node/data/postmaster.pid")
    # Frozen first, so it forks nothing while its children are killed.
    kill -STOP "$pm" 2>/dev/null || true
    pkill -9 -P "$pm" 2>/dev/null || true
    kill -9 "$pm" 2>/dev/null || true
  fi
  rm -f "$node/patroni.pid"
}

# Stops node I cleanly (Patroni stops its PostgreSQL).
ha_stop() {
  local dir=$1 i=$2 node=$1/pg-$2 pid
  [ -f "$node/patroni.pid" ] || return 0
  pid=$(cat "$node/patroni.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$node/patroni.pid"
}

ha_down() {
  local dir=$1 i
  [ -d "$dir" ] || return 0
  for i in 1 2 3; do ha_kill "$dir" "$i"; done
  for f in "$dir/haproxy.pid" "$dir/etcd/pid"; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  rm -rf "$dir"
}
