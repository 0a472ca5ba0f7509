#!/usr/bin/env bash
# make bench-floor: what a hold costs at the least on this machine, piece by piece, beside the
# design's SQL, in one run. Each piece a hold on the deployed stack cannot go without runs
# alone, at full speed, on the two cores of the `make up` stack (its read side idle between the
# pieces), and its CPU per operation is measured:
#   pgbench   the design's guarded-UPDATE hold (the baseline), on the stack's PostgreSQL
#   http      a request that does nothing (GET /healthz) through `onsale serve`'s listener,
#             router and middleware, with wrk: the HTTP part of any hold, load generator included
#   limits    the per-account budget (issue 29): the GCRA script every hold runs in Redis,
#             with redis-benchmark; Redis's own CPU only
#   command   the command layer in process (owners, group commit, PostgreSQL), with
#             `onsale-loadgen bench-command` on a database of its own
#   decode    logical decoding of that run's events, once, as a slot is read (the relay reads
#             each twice: a peek, then the advance); one backend, so its CPU is its time
#   read side the relay, Kafka and the projections folding that much of a backlog (the relay
#             and the projections stopped while the command layer writes to the stack's log,
#             then timed to the log's head): their CPU per hold at their largest batches
#   stack     REST holds on the whole stack (the `make bench-holds STACK=1` probe)
# The sum of the first four pieces' CPU per hold is the hold path's floor: it leaves out the
# sweeper, the token's MAC, the JSON. Two cores divided by it is the most holds a second this
# machine could answer with every piece at its best; the report sets it beside three times
# pgbench, then adds the read side. Runs BENCH_REPEAT times (3) interleaved; medians.
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-floor.XXXXXX)
SECS=${BENCH_SECONDS:-10}
REPEAT=${BENCH_REPEAT:-3}
CLIENTS=64
OUT=$ROOT/target/bench
mkdir -p "$OUT"
RESULTS=$OUT/floor.jsonl
: >"$RESULTS"
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
PG="postgres://onsale@127.0.0.1:${ONSALE_PG_PORT:-54329}"
REDIS_PORT=${ONSALE_REDIS_PORT:-16379}
STACK_DIR=${ONSALE_STACK_DIR:-/tmp/onsale-stack}
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v redis-benchmark >/dev/null || missing+=(redis-tools)
if [ ${#missing[@]} -gt 0 ]; then apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; fi
trap '"$ROOT/scripts/stack.sh" down >/dev/null 2>&1 || true' EXIT
"$ROOT/scripts/stack.sh" up
BIN=$ROOT/target/release

# The machine's busy CPU time (user, nice, system, irq, softirq) in clock ticks.
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
# A process's CPU time (user + system) in clock ticks.
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Runs "$@", then prints its wall seconds and the busy cores over it (from /proc/stat).
measure() {
  local b0 t0 b1 t1
  b0=$(busy_ticks); t0=$(date +%s.%N)
  "$@" >"$DIR/out" 2>&1
  b1=$(busy_ticks); t1=$(date +%s.%N)
  python3 -c "import sys; w=float(sys.argv[2])-float(sys.argv[1]); print(w, (int(sys.argv[4])-int(sys.argv[3]))/100/w)" \
    "$t0" "$t1" "$b0" "$b1"
}
record() { # piece json
  python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d["piece"]=sys.argv[1]; print(json.dumps(d))' "$1" "$2" >>"$RESULTS"
}
# Before each piece: the read side has folded what the last one wrote (5 minutes at most),
# the databases vacuumed and checkpointed, then the machine's idle load over 3 s.
# shellcheck source=scripts/bench/read_side.sh
. "$ROOT/scripts/bench/read_side.sh"
quiesce() {
  read_side_folded "$PG/onsale"
  for db in onsale bench floor; do psql -qc "VACUUM ANALYZE" -c "CHECKPOINT" "$PG/$db" >/dev/null; done
  read -r _ IDLE < <(measure sleep 3)
}

psql -qc "DROP DATABASE IF EXISTS bench" -c "CREATE DATABASE bench" \
  -c "DROP DATABASE IF EXISTS floor" -c "CREATE DATABASE floor" "$PG/postgres"
psql -q "$PG/bench" -f "$ROOT/scripts/bench/seats.sql" >/dev/null
# The event store's schema (bench-command migrates its database first).
"$BIN/onsale-loadgen" bench-command --database-url "$PG/floor" --clients 1 --seats 1 --seconds 1 >/dev/null
GCRA=$(python3 - "$ROOT/edge/src/limits.rs" <<'EOF'
import re, sys
print(re.search(r'const GCRA: &str = r#"\n(.*?)"#;', open(sys.argv[1]).read(), re.S).group(1))
EOF
)
PROJECTIONS=$(grep -oP 'PROJECTIONS: \[&str; \K[0-9]+' "$ROOT/query-side/src/health.rs")
SHA=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$GCRA")
REDIS_PID=$(cat "$STACK_DIR/redis.pid")

for rep in $(seq 1 "$REPEAT"); do
  echo "== run $rep"
  quiesce
  psql -qc "UPDATE seats SET status='AVAILABLE', hold_id=NULL, hold_expires=NULL, holds_won=0" "$PG/bench" >/dev/null
  read -r wall busy < <(measure pgbench -n -c "$CLIENTS" -j 2 -T "$SECS" -D hot_pct=0 -f "$ROOT/scripts/bench/hold1.sql" "$PG/bench")
  tps=$(awk '/^tps/{print $3}' "$DIR/out")
  record pgbench "{\"per_s\": $tps, \"busy\": $busy, \"idle\": $IDLE}"

  quiesce
  read -r wall busy < <(measure wrk -t2 -c"$CLIENTS" -d"${SECS}s" "http://$LISTEN/healthz")
  rps=$(awk '/Requests\/sec/{print $2}' "$DIR/out")
  record http "{\"per_s\": $rps, \"busy\": $busy, \"idle\": $IDLE}"

  quiesce
  r0=$(proc_ticks "$REDIS_PID")
  read -r wall busy < <(measure redis-benchmark -p "$REDIS_PORT" -c "$CLIENTS" -n $((60000 * SECS)) -r 1000000 -q \
    EVALSHA "$SHA" 1 "rl:floor:__rand_int__" 10 20)
  r1=$(proc_ticks "$REDIS_PID")
  calls=$((60000 * SECS))
  record limits "{\"per_s\": $(python3 -c "print($calls / $wall)"), \"busy\": $busy, \"idle\": $IDLE, \"server_cpu_s\": $(python3 -c "print(($r1 - $r0) / 100)"), \"ops\": $calls}"

  quiesce
  psql -qtAc "SELECT pg_create_logical_replication_slot('floor', 'wal2json')" "$PG/floor" >/dev/null
  read -r wall busy < <(measure "$BIN/onsale-loadgen" bench-command --database-url "$PG/floor" --clients "$CLIENTS" --seats 1 --seconds "$SECS")
  cmd=$(tail -1 "$DIR/out")
  record command "$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps({"per_s": d["attempts_per_s"], "busy": float(sys.argv[2]), "idle": float(sys.argv[3])}))' "$cmd" "$busy" "$IDLE")"
  attempts=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(int(d["attempts_per_s"] * int(sys.argv[2])))' "$cmd" "$SECS")
  # The slot's changes decoded once, as the relay's peek asks for them (its options).
  read -r wall busy < <(measure psql -tAc "SELECT count(*) FROM pg_logical_slot_get_changes('floor', NULL, NULL,
      'format-version', '2', 'include-lsn', '1', 'include-timestamp', '1', 'include-xids', '1', 'add-tables', 'public.events')" "$PG/floor")
  record decode "{\"rows\": $(tr -d ' \n' <"$DIR/out"), \"seconds\": $wall, \"ops\": $attempts}"
  psql -qtAc "SELECT pg_drop_replication_slot('floor')" "$PG/floor" >/dev/null

  # The read side folding a backlog at its best (its largest batches): the relay and the
  # projections stopped while the command layer writes to the stack's own log, then their
  # CPU (theirs, Kafka's, their PostgreSQL backends': the machine's busy time less its idle
  # load) until every projection is at the log's head.
  quiesce
  kill -STOP "$(cat "$STACK_DIR/relay.pid")" "$(cat "$STACK_DIR/project.pid")"
  n0=$(psql -tAc "SELECT count(*) FROM events" "$PG/onsale")
  "$BIN/onsale-loadgen" bench-command --database-url "$PG/onsale" --clients "$CLIENTS" --seats 1 --seconds "$SECS" >"$DIR/cmd"
  n1=$(psql -tAc "SELECT count(*) FROM events" "$PG/onsale")
  # The run's show: the one with the most events; the read side is done when every read
  # model (query-side/src/health.rs names them; the payment consumers keep positions too)
  # is at its last sequence.
  read -r show head < <(psql -tAF ' ' -c "SELECT aggregate_id, max(sequence) FROM events GROUP BY 1 ORDER BY 2 DESC LIMIT 1" "$PG/onsale")
  attempts=$(python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(int(d["attempts_per_s"] * int(sys.argv[2])))' "$DIR/cmd" "$SECS")
  kill -CONT "$(cat "$STACK_DIR/relay.pid")" "$(cat "$STACK_DIR/project.pid")"
  caught_up() {
    for _ in $(seq 1 3000); do
      [ "$(psql -tAc "SELECT count(*) FROM projection_positions WHERE show_id = '$show' AND last_sequence >= $head" "$PG/onsale")" -ge "$PROJECTIONS" ] && return
      sleep 0.2
    done
    echo "the read side did not reach $show's head in 10 minutes" >&2
    exit 1
  }
  read -r wall busy < <(measure caught_up)
  record read_side "{\"events\": $((n1 - n0)), \"ops\": $attempts, \"seconds\": $wall, \"busy\": $busy, \"idle\": $IDLE}"

  quiesce
  event=$(ONSALE_DEV_MODE=1 "$BIN/onsale-loadgen" setup --base "http://$LISTEN" --ttl 1 --tokens 20000 --tokens-file "$DIR/tokens.txt")
  read -r wall busy < <(measure env BENCH_EVENT="$event" BENCH_SEATS=1 BENCH_DIST=uniform BENCH_TOKENS="$DIR/tokens.txt" \
    wrk -t2 -c"$CLIENTS" -d"${SECS}s" --timeout 10s -s "$ROOT/scripts/bench/hold.lua" "http://$LISTEN")
  json=$(tail -1 "$DIR/out")
  record stack "$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps({"per_s": d["requests"] / d["seconds"], "p99_ms": d["p99_ms"], "busy": float(sys.argv[2]), "idle": float(sys.argv[3])}))' "$json" "$busy" "$IDLE")"
done
python3 "$ROOT/scripts/bench/floor_report.py" "$RESULTS" | tee "$OUT/floor.md"
