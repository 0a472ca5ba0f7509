#!/usr/bin/env bash
# make bench-limits: what the per-account rate limit costs the REST hold path (it verifies the
# bearer token once more and takes a GCRA cell per request), side by side in one run: onsale as
# it ships (limits on) against the same binary with the rate limits off, BENCH_REPEAT (3)
# interleaved runs each of BENCH_SECONDS (10) with BENCH_CLIENTS (64) wrk connections of
# 1-seat holds over 20,000 fans on a 50,000-seat show. The per-address limit is off in both
# (every request comes from 127.0.0.1). Prints medians and the ratio.
set -euo pipefail
export ONSALE_DEV_MODE=${ONSALE_DEV_MODE:-1}
export ONSALE_RATE_ADDRESS_PER_SEC=0
export ONSALE_RATE_READ_ADDRESS_PER_SEC=0
export ONSALE_RATE_READ_ACCOUNT_PER_SEC=0
export ONSALE_RATE_MISSES_PER_SEC=0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-bench-limits.XXXXXX)
PORT=${BENCH_PG_PORT:-54348}
LISTEN=${BENCH_LISTEN:-127.0.0.1:8088}
SECS=${BENCH_SECONDS:-10}
CLIENTS=${BENCH_CLIENTS:-64}
REPEAT=${BENCH_REPEAT:-3}
OUT=$ROOT/target/bench
mkdir -p "$OUT"
RESULTS=$OUT/limits.jsonl
: >"$RESULTS"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cleanup() {
  [ -f "$DIR/onsale.pid" ] && kill "$(cat "$DIR/onsale.pid")" 2>/dev/null || true
  "$ROOT/scripts/stack.sh" pg-down "$DIR"
}
trap cleanup EXIT
PG_MAX_CONNECTIONS=400 "$ROOT/scripts/stack.sh" pg-up "$DIR" "$PORT"
DB="postgres://onsale@127.0.0.1:$PORT/onsale"
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
BIN=$ROOT/target/release
for rep in $(seq 1 "$REPEAT"); do
  for limits in on off; do
    rate=10; [ "$limits" = off ] && rate=0
    psql -qc "VACUUM ANALYZE" -c "CHECKPOINT" "$DB" >/dev/null
    TOKIO_WORKER_THREADS=1 DATABASE_URL=$DB ONSALE_LISTEN=$LISTEN ONSALE_GRPC_LISTEN=127.0.0.1:50088 \
      ONSALE_RATE_ACCOUNT_PER_SEC=$rate RUST_LOG=warn "$BIN/onsale" serve >>"$DIR/onsale.log" 2>&1 &
    echo $! >"$DIR/onsale.pid"
    for _ in $(seq 1 100); do curl -fsS "http://$LISTEN/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
    event=$("$BIN/onsale-loadgen" setup --base "http://$LISTEN" --ttl 1 --tokens 20000 --tokens-file "$DIR/tokens.txt")
    json=$(BENCH_EVENT=$event BENCH_SEATS=1 BENCH_DIST=uniform BENCH_TOKENS=$DIR/tokens.txt \
      wrk -t2 -c"$CLIENTS" -d"${SECS}s" --timeout 10s -s "$ROOT/scripts/bench/hold.lua" "http://$LISTEN" | tail -1)
    echo "run $rep, limits $limits: $json"
    python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d["limits"]=sys.argv[1]; print(json.dumps(d))' "$limits" "$json" >>"$RESULTS"
    kill "$(cat "$DIR/onsale.pid")"; rm -f "$DIR/onsale.pid"; sleep 0.5
  done
done
python3 - "$RESULTS" <<'PY' | tee "$OUT/limits.md"
import json, statistics, sys
runs = {"on": [], "off": []}
for line in open(sys.argv[1]):
    r = json.loads(line)
    r["attempts"] = r["requests"] / r["seconds"]
    r["limited"] = r["non2xx"] / r["seconds"]
    runs[r["limits"]].append(r)
med = lambda k, f: statistics.median(r[f] for r in runs[k])
print("| rate limits | runs | attempts/s | non-2xx/s | p50 ms | p99 ms |")
print("|---|---:|---:|---:|---:|---:|")
for k in ("on", "off"):
    print(f'| {k} | {len(runs[k])} | {med(k, "attempts"):.0f} | {med(k, "limited"):.0f} | {med(k, "p50_ms"):.2f} | {med(k, "p99_ms"):.2f} |')
print(f'\non/off attempts/s: {med("on", "attempts") / med("off", "attempts"):.2f}x')
PY
