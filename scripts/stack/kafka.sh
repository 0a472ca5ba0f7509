# shellcheck shell=bash
# scripts/stack.sh's Apache Kafka in KRaft mode from Maven Central's jars: Java, one broker or a cluster, killed and started for the drills.
# Sourced by scripts/stack.sh, whose settings (ROOT, CACHE, the ports) it reads.

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
