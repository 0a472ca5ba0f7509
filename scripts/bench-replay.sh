#!/usr/bin/env bash
# make bench-replay: a log of BENCH_SHOWS (200) shows x BENCH_EVENTS (50,000) events, ten
# million, folded back into shows BENCH_REPEAT (3) times, side by side in one run: from the
# store (EventLog::replay of every show, BENCH_CONCURRENCY (2) at once), from the topic (read
# from offset 0 and folded per show), and the same rows read raw with COPY (the limit). Its
# own PostgreSQL and broker; the log is generated (COPY) and published (the relay's gap fill)
# first, outside the figures. Prints the medians (events/s) into target/bench/replay.md, then
# runs `onsale export` of the whole log once more as its own process: its time and peak
# memory (the export streams: its memory does not grow with the log).
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
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
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
DATABASE_URL="postgres://onsale@127.0.0.1:$PORT/onsale" ONSALE_DEV_MODE=1 \
  python3 - "$ROOT/target/release/onsale" "$DIR/export" <<'PY' | tee -a "$OUT/replay.md"
import json, resource, subprocess, sys, time
started = time.monotonic()
subprocess.run([sys.argv[1], "export", "--out", sys.argv[2], "--quiet", "--allow-development-pseudonym-key"], check=True,
               stdout=subprocess.DEVNULL)
secs = time.monotonic() - started
rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
m = json.load(open(f"{sys.argv[2]}/manifest.json"))
size = sum(f["bytes"] for f in m["files"]) / 2**20
print(f"\n`onsale export` (its own process): {m['events']:,} events in {secs:.1f} s "
      f"({m['events'] / secs:,.0f} events/s), {len(m['files'])} Parquet files of {size:,.0f} MiB, "
      f"peak resident memory {rss_mb:,.0f} MiB")
PY
