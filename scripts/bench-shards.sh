#!/usr/bin/env bash
# make bench-shards: what a second write cluster adds (issue 31). Two PostgreSQL clusters and a
# main database (the directory) on this machine; the command layer (owners, group commit, the
# sharded event log, as `onsale serve` builds them) holding seats on BENCH_SHOWS shows (4) with
# BENCH_CLIENTS clients (64), 1-seat uniform holds with a 1 s TTL:
#   one   every show placed on shard 1 (the second cluster idle)
#   two   the shows spread over both shards
# interleaved BENCH_REPEAT times (3); the report gives medians of holds/s and of commits/s per
# shard (pg_stat_database), and two/one. Both clusters share this machine's two cores with the
# load generator: the ratio bounds what a second machine would add from above only by the CPU
# they share, so read it as "the write path scales with clusters, not with one's locks".
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-bench-shards.XXXXXX)
# The postgres user runs the clusters in directories under it.
chmod 755 "$DIR"
BASE=${BENCH_PG_BASE:-54370}
SECS=${BENCH_SECONDS:-10}
CLIENTS=${BENCH_CLIENTS:-64}
REPEAT=${BENCH_REPEAT:-3}
SHOWS=${BENCH_SHOWS:-4}
OUT=$ROOT/target/bench
mkdir -p "$OUT"
RESULTS=$OUT/shards.jsonl
: >"$RESULTS"
cleanup() {
  for d in main s1 s2; do "$ROOT/scripts/stack.sh" pg-down "$DIR/$d" >/dev/null 2>&1 || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT
PG_MAX_CONNECTIONS=400 "$ROOT/scripts/stack.sh" pg-up "$DIR/main" "$BASE"
PG_MAX_CONNECTIONS=400 "$ROOT/scripts/stack.sh" pg-up "$DIR/s1" "$((BASE + 1))"
PG_MAX_CONNECTIONS=400 "$ROOT/scripts/stack.sh" pg-up "$DIR/s2" "$((BASE + 2))"
(cd "$ROOT" && cargo build --release -q -p onsale-server -p onsale-processor-sim -p onsale-loadgen)
MAIN="postgres://onsale@127.0.0.1:$BASE/onsale"
URLS="postgres://onsale@127.0.0.1:$((BASE + 1))/onsale,postgres://onsale@127.0.0.1:$((BASE + 2))/onsale"
for r in $(seq 1 "$REPEAT"); do
  for mode in one two; do
    spread=""; [ "$mode" = two ] && spread="--spread"
    "$ROOT/target/release/onsale-loadgen" bench-command --database-url "$MAIN" --shard-url "$URLS" \
      --clients "$CLIENTS" --seats 1 --seconds "$SECS" --ttl 1 --shows "$SHOWS" $spread \
      | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); d["mode"]=sys.argv[1]; d["round"]=int(sys.argv[2]); print(json.dumps(d))' "$mode" "$r" \
      | tee -a "$RESULTS"
  done
done
python3 - "$RESULTS" "$CLIENTS" "$SHOWS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(mode, f):
    return statistics.median(f(r) for r in rows if r["mode"] == mode)
print(f"\n== bench-shards: {sys.argv[2]} clients, {sys.argv[3]} shows, 1-seat uniform holds, medians of {len(rows)//2} rounds ==")
print(f"{'placement':<28}{'holds/s':>10}{'p99 ms':>9}{'commits/s shard 1':>19}{'shard 2':>9}")
for mode, label in (("one", "every show on shard 1"), ("two", "shows over shards 1 and 2")):
    print(f"{label:<28}{med(mode, lambda r: r['holds_per_s']):>10.0f}{med(mode, lambda r: r['p99_ms']):>9.1f}"
          f"{med(mode, lambda r: r['commits_per_s'][0]):>19.0f}{med(mode, lambda r: r['commits_per_s'][1]):>9.0f}")
print(f"two / one: holds/s {med('two', lambda r: r['holds_per_s']) / med('one', lambda r: r['holds_per_s']):.2f}x, "
      f"commits/s {med('two', lambda r: sum(r['commits_per_s'])) / med('one', lambda r: sum(r['commits_per_s'])):.2f}x")
PY
