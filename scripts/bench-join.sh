#!/usr/bin/env bash
# make bench-join: what a waiting-room join costs when the show asks a proof of work (issue 18),
# side by side in one run at BENCH_BITS (16 20: 20 is the size onsale recommends): the fan's
# search in Chromium (the app's own worker, as built into web/dist), the same search natively
# (Rust, one core: what an attacker's machine does per core), and the server's check of a
# solved challenge (MAC, claims, one hash; the spend in Redis is apart). BENCH_RUNS (30 native,
# 15 in the browser) fresh challenges per size; medians, 90th percentiles and the slowest.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BITS=${BENCH_BITS:-16 20}
RUNS=${BENCH_RUNS:-30}
BROWSER_RUNS=${BENCH_BROWSER_RUNS:-15}
OUT=$ROOT/target/bench
mkdir -p "$OUT"
RESULTS=$OUT/join.jsonl
: >"$RESULTS"
CHROMIUM=$("$ROOT/scripts/stack.sh" browser-tools)
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
ONSALE_BIN=$ROOT/target/release/onsale "$ROOT/scripts/web.sh" >/dev/null
for bits in $BITS; do
  "$ROOT/target/release/onsale-loadgen" bench-join --bits "$bits" --runs "$RUNS" | tee -a "$RESULTS"
  (cd "$ROOT/web" && CHROMIUM=$CHROMIUM BITS=$bits RUNS=$BROWSER_RUNS node e2e/pow-bench.mjs) | tee -a "$RESULTS"
done
python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| bits | client | runs | median ms | p90 ms | slowest ms | hashes/s | server check µs (median, p99) |")
print("|---:|---|---:|---:|---:|---:|---:|---|")
for r in sorted(rows, key=lambda r: (r["bits"], r["client"])):
    check = f'{r["check_us_median"]:.1f}, {r["check_us_p99"]:.1f}' if "check_us_median" in r else "-"
    print(f'| {r["bits"]} | {r["client"]} | {r["runs"]} | {r["solve_ms_median"]:.0f} | {r["solve_ms_p90"]:.0f} | '
          f'{r["solve_ms_max"]:.0f} | {r["hashes_per_s"]:,.0f} | {check} |')
PY
