#!/usr/bin/env bash
# make bench-trace (issue 30, docs/adr/019): what tracing costs the hold path, on the whole
# local stack with Zipkin (`make up TRACING=1`). Rounds alternate the onsale processes without
# a collector (tracing off) and exporting TRACE_SAMPLE (0.1) of the requests to Zipkin, each
# round `onsale-loadgen bench-tail`'s maximum rate (closed loop, TRACE_MAX_SECONDS, 30) and one
# open-loop point at TRACE_POINT percent of it (50) for TRACE_SECONDS (60), over 1,000
# connections. TRACE_ROUNDS (3) of each; medians and their ratio at the end.
set -euo pipefail
export ONSALE_DEV_MODE=${ONSALE_DEV_MODE:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
trap '"$ROOT/scripts/stack.sh" down >/dev/null 2>&1 || true' EXIT
TRACING=1 TRACE_SAMPLE=${TRACE_SAMPLE:-0.1} "$ROOT/scripts/stack.sh" up
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
ZIPKIN=http://127.0.0.1:${ONSALE_ZIPKIN_PORT:-9411}
OUT=$(mktemp -d /tmp/bench-trace.XXXXXX)
echo "## make bench-trace ($(date -u +%F), $(nproc) cores, $(git -C "$ROOT" rev-parse --short HEAD))"
for round in $(seq 1 "${TRACE_ROUNDS:-3}"); do
  for mode in off on; do
    if [ "$mode" = on ]; then
      ONSALE_TRACE_ZIPKIN_URL="$ZIPKIN/api/v2/spans" ONSALE_TRACE_SAMPLE=${TRACE_SAMPLE:-0.1} \
        "$ROOT/scripts/stack.sh" restart-onsale
    else
      ONSALE_TRACE_ZIPKIN_URL='' "$ROOT/scripts/stack.sh" restart-onsale
    fi
    "$ROOT/target/release/onsale-loadgen" bench-tail --base "http://$LISTEN" --json \
      --connections 1000 --max-seconds "${TRACE_MAX_SECONDS:-30}" \
      --points "${TRACE_POINT:-50}" --seconds "${TRACE_SECONDS:-60}" >"$OUT/$mode-$round.json"
    echo "round $round, tracing $mode: $(cat "$OUT/$mode-$round.json" | tr '\n' ' ')"
  done
done
echo
echo "spans Zipkin holds: $(curl -fsS "$ZIPKIN/api/v2/services" || echo '?')"
python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
def rows(mode):
    return [[json.loads(l) for l in open(f) if l.strip()] for f in sorted(glob.glob(f"{out}/{mode}-*.json"))]
def median(mode, key):
    return statistics.median(r[key] for run in rows(mode) for r in run if key in r)
print("| median of the rounds | tracing off | sampled | sampled / off |")
print("|---|---:|---:|---:|")
for label, key in [("max answers/s (closed loop)", "max_per_sec"),
                   ("answered/s at the point", "answered_per_sec"),
                   ("p50 ms at the point", "p50_ms"),
                   ("p99 ms at the point", "p99_ms")]:
    off, on = median("off", key), median("on", key)
    print(f"| {label} | {off:.1f} | {on:.1f} | {on / off:.3f} |")
PY
