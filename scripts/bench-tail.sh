#!/usr/bin/env bash
# make bench-tail (issue 30): the hold path's tail on the whole local stack (`make up`:
# PostgreSQL, Kafka, Redis, the processor simulator, `onsale serve` with its relay,
# projections, sweeper and monitor), measured open loop: `onsale-loadgen bench-tail` finds the
# maximum rate with every connection busy (TAIL_MAX_SECONDS, 30), then sends 1-seat holds of a
# 50,000-seat show (2 s TTL) at TAIL_POINTS percent of it (50,70,90), TAIL_SECONDS each (120),
# over TAIL_CONNECTIONS connections (1000), each hold timed from when it was due; TAIL_RATES
# adds points at absolute rates (holds a second: two builds compared at one load). After each
# run, the server's own figures: its mean time per hold, how late the owner's sweeps took
# lapsed holds (onsale_sweep_lag_seconds) and the monitor's expiry lag (read from the
# projection, so it includes the projection's lag).
set -euo pipefail
export ONSALE_DEV_MODE=${ONSALE_DEV_MODE:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
trap '"$ROOT/scripts/stack.sh" down >/dev/null 2>&1 || true' EXIT
"$ROOT/scripts/stack.sh" up
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
echo "## make bench-tail ($(date -u +%F), $(nproc) cores, $(git -C "$ROOT" rev-parse --short HEAD))"
echo
"$ROOT/target/release/onsale-loadgen" bench-tail --base "http://$LISTEN" \
  --connections "${TAIL_CONNECTIONS:-1000}" --max-seconds "${TAIL_MAX_SECONDS:-30}" \
  --points "${TAIL_POINTS:-50,70,90}" --seconds "${TAIL_SECONDS:-120}" \
  ${TAIL_RATES:+--rates "$TAIL_RATES"}
echo
echo "the server's own figures after the run:"
curl -fsS "http://$LISTEN/metrics" \
  | grep -E '^onsale_hold_seconds_(sum|count)|^onsale_hold_expiry_lag_seconds|^onsale_sweep_lag_seconds_(sum|count)|^onsale_sweep_lag_seconds_bucket\{le="(0.5|1|2|5|\+Inf)"\}' || true
