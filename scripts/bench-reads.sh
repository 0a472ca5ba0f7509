#!/usr/bin/env bash
# make bench-reads: the read path on this machine, in one run, on one 50,000-seat show:
#   1. seat-map snapshot reads/s and latency from onsale's cache (wrk), interleaved with nginx
#      (Debian's package) serving the same bytes as a static file, BENCH_REPEAT (3) times, for
#      the section counts (the default map) and one section's per-seat detail;
#   2. SSE fan-out: BENCH_SSE_SUBSCRIBERS (10,000) subscribers on the one serving process,
#      hold-to-delta latency for every (subscriber, hold) pair;
#   3. commit-to-seat-map lag at BENCH_HOLD_RATE (2,200) hold attempts/s of one uniformly drawn
#      seat each (2 s TTL, so seats keep coming back), from the projector's histogram.
# Apache Kafka runs with BENCH_BROKERS (1) brokers; with 3 the topic has three replicas and
# min.insync.replicas 2. BENCH_ONLY=lag runs part 3 alone. BENCH_ONSALE_BIN runs another build of
# `onsale` (another commit's release build, for a before-and-after in the same conditions).
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-bench-reads.XXXXXX)
PG_PORT=${BENCH_PG_PORT:-54359}
KAFKA_PORT=${BENCH_KAFKA_PORT:-19359}
LISTEN=${BENCH_LISTEN:-127.0.0.1:8099}
NGINX=${BENCH_NGINX_LISTEN:-127.0.0.1:8098}
METRICS=127.0.0.1:9199
SECS=${BENCH_SECONDS:-10}
CLIENTS=${BENCH_CLIENTS:-64}
REPEAT=${BENCH_REPEAT:-3}
SUBSCRIBERS=${BENCH_SSE_SUBSCRIBERS:-10000}
# Attempts per second; a few are 409s (a uniformly drawn seat already held), so the default
# sends a little more than 2,000 for 2,000 granted holds a second.
RATE=${BENCH_HOLD_RATE:-2200}
BROKERS=${BENCH_BROKERS:-1}
ONLY=${BENCH_ONLY:-all}
OUT=$ROOT/target/bench
mkdir -p "$OUT" "$DIR/www"
# nginx's workers run as www-data: they must be able to read the files.
chmod 755 "$DIR" "$DIR/www"
RESULTS=$OUT/reads.jsonl
: >"$RESULTS"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
NGINX_BIN=$(command -v nginx || echo /usr/sbin/nginx)
cleanup() {
  for p in serve relay project; do [ -f "$DIR/$p.pid" ] && kill "$(cat "$DIR/$p.pid")" 2>/dev/null; done
  [ -f "$DIR/nginx.pid" ] && kill "$(cat "$DIR/nginx.pid")" 2>/dev/null
  "$ROOT/scripts/stack.sh" broker-down "$DIR"
  "$ROOT/scripts/stack.sh" pg-down "$DIR"
}
trap cleanup EXIT
PG_MAX_CONNECTIONS=400 "$ROOT/scripts/stack.sh" pg-up "$DIR" "$PG_PORT"
"$ROOT/scripts/stack.sh" broker-up "$DIR" "$KAFKA_PORT" "$BROKERS"
BOOTSTRAP=$(for i in $(seq 0 $((BROKERS - 1))); do printf '127.0.0.1:%s,' $((KAFKA_PORT + i)); done)
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
BIN=$ROOT/target/release
ONSALE_BIN=${BENCH_ONSALE_BIN:-$BIN/onsale}
start() { # name args...
  local name=$1
  shift
  DATABASE_URL="postgres://onsale@127.0.0.1:$PG_PORT/onsale" ONSALE_KAFKA_BROKERS="${BOOTSTRAP%,}" \
    ONSALE_EVENTS_REPLICATION=$((BROKERS >= 3 ? 3 : 1)) \
    ONSALE_LISTEN=$LISTEN ONSALE_GRPC_LISTEN=127.0.0.1:50099 RUST_LOG=warn "$ONSALE_BIN" "$@" >"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
}
start serve serve
start relay relay
start project project --metrics-listen "$METRICS"
for _ in $(seq 1 150); do curl -fsS "http://$LISTEN/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "http://$LISTEN/readyz" >/dev/null || { cat "$DIR"/*.log >&2; exit 1; }

record() { # json key=value...
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(a.split("=",1) for a in sys.argv[2:]); print(json.dumps(d))' "$@" >>"$RESULTS"
}

# 1. Snapshots.
if [ "$ONLY" = all ]; then
event=$("$BIN/onsale-loadgen" setup --base "http://$LISTEN" --ttl 600 --tokens 1 --tokens-file "$DIR/t.txt")
for _ in $(seq 1 100); do curl -fsS "http://$LISTEN/v1/events/$event/seats" -o /dev/null 2>/dev/null && break; sleep 0.2; done
curl -fsS "http://$LISTEN/v1/events/$event/seats" -o "$DIR/www/counts.json"
curl -fsS "http://$LISTEN/v1/events/$event/seats?section=101" -o "$DIR/www/section.json"
cat >"$DIR/nginx.conf" <<CONF
worker_processes 2;
pid $DIR/nginx.pid;
error_log $DIR/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nodelay on;
  keepalive_requests 1000000;
  types { application/json json; }
  server {
    listen $NGINX;
    root $DIR/www;
    location / { add_header Cache-Control "public, max-age=1"; etag on; }
  }
}
CONF
"$NGINX_BIN" -c "$DIR/nginx.conf"
for rep in $(seq 1 "$REPEAT"); do
  for kind in counts section; do
    if [ "$kind" = counts ]; then path="/v1/events/$event/seats"; else path="/v1/events/$event/seats?section=101"; fi
    echo "== run $rep: $kind map, $CLIENTS clients"
    json=$(BENCH_PATH=$path wrk -t2 -c"$CLIENTS" -d"${SECS}s" -s "$ROOT/scripts/bench/get.lua" "http://$LISTEN" | tail -1)
    record "$json" bench=snapshot kind=$kind server=onsale
    json=$(BENCH_PATH=/$kind.json wrk -t2 -c"$CLIENTS" -d"${SECS}s" -s "$ROOT/scripts/bench/get.lua" "http://$NGINX" | tail -1)
    record "$json" bench=snapshot kind=$kind server=nginx
  done
done

# 2. SSE fan-out on the same show.
echo "== SSE: $SUBSCRIBERS subscribers"
json=$("$BIN/onsale-loadgen" bench-fanout --transport sse --base "http://$LISTEN" --event "$event" --section 101 --subscribers "$SUBSCRIBERS")
record "$json" bench=sse
fi

# 3. Lag under a fixed hold rate, on a fresh show.
echo "== lag at $RATE hold attempts/s"
lagevent=$("$BIN/onsale-loadgen" setup --base "http://$LISTEN" --ttl 2 --tokens 1 --tokens-file "$DIR/t.txt")
# Steady state, not the start: the brokers' JIT warms up and the projections' consumer groups
# get their partitions (on a fresh cluster Kafka first creates its offsets topic) under the
# same load, which is not counted.
"$BIN/onsale-loadgen" hold-rate --base "http://$LISTEN" --event "$lagevent" --rate "$RATE" --seconds "${BENCH_WARMUP_SECS:-10}" >/dev/null
sleep 2
curl -fsS "http://$METRICS/metrics" >"$DIR/before.txt"
load=$("$BIN/onsale-loadgen" hold-rate --base "http://$LISTEN" --event "$lagevent" --rate "$RATE" --seconds 20)
sleep 3
curl -fsS "http://$METRICS/metrics" >"$DIR/after.txt"
lag=$(python3 "$ROOT/scripts/bench/lag.py" "$DIR/before.txt" "$DIR/after.txt" seat_map)
record "$(python3 -c 'import json,sys; a=json.loads(sys.argv[1]); a.update(json.loads(sys.argv[2])); print(json.dumps(a))' "$load" "$lag")" bench=lag brokers="$BROKERS"
python3 "$ROOT/scripts/bench/reads_report.py" "$RESULTS" | tee "$OUT/reads.md"
