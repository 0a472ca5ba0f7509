#!/usr/bin/env bash
# make drill-bots (issue 29): the local stack (`make up`) with production rate limits (per
# account, per client address, reads; the address believed from the local proxy, 127.0.0.1, so
# the drill's fans and bots can say theirs in X-Forwarded-For), then `onsale-loadgen
# drill-bots`: honest fans hold and release seats of one show, calm, then beside bots flooding
# made-up ids of the hot show and of shows that do not exist, card-testing loops and reads
# without a token; it prints the fans' granted holds/s, p99 and 5xx calm versus storm and the
# bots' share of 429, and fails if a goal is missed. Then `bot-memory`: what one show remembers
# under each bot loop. Always stops the stack. DRILL_SECONDS sets each phase (15).
set -euo pipefail
export ONSALE_DEV_MODE=${ONSALE_DEV_MODE:-1}
export ONSALE_RATE_ACCOUNT_PER_SEC=10 ONSALE_RATE_ACCOUNT_BURST=20
export ONSALE_RATE_ADDRESS_PER_SEC=200 ONSALE_RATE_ADDRESS_BURST=400
export ONSALE_RATE_READ_ADDRESS_PER_SEC=100 ONSALE_RATE_READ_ADDRESS_BURST=200
export ONSALE_RATE_READ_ACCOUNT_PER_SEC=10 ONSALE_RATE_READ_ACCOUNT_BURST=30
export ONSALE_RATE_MISSES_PER_SEC=1 ONSALE_RATE_MISSES_BURST=20
export ONSALE_TRUSTED_PROXIES=127.0.0.1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
trap '"$ROOT/scripts/stack.sh" down >/dev/null 2>&1 || true' EXIT
"$ROOT/scripts/stack.sh" up
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
echo "## make drill-bots ($(date -u +%F), $(nproc) cores)"
echo
"$ROOT/target/release/onsale-loadgen" drill-bots --base "http://$LISTEN" \
  --seconds "${DRILL_SECONDS:-15}" --check
echo
"$ROOT/target/release/onsale-loadgen" bot-memory --rounds "${DRILL_MEMORY_ROUNDS:-100000}"
