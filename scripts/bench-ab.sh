#!/usr/bin/env bash
# make bench-ab (issue 30): two builds or two settings of the service compared on one `make up`
# stack, in alternating rounds, at one open-loop rate. Each round restarts `onsale serve`, the
# relay and the projector (the processes `stack.sh` started: same arguments, same ONSALE_*,
# DATABASE_* and RUST_LOG environment) from AB_A_BIN / AB_B_BIN (default: this tree's release
# build) with AB_A / AB_B on top (assignments, e.g. AB_A="MIMALLOC_PURGE_DELAY=1000"), waits
# until the read side has folded the log, then sends 1-seat holds of a fresh 50,000-seat show
# (2 s TTL) at AB_RATE a second (4500) for AB_SECONDS (50) over 1,000 connections, with the CPU
# of each process over AB_CPU_SECONDS (20) of its middle (scripts/bench/cpu_by_process.py).
# AB_ROUNDS (3) rounds of A then B. Prints one row per run and the medians of each side.
set -euo pipefail
export ONSALE_DEV_MODE=${ONSALE_DEV_MODE:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STACK=/tmp/onsale-stack
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
# shellcheck source=bench/read_side.sh
. "$ROOT/scripts/bench/read_side.sh"
trap '"$ROOT/scripts/stack.sh" down >/dev/null 2>&1 || true' EXIT
"$ROOT/scripts/stack.sh" up
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
A_BIN=${AB_A_BIN:-$ROOT/target/release/onsale}
B_BIN=${AB_B_BIN:-$ROOT/target/release/onsale}
RATE=${AB_RATE:-4500}
SECONDS_EACH=${AB_SECONDS:-50}
CPU_SECONDS=${AB_CPU_SECONDS:-20}
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
DB=postgres://onsale@127.0.0.1:54329/onsale
OUT=$(mktemp -d)

# restart BIN [NAME=VALUE...]: each of the stack's service processes, from BIN with the
# assignments on top of the environment it was started with.
restart() {
  local bin=$1 pidf old args
  shift
  for pidf in "$STACK/onsale.pid" "$STACK/relay.pid" "$STACK/project.pid"; do
    old=$(cat "$pidf")
    mapfile -d '' -t args <"/proc/$old/cmdline"
    mapfile -t envs < <(tr '\0' '\n' <"/proc/$old/environ" | grep -E '^(ONSALE|DATABASE|RUST_LOG)')
    kill "$old"
    while kill -0 "$old" 2>/dev/null; do sleep 0.1; done
    env -i PATH="$PATH" HOME="$HOME" "${envs[@]}" "$@" setsid "$bin" "${args[@]:1}" \
      >>"${pidf%.pid}.log" 2>&1 </dev/null &
    echo $! >"$pidf"
  done
  for _ in $(seq 1 300); do
    curl -fsS -o /dev/null "http://$LISTEN/readyz" 2>/dev/null && return
    sleep 0.2
  done
  echo "onsale serve is not ready after 60 s" >&2
  exit 1
}

# point LABEL ROUND: one open-loop point with the CPU by process over its middle.
point() {
  local f="$OUT/$1-$2"
  read_side_folded "$DB"
  "$ROOT/target/release/onsale-loadgen" bench-tail --base "http://$LISTEN" --max-seconds 1 \
    --points 0 --rates "$RATE" --seconds "$SECONDS_EACH" --json | tail -1 >"$f.json" &
  local lg=$!
  sleep $(((SECONDS_EACH - CPU_SECONDS) / 2))
  python3 "$ROOT/scripts/bench/cpu_by_process.py" "$CPU_SECONDS" >"$f.cpu"
  wait "$lg"
  ps -o rss= -p "$(cat "$STACK/onsale.pid")" >"$f.rss"
}

echo "## make bench-ab ($(date -u +%F), $(nproc) cores, $(git -C "$ROOT" rev-parse --short HEAD))"
echo "A: ${AB_A:-(nothing on top)} $A_BIN"
echo "B: ${AB_B:-(nothing on top)} $B_BIN"
echo "$RATE holds/s open loop, ${SECONDS_EACH} s a point, 1,000 connections"
echo
for round in $(seq 1 "${AB_ROUNDS:-3}"); do
  # shellcheck disable=SC2086
  restart "$A_BIN" ${AB_A:-}
  point A "$round"
  # shellcheck disable=SC2086
  restart "$B_BIN" ${AB_B:-}
  point B "$round"
done
python3 "$ROOT/scripts/bench/ab_report.py" "$OUT"
