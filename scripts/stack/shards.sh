# shellcheck shell=bash
# scripts/stack.sh's Shards: each write cluster's port and URL, killed and started for the drill (ADR 021).
# Sourced by scripts/stack.sh, whose settings (ROOT, CACHE, the ports) it reads.

# The bootstrap list of `up`'s brokers.
brokers_list() {
  local i list=""
  for i in $(seq 1 "$BROKERS"); do list="$list${list:+,}127.0.0.1:$(broker_port "$i" "$KAFKA_PORT")"; done
  echo "$list"
}

# Where shard I's clients connect: its PostgreSQL, or with HA=1 its trio's HAProxy.
shard_port() {
  if [ "${HA:-0}" = 1 ]; then echo $((SHARD_HA_BASE + 30 * ($1 - 1))); else echo $((SHARD_PG_BASE + $1)); fi
}

# The write clusters of `up SHARDS=n` (empty for one: the main database is the only shard), as
# login $1 (the schema's owner by default; the processes' is $NODE_LOGIN).
shard_urls() {
  local i list="" login=${1:-onsale}
  if [ "$SHARDS" -gt 1 ]; then
    for i in $(seq 1 "$SHARDS"); do
      list="$list${list:+,}postgres://$login@127.0.0.1:$(shard_port "$i")/onsale"
    done
  fi
  echo "$list"
}

# The operator's drill on `make up SHARDS=n`: shard I's primary dies. With HA=1, SIGKILL to the
# trio's primary (Patroni promotes a standby); without, SIGKILL to the shard's postmaster and
# every backend (nothing serves the shard until `start-shard I`).
shard_kill() {
  local i=$1 dir=$STACK_DIR/shard$1 pm
  if [ -d "$dir/ha" ]; then
    ha_kill_primary "$dir/ha" >/dev/null
    echo "killed shard $i's primary; Patroni promotes a standby (make start-shard N=$i brings the node back)"
    return 0
  fi
  [ -f "$dir/data/postmaster.pid" ] || { echo "shard $i is not running" >&2; return 1; }
  pm=$(head -1 "$dir/data/postmaster.pid")
  kill -STOP "$pm" 2>/dev/null || true
  pkill -9 -P "$pm" 2>/dev/null || true
  kill -9 "$pm" 2>/dev/null || true
  echo "killed shard $i's PostgreSQL (postmaster $pm); make start-shard N=$i starts it again"
}

# Shard I back: its PostgreSQL started again (crash recovery), or with HA=1 every node of its
# trio that is down started again (a returning old primary rejoins as a standby).
shard_start() {
  local i=$1 dir=$STACK_DIR/shard$1 n
  if [ -d "$dir/ha" ]; then
    for n in 1 2 3; do ha_start "$dir/ha" "$n"; done
    ha_wait "$dir/ha" replicated 90
    echo "shard $i: a primary and two streaming standbys"
    return 0
  fi
  [ -d "$dir/data" ] || { echo "no shard $i in $STACK_DIR" >&2; return 1; }
  rm -f "$dir/data/postmaster.pid"
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null
  echo "shard $i: postgresql on 127.0.0.1:$(shard_port "$i") again"
}

# Starts one onsale process in the background: NAME ARGS...
# Becomes the command (exec: in a background subshell `$!` is then the command's own pid), with
# ONSALE_SHARD_URLS set to $1 only when that lists shards: set but empty, it would name one
# shard at an empty address.
with_shards() {
  local urls=$1
  shift
  if [ -n "$urls" ]; then ONSALE_SHARD_URLS=$urls exec "$@"; else exec env -u ONSALE_SHARD_URLS "$@"; fi
}
