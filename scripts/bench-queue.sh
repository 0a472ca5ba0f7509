#!/usr/bin/env bash
# make bench-queue: the waiting room on one machine, in one run:
#   the admitter's tick time with 1,000 to 1,000,000 queued positions (it must stay flat),
#   joins/s through the REST API into a line of 1,000,000, and the live-session count against
#   N during a simulated on-sale (fans wait, enter, keep their 3 s lease, walk away).
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-bench-queue.XXXXXX)
PORT=${BENCH_PG_PORT:-54359}
REDIS_PORT=${BENCH_REDIS_PORT:-16459}
LISTEN=${BENCH_LISTEN:-127.0.0.1:8079}
TARGET=${BENCH_QUEUE_TARGET:-200}
cleanup() {
  [ -f "$DIR/onsale.pid" ] && kill "$(cat "$DIR/onsale.pid")" 2>/dev/null || true
  "$ROOT/scripts/stack.sh" redis-down "$DIR"
  "$ROOT/scripts/stack.sh" pg-down "$DIR"
}
trap cleanup EXIT
ulimit -n 65536 2>/dev/null || true
"$ROOT/scripts/stack.sh" pg-up "$DIR" "$PORT"
"$ROOT/scripts/stack.sh" redis-up "$DIR" "$REDIS_PORT"
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
BIN=$ROOT/target/release
REDIS="redis://127.0.0.1:$REDIS_PORT/"
DATABASE_URL="postgres://onsale@127.0.0.1:$PORT/onsale" ONSALE_LISTEN=$LISTEN \
  ONSALE_GRPC_LISTEN=${BENCH_GRPC_LISTEN:-127.0.0.1:50079} ONSALE_REDIS_URL=$REDIS \
  ONSALE_ADMISSION_TARGET=$TARGET ONSALE_SESSION_LEASE_SECS=3 RUST_LOG=warn \
  "$BIN/onsale" serve >"$DIR/onsale.log" 2>&1 &
echo $! >"$DIR/onsale.pid"
for _ in $(seq 1 100); do curl -fsS "http://$LISTEN/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; commit $(cd "$ROOT" && git rev-parse --short HEAD)"
"$BIN/onsale-loadgen" bench-queue --base "http://$LISTEN" --redis-url "$REDIS" --target "$TARGET" \
  --clients "${BENCH_CLIENTS:-256}" --seconds "${BENCH_SECONDS:-10}" --fans "${BENCH_FANS:-3000}"
