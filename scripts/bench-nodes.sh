#!/usr/bin/env bash
# make bench-nodes: hold attempts/s over many shows (BENCH_SHOWS, 20 shows of 50,000 seats, each
# request on a show drawn uniformly, 1-seat holds with a 1 s TTL so no show sells out), side by
# side in one run:
#   direct-1   one node, wrk straight at it
#   router-1   the same node behind the HAProxy router (the router's cost)
#   router-3   three nodes behind the router (each show's requests on its owner)
# BENCH_REPEAT (3) interleaved runs of BENCH_SECONDS (10) with BENCH_CLIENTS (256) connections;
# the report gives medians, and each node's RSS after its runs with the shows it owned. First,
# the memory of a loaded show: one node's RSS before and after each show took one hold (so its
# owner claimed and loaded it). BENCH_REPEAT=0 measures only that.
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-bench-nodes.XXXXXX)
PORT=${BENCH_PG_PORT:-54359}
SECS=${BENCH_SECONDS:-10}
CLIENTS=${BENCH_CLIENTS:-256}
REPEAT=${BENCH_REPEAT:-3}
SHOWS=${BENCH_SHOWS:-20}
HTTP_BASE=18180 GRPC_BASE=18250 INTERNAL_BASE=18380 ROUTER=127.0.0.1:18280
OUT=$ROOT/target/bench
mkdir -p "$OUT"
RESULTS=$OUT/nodes.jsonl
: >"$RESULTS"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
stop_nodes() {
  local f
  for f in "$DIR"/node*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; rm -f "$f"; done
  "$ROOT/scripts/stack.sh" router-down "$DIR"
  sleep 1
}
cleanup() { stop_nodes; "$ROOT/scripts/stack.sh" pg-down "$DIR"; }
trap cleanup EXIT
PG_MAX_CONNECTIONS=1200 "$ROOT/scripts/stack.sh" pg-up "$DIR" "$PORT"
DB="postgres://onsale@127.0.0.1:$PORT/onsale"
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
BIN=$ROOT/target/release

start_nodes() { # n
  local i
  for i in $(seq 1 "$1"); do
    TOKIO_WORKER_THREADS=${BENCH_SERVICE_THREADS:-1} DATABASE_URL=$DB ONSALE_LISTEN=127.0.0.1:$((HTTP_BASE + i)) \
      ONSALE_GRPC_LISTEN=127.0.0.1:$((GRPC_BASE + i)) ONSALE_INTERNAL_LISTEN=127.0.0.1:$((INTERNAL_BASE + i)) RUST_LOG=warn \
      "$BIN/onsale" serve >>"$DIR/node$i.log" 2>&1 &
    echo $! >"$DIR/node$i.pid"
  done
  for i in $(seq 1 "$1"); do
    for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$((HTTP_BASE + i))/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
  done
}
router() { # n
  "$ROOT/scripts/stack.sh" router-up "$DIR" "$ROUTER" 127.0.0.1:18281 "$1" "$HTTP_BASE" "$GRPC_BASE" >/dev/null
  for _ in $(seq 1 50); do curl -fsS "http://$ROUTER/healthz" >/dev/null 2>&1 && return; sleep 0.2; done
}
rss() { # n: "node rss_mb shows" per node
  local i pid
  for i in $(seq 1 "$1"); do
    pid=$(cat "$DIR/node$i.pid")
    echo "node$i $(($(awk '/VmRSS/ {print $2}' "/proc/$pid/status") / 1024)) $(psql -tAc "SELECT count(*) FROM show_owners o JOIN nodes n USING (node_id) WHERE n.addr = '127.0.0.1:$((INTERNAL_BASE + i))'" "$DB")"
  done
}

start_nodes 1
events=""
for s in $(seq 1 "$SHOWS"); do
  e=$("$BIN/onsale-loadgen" setup --base "http://127.0.0.1:$((HTTP_BASE + 1))" --ttl 1 --tokens 20000 --tokens-file "$DIR/tokens.txt")
  events="$events${events:+,}$e"
done
stop_nodes

# Memory per loaded show.
start_nodes 1
pid=$(cat "$DIR/node1.pid")
before=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
token=$(head -1 "$DIR/tokens.txt")
for e in ${events//,/ }; do
  curl -fsS -o /dev/null -X POST -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d '{"quantity":1}' "http://127.0.0.1:$((HTTP_BASE + 1))/v1/events/$e/holds"
done
after=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
echo "memory: node RSS $((before / 1024)) MB with no show loaded, $((after / 1024)) MB with $SHOWS shows of 50,000 seats loaded: $(( (after - before) / SHOWS / 1024 )) MB per show" | tee "$OUT/nodes-memory.txt"
stop_nodes

run() { # name nodes url
  psql -qc "VACUUM ANALYZE" -c "CHECKPOINT" "$DB" >/dev/null
  start_nodes "$2"
  [ "$1" = direct-1 ] || router "$2"
  # Every node loads its shows first (the first request of a show claims and loads it).
  BENCH_EVENTS=$events BENCH_SEATS=1 BENCH_TOKENS=$DIR/tokens.txt \
    wrk -t2 -c"$CLIENTS" -d2s --timeout 10s -s "$ROOT/scripts/bench/hold.lua" "$3" >/dev/null
  json=$(BENCH_EVENTS=$events BENCH_SEATS=1 BENCH_TOKENS=$DIR/tokens.txt \
    wrk -t2 -c"$CLIENTS" -d"${SECS}s" --timeout 10s -s "$ROOT/scripts/bench/hold.lua" "$3" | tail -1)
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(config=sys.argv[2], rss=sys.argv[3]); print(json.dumps(d))' \
    "$json" "$1" "$(rss "$2" | tr '\n' ';')" >>"$RESULTS"
  echo "$1: $json"
  stop_nodes
}
for rep in $(seq 1 "$REPEAT"); do
  echo "== run $rep"
  run direct-1 1 "http://127.0.0.1:$((HTTP_BASE + 1))"
  run router-1 1 "http://$ROUTER"
  run router-3 3 "http://$ROUTER"
done
[ "$REPEAT" -gt 0 ] || exit 0
python3 - "$RESULTS" <<'PY' | tee "$OUT/nodes.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| configuration | attempts/s (median) | p50 ms | p99 ms | non-2xx share | vs direct-1 | node RSS MB / shows owned (last run) |")
print("|---|---|---|---|---|---|---|")
base = None
for config in ["direct-1", "router-1", "router-3"]:
    rs = [r for r in rows if r["config"] == config]
    rate = statistics.median(r["requests"] / r["seconds"] for r in rs)
    base = base or rate
    p50 = statistics.median(r["p50_ms"] for r in rs)
    p99 = statistics.median(r["p99_ms"] for r in rs)
    refused = statistics.median(r["non2xx"] / max(r["requests"], 1) for r in rs)
    print(f"| {config} | {rate:,.0f} | {p50:.1f} | {p99:.1f} | {refused:.0%} | {rate / base:.2f}x | {rs[-1]['rss'].strip(';')} |")
PY
