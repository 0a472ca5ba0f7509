#!/usr/bin/env bash
# make bench-search: the catalog search on BENCH_SHOWS (100,000) synthetic shows, queries/s and
# latency of one query mix (a performer's name, the same with a typo, a city, words and a city,
# a week and a status and a price bound) from BENCH_CLIENTS (16) clients for BENCH_SECONDS (20),
# BENCH_REPEAT (3) times, side by side in one run: PostgreSQL in process (the search function
# and its statement), PostgreSQL over HTTP (`onsale serve` with ONSALE_SEARCH_INDEX=0, ADR 013),
# the search index over HTTP (another `onsale serve`, its index following the same catalog, ADR
# 033), and type-ahead on it (prefixes of 1-6 letters, a typo in one of three). Both serve
# processes run throughout; the one not measured is idle. Prints the medians. Then freshness,
# with the relay and the projector running on a broker of its own: BENCH_FRESH_SHOWS (50) shows
# scheduled, sold out and released one after another, each timed from its acknowledged write
# to the first search (on the index, among the synthetic shows) that says so.
set -euo pipefail
export ONSALE_DEV_MODE=${ONSALE_DEV_MODE:-1}
export ONSALE_RATE_ADDRESS_PER_SEC=0
export ONSALE_RATE_READ_ADDRESS_PER_SEC=0
export ONSALE_RATE_READ_ACCOUNT_PER_SEC=0
export ONSALE_RATE_MISSES_PER_SEC=0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-bench-search.XXXXXX)
PORT=${BENCH_PG_PORT:-54349}
KAFKA_PORT=${BENCH_KAFKA_PORT:-19389}
FRESH=${BENCH_FRESH_SHOWS:-50}
LISTEN=${BENCH_LISTEN:-127.0.0.1:8089}
SHOWS=${BENCH_SHOWS:-100000}
SECS=${BENCH_SECONDS:-20}
CLIENTS=${BENCH_CLIENTS:-16}
REPEAT=${BENCH_REPEAT:-3}
OUT=$ROOT/target/bench
mkdir -p "$OUT"
RESULTS=$OUT/search.txt
: >"$RESULTS"
: >"$OUT/search-memory.txt"
cleanup() {
  for p in "$DIR"/onsale-*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  "$ROOT/scripts/stack.sh" broker-down "$DIR"
  "$ROOT/scripts/stack.sh" pg-down "$DIR"
}
trap cleanup EXIT
"$ROOT/scripts/stack.sh" pg-up "$DIR" "$PORT"
"$ROOT/scripts/stack.sh" broker-up "$DIR" "$KAFKA_PORT" 1
DB="postgres://onsale@127.0.0.1:$PORT/onsale"
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
BIN=$ROOT/target/release
INDEXED=${BENCH_INDEX_LISTEN:-127.0.0.1:8090}
# start NAME LISTEN GRPC INDEX COMMAND...: one onsale process on the catalog, a server with or
# without its search index, or the relay or the projector.
start() {
  local name=$1 listen=$2 grpc=$3 index=$4
  shift 4
  DATABASE_URL=$DB ONSALE_KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT ONSALE_LISTEN=$listen \
    ONSALE_GRPC_LISTEN=$grpc ONSALE_SEARCH_INDEX=$index RUST_LOG=warn \
    "$BIN/onsale" "$@" >>"$DIR/onsale-$name.log" 2>&1 &
  echo $! >"$DIR/onsale-$name.pid"
}
start sql "$LISTEN" 127.0.0.1:50089 0 serve
start index "$INDEXED" 127.0.0.1:50090 1 serve
for _ in $(seq 1 100); do curl -fsS "http://$LISTEN/healthz" >/dev/null 2>&1 &&
  curl -fsS "http://$INDEXED/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
# What holding the index costs in memory: each server's resident set after a run.
resident() {
  for name in sql index; do
    echo "after run $1: $name serve $(ps -o rss= -p "$(cat "$DIR/onsale-$name.pid")" | awk '{printf "%.0f MiB", $1 / 1024}') resident" |
      tee -a "$OUT/search-memory.txt"
  done
}
for rep in $(seq 1 "$REPEAT"); do
  "$BIN/onsale-loadgen" bench-search --database-url "$DB" --base "http://$LISTEN" \
    --index-base "http://$INDEXED" --shows "$SHOWS" --clients "$CLIENTS" --seconds "$SECS" \
    | tee -a "$RESULTS"
  resident "$rep"
done
start relay 127.0.0.1:0 127.0.0.1:0 0 relay
start project 127.0.0.1:0 127.0.0.1:0 0 project --metrics-listen 127.0.0.1:0
"$BIN/onsale-loadgen" search-freshness --base "http://$INDEXED" --shows "$FRESH" | tee "$OUT/search-freshness.md"
python3 - "$RESULTS" "$SHOWS" <<'PY' | tee "$OUT/search.md"
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("| "):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.setdefault(cells[0], []).append([float(c) for c in cells[1:]])
print(f"| {sys.argv[2]} shows | clients | runs | queries/s | p50 ms | p99 ms | empty answers |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, runs in rows.items():
    med = lambda i: statistics.median(r[i] for r in runs)
    print(f"| {name} | {int(runs[0][0])} | {len(runs)} | {med(2):,.0f} | {med(3):.2f} | {med(4):.2f} | {med(5) / med(1):.0%} |")
PY
