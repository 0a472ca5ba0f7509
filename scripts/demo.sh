#!/usr/bin/env bash
# make demo: start the local stack, run a short on-sale of many simulated fans against the REST
# API, print what happened and the double-sale check, and always stop the stack.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PG_PORT=${ONSALE_PG_PORT:-54329}
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
trap '"$ROOT/scripts/stack.sh" down' EXIT
ulimit -n 65536 2>/dev/null || true
"$ROOT/scripts/stack.sh" up
(cd "$ROOT" && cargo build --release -q -p onsale-loadgen)
"$ROOT/target/release/onsale-loadgen" demo --base "http://$LISTEN" \
  --database-url "postgres://onsale@127.0.0.1:$PG_PORT/onsale" \
  --fans "${DEMO_FANS:-20000}" --concurrency "${DEMO_CONCURRENCY:-256}"
