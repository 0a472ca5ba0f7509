#!/usr/bin/env bash
# make bench-replay: a log of BENCH_SHOWS (200) shows x BENCH_EVENTS (50,000) events, ten
# million, folded back into shows BENCH_REPEAT (3) times, side by side in one run: from the
# store (EventLog::replay of every show, BENCH_CONCURRENCY (2) at once), from the topic (read
# from offset 0 and folded per show), and the same rows read raw with COPY (the limit). Its
# own PostgreSQL and broker; the log is generated (COPY) and published (the relay's backfill)
# first, outside the figures. Prints the medians (events/s) into target/bench/replay.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-bench-replay.XXXXXX)
PORT=${BENCH_PG_PORT:-54347}
KAFKA=${BENCH_KAFKA_PORT:-19447}
SHOWS=${BENCH_SHOWS:-200}
EVENTS=${BENCH_EVENTS:-50000}
REPEAT=${BENCH_REPEAT:-3}
CONCURRENCY=${BENCH_CONCURRENCY:-2}
OUT=$ROOT/target/bench
mkdir -p "$OUT"
RESULTS=$OUT/replay.txt
: >"$RESULTS"
cleanup() {
  "$ROOT/scripts/stack.sh" broker-down "$DIR" || true
  "$ROOT/scripts/stack.sh" pg-down "$DIR"
}
trap cleanup EXIT
"$ROOT/scripts/stack.sh" pg-up "$DIR" "$PORT"
"$ROOT/scripts/stack.sh" broker-up "$DIR" "$KAFKA"
(cd "$ROOT" && cargo build --release -q -p onsale-loadgen)
"$ROOT/target/release/onsale-loadgen" bench-replay \
  --database-url "postgres://onsale@127.0.0.1:$PORT/onsale" --brokers "127.0.0.1:$KAFKA" \
  --shows "$SHOWS" --events "$EVENTS" --repeat "$REPEAT" --concurrency "$CONCURRENCY" | tee -a "$RESULTS"
python3 - "$RESULTS" "$SHOWS" "$EVENTS" <<'PY' | tee "$OUT/replay.md"
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("| "):
        name, events, secs, rate = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.setdefault(name, []).append((int(events), float(secs), float(rate)))
shows, per = int(sys.argv[2]), int(sys.argv[3])
print(f"| {shows} shows x {per:,} events | runs | events | seconds (median) | events/s (median) | vs COPY |")
print("|---|---:|---:|---:|---:|---:|")
copy = statistics.median(r[2] for r in rows.get("COPY raw (no decoding)", [(0, 0, 1)]))
for name, runs in rows.items():
    rate = statistics.median(r[2] for r in runs)
    print(f"| {name} | {len(runs)} | {runs[0][0]:,} | {statistics.median(r[1] for r in runs):.1f} | {rate:,.0f} | {rate / copy:.2f} |")
PY
