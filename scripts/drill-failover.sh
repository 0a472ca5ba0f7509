#!/usr/bin/env bash
# make drill-failover: the demo on replicated PostgreSQL (`make up HA=1`): an on-sale of fans
# through the waiting room (holds, orders, payments through the simulator), the primary's
# machine killed at a random moment (`scripts/stack.sh kill-primary`), then the report: seconds
# without an acknowledged write, every acknowledged hold and order looked up in the new
# primary's log (lost: 0), seats in two paid orders, charges per order, orders still pending,
# the seat map against a replay. Always stops the stack. DRILL_FANS sets the crowd (6,000).
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEMO_BROWSE=0 HA=1 DEMO_FANS=${DRILL_FANS:-6000} exec "$ROOT/scripts/demo.sh" \
  --kill-primary "$ROOT/scripts/stack.sh kill-primary"
