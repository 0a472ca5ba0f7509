#!/usr/bin/env bash
# make drill-failover: the local stack on replicated PostgreSQL (`make up HA=1`), the demo's
# on-sale of fans through the waiting room (holds, orders, payments through the simulator), the
# primary's machine killed at a random moment (`scripts/stack.sh kill-primary`), then the
# report: seconds without an acknowledged write, every acknowledged hold and order looked up in
# the new primary's log (lost: 0), seats in two paid orders, charges per order, orders still
# pending, the seat map against a replay. Always stops the stack.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PG_PORT=${ONSALE_PG_PORT:-54329}
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
trap '"$ROOT/scripts/stack.sh" down' EXIT
ulimit -n 65536 2>/dev/null || true
ONSALE_ADMISSION_TARGET=${DEMO_ADMISSION_TARGET:-192} ONSALE_ADMISSION_TICK_MS=100 HA=1 \
  "$ROOT/scripts/stack.sh" up
(cd "$ROOT" && cargo build --release -q -p onsale-loadgen)
"$ROOT/target/release/onsale-loadgen" demo --base "http://$LISTEN" \
  --database-url "postgres://onsale@127.0.0.1:$PG_PORT/onsale" \
  --fans "${DRILL_FANS:-6000}" --concurrency "${DEMO_CONCURRENCY:-256}" \
  --kill-primary "$ROOT/scripts/stack.sh kill-primary"
