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

# Apache Kafka from Maven Central: the jars of kafka/broker/pom.xml, resolved once into the
# cache (keyed by the pom, so a version bump resolves again). Prints the directory of jars.
broker_lib() {
  maven_lib kafka "$ROOT/kafka/broker/pom.xml" "Apache Kafka"
}

# The runtime jars of POM (and their dependencies) resolved from Maven Central once into the
# cache, keyed by the pom (a version bump resolves again). Prints the directory of jars.
maven_lib() {
  local name=$1 pom=$2 what=$3 key lib
  key=$(sha256sum "$pom" | cut -c1-12)
  lib=$CACHE/$name-$key/lib
  if [ ! -f "$lib/.complete" ]; then
    ensure_java
    echo "resolving $what from Maven Central into $lib" >&2
    rm -rf "$lib"
    mkdir -p "$CACHE"
    mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$lib" >"$CACHE/maven-$name.log" 2>&1 || { cat "$CACHE/maven-$name.log" >&2; return 1; }
    touch "$lib/.complete"
  fi
  echo "$lib"
}

# Zipkin's server, its executable jar from Maven Central (docs/adr/019), resolved once into the
# cache. Prints the jar's path.
ZIPKIN_VERSION=3.6.1
zipkin_jar() {
  local dir=$CACHE/zipkin-$ZIPKIN_VERSION jar
  jar=$dir/zipkin-server-$ZIPKIN_VERSION-exec.jar
  if [ ! -f "$jar" ]; then
    ensure_java
    echo "resolving Zipkin $ZIPKIN_VERSION from Maven Central into $dir" >&2
    mkdir -p "$dir"
    mvn -q -B dependency:copy -Dartifact="io.zipkin:zipkin-server:$ZIPKIN_VERSION:jar:exec" \
      -DoutputDirectory="$dir" >"$CACHE/maven-zipkin.log" 2>&1 || { cat "$CACHE/maven-zipkin.log" >&2; return 1; }
  fi
  echo "$jar"
}

# A Zipkin server (spans in memory) in DIR on 127.0.0.1:PORT: its UI at /zipkin, spans taken at
# /api/v2/spans.
zipkin_up() {
  local dir=$1 port=$2 jar
  jar=$(zipkin_jar)
  mkdir -p "$dir/zipkin"
  QUERY_PORT=$port STORAGE_TYPE=mem MEM_MAX_SPANS=${ZIPKIN_MAX_SPANS:-1000000} \
    nohup java -Xms128m -Xmx1g -jar "$jar" >"$dir/zipkin/zipkin.log" 2>&1 &
  echo $! >"$dir/zipkin/zipkin.pid"
  answers "http://127.0.0.1:$port/health" 120 "zipkin" "$dir/zipkin/zipkin.log" || return 1
  echo "zipkin on http://127.0.0.1:$port/zipkin"
}

# Waits until URL answers 2xx, SECS at most; otherwise names WHAT and its LOG and fails.
answers() {
  local url=$1 secs=$2 what=$3 log=$4 i
  for i in $(seq 1 $((secs * 5))); do
    if curl -fsS "$url" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.2
  done
  echo "$what did not start; see $log" >&2
  return 1
}

zipkin_down() {
  local dir=$1
  if [ -f "$dir/zipkin/zipkin.pid" ]; then
    kill "$(cat "$dir/zipkin/zipkin.pid")" 2>/dev/null || true
    rm -f "$dir/zipkin/zipkin.pid"
  fi
}

ensure_java() {
  local missing=()
  command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || missing+=(maven)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# Broker i of a cluster in DIR whose first client port is PORT: client port PORT+i-1, controller
# port PORT+50+i-1. Every broker is also a KRaft controller (a quorum of N voters).
broker_port() { echo $(($2 + $1 - 1)); }
controller_port() { echo $(($2 + 50 + $1 - 1)); }

# Formats and starts a cluster of N brokers (default 1) in DIR, clients on PORT..PORT+N-1.
broker_up() {
  local dir=$1 port=$2 n=${3:-1} lib cluster voters="" i
  lib=$(broker_lib)
  mkdir -p "$dir"
  for i in $(seq 1 "$n"); do
    # Something else answering on a port would be taken for our broker.
    for p in $(broker_port "$i" "$port") $(controller_port "$i" "$port"); do
      if (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        echo "port $p is already in use; is another broker running?" >&2
        return 1
      fi
    done
    voters="$voters${voters:+,}$i@127.0.0.1:$(controller_port "$i" "$port")"
  done
  cluster=$(java -cp "$lib/*" kafka.tools.StorageTool random-uuid)
  # With fewer than three brokers the internal topics cannot have three replicas.
  local rf=$((n >= 3 ? 3 : 1)) isr=$((n >= 3 ? 2 : 1))
  # KAFKA_SECURE=DIR (DIR prepared by secure_material): clients only over TLS with a SCRAM
  # user, every request authorized by the ACLs (kafka_acls); the controllers' quorum stays on
  # loopback in the clear, as the principal ANONYMOUS.
  local protocol=PLAINTEXT scram=()
  if [ -n "${KAFKA_SECURE:-}" ]; then
    protocol=SASL_SSL
    # shellcheck disable=SC1091
    . "$KAFKA_SECURE/secure.env"
    scram=(--add-scram "SCRAM-SHA-512=[name=admin,password=$KAFKA_ADMIN_PASSWORD]"
      --add-scram "SCRAM-SHA-512=[name=onsale-relay,password=$KAFKA_RELAY_PASSWORD]"
      --add-scram "SCRAM-SHA-512=[name=onsale-node,password=$KAFKA_NODE_PASSWORD]")
  fi
  for i in $(seq 1 "$n"); do
    local node=$dir/kafka-$i
    mkdir -p "$node"
    cat >"$node/server.properties" <<PROPS
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=$protocol://127.0.0.1:$(broker_port "$i" "$port"),CONTROLLER://127.0.0.1:$(controller_port "$i" "$port")
advertised.listeners=$protocol://127.0.0.1:$(broker_port "$i" "$port")
controller.listener.names=CONTROLLER
listener.security.protocol.map=$protocol:$protocol,CONTROLLER:PLAINTEXT
inter.broker.listener.name=$protocol
log.dirs=$node/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
unclean.leader.election.enable=false
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
# A killed broker is fenced (and its partitions get new leaders) within about 3 s.
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
PROPS
    if [ -n "${KAFKA_SECURE:-}" ]; then
      cat >>"$node/server.properties" <<PROPS
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$KAFKA_ADMIN_PASSWORD";
ssl.keystore.type=PEM
ssl.keystore.location=$KAFKA_SECURE/tls/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$KAFKA_SECURE/tls/ca.pem
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:ANONYMOUS
PROPS
      chmod 600 "$node/server.properties"
    fi
    java -cp "$lib/*" -Dlog4j2.configurationFile="$ROOT/kafka/broker/log4j2.properties" \
      kafka.tools.StorageTool format -t "$cluster" -c "$node/server.properties" "${scram[@]}" >"$node/format.log" 2>&1 \
      || { cat "$node/format.log" >&2; return 1; }
  done
  for i in $(seq 1 "$n"); do broker_start "$dir" "$i" nowait; done
  for i in $(seq 1 "$n"); do broker_wait "$dir" "$i" || return 1; done
  echo "apache kafka: $n broker(s) on 127.0.0.1:$port..$(broker_port "$n" "$port") (data in $dir)"
}

# Starts broker I of the cluster in DIR again (its data kept).
broker_start() {
  local dir=$1 i=$2 node=$1/kafka-$2 lib
  lib=$(broker_lib)
  [ -f "$node/server.properties" ] || { echo "no broker $i in $dir" >&2; return 1; }
  if [ -f "$node/pid" ] && kill -0 "$(cat "$node/pid")" 2>/dev/null; then
    echo "broker $i is running" >&2
    return 0
  fi
  # broker_wait reads only what this start logs.
  if [ -f "$node/broker.log" ]; then wc -l <"$node/broker.log" >"$node/log-start"; else echo 0 >"$node/log-start"; fi
  # A small heap: the local stack's load fits in 256 MB.
  nohup java -Xms64m -Xmx256m -XX:+UseSerialGC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$ROOT/kafka/broker/log4j2.properties" \
    -cp "$lib/*" kafka.Kafka "$node/server.properties" >>"$node/broker.log" 2>&1 &
  echo $! >"$node/pid"
  [ "${3:-}" = nowait ] || broker_wait "$dir" "$i"
}

broker_wait() {
  local dir=$1 i=$2 node=$1/kafka-$2 port
  port=$(sed -n 's#^advertised.listeners=[A-Z_]*://127.0.0.1:##p' "$node/server.properties")
  for _ in $(seq 1 600); do
    if ! kill -0 "$(cat "$node/pid")" 2>/dev/null; then
      echo "broker $i exited; see $node/broker.log" >&2
      tail -5 "$node/broker.log" >&2
      return 1
    fi
    if tail -n +"$(($(cat "$node/log-start") + 1))" "$node/broker.log" 2>/dev/null | grep -q "Kafka Server started" \
      && (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "broker $i is not serving after 60 s; see $node/broker.log (a broker serves only once a majority of the controller quorum is up)" >&2
  return 1
}

# SIGKILL of broker I: the crash of the operator's drill.
broker_kill() {
  local node=$1/kafka-$2
  [ -f "$node/pid" ] || { echo "no broker $2 in $1" >&2; return 1; }
  kill -9 "$(cat "$node/pid")" 2>/dev/null || true
  while kill -0 "$(cat "$node/pid")" 2>/dev/null; do sleep 0.05; done
  rm -f "$node/pid"
}

# Stops every broker of DIR (SIGTERM, then SIGKILL after 10 s).
broker_down() {
  local dir=$1 pid
  for pidfile in "$dir"/kafka-*/pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

# --- Kafka and Redis over TLS with credentials (`up SECURE=1`, the tests' secure pair; issue
# 53 item 7). DIR/tls: a CA of its own and a certificate for 127.0.0.1 and localhost signed by
# it; DIR/secure.env: the users' passwords (random, mode 600), sourced by the functions below.
secure_material() {
  local dir=$1 tls=$1/tls
  [ -f "$dir/secure.env" ] && return 0
  ensure_packages
  mkdir -p "$tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=onsale local CA" \
    -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
  printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=CA:FALSE" \
    "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" >"$tls/server.ext"
  openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
    -days 30 -extfile "$tls/server.ext" -out "$tls/server.pem" 2>/dev/null
  # Kafka's PEM key store: the key (PKCS#8) and its certificate in one file.
  cat "$tls/server.key" "$tls/server.pem" >"$tls/broker.pem"
  chmod 600 "$tls"/*.key "$tls/broker.pem"
  (umask 077 && {
    echo "KAFKA_ADMIN_PASSWORD=$(openssl rand -hex 16)"
    echo "KAFKA_RELAY_PASSWORD=$(openssl rand -hex 16)"
    echo "KAFKA_NODE_PASSWORD=$(openssl rand -hex 16)"
    echo "REDIS_PASSWORD=$(openssl rand -hex 16)"
  } >"$dir/secure.env")
}

# The ACLs of a secure broker (kafka/broker/Acls.java): only onsale-relay writes the topics
# whose names start with PREFIX; onsale-node reads them.
kafka_acls() {
  local secure=$1 bootstrap=$2 prefix=$3 lib
  lib=$(broker_lib)
  # shellcheck disable=SC1091
  . "$secure/secure.env"
  (umask 077 && cat >"$secure/admin.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$KAFKA_ADMIN_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$secure/tls/ca.pem
PROPS
  )
  java -Dlog4j2.configurationFile="$ROOT/kafka/broker/log4j2.properties" -cp "$lib/*" \
    "$ROOT/kafka/broker/Acls.java" "$bootstrap" "$secure/admin.properties" "$prefix"
}

# A broker (SASL_SSL, SCRAM users admin, onsale-relay, onsale-node, ACLs on the onsale.events
# topics) on KAFKA_PORT and a Redis (TLS only, user onsale) on REDIS_PORT, both in DIR; prints
# what a client needs as NAME=VALUE lines (also in DIR/client.env).
secure_up() {
  local dir=$1 kport=$2 rport=$3
  secure_material "$dir"
  KAFKA_SECURE=$dir broker_up "$dir" "$kport" 1 >/dev/null
  kafka_acls "$dir" "127.0.0.1:$kport" onsale.events >/dev/null
  REDIS_SECURE=$dir redis_up "$dir" "$rport" >/dev/null
  # shellcheck disable=SC1091
  . "$dir/secure.env"
  (umask 077 && {
    echo "KAFKA_BROKERS=127.0.0.1:$kport"
    echo "KAFKA_CA_FILE=$dir/tls/ca.pem"
    echo "KAFKA_RELAY_PASSWORD=$KAFKA_RELAY_PASSWORD"
    echo "KAFKA_NODE_PASSWORD=$KAFKA_NODE_PASSWORD"
    echo "KAFKA_ADMIN_PASSWORD=$KAFKA_ADMIN_PASSWORD"
    echo "REDIS_URL=rediss://onsale:$REDIS_PASSWORD@127.0.0.1:$rport/"
    echo "REDIS_CA_FILE=$dir/tls/ca.pem"
  } >"$dir/client.env")
  cat "$dir/client.env"
}

# The Python gRPC tools the tests generate a non-Rust client with; prints the venv's python.
py_tools() {
  # grpcio-tools (the gRPC tests' client), DuckDB (reads the analysts' export) and
  # confluent-kafka (the sample consumer of the topic).
  if ! "$VENV/bin/python" -c 'import grpc_tools, grpc, duckdb, confluent_kafka' 2>/dev/null; then
    ensure_packages
    echo "installing grpcio-tools, duckdb and confluent-kafka into $VENV" >&2
    python3 -m venv "$VENV" >&2
    "$VENV/bin/pip" install -q 'grpcio-tools==1.*' 'grpcio==1.*' 'duckdb==2.0.0' 'confluent-kafka==2.16.1' >&2
  fi
  echo "$VENV/bin/python"
}

# schemathesis (PyPI), pinned, in a virtualenv of its own; prints its command.
FUZZ_VENV=$CACHE/fuzz
fuzz_tools() {
  if ! "$FUZZ_VENV/bin/schemathesis" --version 2>/dev/null | grep -q '4.32.5'; then
    ensure_packages
    echo "installing schemathesis into $FUZZ_VENV" >&2
    python3 -m venv "$FUZZ_VENV" >&2
    "$FUZZ_VENV/bin/pip" install -q 'schemathesis==4.32.5' >&2
  fi
  echo "$FUZZ_VENV/bin/schemathesis"
}

# promtool, to check the alerting rules (telemetry/alerts) and run their tests. Debian's
# package brings the server too; nothing here starts it.
prom_tools() {
  if ! command -v promtool >/dev/null; then
    echo "installing prometheus (for promtool)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
  fi
  command -v promtool
}

# Debian's Chromium, for the front end's tests in a real browser (driven by playwright-core
# from web/'s npm packages).
browser_tools() {
  if [ ! -x /usr/bin/chromium ]; then
    echo "installing chromium" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
  echo /usr/bin/chromium
}

# A real OpenID provider (panva's oidc-provider, npm, pinned by scripts/oidc/package-lock.json)
# installed beside its scripts; prints their directory.
oidc_tools() {
  local dir=$ROOT/scripts/oidc key
  key=$(sha256sum "$dir/package-lock.json" | cut -c1-16)
  if [ "$(cat "$dir/node_modules/.onsale-lock" 2>/dev/null)" != "$key" ]; then
    echo "installing oidc-provider" >&2
    (cd "$dir" && npm ci --no-audit --no-fund --cache "${ONSALE_NPM_CACHE:-$HOME/.cache/onsale/npm}" >&2)
    echo "$key" >"$dir/node_modules/.onsale-lock"
  fi
  echo "$dir"
}

# The identity provider of `up` on $OIDC_PORT: its keys in $1/keys.json (one EdDSA key at
# first), its machine clients in $1/clients.json (a fan, an admin, a scanner of every show at
# the demo's venue), started again by `oidc-rotate`/`oidc-retire`.
oidc_up() {
  local dir=$1 tools
  tools=$(oidc_tools)
  mkdir -p "$dir"
  [ -f "$dir/keys.json" ] || node "$tools/keys.mjs" add "$dir/keys.json" EdDSA >/dev/null
  [ -f "$dir/clients.json" ] || cat >"$dir/clients.json" <<JSON
[{"client_id": "fan-1", "client_secret": "fan-1-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')", "role": "fan"},
 {"client_id": "admin-1", "client_secret": "admin-1-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')", "role": "admin"},
 {"client_id": "gate-1", "client_secret": "gate-1-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')", "role": "scanner", "venue": "demo-venue"}]
JSON
  chmod 600 "$dir/clients.json"
  oidc_down "$dir"
  nohup node "$tools/provider.mjs" "$OIDC_PORT" "$dir/keys.json" "$dir/clients.json" >"$dir/provider.log" 2>&1 &
  echo $! >"$dir/pid"
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$OIDC_PORT/jwks" >/dev/null && return 0
    sleep 0.1
  done
  echo "the identity provider did not start:" >&2
  cat "$dir/provider.log" >&2
  return 1
}

oidc_down() {
  [ -f "$1/pid" ] || return 0
  kill "$(cat "$1/pid")" 2>/dev/null || true
  rm -f "$1/pid"
}

# A rotation on `up`'s provider: a new key (ALG, EdDSA by default) signs from now on, the old
# ones stay in its JWKS (their tokens verify) until `oidc-retire` drops the oldest. onsale takes
# the new key at its first token, without a restart.
oidc_rotate() {
  node "$(oidc_tools)/keys.mjs" "$1" "$STACK_DIR/oidc/keys.json" ${2:-EdDSA}
  oidc_up "$STACK_DIR/oidc"
}

# A Prometheus server (Debian's) scraping onsale and evaluating its alerting rules: what the ops
# console asks which alerts fire.
prom_up() {
  local dir=$1 port=$2 target=$3 every=${4:-1}
  prom_tools >/dev/null
  mkdir -p "$dir/prometheus"
  cat >"$dir/prometheus/prometheus.yml" <<YAML
global:
  scrape_interval: ${every}s
  evaluation_interval: ${every}s
rule_files:
  - $ROOT/telemetry/alerts/onsale.rules.yml
scrape_configs:
  - job_name: onsale
    static_configs:
      - targets: ['${target//,/\',\'}']
YAML
  nohup prometheus --config.file="$dir/prometheus/prometheus.yml" \
    --storage.tsdb.path="$dir/prometheus/data" --web.listen-address="127.0.0.1:$port" \
    >"$dir/prometheus/prometheus.log" 2>&1 &
  echo $! >"$dir/prometheus/prometheus.pid"
  answers "http://127.0.0.1:$port/-/ready" 20 "prometheus" "$dir/prometheus/prometheus.log" || return 1
  echo "prometheus on 127.0.0.1:$port scraping $target"
}

prom_down() {
  local dir=$1
  if [ -f "$dir/prometheus/prometheus.pid" ]; then
    kill "$(cat "$dir/prometheus/prometheus.pid")" 2>/dev/null || true
    rm -f "$dir/prometheus/prometheus.pid"
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
  # REDIS_SECURE=DIR (prepared by secure_material): TLS only, the certificate of DIR/tls, one
  # user (onsale) with the password of DIR/secure.env and no default user.
  local listen=(--port "$port") ping=(-p "$port")
  if [ -n "${REDIS_SECURE:-}" ]; then
    # shellcheck disable=SC1091
    . "$REDIS_SECURE/secure.env"
    listen=(--port 0 --tls-port "$port" --tls-cert-file "$REDIS_SECURE/tls/server.pem"
      --tls-key-file "$REDIS_SECURE/tls/server.key" --tls-ca-cert-file "$REDIS_SECURE/tls/ca.pem"
      --tls-auth-clients no --user default off --user onsale on ">$REDIS_PASSWORD" '~*' '&*' '+@all')
    ping=(-p "$port" --tls --cacert "$REDIS_SECURE/tls/ca.pem" --user onsale --pass "$REDIS_PASSWORD" --no-auth-warning)
  fi
  redis-server "${listen[@]}" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
  for _ in $(seq 1 50); do
    if redis-cli "${ping[@]}" ping 2>/dev/null | grep -q PONG; then
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

# --- Many command nodes behind a router (`make up NODES=3`, docs/adr/011) ---
# HAProxy (Debian) on the API's ports routes each request to a node by a consistent hash of the
# show it names: /v1/events/{show}/..., /v1/holds/h_{show}_..., /v1/orders/o_{show}_..., and
# POST /v1/orders by the holdId in its body. A node whose /healthz stops answering is out
# within about a second, and its shows' requests go to the next node on the ring (which
# claims the show once the dead node's registration lapsed, or forwards to its live owner).
# gRPC (reads only) is spread round robin. Node i: HTTP NODE_HTTP_BASE+i, gRPC NODE_GRPC_BASE+i.
router_up() {
  local dir=$1 listen=$2 grpc=$3 n=$4 http_base=$5 grpc_base=$6 i servers="" gservers="" maxconn
  ensure_ha
  mkdir -p "$dir"
  # Two descriptors per proxied connection, within this shell's limit.
  maxconn=$(( ($(ulimit -n) - 200) / 2 ))
  [ "$maxconn" -le 50000 ] || maxconn=50000
  for i in $(seq 1 "$n"); do
    servers="$servers  server node$i 127.0.0.1:$((http_base + i)) check"$'\n'
    gservers="$gservers  server node$i 127.0.0.1:$((grpc_base + i)) check"$'\n'
  done
  # The router's own errors (no node up, a node died mid-request) are the API's: problem+json,
  # 503 with Retry-After.
  local code
  for code in 502 503 504; do
    printf 'HTTP/1.0 %s Service Unavailable\r\nCache-Control: no-cache\r\nConnection: close\r\nContent-Type: application/problem+json\r\nRetry-After: 1\r\n\r\n{"type":"https://onsale.dev/problems/unavailable","title":"Service Unavailable","status":503,"code":"UNAVAILABLE","detail":"no node can answer this request right now; retry shortly"}\n' 503 >"$dir/$code.http"
  done
  cat >"$dir/router.cfg" <<CFG
global
  maxconn $maxconn
defaults
  timeout connect 2s
  timeout client 1h
  timeout server 1h
  timeout check 1s
  timeout http-request 10s
  errorfile 502 $dir/502.http
  errorfile 503 $dir/503.http
  errorfile 504 $dir/504.http
frontend api
  mode http
  bind $listen
  option http-buffer-request
  # The nodes rate-limit per client address: they trust the address appended here.
  option forwardfor
  # Node-to-node forwarding is never reachable from outside.
  http-request deny deny_status 404 if { path_beg /internal/ }
  http-request set-var(txn.show) path,field(4,/) if { path_beg /v1/events/ }
  http-request set-var(txn.show) path,field(4,/),field(2,_) if { path_beg /v1/holds/ } || { path_beg /v1/orders/ }
  http-request set-var(txn.show) req.body,json_query('\$.holdId'),field(2,_) if { method POST } { path /v1/orders }
  http-request set-var(txn.show) path unless { var(txn.show) -m found }
  default_backend nodes
backend nodes
  mode http
  balance hash var(txn.show)
  hash-type consistent
  # A node that refuses the connection (it just died) is retried on the next one.
  retries 2
  option redispatch 1
  option httpchk GET /healthz
  default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions
$servers
frontend grpc
  mode tcp
  bind $grpc
  default_backend grpc_nodes
backend grpc_nodes
  mode tcp
  balance roundrobin
  default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions
$gservers
CFG
  haproxy -c -q -f "$dir/router.cfg" || { echo "the router's configuration is invalid: $dir/router.cfg" >&2; return 1; }
  nohup haproxy -f "$dir/router.cfg" -db >"$dir/router.log" 2>&1 &
  echo $! >"$dir/router.pid"
  echo "router on $listen (REST, SSE) and $grpc (gRPC) over $n nodes"
}

router_down() {
  local dir=$1
  if [ -f "$dir/router.pid" ]; then kill "$(cat "$dir/router.pid")" 2>/dev/null || true; rm -f "$dir/router.pid"; fi
}

node_http() { echo "127.0.0.1:$((NODE_HTTP_BASE + $1))"; }
node_grpc() { echo "127.0.0.1:$((NODE_GRPC_BASE + $1))"; }
node_internal() { echo "127.0.0.1:$((NODE_INTERNAL_BASE + $1))"; }

# Starts node I of `up NODES=n` (an `onsale serve` on its own ports).
node_start() {
  local i=$1 page=$LISTEN grpc_web=$GRPC_LISTEN
  # Browsers reach every node through the router: the page's origin and gRPC-web are its.
  LISTEN=$(node_http "$i") GRPC_LISTEN=$(node_grpc "$i") ONSALE_TRUSTED_PROXIES=127.0.0.1 \
    ONSALE_INTERNAL_LISTEN=$(node_internal "$i") \
    ONSALE_PUBLIC_GRPC_WEB_URL="http://$grpc_web" \
    ONSALE_CORS_ORIGINS="http://$page,http://localhost:${page##*:},http://localhost:5173,http://127.0.0.1:5173" \
    ONSALE_PROCESSOR_URL="http://$PROCESSOR_LISTEN" start_onsale "node$i" serve
}

node_signal() {
  local sig=$1 i=$2 f=$STACK_DIR/node$2.pid
  [ -f "$f" ] || { echo "node $i is not running" >&2; return 1; }
  kill "-$sig" "$(cat "$f")"
  case $sig in KILL|TERM) rm -f "$f" ;; esac
  echo "node $i: SIG$sig"
}

# The node that owns the most recently claimed show (the demo's show).
node_owner() {
  local port
  port=$(psql -h 127.0.0.1 -p "$PG_PORT" -U onsale -d onsale -Atc \
    "SELECT split_part(n.addr, ':', 2) FROM show_owners o JOIN nodes n USING (node_id) ORDER BY o.claimed_at DESC LIMIT 1")
  [ -n "$port" ] || { echo "no show has an owner yet" >&2; return 1; }
  echo $((port - NODE_INTERNAL_BASE))
}

# The node drills: SIGKILL the show's node; or pause it (SIGSTOP) for SECS, then let it run on
# (SIGCONT) after another node has taken its show.
node_kill_owner() {
  local i
  i=$(node_owner) && node_signal KILL "$i"
}

node_pause_owner() {
  local secs=$1 i
  i=$(node_owner) || return 1
  node_signal STOP "$i"
  sleep "$secs"
  node_signal CONT "$i"
}

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

# Toxiproxy's server, built once from its Go module into the cache (this machine's links have no
# `tc netem`: the delay between regions is a proxy's). Prints its path.
TOXIPROXY_VERSION=v2.12.0
toxiproxy_bin() {
  local bin=$CACHE/toxiproxy-$TOXIPROXY_VERSION/toxiproxy-server
  if [ ! -x "$bin" ]; then
    command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
    echo "building Toxiproxy $TOXIPROXY_VERSION into $(dirname "$bin")" >&2
    mkdir -p "$(dirname "$bin")"
    GOBIN=$(dirname "$bin") GOPATH=$CACHE/gopath GOFLAGS=-modcacherw \
      go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" >&2
    mv "$(dirname "$bin")/server" "$bin"
  fi
  echo "$bin"
}

# MirrorMaker 2's jars (kafka/mirror/pom.xml) resolved once into the cache; prints their dir.
mirror_lib() {
  maven_lib mirror "$ROOT/kafka/mirror/pom.xml" "MirrorMaker 2"
}

# Kafka Connect's standalone worker (kafka/debezium/pom.xml) and Debezium's PostgreSQL
# connector (its plugin archive, which carries its own jars), resolved once into the cache for
# `make bench-cdc`. Prints the worker's jar directory and the plugin directory, a line each.
DEBEZIUM_VERSION=3.6.1.Final
debezium_tools() {
  local lib plugins=$CACHE/debezium-$DEBEZIUM_VERSION
  lib=$(maven_lib connect "$ROOT/kafka/debezium/pom.xml" "Kafka Connect")
  if [ ! -f "$plugins/.complete" ]; then
    echo "resolving Debezium's PostgreSQL connector $DEBEZIUM_VERSION from Maven Central into $plugins" >&2
    rm -rf "$plugins"
    mkdir -p "$plugins"
    mvn -q -B dependency:copy -Dartifact="io.debezium:debezium-connector-postgres:$DEBEZIUM_VERSION:tar.gz:plugin" \
      -DoutputDirectory="$plugins" >"$CACHE/maven-debezium.log" 2>&1 || { cat "$CACHE/maven-debezium.log" >&2; return 1; }
    tar -xzf "$plugins"/*.tar.gz -C "$plugins"
    rm "$plugins"/*.tar.gz
    touch "$plugins/.complete"
  fi
  echo "$lib"
  echo "$plugins"
}

# The clusters of a region, one `name:port` a line: its main database, then each shard.
region_clusters() {
  local region=$1 shard
  if [ "$region" = a ]; then
    echo "main:$PG_PORT"
    if [ "$SHARDS" -gt 1 ]; then for shard in $(seq 1 "$SHARDS"); do echo "shard$shard:$(shard_port "$shard")"; done; fi
  else
    echo "main:$REGION_B_PG_PORT"
    if [ "$SHARDS" -gt 1 ]; then for shard in $(seq 1 "$SHARDS"); do echo "shard$shard:$((REGION_B_PG_PORT + 10 + shard))"; done; fi
  fi
}

# A region cluster's data directory.
region_dir() {
  local region=$1 name=$2
  if [ "$region" = a ]; then
    if [ "$name" = main ]; then echo "$STACK_DIR"; else echo "$STACK_DIR/$name"; fi
  else
    echo "$STACK_DIR/region-b/$name"
  fi
}

# The link between the regions: Toxiproxy with a proxy in front of each of `from`'s clusters,
# REGION_DELAY_MS added each way; the other region's standbys stream through it.
region_link_up() {
  local from=$1 line name port proxy
  local dir=$STACK_DIR/region-link
  mkdir -p "$dir"
  if [ ! -f "$dir/toxiproxy.pid" ] || ! kill -0 "$(cat "$dir/toxiproxy.pid")" 2>/dev/null; then
    local bin
    bin=$(toxiproxy_bin)
    nohup "$bin" -host "${TOXIPROXY_API%:*}" -port "${TOXIPROXY_API#*:}" >"$dir/toxiproxy.log" 2>&1 &
    echo $! >"$dir/toxiproxy.pid"
    for _ in $(seq 1 50); do curl -fsS "http://$TOXIPROXY_API/version" >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  for line in $(region_clusters "$from"); do
    name=${line%%:*} port=${line#*:} proxy=$((port + REGION_LINK_OFFSET))
    curl -fsS -XDELETE "http://$TOXIPROXY_API/proxies/${from}_$name" >/dev/null 2>&1 || true
    curl -fsS -XPOST "http://$TOXIPROXY_API/proxies" \
      -d "{\"name\":\"${from}_$name\",\"listen\":\"127.0.0.1:$proxy\",\"upstream\":\"127.0.0.1:$port\",\"enabled\":true}" >/dev/null
    for stream in upstream downstream; do
      curl -fsS -XPOST "http://$TOXIPROXY_API/proxies/${from}_$name/toxics" \
        -d "{\"name\":\"distance_$stream\",\"type\":\"latency\",\"stream\":\"$stream\",\"attributes\":{\"latency\":$REGION_DELAY_MS,\"jitter\":0}}" >/dev/null
    done
  done
}

region_link_down() {
  local dir=$STACK_DIR/region-link
  if [ -f "$dir/toxiproxy.pid" ]; then kill "$(cat "$dir/toxiproxy.pid")" 2>/dev/null || true; rm -f "$dir/toxiproxy.pid"; fi
}

# Region `to`'s clusters become standbys of region `from`'s (through the link), and every
# commit in `from` waits for `to`'s flush (synchronous commit across the regions).
region_standbys_up() {
  local from=$1 to=$2 line name port
  local -a ups
  mapfile -t ups < <(region_clusters "$from")
  local i=0
  for line in $(region_clusters "$to"); do
    name=${line%%:*} port=${line#*:}
    local up=${ups[$i]#*:}
    pg_standby_up "$(region_dir "$to" "$name")" "$port" "$((up + REGION_LINK_OFFSET))" "${to}_$name" >/dev/null
    pg_sync "$up" "\"${to}_$name\""
    i=$((i + 1))
  done
}

# MirrorMaker 2 copies region a's topics into region b's Kafka (as `a.<topic>`).
mirror_up() {
  local dir=$STACK_DIR/region-b lib
  lib=$(mirror_lib)
  cat >"$dir/mirror.properties" <<PROPS
clusters = a, b
a.bootstrap.servers = $(brokers_list)
b.bootstrap.servers = 127.0.0.1:$REGION_B_KAFKA_PORT
a->b.enabled = true
a->b.topics = onsale\\..*
b->a.enabled = false
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
sync.topic.acls.enabled = false
refresh.topics.interval.seconds = 5
emit.heartbeats.interval.seconds = 5
PROPS
  nohup java -Xmx384m -Dlog4j2.configurationFile="$ROOT/kafka/broker/log4j2.properties" \
    -cp "$lib/*" org.apache.kafka.connect.mirror.MirrorMaker "$dir/mirror.properties" \
    >"$dir/mirror.log" 2>&1 &
  echo $! >"$dir/mirror.pid"
}

# Stops the mirror: a graceful stop waits on a's cluster, which may be dark, so after 5 s it is
# killed (at once with `now`: a promotion has nothing left for it to copy).
mirror_down() {
  local f=$STACK_DIR/region-b/mirror.pid pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if [ "${1:-}" != now ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 25); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

# Region b's shard URLs (as ONSALE_SHARD_URLS lists them), as login $1 (the owner by default).
region_b_shard_urls() {
  if [ "$SHARDS" -gt 1 ]; then
    region_clusters b | tail -n +2 | sed "s|.*:|postgres://${1:-onsale}@127.0.0.1:|; s|\$|/onsale|" | paste -sd,
  fi
}

# One of region b's onsale processes (standing by until b writes).
start_region_b() {
  local name=$1
  shift
  DATABASE_URL="postgres://$NODE_LOGIN@127.0.0.1:$REGION_B_PG_PORT/onsale" \
    ONSALE_REGION=b ONSALE_KAFKA_BROKERS="127.0.0.1:$REGION_B_KAFKA_PORT" \
    ONSALE_REDIS_URL="redis://127.0.0.1:$REGION_B_REDIS_PORT/" \
    ONSALE_PROCESSOR_URL="http://$PROCESSOR_LISTEN" \
    ONSALE_LISTEN=$REGION_B_LISTEN ONSALE_GRPC_LISTEN=$REGION_B_GRPC RUST_LOG=${RUST_LOG:-warn} \
    ONSALE_WEB_DIR="$ROOT/web/dist" \
    with_shards "$(region_b_shard_urls "$NODE_LOGIN")" nohup "$ROOT/target/release/onsale" "$@" >"$STACK_DIR/region-b/$name.log" 2>&1 &
  echo $! >"$STACK_DIR/region-b/$name.pid"
}

# The region router: every request to the region whose processes write (`/writerz` says
# `writer`); while
# none does (a region dark, the other not promoted yet) it answers 503 with Retry-After.
region_router_up() {
  local dir=$STACK_DIR/region-router code
  ensure_ha
  mkdir -p "$dir"
  for code in 502 503 504; do
    printf 'HTTP/1.0 %s Service Unavailable\r\nCache-Control: no-cache\r\nConnection: close\r\nContent-Type: application/problem+json\r\nRetry-After: 1\r\n\r\n{"type":"https://onsale.dev/problems/unavailable","title":"Service Unavailable","status":503,"code":"UNAVAILABLE","detail":"no region takes writes right now; retry shortly"}\n' 503 >"$dir/$code.http"
  done
  cat >"$dir/router.cfg" <<CFG
global
  maxconn 9000
defaults
  mode http
  timeout connect 2s
  timeout client 1h
  timeout server 1h
  timeout check 1s
  errorfile 502 $dir/502.http
  errorfile 503 $dir/503.http
  errorfile 504 $dir/504.http
frontend regions
  bind $REGION_LISTEN
  option forwardfor
  default_backend writer
backend writer
  option httpchk GET /writerz
  http-check expect string writer
  retries 2
  option redispatch 1
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
  server a $LISTEN check
  server b $REGION_B_LISTEN check
CFG
  haproxy -c -q -f "$dir/router.cfg" || { echo "the region router's configuration is invalid" >&2; return 1; }
  nohup haproxy -f "$dir/router.cfg" -db >"$dir/router.log" 2>&1 &
  echo $! >"$dir/router.pid"
}

# Region b beside `up`'s region a.
region_b_up() {
  [ "${HA:-0}" = 1 ] && { echo "REGIONS=2 runs each region's clusters without Patroni (HA=0): see docs/adr/024" >&2; return 1; }
  [ "$NODES" -gt 1 ] && { echo "REGIONS=2 runs one node per region (NODES=1)" >&2; return 1; }
  mkdir -p "$STACK_DIR/region-b"
  region_link_up a
  region_standbys_up a b
  broker_up "$STACK_DIR/region-b" "$REGION_B_KAFKA_PORT" 1 >/dev/null
  redis_up "$STACK_DIR/region-b" "$REGION_B_REDIS_PORT" >/dev/null
  mirror_up
  start_region_b onsale serve
  start_region_b relay relay --metrics-listen 127.0.0.1:9201
  start_region_b project project --metrics-listen 127.0.0.1:9202
  region_router_up
  echo "region b (a's standby, ${REGION_DELAY_MS} ms away each way): reads on http://$REGION_B_LISTEN, gRPC on $REGION_B_GRPC, Kafka on 127.0.0.1:$REGION_B_KAFKA_PORT (a's topic mirrored as a.onsale.events)"
  echo "the region router (to whichever region writes): http://$REGION_LISTEN"
}

# The pid files of a region's processes.
region_pids() {
  if [ "$1" = a ]; then
    ls "$STACK_DIR"/{onsale,relay,project}.pid 2>/dev/null || true
  else
    ls "$STACK_DIR"/region-b/{onsale,relay,project}.pid 2>/dev/null || true
  fi
}

# The region goes dark: its onsale processes killed, its PostgreSQL clusters stopped as a
# machine dies (immediate), its Kafka killed.
fail_region() {
  local region=$1 f line
  for f in $(region_pids "$region"); do kill -9 "$(cat "$f")" 2>/dev/null || true; done
  for line in $(region_clusters "$region"); do pg_stop "$(region_dir "$region" "${line%%:*}")" immediate; done
  if [ "$region" = a ]; then
    local i
    for i in $(seq 1 "$BROKERS"); do broker_kill "$STACK_DIR" "$i" >/dev/null 2>&1 || true; done
  else
    broker_kill "$STACK_DIR/region-b" 1 >/dev/null 2>&1 || true
  fi
  echo "region $region is dark"
}

# `onsale region promote` for the region, on its databases.
promote_region() {
  local region=$1 url shards
  if [ "$region" = a ]; then
    url="postgres://onsale@127.0.0.1:$PG_PORT/onsale" shards=$(shard_urls)
  else
    url="postgres://onsale@127.0.0.1:$REGION_B_PG_PORT/onsale" shards=$(region_b_shard_urls)
  fi
  (DATABASE_URL=$url with_shards "$shards" "$ROOT/target/release/onsale" region promote --region "$region")
  # The copy of the old writer's topic ends: the promoted region publishes its own.
  mirror_down now
}

# The dark region comes back as the standby of the region that writes now: each cluster
# checked (`onsale region follow-check`: the writer must be a later epoch), rewound onto the
# writer's timeline and following it; the writer commits synchronously to it again; its Kafka
# and processes start again (standing by).
rejoin_region() {
  local region=$1 writer line name port i=0 wurl
  writer=$([ "$region" = a ] && echo b || echo a)
  local -a ws
  mapfile -t ws < <(region_clusters "$writer")
  wurl="postgres://onsale@127.0.0.1:${ws[0]#*:}/onsale"
  # The region's record, read from its main database started alone (nothing of it runs).
  local main_dir
  main_dir=$(region_dir "$region" main)
  pg_start "$main_dir"
  DATABASE_URL="postgres://onsale@127.0.0.1:$(region_clusters "$region" | head -1 | cut -d: -f2)/onsale" \
    "$ROOT/target/release/onsale" region follow-check --writer-url "$wurl"
  region_link_up "$writer"
  for line in $(region_clusters "$region"); do
    name=${line%%:*} port=${line#*:}
    pg_rejoin "$(region_dir "$region" "$name")" "$port" "$(( ${ws[$i]#*:} + REGION_LINK_OFFSET ))" "${region}_$name" >/dev/null
    pg_sync "${ws[$i]#*:}" "\"${region}_$name\""
    i=$((i + 1))
  done
  if [ "$region" = a ]; then
    for i in $(seq 1 "$BROKERS"); do broker_start "$STACK_DIR" "$i" >/dev/null; done
    start_one_node
  else
    broker_start "$STACK_DIR/region-b" 1 >/dev/null
    start_region_b onsale serve
    start_region_b relay relay --metrics-listen 127.0.0.1:9201
    start_region_b project project --metrics-listen 127.0.0.1:9202
  fi
  echo "region $region follows region $writer"
}

region_down() {
  local f
  [ -d "$STACK_DIR/region-b" ] || [ -d "$STACK_DIR/region-link" ] || return 0
  router_down "$STACK_DIR/region-router"
  mirror_down
  for f in "$STACK_DIR"/region-b/*.pid; do
    [ -f "$f" ] || continue
    case $(basename "$f") in onsale.pid|relay.pid|project.pid) kill "$(cat "$f")" 2>/dev/null || true ;; esac
  done
  sleep 0.5
  broker_down "$STACK_DIR/region-b"
  redis_down "$STACK_DIR/region-b"
  for f in "$STACK_DIR"/region-b/*; do
    if [ -d "$f/data" ]; then pg_down "$f"; fi
  done
  region_link_down
  rm -rf "$STACK_DIR/region-b" "$STACK_DIR/region-link" "$STACK_DIR/region-router"
}

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
