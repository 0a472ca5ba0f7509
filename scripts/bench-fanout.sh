#!/usr/bin/env bash
# make bench-fanout (issue 30): FANOUT_SUBSCRIBERS (50,000) subscribers of one 50,000-seat show
# on the one `onsale serve` of the whole local stack (`make up`): over SSE on HTTP/2 (as a
# browser's EventSources to one origin; FANOUT_STREAMS_PER_CONNECTION, 200, streams on each
# connection), over gRPC StreamDeltas (the same), and over SSE on HTTP/1.1, a connection each,
# FANOUT_H1_SUBSCRIBERS of them (18,000: a process here may open 20,000 files at most, a hard
# limit only a privileged process may raise). Once all are connected, FANOUT_HOLDS (30) holds
# one every FANOUT_INTERVAL_MS (700); for every (subscriber, hold) pair the time from sending the
# hold to the delta that shows it, and the serving process's memory per subscriber (a fresh
# process each time: its resident memory before and after they connected). Connections come
# from four loopback addresses (one address has about 28,000 ephemeral ports).
set -euo pipefail
export ONSALE_DEV_MODE=${ONSALE_DEV_MODE:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SUBSCRIBERS=${FANOUT_SUBSCRIBERS:-50000}
# Every connection is a socket on each side, in this shell's children.
ulimit -n "$(ulimit -Hn)"
# One serving process sized for them: its stream and connection caps above the subscribers.
export ONSALE_MAX_STREAMS=$((SUBSCRIBERS + 10000))
export ONSALE_MAX_CONNECTIONS=$((SUBSCRIBERS + 10000))
STACK_DIR=${ONSALE_STACK_DIR:-/tmp/onsale-stack}
trap '"$ROOT/scripts/stack.sh" down >/dev/null 2>&1 || true' EXIT
"$ROOT/scripts/stack.sh" up
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
GRPC_LISTEN=${ONSALE_GRPC_LISTEN:-127.0.0.1:50051}
echo "## make bench-fanout ($(date -u +%F), $(nproc) cores, $(git -C "$ROOT" rev-parse --short HEAD))"
run() {
  # A fresh serving process for each: its memory before and after is the subscribers' alone.
  "$ROOT/scripts/stack.sh" restart-onsale
  "$ROOT/target/release/onsale-loadgen" bench-fanout "$@" \
    --base "http://$LISTEN" --grpc "http://$GRPC_LISTEN" \
    --local-addrs 127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4 \
    --streams-per-connection "${FANOUT_STREAMS_PER_CONNECTION:-200}" \
    --holds "${FANOUT_HOLDS:-30}" --interval-ms "${FANOUT_INTERVAL_MS:-700}" \
    --server-pid "$(cat "$STACK_DIR/onsale.pid")"
}
run --transport sse --http2 --subscribers "$SUBSCRIBERS"
run --transport grpc --subscribers "$SUBSCRIBERS"
run --transport sse --subscribers "${FANOUT_H1_SUBSCRIBERS:-18000}"
