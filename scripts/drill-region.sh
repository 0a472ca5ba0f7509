#!/usr/bin/env bash
# make drill-region (docs/adr/024): two regions (`make up REGIONS=2`), fans buying through the
# region router while region a writes; at a random moment region a goes dark (its processes,
# PostgreSQL and Kafka stopped) and region b is promoted (`onsale region promote`); the sale
# goes on in b; then a comes back as b's standby and is sent writes directly. The report: every
# acknowledged hold and order looked up in b's log, seats sold twice, orders charged twice,
# the write gap, what a answered after it came back. Always stops the stack. DRILL_FANS (64)
# fans for DRILL_SECONDS (60).
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STACK="$ROOT/scripts/stack.sh"
trap '"$STACK" down' EXIT
export REGIONS=2 SHARDS=${SHARDS:-1}
"$STACK" up
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
# Region b's databases: its main one and, with SHARDS=2, its shards (where the shows' logs are).
shards=$("$STACK" region-b-shard-urls)
export DATABASE_URL="postgres://onsale@127.0.0.1:${ONSALE_REGION_B_PG_PORT:-54529}/onsale"
if [ -n "$shards" ]; then export ONSALE_SHARD_URLS=$shards; else unset ONSALE_SHARD_URLS; fi
"$ROOT/target/release/onsale-loadgen" drill-region \
  --base "http://${ONSALE_REGION_LISTEN:-127.0.0.1:8070}" \
  --region-a "http://${ONSALE_LISTEN:-127.0.0.1:8080}" \
  --fans "${DRILL_FANS:-64}" --seconds "${DRILL_SECONDS:-60}" \
  --cut "$STACK fail-region a && $STACK promote-region b" \
  --rejoin "$STACK rejoin-region a"
