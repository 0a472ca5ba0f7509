#!/usr/bin/env bash
# make bench-search: the catalog search on BENCH_SHOWS (100,000) synthetic shows, queries/s and
# latency of one query mix (a performer's name, the same with a typo, a city, words and a city,
# a week and a status and a price bound) from BENCH_CLIENTS (16) clients for BENCH_SECONDS (20),
# BENCH_REPEAT (3) times, side by side in one run: PostgreSQL in process (the search function
# and its statement), PostgreSQL over HTTP (`onsale serve` with ONSALE_SEARCH_INDEX=0, ADR 013),
# the search index over HTTP (another `onsale serve`, its index following the same catalog, ADR
# 033), and type-ahead on it (prefixes of 1-6 letters, a typo in one of three). Both serve
# processes run throughout; the one not measured is idle. Prints the medians.
set -euo pipefail
export ONSALE_DEV_MODE=${ONSALE_DEV_MODE:-1}
export ONSALE_RATE_ADDRESS_PER_SEC=0
export ONSALE_RATE_READ_ADDRESS_PER_SEC=0
export ONSALE_RATE_READ_ACCOUNT_PER_SEC=0
export ONSALE_RATE_MISSES_PER_SEC=0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-bench-search.XXXXXX)
PORT=${BENCH_PG_PORT:-54349}
LISTEN=${BENCH_LISTEN:-127.0.0.1:8089}
SHOWS=${BENCH_SHOWS:-100000}
SECS=${BENCH_SECONDS:-20}
CLIENTS=${BENCH_CLIENTS:-16}
REPEAT=${BENCH_REPEAT:-3}
OUT=$ROOT/target/bench
mkdir -p "$OUT"
RESULTS=$OUT/search.txt
: >"$RESULTS"
cleanup() {
  for p in "$DIR"/onsale-*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  "$ROOT/scripts/stack.sh" pg-down "$DIR"
}
trap cleanup EXIT
"$ROOT/scripts/stack.sh" pg-up "$DIR" "$PORT"
DB="postgres://onsale@127.0.0.1:$PORT/onsale"
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
BIN=$ROOT/target/release
INDEXED=${BENCH_INDEX_LISTEN:-127.0.0.1:8090}
# serve NAME LISTEN GRPC INDEX: one `onsale serve` on the catalog, with or without its index.
serve() {
  DATABASE_URL=$DB ONSALE_LISTEN=$2 ONSALE_GRPC_LISTEN=$3 ONSALE_SEARCH_INDEX=$4 RUST_LOG=warn \
    "$BIN/onsale" serve >>"$DIR/onsale-$1.log" 2>&1 &
  echo $! >"$DIR/onsale-$1.pid"
  for _ in $(seq 1 100); do curl -fsS "http://$2/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
}
serve sql "$LISTEN" 127.0.0.1:50089 0
serve index "$INDEXED" 127.0.0.1:50090 1
for rep in $(seq 1 "$REPEAT"); do
  "$BIN/onsale-loadgen" bench-search --database-url "$DB" --base "http://$LISTEN" \
    --index-base "http://$INDEXED" --shows "$SHOWS" --clients "$CLIENTS" --seconds "$SECS" \
    | tee -a "$RESULTS"
done
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
