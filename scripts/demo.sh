#!/usr/bin/env bash
# make demo: start the local stack, run a short on-sale of many simulated fans through the
# waiting room against the REST API, print what happened and the double-sale check, and always stop the stack.
# HA=1 runs it on replicated PostgreSQL, NODES=3 on three command nodes behind the router; further arguments go to the load generator
# (scripts/drill-failover.sh passes the failover drill's).
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PG_PORT=${ONSALE_PG_PORT:-54329}
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
trap '"$ROOT/scripts/stack.sh" down' EXIT
ulimit -n 65536 2>/dev/null || true
# The sale holds at most this many fans at once (the waiting room's N), fewer than the fans
# arriving together, so the line does its job; a short tick keeps the demo short.
ONSALE_ADMISSION_TARGET=${DEMO_ADMISSION_TARGET:-192} ONSALE_ADMISSION_TICK_MS=100 HA=${HA:-0} NODES=${NODES:-1} \
  "$ROOT/scripts/stack.sh" up
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
"$ROOT/target/release/onsale-loadgen" demo --base "http://$LISTEN" \
  --database-url "postgres://onsale@127.0.0.1:$PG_PORT/onsale" \
  --fans "${DEMO_FANS:-20000}" --concurrency "${DEMO_CONCURRENCY:-256}" \
  --ga-floor "${DEMO_GA_FLOOR:-5000}" --join-challenge-bits "${DEMO_JOIN_BITS:-12}" "$@"
# The sale just run, in a browser: at a terminal the stack stays up until Enter (DEMO_BROWSE=0:
# never; the drills).
echo
echo "the fan app: http://$LISTEN/ (sign in with any name); the ops console: http://$LISTEN/ops (sign in as an admin)"
if [ "${DEMO_BROWSE:-1}" = 1 ] && [ -t 0 ] && [ -t 1 ] && [ -z "${CI:-}" ]; then
  read -r -p "the stack stays up to browse the sale just run; press Enter to stop it " _
else
  echo "(the stack stops now; \`make up\` starts it again to browse)"
fi
