#!/usr/bin/env bash
# The local stack, started from local binaries: a throwaway PostgreSQL cluster from Debian's
# packages, Apache Kafka in KRaft mode (its jars from Maven Central, pinned in
# kafka/broker/pom.xml and cached outside the repo), Redis, and with `up` the onsale processes.
# Installs what is missing (apt packages, Java and Maven, the broker's jars).
#
#   scripts/stack.sh pg-up DIR PORT          start a cluster in DIR on 127.0.0.1:PORT
#   scripts/stack.sh pg-down DIR             stop it and remove DIR
#   scripts/stack.sh pg-restart DIR          restart it (fast shutdown), keeping its data
#   scripts/stack.sh pg-stop DIR [MODE]      stop it (fast, or immediate: a crash), keeping its data
#   scripts/stack.sh pg-start DIR            start it again as its data directory says
#   scripts/stack.sh pg-standby-up DIR PORT UPSTREAM NAME   a standby of the cluster on UPSTREAM,
#                                            streaming as NAME (docs/adr/024)
#   scripts/stack.sh pg-sync PORT NAMES      the cluster on PORT commits synchronously to NAMES ('' : none)
#   scripts/stack.sh pg-rejoin DIR PORT WRITER NAME   rewind DIR's cluster onto the writer on
#                                            WRITER (pg_rewind) and follow it as NAME
#   scripts/stack.sh region-pair-up DIR PORT_A PORT_B  region a's cluster and region b's standby
#                                            of it (synchronous), in DIR/a and DIR/b
#   scripts/stack.sh broker-up DIR PORT [N]  format and start N brokers (default 1) on PORT..
#   scripts/stack.sh broker-start DIR I [nowait]  start broker I again, its data kept
#   scripts/stack.sh broker-wait DIR I       wait (60 s at most) until broker I serves
#   scripts/stack.sh broker-kill DIR I       SIGKILL broker I
#   scripts/stack.sh broker-down DIR         stop every broker of DIR
#   scripts/stack.sh broker-lib              resolve the broker's jars if missing, print their dir
#   scripts/stack.sh secure-up DIR KPORT RPORT  a broker (TLS, SCRAM users, ACLs) and a Redis (TLS,
#                                            a user) in DIR; prints what a client needs (DIR/client.env)
#   scripts/stack.sh py-tools                install grpcio-tools, duckdb, confluent-kafka if missing, print the python
#   scripts/stack.sh fuzz-tools              install schemathesis if missing, print its command
#   scripts/stack.sh prom-tools              install promtool (Debian's prometheus) if missing, print its command
#   scripts/stack.sh browser-tools           install Debian's Chromium if missing, print its command
#   scripts/stack.sh prom-up DIR PORT TARGETS [SECS]  a Prometheus on PORT scraping TARGETS' /metrics (host:port,...)
#                                            every SECS (1) with telemetry/alerts loaded
#   scripts/stack.sh prom-down DIR           stop it
#   scripts/stack.sh zipkin-tools            resolve Zipkin's server jar if missing, print its path
#   scripts/stack.sh zipkin-up DIR PORT      a Zipkin on PORT (spans in memory); zipkin-down DIR stops it
#   scripts/stack.sh ha-tools                install etcd, HAProxy and Patroni if missing
#   scripts/stack.sh ha-up DIR BASE          replicated PostgreSQL (3 nodes, Patroni, HAProxy on BASE)
#   scripts/stack.sh ha-down DIR             stop it and remove DIR
#   scripts/stack.sh ha-start|ha-stop|ha-kill DIR I   start, stop cleanly, SIGKILL node I
#   scripts/stack.sh ha-kill-primary DIR     SIGKILL the primary's node (prints which)
#   scripts/stack.sh ha-leader DIR           the primary's node number
#   scripts/stack.sh ha-wait DIR primary|replicated [SECS]
#   scripts/stack.sh up                      everything on the default ports (make up [BROKERS=3] [HA=1] [NODES=3] [SHARDS=2] [TRACING=1] [REGIONS=2] [SECURE=1])
#   scripts/stack.sh fail-region a|b         REGIONS=2: the region goes dark (its processes, PostgreSQL and Kafka stopped)
#   scripts/stack.sh promote-region a|b      REGIONS=2: `onsale region promote` on that region's databases
#   scripts/stack.sh rejoin-region a|b       REGIONS=2: the dark region comes back as the writer's standby
#   scripts/stack.sh toxiproxy-tools         build Toxiproxy's server (a Go module) if missing, print its path
#   scripts/stack.sh kill-node|stop-node|cont-node|start-node I   node I of `up NODES=n`
#   scripts/stack.sh router-up DIR LISTEN GRPC N HTTP_BASE GRPC_BASE   HAProxy over N nodes
#   scripts/stack.sh kill-broker I           SIGKILL broker I of `up` (make kill-broker N=I)
#   scripts/stack.sh start-broker I          bring it back (make start-broker N=I)
#   scripts/stack.sh kill-primary            HA=1: SIGKILL the primary's node (make kill-primary)
#   scripts/stack.sh start-db I              HA=1: start node I again, wait until replicated (make start-db N=I)
#   scripts/stack.sh restart-onsale          restart `up`'s onsale processes (one node) with the caller's environment
#   scripts/stack.sh down                    stop everything `up` started (make down)
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STACK_DIR=${ONSALE_STACK_DIR:-/tmp/onsale-stack}
PG_PORT=${ONSALE_PG_PORT:-54329}
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
GRPC_LISTEN=${ONSALE_GRPC_LISTEN:-127.0.0.1:50051}
KAFKA_PORT=${ONSALE_KAFKA_PORT:-19092}
PROCESSOR_LISTEN=${ONSALE_PROCESSOR_LISTEN:-127.0.0.1:8090}
# The local stack's Prometheus (the alerting rules evaluated; the ops console asks it).
PROM_PORT=${ONSALE_PROM_PORT:-9090}
REDIS_PORT=${ONSALE_REDIS_PORT:-16379}
# `make up TRACING=1`: Zipkin, where every process sends its spans.
ZIPKIN_PORT=${ONSALE_ZIPKIN_PORT:-9411}
PG_BIN=/usr/lib/postgresql/15/bin
CACHE=${ONSALE_CACHE:-$HOME/.cache/onsale}
# The login `serve`, `relay` and `project` use: a member of onsale_app and nothing more, admitted
# by `onsale migrate` (the owner's job; `onsale` is the schema's owner here).
NODE_LOGIN=${ONSALE_NODE_LOGIN:-onsale_node}
# The identity provider `up` starts (scripts/oidc), whose tokens onsale takes beside the
# development sign-in's.
OIDC_PORT=${ONSALE_OIDC_PORT:-9300}
# The Python gRPC tools of the tests live in a venv outside the repo.
VENV=$CACHE/venv
# `make up BROKERS=3`: a cluster of three.
BROKERS=${BROKERS:-1}
# `make up NODES=3`: three `onsale serve` behind the router on LISTEN/GRPC_LISTEN.
NODES=${NODES:-1}
# `make up SHARDS=2`: the shows' write path on two PostgreSQL clusters of their own (ports
# SHARD_PG_BASE+1, +2, ...), the directory and the read models on PG_PORT (docs/adr/021). With
# HA=1 each shard is a Patroni trio of its own behind its own HAProxy port (SHARD_HA_BASE,
# +30, ...: a trio takes 24 ports above its base).
SHARDS=${SHARDS:-1}
SHARD_PG_BASE=${ONSALE_SHARD_PG_BASE:-54340}
SHARD_HA_BASE=${ONSALE_SHARD_HA_BASE:-54430}
NODE_HTTP_BASE=${ONSALE_NODE_HTTP_BASE:-8180}
# `make up REGIONS=2` (docs/adr/024): region b, a standby of region a on the same machine: its
# PostgreSQL clusters stream from a's through Toxiproxy (REGION_DELAY_MS each way: the
# distance between the regions), its own Kafka (MirrorMaker 2 copies a's topic into it), Redis
# and onsale processes, which stand by until b is promoted. The region router on REGION_LISTEN
# sends every request to the region that writes.
REGIONS=${REGIONS:-1}
REGION_DELAY_MS=${REGION_DELAY_MS:-5}
REGION_LISTEN=${ONSALE_REGION_LISTEN:-127.0.0.1:8070}
REGION_B_LISTEN=${ONSALE_REGION_B_LISTEN:-127.0.0.1:8081}
REGION_B_GRPC=${ONSALE_REGION_B_GRPC:-127.0.0.1:50052}
REGION_B_PG_PORT=${ONSALE_REGION_B_PG_PORT:-54529}
REGION_B_KAFKA_PORT=${ONSALE_REGION_B_KAFKA_PORT:-19192}
REGION_B_REDIS_PORT=${ONSALE_REGION_B_REDIS_PORT:-16479}
# Where region b reaches region a's clusters (Toxiproxy's listeners): a's port plus this.
REGION_LINK_OFFSET=300
TOXIPROXY_API=${ONSALE_TOXIPROXY_API:-127.0.0.1:8474}
NODE_GRPC_BASE=${ONSALE_NODE_GRPC_BASE:-50150}
# Node i's internal listener (commands other nodes forward to it): never behind the router.
NODE_INTERNAL_BASE=${ONSALE_NODE_INTERNAL_BASE:-8280}

# Each component's functions, in scripts/stack/: PostgreSQL, Kafka, Redis, the secure pair,
# Patroni, the router and its nodes, shards, regions, and the tools installed on first use.
for part in "$ROOT"/scripts/stack/*.sh; do
  # shellcheck source=/dev/null
  . "$part"
done

ensure_packages() {
  local missing=()
  # postgresql-15 also brings pgbench (make bench-holds); the client brings psql.
  [ -x "$PG_BIN/postgres" ] || missing+=(postgresql-15)
  command -v psql >/dev/null || missing+=(postgresql-client-15)
  command -v curl >/dev/null || missing+=(curl)
  # The certificates of `up SECURE=1` and the tests' secure broker and Redis.
  command -v openssl >/dev/null || missing+=(openssl)
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

# The operator's job before the processes start (issue 53, item 6): the migrations on every
# cluster, the processes' login admitted (a member of onsale_app and nothing more), the region
# recorded as the writer; as the schema's owner.
migrate_onsale() {
  (DATABASE_URL="postgres://onsale@127.0.0.1:$PG_PORT/onsale" ONSALE_DEV_MODE=1 \
    with_shards "$(shard_urls)" "$ROOT/target/release/onsale" migrate --login-role "$NODE_LOGIN") >/dev/null
  # The key the jobs sign the log's checkpoints with (into $STACK_DIR/checkpoints; its public
  # key in checkpoint.pub, for `onsale audit verify --checkpoint ... --public-key`).
  [ -f "$STACK_DIR/checkpoint.p8" ] ||
    "$ROOT/target/release/onsale" audit keygen --out "$STACK_DIR/checkpoint.p8" >"$STACK_DIR/checkpoint.pub" 2>/dev/null
}

start_onsale() {
  local name=$1 redis="redis://127.0.0.1:$REDIS_PORT/" secure=()
  shift
  # SECURE=1: Kafka as the relay's user (writes the topic) or the readers' (reads it), and
  # Redis over TLS with its password.
  if [ "${SECURE:-0}" = 1 ]; then
    # shellcheck disable=SC1091
    . "$STACK_DIR/secure.env"
    local user=onsale-node password=$KAFKA_NODE_PASSWORD
    if [ "$1" = relay ]; then user=onsale-relay password=$KAFKA_RELAY_PASSWORD; fi
    redis="rediss://onsale:$REDIS_PASSWORD@127.0.0.1:$REDIS_PORT/"
    secure=(ONSALE_KAFKA_SECURITY_PROTOCOL=sasl_ssl "ONSALE_KAFKA_SASL_USERNAME=$user"
      "ONSALE_KAFKA_SASL_PASSWORD=$password" "ONSALE_KAFKA_CA_FILE=$STACK_DIR/tls/ca.pem"
      "ONSALE_REDIS_CA_FILE=$STACK_DIR/tls/ca.pem")
  fi
  DATABASE_URL="postgres://$NODE_LOGIN@127.0.0.1:$PG_PORT/onsale" \
    ONSALE_KAFKA_BROKERS="$(brokers_list)" \
    ONSALE_EVENTS_REPLICATION=$((BROKERS >= 3 ? 3 : 1)) \
    ONSALE_REDIS_URL="$redis" \
    ONSALE_LISTEN=$LISTEN ONSALE_GRPC_LISTEN=$GRPC_LISTEN RUST_LOG=${RUST_LOG:-warn} \
    ONSALE_WEB_DIR="$ROOT/web/dist" ONSALE_PROMETHEUS_URL="http://127.0.0.1:$PROM_PORT" \
    ONSALE_CHECKPOINT_DIR="$STACK_DIR/checkpoints" ONSALE_CHECKPOINT_KEY_FILE="$STACK_DIR/checkpoint.p8" \
    ONSALE_JWKS_URL="http://127.0.0.1:$OIDC_PORT/jwks" ONSALE_JWKS_ISSUER="http://127.0.0.1:$OIDC_PORT" \
    with_shards "$(shard_urls "$NODE_LOGIN")" env "${secure[@]}" nohup "$ROOT/target/release/onsale" "$@" >"$STACK_DIR/$name.log" 2>&1 &
  echo $! >"$STACK_DIR/$name.pid"
}

up() {
  if [ -d "$STACK_DIR" ]; then down; fi
  if [ "${SECURE:-0}" = 1 ] && [ "$REGIONS" -gt 1 ]; then
    echo "SECURE=1 runs one region (MirrorMaker 2 and region b are not set up with credentials)" >&2
    return 1
  fi
  # Region a's clusters may have to be rewound onto region b's after a failover.
  [ "$REGIONS" -gt 1 ] && export PG_REWINDABLE=1
  if [ "${HA:-0}" = 1 ]; then
    mkdir -p "$STACK_DIR"
    ha_up "$STACK_DIR/ha" "$PG_PORT"
  else
    pg_up "$STACK_DIR" "$PG_PORT"
  fi
  local shard
  if [ "$SHARDS" -gt 1 ]; then
    for shard in $(seq 1 "$SHARDS"); do
      if [ "${HA:-0}" = 1 ]; then
        mkdir -p "$STACK_DIR/shard$shard"
        ha_up "$STACK_DIR/shard$shard/ha" "$(shard_port "$shard")"
      else
        pg_up "$STACK_DIR/shard$shard" "$(shard_port "$shard")"
      fi
    done
  fi
  if [ "${SECURE:-0}" = 1 ]; then
    # Kafka and Redis only over TLS with credentials (issue 53 item 7): the certificates and
    # passwords in $STACK_DIR/tls and $STACK_DIR/secure.env, the topic's ACLs set.
    secure_material "$STACK_DIR"
    KAFKA_SECURE=$STACK_DIR broker_up "$STACK_DIR" "$KAFKA_PORT" "$BROKERS"
    kafka_acls "$STACK_DIR" "$(brokers_list)" onsale.events
    REDIS_SECURE=$STACK_DIR redis_up "$STACK_DIR" "$REDIS_PORT"
  else
    broker_up "$STACK_DIR" "$KAFKA_PORT" "$BROKERS"
    redis_up "$STACK_DIR" "$REDIS_PORT"
  fi
  if [ "${TRACING:-0}" = 1 ]; then
    # Every onsale process exports its spans there; TRACE_SAMPLE of the requests are traced
    # (and every request that sends a sampled traceparent).
    zipkin_up "$STACK_DIR" "$ZIPKIN_PORT"
    export ONSALE_TRACE_ZIPKIN_URL="http://127.0.0.1:$ZIPKIN_PORT/api/v2/spans"
    export ONSALE_TRACE_SAMPLE=${TRACE_SAMPLE:-0.1}
  fi
  (cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
  migrate_onsale
  oidc_up "$STACK_DIR/oidc"
  # The fan app, served by onsale at / (npm and the generated clients: scripts/web.sh).
  ONSALE_BIN="$ROOT/target/release/onsale" "$ROOT/scripts/web.sh" >/dev/null
  # The card-processor simulator (the one simulated part), webhooks to the service.
  # With two regions its webhooks go through the region router, to whichever region writes.
  local hooks=$LISTEN
  [ "$REGIONS" -gt 1 ] && hooks=$REGION_LISTEN
  PROCESSOR_LISTEN=$PROCESSOR_LISTEN PROCESSOR_WEBHOOK_URL="http://$hooks/v1/webhooks/processor" \
    nohup "$ROOT/target/release/onsale-processor-sim" >"$STACK_DIR/processor.log" 2>&1 &
  echo $! >"$STACK_DIR/processor.pid"
  local targets=$LISTEN
  if [ "$NODES" -gt 1 ]; then
    targets=$(for i in $(seq 1 "$NODES"); do node_http "$i"; done | paste -sd,)
  fi
  prom_up "$STACK_DIR" "$PROM_PORT" "$targets" 5 >/dev/null
  if [ "$NODES" -gt 1 ]; then
    local i
    for i in $(seq 1 "$NODES"); do node_start "$i"; done
    router_up "$STACK_DIR" "$LISTEN" "$GRPC_LISTEN" "$NODES" "$NODE_HTTP_BASE" "$NODE_GRPC_BASE"
    # A hot standby of the relay (one publishes), and two projection processes sharing the
    # partitions.
    start_onsale relay relay --metrics-listen 127.0.0.1:9101
    start_onsale relay2 relay --metrics-listen 127.0.0.1:9111
    start_onsale project project --metrics-listen 127.0.0.1:9102
    start_onsale project2 project --metrics-listen 127.0.0.1:9112
  else
    start_one_node
  fi
  # Every process started above, with where it says it is ready: `up` returns only when all
  # are (a process that exited, or is not ready within a minute, is named with its log).
  local checks="processor=http://$PROCESSOR_LISTEN/healthz relay=http://127.0.0.1:9101/readyz project=http://127.0.0.1:9102/readyz"
  if [ "$NODES" -gt 1 ]; then
    for i in $(seq 1 "$NODES"); do checks="$checks node$i=http://$(node_http "$i")/readyz"; done
    checks="$checks relay2=http://127.0.0.1:9111/readyz project2=http://127.0.0.1:9112/readyz router=http://$LISTEN/readyz"
  else
    checks="$checks onsale=http://$LISTEN/readyz"
  fi
  wait_ready "$checks" || return 1
  if [ "$REGIONS" -gt 1 ]; then
    region_b_up
    wait_ready "serve-b=http://$REGION_B_LISTEN/healthz" || return 1
  fi
  echo "onsale ready: REST and SSE on http://$LISTEN, gRPC and gRPC-web on $GRPC_LISTEN, Kafka on $(brokers_list), card processor on http://$PROCESSOR_LISTEN"
  echo "the fan app: http://$LISTEN/ (sign in with any name: development mode); the ops console: http://$LISTEN/ops (sign in as an admin); Prometheus: http://127.0.0.1:$PROM_PORT"
  echo "the identity provider: http://127.0.0.1:$OIDC_PORT (its clients and their secrets in $STACK_DIR/oidc/clients.json; make oidc-rotate, make oidc-retire)"
  if [ "${SECURE:-0}" = 1 ]; then
    echo "Kafka only over TLS with SCRAM users (onsale-relay writes the topic, onsale-node reads it) and Redis only over TLS: CA $STACK_DIR/tls/ca.pem, passwords in $STACK_DIR/secure.env"
  fi
  if [ "${TRACING:-0}" = 1 ]; then
    echo "traces ($ONSALE_TRACE_SAMPLE of the requests): http://127.0.0.1:$ZIPKIN_PORT/zipkin"
  fi
}

# Waits (a minute at most) until every NAME=URL of CHECKS answers; a process that exited, or
# is not ready in time, is named with its log.
wait_ready() {
  local pending=$1 check name
  for _ in $(seq 1 120); do
    local left=""
    for check in $pending; do
      name=${check%%=*}
      if [ -f "$STACK_DIR/$name.pid" ] && ! kill -0 "$(cat "$STACK_DIR/$name.pid")" 2>/dev/null; then
        echo "$name exited; its log, $STACK_DIR/$name.log, ends:" >&2
        tail -20 "$STACK_DIR/$name.log" >&2 || true
        return 1
      fi
      curl -fsS "${check#*=}" >/dev/null 2>&1 || left="$left $check"
    done
    pending=$left
    if [ -z "$pending" ]; then
      return 0
    fi
    sleep 0.5
  done
  for check in $pending; do
    name=${check%%=*}
    echo "$name is not ready (${check#*=}): $(curl -sS "${check#*=}" 2>&1 | head -c 300)" >&2
    [ -f "$STACK_DIR/$name.log" ] && tail -5 "$STACK_DIR/$name.log" >&2
  done
  return 1
}

# One node's onsale processes: `serve`, its relay and its projections.
start_one_node() {
  ONSALE_PROCESSOR_URL="http://$PROCESSOR_LISTEN" start_onsale onsale serve
  start_onsale relay relay --metrics-listen 127.0.0.1:9101
  start_onsale project project --metrics-listen 127.0.0.1:9102
}

# `up`'s onsale processes (one node) stopped and started again with the environment of the
# caller (bench-trace.sh switches tracing this way), the stores and their data kept.
restart_onsale() {
  local name
  for name in onsale relay project; do
    if [ -f "$STACK_DIR/$name.pid" ]; then
      kill "$(cat "$STACK_DIR/$name.pid")" 2>/dev/null || true
      # A graceful stop finishes what is in flight: 30 s at most, then it is killed.
      for _ in $(seq 1 150); do
        kill -0 "$(cat "$STACK_DIR/$name.pid")" 2>/dev/null || break
        sleep 0.2
      done
      kill -9 "$(cat "$STACK_DIR/$name.pid")" 2>/dev/null || true
    fi
  done
  start_one_node
  wait_ready "onsale=http://$LISTEN/readyz relay=http://127.0.0.1:9101/readyz project=http://127.0.0.1:9102/readyz"
}

# ---- Regions (docs/adr/024) -------------------------------------------------------------

down() {
  local f
  region_down
  router_down "$STACK_DIR"
  prom_down "$STACK_DIR"
  zipkin_down "$STACK_DIR"
  oidc_down "$STACK_DIR/oidc"
  for f in "$STACK_DIR"/*.pid; do
    [ -f "$f" ] || continue
    case $(basename "$f") in onsale.pid|relay*.pid|project*.pid|processor.pid|node*.pid)
      kill -CONT "$(cat "$f")" 2>/dev/null || true
      kill "$(cat "$f")" 2>/dev/null || true ;;
    esac
  done
  sleep 0.5
  broker_down "$STACK_DIR"
  redis_down "$STACK_DIR"
  # The relay's slot goes with the cluster.
  ha_down "$STACK_DIR/ha"
  for f in "$STACK_DIR"/shard*; do
    if [ -d "$f/ha" ]; then ha_down "$f/ha"; rm -rf "$f"; elif [ -d "$f" ]; then pg_down "$f"; fi
  done
  pg_down "$STACK_DIR"
  echo "stack stopped"
}

case "${1:-}" in
  pg-up) pg_up "$2" "$3" ;;
  pg-down) pg_down "$2" ;;
  pg-restart) pg_restart "$2" ;;
  pg-stop) pg_stop "$2" "${3:-fast}" ;;
  pg-start) pg_start "$2" ;;
  pg-standby-up) pg_standby_up "$2" "$3" "$4" "$5" ;;
  pg-sync) pg_sync "$2" "$3" ;;
  pg-rejoin) pg_rejoin "$2" "$3" "$4" "$5" ;;
  region-pair-up) region_pair_up "$2" "$3" "$4" ;;
  fail-region) fail_region "${2:?which region}" ;;
  promote-region) promote_region "${2:?which region}" ;;
  rejoin-region) rejoin_region "${2:?which region}" ;;
  toxiproxy-tools) toxiproxy_bin ;;
  region-b-shard-urls) region_b_shard_urls ;;
  broker-up) broker_up "$2" "$3" "${4:-1}" ;;
  broker-start) broker_start "$2" "$3" "${4:-}" ;;
  broker-wait) broker_wait "$2" "$3" ;;
  broker-kill) broker_kill "$2" "$3" ;;
  broker-down) broker_down "$2" ;;
  broker-lib) broker_lib ;;
  redis-up) redis_up "$2" "$3" ;;
  secure-up) secure_up "$2" "$3" "$4" ;;
  redis-down) redis_down "$2" ;;
  py-tools) py_tools ;;
  fuzz-tools) fuzz_tools ;;
  prom-tools) prom_tools ;;
  browser-tools) browser_tools ;;
  oidc-tools) oidc_tools ;;
  oidc-rotate) oidc_rotate add "${2:-EdDSA}" ;;
  oidc-retire) oidc_rotate retire ;;
  prom-up) prom_up "$2" "$3" "$4" "${5:-1}" ;;
  prom-down) prom_down "$2" ;;
  zipkin-tools) zipkin_jar ;;
  debezium-tools) debezium_tools ;;
  zipkin-up) zipkin_up "$2" "$3" ;;
  zipkin-down) zipkin_down "$2" ;;
  ha-tools) ensure_ha ;;
  ha-up) ha_up "$2" "$3" ;;
  ha-down) ha_down "$2" ;;
  ha-start) ha_start "$2" "$3" ;;
  ha-stop) ha_stop "$2" "$3" ;;
  ha-kill) ha_kill "$2" "$3" ;;
  ha-kill-primary) ha_kill_primary "$2" ;;
  ha-leader) ha_leader "$2" ;;
  ha-wait) ha_wait "$2" "$3" "${4:-60}" ;;
  up) up ;;
  restart-onsale) restart_onsale ;;
  kill-broker) broker_kill "$STACK_DIR" "${2:?which broker}" ;;
  kill-primary) ha_kill_primary "$STACK_DIR/ha" ;;
  kill-shard) shard_kill "${2:?which shard}" ;;
  start-shard) shard_start "${2:?which shard}" ;;
  shard-urls) shard_urls ;;
  kill-node) node_signal KILL "${2:?which node}" ;;
  kill-owner) node_kill_owner ;;
  pause-owner) node_pause_owner "${2:-20}" ;;
  stop-node) node_signal STOP "${2:?which node}" ;;
  cont-node) node_signal CONT "${2:?which node}" ;;
  start-node) node_start "${2:?which node}" ;;
  router-up) router_up "$2" "$3" "$4" "$5" "$6" "$7" ;;
  router-down) router_down "$2" ;;
  start-db) ha_start "$STACK_DIR/ha" "${2:?which node}" && ha_wait "$STACK_DIR/ha" replicated 90 ;;
  start-broker) broker_start "$STACK_DIR" "${2:?which broker}" ;;
  down) down ;;
  *) sed -n '7,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
esac
