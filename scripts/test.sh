#!/usr/bin/env bash
# make test: start a throwaway PostgreSQL, an Apache Kafka broker and Redis for the whole run (each
# test makes its own database, slot and topic in them), run every test of the workspace
# against them, and always tear them down.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/onsale-test.XXXXXX)
PORT=${ONSALE_TEST_PG_PORT:-54339}
KAFKA_PORT=${ONSALE_TEST_KAFKA_PORT:-19392}
REDIS_PORT=${ONSALE_TEST_REDIS_PORT:-16399}
# Tests that kill brokers start private clusters under $DIR; a test binary killed mid-run leaves
# them behind, and every process whose command line names $DIR is reaped at the end.
export ONSALE_TEST_DIR=$DIR
trap 'jobs -p | xargs -r kill 2>/dev/null || true; "$ROOT/scripts/stack.sh" redis-down "$DIR"; "$ROOT/scripts/stack.sh" redis-down "$DIR/secure"; "$ROOT/scripts/stack.sh" broker-down "$DIR"; "$ROOT/scripts/stack.sh" broker-down "$DIR/secure"; "$ROOT/scripts/stack.sh" pg-down "$DIR"; pkill -9 -f "$DIR/" || true' EXIT
# built PID LOG: waits for a build started in the background, shows what it printed, and stops
# the run if it failed.
built() {
  local rc=0
  wait "$1" || rc=$?
  cat "$2"
  [ "$rc" -eq 0 ] || exit "$rc"
}
# Every test binary and the onsale binary, built once: the front end's OpenAPI document comes
# from this build's binary rather than a build of its own (other features, the whole server
# compiled twice). `stack`: the integration tests of the crates that have them, which need the
# servers below (a plain `cargo test` builds each without them and says so in one line). The
# build runs while the servers start and the tools install (on a fresh machine mostly waiting
# on downloads, the broker's JVM and the disk): on two cores that overlap is minutes.
FEATURES=onsale-tests/stack,onsale-server/stack,onsale-loadgen/stack
(cd "$ROOT" && cargo test --workspace --locked --no-run --features "$FEATURES") >"$DIR/build.log" 2>&1 &
BUILD=$!
"$ROOT/scripts/stack.sh" pg-up "$DIR" "$PORT"
"$ROOT/scripts/stack.sh" broker-up "$DIR" "$KAFKA_PORT"
export ONSALE_TEST_DATABASE_URL="postgres://onsale@127.0.0.1:$PORT/postgres"
export ONSALE_TEST_KAFKA_BROKERS="127.0.0.1:$KAFKA_PORT"
"$ROOT/scripts/stack.sh" redis-up "$DIR" "$REDIS_PORT"
export ONSALE_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/"
# The secure pair (issue 53 item 7): a broker that takes only TLS with a SCRAM user and its
# ACLs, a Redis that takes only TLS with a password; the contract test and the topic's own run
# on it (tests/src/secure.rs reads $DIR/secure/client.env).
"$ROOT/scripts/stack.sh" secure-up "$DIR/secure" "${ONSALE_TEST_SECURE_KAFKA_PORT:-$((KAFKA_PORT + 10))}" \
  "${ONSALE_TEST_SECURE_REDIS_PORT:-$((REDIS_PORT + 1))}" >/dev/null
export ONSALE_TEST_SECURE_DIR="$DIR/secure"
# The failover tests start replicated clusters of their own (etcd, Patroni, HAProxy): installed
# once here, not by tests racing each other.
"$ROOT/scripts/stack.sh" ha-tools
# A client generated from proto/ in another language than Rust.
ONSALE_TEST_PYTHON=$("$ROOT/scripts/stack.sh" py-tools)
export ONSALE_TEST_PYTHON
# schemathesis, for the short fuzzing of the API against its OpenAPI document.
ONSALE_TEST_SCHEMATHESIS=$("$ROOT/scripts/stack.sh" fuzz-tools)
export ONSALE_TEST_SCHEMATHESIS
built "$BUILD" "$DIR/build.log"
# The simulator's own build with its planted bugs in (the teeth, run last), while the front end
# builds.
(cd "$ROOT" && cargo test -p onsale-sim --locked --features planted-bugs --test simulation --no-run) \
  >"$DIR/teeth-build.log" 2>&1 &
TEETH=$!
# The front end, built (its clients generated from proto/ and the OpenAPI document), and a real
# Chromium to run it in.
ONSALE_TEST_WEB_DIR=$(ONSALE_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/onsale" "$ROOT/scripts/web.sh")
export ONSALE_TEST_WEB_DIR
ONSALE_TEST_CHROMIUM=$("$ROOT/scripts/stack.sh" browser-tools)
export ONSALE_TEST_CHROMIUM
# A real OpenID provider (oidc-provider, npm), whose tokens and key rotations the identity test
# takes.
ONSALE_TEST_OIDC_DIR=$("$ROOT/scripts/stack.sh" oidc-tools)
export ONSALE_TEST_OIDC_DIR
# Zipkin's server, where the trace test sends its spans.
ONSALE_TEST_ZIPKIN_JAR=$("$ROOT/scripts/stack.sh" zipkin-tools)
export ONSALE_TEST_ZIPKIN_JAR
# promtool, for the alerting rules and their tests.
ONSALE_TEST_PROMTOOL=$("$ROOT/scripts/stack.sh" prom-tools)
export ONSALE_TEST_PROMTOOL
cd "$ROOT"
# The crate graph of ARCHITECTURE.md: the domain stays free of I/O crates, the query side and
# the waiting room do not reach into the command side, the command side reads no read model,
# and the onsale binary does not link the processor simulator.
if cargo tree -p onsale-domain -e normal --prefix none | grep -E '^(sqlx|rdkafka|axum|tonic|redis|hyper|reqwest) '; then
  echo "onsale-domain depends on an I/O crate" >&2
  exit 1
fi
for pair in onsale-query:onsale-command onsale-waiting-room:onsale-command onsale-command:onsale-projections onsale-server:onsale-processor-sim; do
  if cargo tree -p "${pair%%:*}" -e normal --prefix none | grep -q "^${pair##*:} "; then
    echo "${pair%%:*} depends on ${pair##*:}" >&2
    exit 1
  fi
done
# The simulator's planted bugs (onsale_domain::plant) are in no build but its own test's.
if cargo tree -p onsale-server -e features --prefix none | grep -q 'planted-bugs'; then
  echo "onsale-server is built with the simulator's planted bugs" >&2
  exit 1
fi
# Each table's statements in its owner crate (migrations/OWNERS), and the check itself seeing a
# planted crossing.
python3 "$ROOT/scripts/layering.py"
python3 "$ROOT/scripts/layering.py" --self-test
# The entrances name only what exists: every `make` target and `onsale` subcommand the README,
# ARCHITECTURE, BENCHMARKS and docs/ name (and the check itself catching made-up ones).
python3 "$ROOT/scripts/docs_names.py"
python3 "$ROOT/scripts/docs_names.py" --self-test
built "$TEETH" "$DIR/teeth-build.log"
# Three tests at a time where libtest would run two (the cores): an integration test spends most
# of its time waiting on the servers and processes it starts. The integration binary took 361 s
# with two and 288 s with three, green (docs/bench/issue-56-the-house.md). --test-threads wins.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-3}
LOG="$DIR/cargo-test.log"
set +e
cargo test --workspace --locked --no-fail-fast --features "$FEATURES" "$@" 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
# The simulator finds every planted bug: a build of its own, with them in.
cargo test -p onsale-sim --locked --features planted-bugs --test simulation teeth:: 2>&1 | tee -a "$LOG"
teeth=${PIPESTATUS[0]}
[ "$status" -ne 0 ] || status=$teeth
set -e
# One closing line for the whole run (cargo prints one per test binary, the last often a
# doc-test binary with nothing in it).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$LOG"
exit "$status"
