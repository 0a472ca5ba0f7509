#!/usr/bin/env bash
# make bench-ga: general-admission holds/s on one hot floor, side by side in one run:
#   onsale http     the REST hold path ({"quantity": n, "section": "FLOOR"}), driven by wrk
#   onsale command  the command layer (owners + event store), driven in-process
#   counter K=1     the design's guarded counter UPDATE (design.md §8.3) on one row, by pgbench
#   counter K=16    the same over 16 bucket rows, each buyer hashed to one
# for holds of 1 and 4 places, 64 and 1,000 concurrent clients. onsale's floor has 200,000
# places (a show's most) and 1 s holds, so places keep coming back faster than they are taken
# (50,000 would run out at 4-place holds: the floor, not the path, would be measured); the
# counters are large enough never to run out. Each configuration runs BENCH_REPEAT times (3) interleaved; the report gives medians.
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-bench-ga.XXXXXX)
PORT=${BENCH_PG_PORT:-54359}
LISTEN=${BENCH_LISTEN:-127.0.0.1:8099}
SECS=${BENCH_SECONDS:-10}
CLIENTS=${BENCH_CLIENTS:-64 1000}
QUANTITIES=${BENCH_QUANTITIES:-1 4}
REPEAT=${BENCH_REPEAT:-3}
K=${BENCH_BUCKETS:-16}
PLACES=${BENCH_PLACES:-200000}
OUT=$ROOT/target/bench
mkdir -p "$OUT"
RESULTS=$OUT/ga.jsonl
: >"$RESULTS"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cleanup() {
  [ -f "$DIR/onsale.pid" ] && kill "$(cat "$DIR/onsale.pid")" 2>/dev/null || true
  "$ROOT/scripts/stack.sh" pg-down "$DIR"
}
trap cleanup EXIT
PG_MAX_CONNECTIONS=1200 "$ROOT/scripts/stack.sh" pg-up "$DIR" "$PORT"
DB="postgres://onsale@127.0.0.1:$PORT/onsale"
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
BIN=$ROOT/target/release
GRPC_LISTEN=${BENCH_GRPC_LISTEN:-127.0.0.1:50099}
# shellcheck source=scripts/bench/service.sh
. "$ROOT/scripts/bench/service.sh"
psql -q "$DB" -c "DROP TABLE IF EXISTS ga_buckets, ga_holds" \
  -c "CREATE TABLE ga_buckets (event_id int, bucket int, available bigint NOT NULL, PRIMARY KEY (event_id, bucket))" \
  -c "CREATE TABLE ga_holds (hold_id bigserial PRIMARY KEY, event_id int, bucket int, quantity int, expires_at timestamptz)" >/dev/null
record() { # layer clients qty json
  python3 -c 'import json,sys; d=json.loads(sys.argv[4]); d.update(layer=sys.argv[1], clients=int(sys.argv[2]), qty=int(sys.argv[3])); print(json.dumps(d))' "$@" >>"$RESULTS"
}
counter() { # buckets clients qty
  psql -q "$DB" -c "TRUNCATE ga_holds" -c "DELETE FROM ga_buckets" \
    -c "INSERT INTO ga_buckets SELECT 1, b, 1000000000000 / $1 FROM generate_series(1, $1) b" >/dev/null
  quiesce
  rm -f "$DIR"/pgblog*
  pgbench -n -c "$2" -j 2 -T "$SECS" -D buckets="$1" -D qty="$3" -f "$ROOT/scripts/bench/ga.sql" \
    --log --log-prefix="$DIR/pgblog" "$DB" >"$DIR/pgbench.out" 2>&1 || { cat "$DIR/pgbench.out"; exit 1; }
  won=$(psql -tAc "SELECT count(*) FROM ga_holds" "$DB")
  # pgbench_stats.py divides the places won by the hold size: pass holds as 1-place wins.
  python3 "$ROOT/scripts/bench/pgbench_stats.py" "$DIR" "$SECS" "$won" 1
}
for rep in $(seq 1 "$REPEAT"); do
for clients in $CLIENTS; do
  for qty in $QUANTITIES; do
    echo "== run $rep: $clients clients, holds of $qty places"
    quiesce
    start_service
    event=$("$BIN/onsale-loadgen" setup --base "http://$LISTEN" --ttl 1 --ga "$PLACES" --tokens 20000 --tokens-file "$DIR/tokens.txt")
    json=$(BENCH_EVENT=$event BENCH_SEATS=$qty BENCH_TOKENS=$DIR/tokens.txt \
      wrk -t2 -c"$clients" -d"${SECS}s" --timeout 10s -s "$ROOT/scripts/bench/ga.lua" "http://$LISTEN" | tail -1)
    record "onsale http" "$clients" "$qty" "$json"
    stop_service
    quiesce
    json=$("$BIN/onsale-loadgen" bench-command --database-url "$DB" --clients "$clients" --seats "$qty" --ga "$PLACES" --seconds "$SECS" | tail -1)
    record "onsale command" "$clients" "$qty" "$json"
    record "counter K=1" "$clients" "$qty" "$(counter 1 "$clients" "$qty")"
    record "counter K=$K" "$clients" "$qty" "$(counter "$K" "$clients" "$qty")"
  done
done
done
python3 "$ROOT/scripts/bench/ga_report.py" "$RESULTS" | tee "$OUT/ga.md"
