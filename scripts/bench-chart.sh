#!/usr/bin/env bash
# make bench-chart: the venue chart at scale in Debian's Chromium (issue 34), BENCH_REPEAT (3)
# times: a 50,000-seat show's first whole draw after its snapshot arrives, then 1,000 seat
# changes a second for 10 s handed to the page's map as deltas arrive: the frames' pace, each
# delta's time from arrival to its seats repainted, the long tasks. It runs the Chromium test
# that `make test` runs (tests/tests/browser.rs, web/e2e/chart-perf.mjs) on a stack of its own
# (PostgreSQL, Kafka, Redis from packages), prints each run's figures as JSON and the medians.
set -euo pipefail
# shellcheck source=scripts/local-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/local-env.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-bench-chart.XXXXXX)
PORT=${BENCH_PG_PORT:-54369}
KAFKA_PORT=${BENCH_KAFKA_PORT:-19369}
REDIS_PORT=${BENCH_REDIS_PORT:-16369}
REPEAT=${BENCH_REPEAT:-3}
trap '"$ROOT/scripts/stack.sh" redis-down "$DIR"; "$ROOT/scripts/stack.sh" broker-down "$DIR"; "$ROOT/scripts/stack.sh" pg-down "$DIR"; pkill -9 -f "$DIR/" || true' EXIT
"$ROOT/scripts/stack.sh" pg-up "$DIR" "$PORT"
"$ROOT/scripts/stack.sh" broker-up "$DIR" "$KAFKA_PORT"
"$ROOT/scripts/stack.sh" redis-up "$DIR" "$REDIS_PORT"
export ONSALE_TEST_DIR=$DIR
export ONSALE_TEST_DATABASE_URL="postgres://onsale@127.0.0.1:$PORT/postgres"
export ONSALE_TEST_KAFKA_BROKERS="127.0.0.1:$KAFKA_PORT"
export ONSALE_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/"
ONSALE_TEST_WEB_DIR=$("$ROOT/scripts/web.sh")
export ONSALE_TEST_WEB_DIR
ONSALE_TEST_CHROMIUM=$("$ROOT/scripts/stack.sh" browser-tools)
export ONSALE_TEST_CHROMIUM
cd "$ROOT"
OUT="$DIR/runs.jsonl"
for i in $(seq 1 "$REPEAT"); do
  cargo test -q -p onsale-tests --features stack --test integration -- --exact --nocapture \
    browser::a_50000_seat_chart_draws_and_repaints_every_delta_at_1000_seat_changes_a_second 2>&1 |
    grep '^{"seats"' | head -1 | tee -a "$OUT"
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = lambda k: statistics.median(r[k] for r in runs)
print(f"{len(runs)} runs, medians: first draw {med('firstDrawMs'):.0f} ms (goal < 300); "
      f"frame interval p50 {med('frameP50'):.1f} ms, p95 {med('frameP95'):.1f} ms (goal: on time at 60 Hz), max {med('frameMax'):.1f} ms; "
      f"delta arrival to repaint p50 {med('repaintP50'):.1f} ms, p95 {med('repaintP95'):.1f} ms, max {med('repaintMax'):.1f} ms (goal < 500); "
      f"{med('changes'):.0f} changes in {med('deltas'):.0f} deltas; long tasks {med('longTasks'):.0f}")
PY
