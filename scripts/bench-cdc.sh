#!/usr/bin/env bash
# make bench-cdc: the project's relay beside Debezium's PostgreSQL connector (3.6.1.Final on
# Kafka Connect 4.1.1's standalone worker, both from Maven Central), on one PostgreSQL and one
# broker of their own, reading the same events table through the same publication (pgoutput),
# in one run (issue 52). Each round:
#   backlog  both stopped (SIGSTOP) while the command layer writes for BENCH_SECONDS (64
#            clients, 1-seat holds: its transactions as the hold path commits them); then each
#            resumed alone, in turn (the order alternates between rounds), and timed until its
#            topic has every event: events per second, and CPU per event of the process and of
#            the PostgreSQL backends it is connected to (its walsender and the rest), from
#            /proc.
#   live     both running while pgbench inserts events at CDC_RATE a second for CDC_LIVE_SECONDS
#            (one event a transaction, copied from the command layer's, on four shows): CPU per
#            event again, and commit-to-topic latency, the broker's append time (the broker
#            stamps every message, log.message.timestamp.type=LogAppendTime) less the commit
#            time each envelope carries.
# The relay publishes at its defaults (linger 25 ms); Debezium at its defaults but
# poll.interval.ms 25 (its default 500 would add up to half a second to every latency) and
# JsonConverter without schemas (the relay's envelope carries none). The JVM gets what Kafka's
# connect-standalone.sh gives it (G1, 256 MB to 2 GB of heap). A warm-up round runs first (the
# JIT). BENCH_REPEAT rounds (3); medians, in target/bench/cdc.md.
set -euo pipefail
shopt -s inherit_errexit
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${BENCH_SECONDS:-10}
REPEAT=${BENCH_REPEAT:-3}
RATE=${CDC_RATE:-2000}
LIVE=${CDC_LIVE_SECONDS:-20}
PG_PORT=${CDC_PG_PORT:-54349}
BROKER_PORT=${CDC_BROKER_PORT:-19402}
CONNECT_PORT=${CDC_CONNECT_PORT:-18093}
RELAY_METRICS=127.0.0.1:${CDC_RELAY_METRICS_PORT:-9191}
DIR=$(mktemp -d /tmp/onsale-cdc.XXXXXX)
chmod 755 "$DIR" # the postgres user runs the cluster inside it
OUT=$ROOT/target/bench
RESULTS=$OUT/cdc.jsonl
BROKERS=127.0.0.1:$BROKER_PORT
PG=postgres://onsale@127.0.0.1:$PG_PORT/onsale
RELAY_TOPIC=onsale.events
DBZ_TOPIC=dbz.public.events
STACK=$ROOT/scripts/stack.sh
BIN=$ROOT/target/release
mkdir -p "$OUT"
: >"$RESULTS"

cleanup() {
  for f in "$DIR"/*.pid; do [ -f "$f" ] && kill -CONT "$(cat "$f")" 2>/dev/null && kill "$(cat "$f")" 2>/dev/null; done
  "$STACK" broker-down "$DIR/kafka" >/dev/null 2>&1 || true
  "$STACK" pg-down "$DIR/pg" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
PY=$("$STACK" py-tools)
{ read -r CONNECT_LIB; read -r PLUGINS; } < <("$STACK" debezium-tools)
BROKER_LIB=$("$STACK" broker-lib)
cdc() { "$PY" "$ROOT/scripts/bench/cdc.py" "$@"; }

"$STACK" pg-up "$DIR/pg" "$PG_PORT" >/dev/null
# A stopped reader must keep its walsender: no timeout while one is held stopped.
psql -qc "ALTER SYSTEM SET wal_sender_timeout = 0" -c "SELECT pg_reload_conf()" "$PG" >/dev/null
"$STACK" broker-up "$DIR/kafka" "$BROKER_PORT" >/dev/null
java -cp "$BROKER_LIB/*" -Dlog4j2.configurationFile="$ROOT/kafka/broker/log4j2.properties" kafka.admin.ConfigCommand \
  --bootstrap-server "$BROKERS" --entity-type brokers --entity-default --alter \
  --add-config log.message.timestamp.type=LogAppendTime >/dev/null
# The event store's schema and its first events (bench-command migrates its database first).
"$BIN/onsale-loadgen" bench-command --database-url "$PG" --clients 1 --seats 1 --seconds 1 >/dev/null

# The relay, as `make up` runs it.
DATABASE_URL=$PG ONSALE_KAFKA_BROKERS=$BROKERS ONSALE_EVENTS_TOPIC=$RELAY_TOPIC RUST_LOG=warn \
  nohup "$BIN/onsale" relay --metrics-listen "$RELAY_METRICS" >"$DIR/relay.log" 2>&1 &
echo $! >"$DIR/relay.pid"

# Kafka Connect's standalone worker with Debezium's connector, on the same publication.
cat >"$DIR/worker.properties" <<PROPS
bootstrap.servers=$BROKERS
listeners=http://127.0.0.1:$CONNECT_PORT
plugin.path=$PLUGINS
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=false
value.converter.schemas.enable=false
offset.storage.file.filename=$DIR/connect.offsets
offset.flush.interval.ms=1000
PROPS
cat >"$DIR/debezium.properties" <<PROPS
name=dbz
connector.class=io.debezium.connector.postgresql.PostgresConnector
tasks.max=1
plugin.name=pgoutput
publication.name=onsale_events
publication.autocreate.mode=disabled
slot.name=dbz
database.hostname=127.0.0.1
database.port=$PG_PORT
database.user=onsale
database.password=unused
database.dbname=onsale
topic.prefix=dbz
table.include.list=public.events
snapshot.mode=no_data
poll.interval.ms=25
topic.creation.default.replication.factor=1
topic.creation.default.partitions=6
PROPS
cat >"$DIR/log4j2.properties" <<PROPS
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName=$DIR/connect.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=%d %p %c{1} %m%n
PROPS
nohup java -Xms256m -Xmx2g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
  -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true -Dlog4j2.configurationFile="$DIR/log4j2.properties" \
  -cp "$CONNECT_LIB/*" org.apache.kafka.connect.cli.ConnectStandalone \
  "$DIR/worker.properties" "$DIR/debezium.properties" >"$DIR/connect.out" 2>&1 &
echo $! >"$DIR/debezium.pid"

# Both streaming: each slot active, each topic there.
for _ in $(seq 1 600); do
  active=$(psql -tAc "SELECT count(*) FROM pg_replication_slots WHERE active" "$PG")
  [ "$active" -ge 2 ] && break
  for who in relay debezium; do
    kill -0 "$(cat "$DIR/$who.pid")" 2>/dev/null || { echo "$who exited" >&2; tail -20 "$DIR/$who.log" "$DIR/connect.out" "$DIR/connect.log" 2>/dev/null >&2; exit 1; }
  done
  sleep 0.2
done
[ "$active" -ge 2 ] || { echo "the two readers did not start streaming in 2 minutes" >&2; exit 1; }

topic_of() { if [ "$1" = relay ]; then echo "$RELAY_TOPIC"; else echo "$DBZ_TOPIC"; fi; }
events() { psql -tAc "SELECT count(*) FROM events" "$PG"; }
# A process's CPU time (user + system) in clock ticks.
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The PostgreSQL backends a process is connected to (its walsender among them), by client port.
backends() {
  local ports
  ports=$(ss -Htnp state established "( dport = :$PG_PORT )" | grep "pid=$1," | awk '{print $3}' | sed 's/.*://' | paste -sd, -)
  [ -n "$ports" ] && psql -tAc "SELECT pid FROM pg_stat_activity WHERE client_addr = '127.0.0.1' AND client_port IN ($ports)" "$PG"
}
backend_ticks() {
  local t=0 b
  for b in "$@"; do [ -r "/proc/$b/stat" ] && t=$((t + $(proc_ticks "$b"))); done
  echo "$t"
}

# One reader resumed alone onto a backlog of N events its topic has not had since FROM:
# "seconds process_ticks backend_ticks".
catch_up() {
  local who=$1 n=$2 from=$3 pid bs p0 b0 secs
  pid=$(cat "$DIR/$who.pid")
  mapfile -t bs < <(backends "$pid")
  p0=$(proc_ticks "$pid"); b0=$(backend_ticks "${bs[@]}")
  kill -CONT "$pid"
  secs=$(cdc wait "$BROKERS" "$(topic_of "$who")" "$from" "$n" 600)
  echo "$secs $(($(proc_ticks "$pid") - p0)) $(($(backend_ticks "${bs[@]}") - b0))"
}

# pgbench's insert: each transaction appends one event, a copy of a hold the command layer wrote
# (kept in a table of one row, outside the publication), to its client's show (four shows, as
# an on-sale's events come from a few).
psql -qc "CREATE TABLE cdc_template AS SELECT aggregate_type, event_type, event_version, payload, metadata
  FROM events WHERE event_type = 'SeatsHeld' LIMIT 1" "$PG"
cat >"$DIR/insert.sql" <<'SQL'
\set seq :seq + 1
INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
SELECT aggregate_type, 'cdc-' || :run || '-' || :client_id, :seq, event_type, event_version, payload, metadata
  FROM cdc_template;
SQL

round() {
  local r=$1 order=$2 n0 n1 n who from secs pt bt
  # Backlog.
  kill -STOP "$(cat "$DIR/relay.pid")" "$(cat "$DIR/debezium.pid")"
  declare -A since
  for who in relay debezium; do since[$who]=$(cdc offsets "$BROKERS" "$(topic_of "$who")"); done
  n0=$(events)
  "$BIN/onsale-loadgen" bench-command --database-url "$PG" --clients 64 --seats 1 --seconds "$SECS" >/dev/null
  n1=$(events)
  n=$((n1 - n0))
  declare -A backlog
  for who in $order; do backlog[$who]=$(catch_up "$who" "$n" "${since[$who]}"); done
  # Live.
  for who in relay debezium; do
    since[$who]=$(cdc offsets "$BROKERS" "$(topic_of "$who")")
  done
  local rp dp rbs dbs
  rp=$(cat "$DIR/relay.pid"); dp=$(cat "$DIR/debezium.pid")
  mapfile -t rbs < <(backends "$rp"); mapfile -t dbs < <(backends "$dp")
  local rp0 dp0 rb0 db0
  rp0=$(proc_ticks "$rp"); dp0=$(proc_ticks "$dp"); rb0=$(backend_ticks "${rbs[@]}"); db0=$(backend_ticks "${dbs[@]}")
  n0=$(events)
  pgbench -n -c 4 -j 2 -R "$RATE" -T "$LIVE" -D seq=0 -D run="$r" -f "$DIR/insert.sql" "$PG" >"$DIR/pgbench.out" 2>&1
  n1=$(events)
  for who in relay debezium; do cdc wait "$BROKERS" "$(topic_of "$who")" "${since[$who]}" $((n1 - n0)) 120 >/dev/null; done
  local rp1 dp1 rb1 db1
  rp1=$(proc_ticks "$rp"); dp1=$(proc_ticks "$dp"); rb1=$(backend_ticks "${rbs[@]}"); db1=$(backend_ticks "${dbs[@]}")
  for who in relay debezium; do
    local lat lp lb
    lat=$(cdc latency "$BROKERS" "$(topic_of "$who")" "${since[$who]}")
    if [ "$who" = relay ]; then lp=$((rp1 - rp0)); lb=$((rb1 - rb0)); else lp=$((dp1 - dp0)); lb=$((db1 - db0)); fi
    read -r secs pt bt <<<"${backlog[$who]}"
    python3 -c 'import json,sys
a = sys.argv
n, secs, pt, bt, ln, lp, lb = int(a[3]), float(a[4]), int(a[5]), int(a[6]), int(a[7]), int(a[8]), int(a[9])
lat = json.loads(a[10])
tick_us = 1e6 / 100
print(json.dumps({"round": int(a[1]), "cdc": a[2], "events": n, "seconds": secs, "events_per_s": n / secs,
  "proc_us": pt * tick_us / n, "pg_us": bt * tick_us / n, "live_events": ln,
  "live_proc_us": lp * tick_us / ln, "live_pg_us": lb * tick_us / ln, **lat}))' \
      "$r" "$who" "$n" "$secs" "$pt" "$bt" $((n1 - n0)) "$lp" "$lb" "$lat" >>"$RESULTS"
  done
  tail -2 "$RESULTS" >&2
}

echo "warming up (both readers, one short round)" >&2
SECS_SAVED=$SECS LIVE_SAVED=$LIVE
SECS=3 LIVE=5
round 0 "relay debezium"
SECS=$SECS_SAVED LIVE=$LIVE_SAVED
: >"$RESULTS"
for r in $(seq 1 "$REPEAT"); do
  if [ $((r % 2)) = 1 ]; then order="relay debezium"; else order="debezium relay"; fi
  round "$r" "$order"
done
"$PY" "$ROOT/scripts/bench/cdc.py" report "$RESULTS" | tee "$OUT/cdc.md"
