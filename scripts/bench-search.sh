#!/usr/bin/env bash
# make bench-search: the catalog search on BENCH_SHOWS (100,000) synthetic shows, queries/s and
# latency of one query mix (a performer's name, the same with a typo, a city, words and a city,
# a week and a status and a price bound) from BENCH_CLIENTS (16) clients for BENCH_SECONDS (20),
# BENCH_REPEAT (3) times, side by side in one run: PostgreSQL in process (the search function
# and its statement), PostgreSQL over HTTP (`onsale serve`, what a fan gets), and tantivy in
# process on an in-memory index of the same shows (ADR 013). Prints the medians.
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
  [ -f "$DIR/onsale.pid" ] && kill "$(cat "$DIR/onsale.pid")" 2>/dev/null || true
  "$ROOT/scripts/stack.sh" pg-down "$DIR"
}
trap cleanup EXIT
"$ROOT/scripts/stack.sh" pg-up "$DIR" "$PORT"
DB="postgres://onsale@127.0.0.1:$PORT/onsale"
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
(cd "$ROOT/loadgen/search-compare" && CARGO_TARGET_DIR=$ROOT/target/search-compare cargo build --release -q)
BIN=$ROOT/target/release
DATABASE_URL=$DB ONSALE_LISTEN=$LISTEN ONSALE_GRPC_LISTEN=127.0.0.1:50089 RUST_LOG=warn \
  "$BIN/onsale" serve >>"$DIR/onsale.log" 2>&1 &
echo $! >"$DIR/onsale.pid"
for _ in $(seq 1 100); do curl -fsS "http://$LISTEN/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
for rep in $(seq 1 "$REPEAT"); do
  "$BIN/onsale-loadgen" bench-search --database-url "$DB" --base "http://$LISTEN" --shows "$SHOWS" \
    --clients "$CLIENTS" --seconds "$SECS" --export "$DIR/data" | tee -a "$RESULTS"
  "$ROOT/target/search-compare/release/search-compare" "$DIR/data" "$CLIENTS" "$SECS" | tee -a "$RESULTS"
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
