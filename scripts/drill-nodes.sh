#!/usr/bin/env bash
# make drill-nodes: the demo on three command nodes behind the router (`make up NODES=3`): an
# on-sale of fans through the waiting room (holds, orders, payments through the simulator), the
# node owning the show SIGKILLed at a random moment (`scripts/stack.sh kill-owner`), then the
# report: seconds without an acknowledged write, every acknowledged hold and order looked up in
# the log (lost: 0), seats in two paid orders, charges per order, orders still pending, the seat
# map against a replay. Always stops the stack. DRILL_FANS sets the crowd (6,000).
# PAUSE=20: the node is paused (SIGSTOP) for 20 s instead, another node takes the show, and then
# it runs on (SIGCONT) with its stale decisions, which the fence must refuse.
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
action="kill-owner"
[ -n "${PAUSE:-}" ] && action="pause-owner $PAUSE"
DEMO_BROWSE=0 NODES=3 DEMO_FANS=${DRILL_FANS:-6000} exec "$ROOT/scripts/demo.sh" \
  --kill-node "$ROOT/scripts/stack.sh $action"
