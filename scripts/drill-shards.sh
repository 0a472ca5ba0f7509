#!/usr/bin/env bash
# make drill-shards [HA=1]: the stack on two write clusters (`make up SHARDS=2`; with HA=1 each a
# Patroni trio), an on-sale on three shows (A and C on shard 1, B on shard 2), shard 1's primary
# killed at a random moment (without HA it is started again DRILL_RESTORE_AFTER seconds later;
# with HA its trio promotes a standby and the killed node comes back as one), show C moved to
# shard 2 mid-sale with `onsale shard move`. The report, per show: acknowledged holds and orders
# checked in its shard's log (lost), seats sold twice, the write gap, the 503s clients retried,
# the seat map against a replay; and the moved show's hash chain on its new shard. Always stops
# the stack (its processes' logs are kept in target/drill-shards/). DRILL_SECONDS sets the
# sale's length (60).
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PG_PORT=${ONSALE_PG_PORT:-54329}
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
export HA=${HA:-0} SHARDS=2
# The processes' logs outlive the stack: target/drill-shards/.
stop() {
  mkdir -p "$ROOT/target/drill-shards"
  cp "${ONSALE_STACK_DIR:-/tmp/onsale-stack}"/*.log "$ROOT/target/drill-shards/" 2>/dev/null || true
  "$ROOT/scripts/stack.sh" down >/dev/null
}
trap stop EXIT
ulimit -n 65536 2>/dev/null || true
"$ROOT/scripts/stack.sh" up
MAIN="postgres://onsale@127.0.0.1:$PG_PORT/onsale"
URLS=$("$ROOT/scripts/stack.sh" shard-urls)
restore_after=${DRILL_RESTORE_AFTER:-10}
# With HA=1 the trio fails over by itself; the killed node returns once the new primary serves.
[ "$HA" = 1 ] && restore_after=${DRILL_RESTORE_AFTER:-40}
"$ROOT/target/release/onsale-loadgen" drill-shards --base "http://$LISTEN" \
  --database-url "$MAIN" --shard-url "$URLS" --seconds "${DRILL_SECONDS:-60}" \
  --kill "$ROOT/scripts/stack.sh kill-shard 1" \
  --restore "$ROOT/scripts/stack.sh start-shard 1" --restore-after "$restore_after" \
  --move-command "DATABASE_URL=$MAIN ONSALE_SHARD_URLS=$URLS $ROOT/target/release/onsale shard move --show {show} --to 2" \
  --processor "http://${ONSALE_PROCESSOR_LISTEN:-127.0.0.1:8090}"
