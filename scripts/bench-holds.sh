#!/usr/bin/env bash
# make bench-holds: holds/s and latency on one 50,000-seat show, side by side in one run:
#   http     onsale's REST hold path, driven by wrk
#   command  onsale's command layer (owners + event store), driven in-process
#   pgbench  the design's guarded-UPDATE hold (design.md §3.1), on the same PostgreSQL
# for 1- and 4-seat holds, uniform and skewed demand, 64 and 1,000 concurrent clients.
# Every hold has a 1 s TTL so seats keep coming back and no run sells out. Each configuration
# runs BENCH_REPEAT times (3) interleaved; the report gives medians.
# HA=1: all three layers on a replicated primary (three nodes under Patroni, synchronous quorum
# commit ANY 1 of two standbys, through HAProxy), as `make up HA=1` runs it.
# STACK=1: the hold path as deployed: REST holds against the whole `make up` stack (its relay,
# projections, sweeper, monitor, Kafka and Redis all running on the same cores), pgbench on the
# stack's own PostgreSQL (a database of its own) right after each run, once the read side has
# caught up; 64 clients, 1-seat uniform holds unless BENCH_CLIENTS, BENCH_SEATS, BENCH_DISTS say
# otherwise. With HA=1 the stack (and so pgbench) is on the replicated primary. With STACK=1 each
# run also prints the machine's CPU per answered hold, from wrk's start until the read side has
# folded the run (its catch-up included), and pgbench's per guarded UPDATE: the machine's busy
# time (/proc/stat) less its idle load measured just before, over the attempts answered.
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-bench.XXXXXX)
PORT=${BENCH_PG_PORT:-54349}
LISTEN=${BENCH_LISTEN:-127.0.0.1:8089}
SECS=${BENCH_SECONDS:-10}
CLIENTS=${BENCH_CLIENTS:-64 1000}
REPEAT=${BENCH_REPEAT:-3}
OUT=$ROOT/target/bench
mkdir -p "$OUT"
HA=${HA:-0}
STACK=${STACK:-0}
SEATS=${BENCH_SEATS:-1 4}
DISTS=${BENCH_DISTS:-uniform skewed}
NAME=holds; [ "$HA" = 1 ] && NAME=holds-ha
if [ "$STACK" = 1 ]; then
  NAME=$NAME-stack
  CLIENTS=${BENCH_CLIENTS:-64}
  SEATS=${BENCH_SEATS:-1}
  DISTS=${BENCH_DISTS:-uniform}
  LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
  STACK_DB="postgres://onsale@127.0.0.1:${ONSALE_PG_PORT:-54329}"
fi
RESULTS=$OUT/$NAME.jsonl
: >"$RESULTS"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cleanup() {
  [ -f "$DIR/onsale.pid" ] && kill "$(cat "$DIR/onsale.pid")" 2>/dev/null || true
  if [ "$STACK" = 1 ]; then
    "$ROOT/scripts/stack.sh" down >/dev/null 2>&1 || true
  else
    "$ROOT/scripts/stack.sh" ha-down "$DIR/ha"
    "$ROOT/scripts/stack.sh" pg-down "$DIR"
  fi
}
trap cleanup EXIT
if [ "$STACK" = 1 ]; then
  HA=$HA "$ROOT/scripts/stack.sh" up
  psql -qc "DROP DATABASE IF EXISTS bench" -c "CREATE DATABASE bench" "$STACK_DB/postgres"
  DB=$STACK_DB/bench
elif [ "$HA" = 1 ]; then
  PG_MAX_CONNECTIONS=1200 "$ROOT/scripts/stack.sh" ha-up "$DIR/ha" "$PORT"
  DB="postgres://onsale@127.0.0.1:$PORT/onsale"
else
  PG_MAX_CONNECTIONS=1200 "$ROOT/scripts/stack.sh" pg-up "$DIR" "$PORT"
  DB="postgres://onsale@127.0.0.1:$PORT/onsale"
fi
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
BIN=$ROOT/target/release
GRPC_LISTEN=${BENCH_GRPC_LISTEN:-127.0.0.1:50089}
# shellcheck source=scripts/bench/service.sh
. "$ROOT/scripts/bench/service.sh"
psql -q "$DB" -f "$ROOT/scripts/bench/seats.sql" >/dev/null
if [ "$STACK" = 1 ]; then
  # The stack's service runs throughout; each configuration gets a show of its own.
  start_service() { :; }
  stop_service() { :; }
  # Before each layer: the stack's read side has folded the last run's events (every
  # projection and log consumer at the log's last sequence of every show, 5 minutes at most),
  # then both databases vacuumed and checkpointed.
  # shellcheck source=scripts/bench/read_side.sh
  . "$ROOT/scripts/bench/read_side.sh"
  quiesce() {
    read_side_folded "$STACK_DB/onsale"
    psql -qc "VACUUM ANALYZE" -c "CHECKPOINT" "$STACK_DB/onsale" >/dev/null
    psql -qc "VACUUM ANALYZE" -c "CHECKPOINT" "$DB" >/dev/null
    # The machine's idle load (busy cores) over 3 s.
    local b0 t0
    b0=$(busy_ticks); t0=$(date +%s.%N); sleep 3
    IDLE=$(python3 -c "import sys; print((int(sys.argv[2]) - int(sys.argv[1])) / 100 / (float(sys.argv[4]) - float(sys.argv[3])))" \
      "$b0" "$(busy_ticks)" "$t0" "$(date +%s.%N)")
  }
fi
# The machine's busy CPU time (user, nice, system, irq, softirq) in clock ticks.
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
START_BUSY=0 START_AT=0
started() { START_BUSY=$(busy_ticks); START_AT=$(date +%s.%N); }
# JSON plus "cpu_us": the machine's CPU since `started`, less the idle load, per ATTEMPTS.
with_cpu() { # json attempts
  python3 -c 'import json,sys
d = json.loads(sys.argv[1]); attempts = float(sys.argv[2])
busy = (int(sys.argv[4]) - int(sys.argv[3])) / 100
idle = float(sys.argv[7]) * (float(sys.argv[6]) - float(sys.argv[5]))
d["cpu_us"] = (busy - idle) * 1e6 / attempts if attempts else 0
print(json.dumps(d))' "$1" "$2" "$START_BUSY" "$(busy_ticks)" "$START_AT" "$(date +%s.%N)" "${IDLE:-0}"
}

record() { # layer clients seats dist json
  python3 -c 'import json,sys; d=json.loads(sys.argv[5]); d.update(layer=sys.argv[1], clients=int(sys.argv[2]), seats=int(sys.argv[3]), dist=sys.argv[4]); print(json.dumps(d))' "$@" >>"$RESULTS"
}

for rep in $(seq 1 "$REPEAT"); do
for clients in $CLIENTS; do
  for seats in $SEATS; do
    for dist in $DISTS; do
      echo "== run $rep: $clients clients, $seats-seat holds, $dist"
      quiesce
      start_service
      event=$("$BIN/onsale-loadgen" setup --base "http://$LISTEN" --ttl 1 --tokens 20000 --tokens-file "$DIR/tokens.txt")
      started
      json=$(BENCH_EVENT=$event BENCH_SEATS=$seats BENCH_DIST=$dist BENCH_TOKENS=$DIR/tokens.txt \
        wrk -t2 -c"$clients" -d"${SECS}s" --timeout 10s -s "$ROOT/scripts/bench/hold.lua" "http://$LISTEN" | tail -1)
      if [ "$STACK" = 1 ]; then
        # Until the read side has folded every event of the run.
        read_side_folded "$STACK_DB/onsale"
        json=$(with_cpu "$json" "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["requests"])' "$json")")
      fi
      record http "$clients" "$seats" "$dist" "$json"
      stop_service
      quiesce

      if [ "$STACK" != 1 ]; then
        skew=""; [ "$dist" = skewed ] && skew=--skewed
        json=$("$BIN/onsale-loadgen" bench-command --database-url "$DB" --clients "$clients" --seats "$seats" $skew --seconds "$SECS" | tail -1)
        record command "$clients" "$seats" "$dist" "$json"
        quiesce
      fi

      psql -qc "UPDATE seats SET status='AVAILABLE', hold_id=NULL, hold_expires=NULL, holds_won=0" "$DB" >/dev/null
      hot=0; [ "$dist" = skewed ] && hot=80
      rm -f "$DIR"/pgblog*
      started
      pgbench -n -c "$clients" -j 2 -T "$SECS" -D hot_pct=$hot -f "$ROOT/scripts/bench/hold$seats.sql" \
        --log --log-prefix="$DIR/pgblog" "$DB" >"$DIR/pgbench.out" 2>&1 || { cat "$DIR/pgbench.out"; exit 1; }
      won=$(psql -tAc "SELECT sum(holds_won) FROM seats" "$DB")
      json=$(python3 "$ROOT/scripts/bench/pgbench_stats.py" "$DIR" "$SECS" "$won" "$seats")
      if [ "$STACK" = 1 ]; then
        json=$(with_cpu "$json" "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["attempts_per_s"] * float(sys.argv[2]))' "$json" "$SECS")")
      fi
      record pgbench "$clients" "$seats" "$dist" "$json"
    done
  done
done
done
python3 "$ROOT/scripts/bench/report.py" "$RESULTS" | tee "$OUT/$NAME.md"
