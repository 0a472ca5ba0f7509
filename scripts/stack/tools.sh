# shellcheck shell=bash
# scripts/stack.sh's What the tests and the stack install on first use: the Python tools, schemathesis, promtool and Prometheus, Chromium, the identity provider, Zipkin, Debezium's connector.
# Sourced by scripts/stack.sh, whose settings (ROOT, CACHE, the ports) it reads.

# Zipkin's server, its executable jar from Maven Central (docs/adr/019), resolved once into the
# cache. Prints the jar's path.
ZIPKIN_VERSION=3.6.1

zipkin_jar() {
  local dir=$CACHE/zipkin-$ZIPKIN_VERSION jar
  jar=$dir/zipkin-server-$ZIPKIN_VERSION-exec.jar
  if [ ! -f "$jar" ]; then
    ensure_java
    echo "resolving Zipkin $ZIPKIN_VERSION from Maven Central into $dir" >&2
    mkdir -p "$dir"
    mvn -q -B dependency:copy -Dartifact="io.zipkin:zipkin-server:$ZIPKIN_VERSION:jar:exec" \
      -DoutputDirectory="$dir" >"$CACHE/maven-zipkin.log" 2>&1 || { cat "$CACHE/maven-zipkin.log" >&2; return 1; }
  fi
  echo "$jar"
}

# A Zipkin server (spans in memory) in DIR on 127.0.0.1:PORT: its UI at /zipkin, spans taken at
# /api/v2/spans.
zipkin_up() {
  local dir=$1 port=$2 jar
  jar=$(zipkin_jar)
  mkdir -p "$dir/zipkin"
  QUERY_PORT=$port STORAGE_TYPE=mem MEM_MAX_SPANS=${ZIPKIN_MAX_SPANS:-1000000} \
    nohup java -Xms128m -Xmx1g -jar "$jar" >"$dir/zipkin/zipkin.log" 2>&1 &
  echo $! >"$dir/zipkin/zipkin.pid"
  answers "http://127.0.0.1:$port/health" 120 "zipkin" "$dir/zipkin/zipkin.log" || return 1
  echo "zipkin on http://127.0.0.1:$port/zipkin"
}

# Waits until URL answers 2xx, SECS at most; otherwise names WHAT and its LOG and fails.
answers() {
  local url=$1 secs=$2 what=$3 log=$4 i
  for i in $(seq 1 $((secs * 5))); do
    if curl -fsS "$url" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.2
  done
  echo "$what did not start; see $log" >&2
  return 1
}

zipkin_down() {
  local dir=$1
  if [ -f "$dir/zipkin/zipkin.pid" ]; then
    kill "$(cat "$dir/zipkin/zipkin.pid")" 2>/dev/null || true
    rm -f "$dir/zipkin/zipkin.pid"
  fi
}

# The Python gRPC tools the tests generate a non-Rust client with; prints the venv's python.
py_tools() {
  # grpcio-tools (the gRPC tests' client), DuckDB (reads the analysts' export) and
  # confluent-kafka (the sample consumer of the topic).
  if ! "$VENV/bin/python" -c 'import grpc_tools, grpc, duckdb, confluent_kafka' 2>/dev/null; then
    ensure_packages
    echo "installing grpcio-tools, duckdb and confluent-kafka into $VENV" >&2
    python3 -m venv "$VENV" >&2
    "$VENV/bin/pip" install -q 'grpcio-tools==1.*' 'grpcio==1.*' 'duckdb==2.0.0' 'confluent-kafka==2.16.1' >&2
  fi
  echo "$VENV/bin/python"
}

# schemathesis (PyPI), pinned, in a virtualenv of its own; prints its command.
FUZZ_VENV=$CACHE/fuzz

fuzz_tools() {
  if ! "$FUZZ_VENV/bin/schemathesis" --version 2>/dev/null | grep -q '4.32.5'; then
    ensure_packages
    echo "installing schemathesis into $FUZZ_VENV" >&2
    python3 -m venv "$FUZZ_VENV" >&2
    "$FUZZ_VENV/bin/pip" install -q 'schemathesis==4.32.5' >&2
  fi
  echo "$FUZZ_VENV/bin/schemathesis"
}

# promtool, to check the alerting rules (telemetry/alerts) and run their tests. Debian's
# package brings the server too; nothing here starts it.
prom_tools() {
  if ! command -v promtool >/dev/null; then
    echo "installing prometheus (for promtool)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
  fi
  command -v promtool
}

# Debian's Chromium, for the front end's tests in a real browser (driven by playwright-core
# from web/'s npm packages).
browser_tools() {
  if [ ! -x /usr/bin/chromium ]; then
    echo "installing chromium" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
  echo /usr/bin/chromium
}

# A real OpenID provider (panva's oidc-provider, npm, pinned by scripts/oidc/package-lock.json)
# installed beside its scripts; prints their directory.
oidc_tools() {
  local dir=$ROOT/scripts/oidc key
  key=$(sha256sum "$dir/package-lock.json" | cut -c1-16)
  if [ "$(cat "$dir/node_modules/.onsale-lock" 2>/dev/null)" != "$key" ]; then
    echo "installing oidc-provider" >&2
    (cd "$dir" && npm ci --no-audit --no-fund --cache "${ONSALE_NPM_CACHE:-$HOME/.cache/onsale/npm}" >&2)
    echo "$key" >"$dir/node_modules/.onsale-lock"
  fi
  echo "$dir"
}

# The identity provider of `up` on $OIDC_PORT: its keys in $1/keys.json (one EdDSA key at
# first), its machine clients in $1/clients.json (a fan, an admin, a scanner of every show at
# the demo's venue), started again by `oidc-rotate`/`oidc-retire`.
oidc_up() {
  local dir=$1 tools
  tools=$(oidc_tools)
  mkdir -p "$dir"
  [ -f "$dir/keys.json" ] || node "$tools/keys.mjs" add "$dir/keys.json" EdDSA >/dev/null
  [ -f "$dir/clients.json" ] || cat >"$dir/clients.json" <<JSON
[{"client_id": "fan-1", "client_secret": "fan-1-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')", "role": "fan"},
 {"client_id": "admin-1", "client_secret": "admin-1-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')", "role": "admin"},
 {"client_id": "gate-1", "client_secret": "gate-1-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')", "role": "scanner", "venue": "demo-venue"}]
JSON
  chmod 600 "$dir/clients.json"
  oidc_down "$dir"
  nohup node "$tools/provider.mjs" "$OIDC_PORT" "$dir/keys.json" "$dir/clients.json" >"$dir/provider.log" 2>&1 &
  echo $! >"$dir/pid"
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$OIDC_PORT/jwks" >/dev/null && return 0
    sleep 0.1
  done
  echo "the identity provider did not start:" >&2
  cat "$dir/provider.log" >&2
  return 1
}

oidc_down() {
  [ -f "$1/pid" ] || return 0
  kill "$(cat "$1/pid")" 2>/dev/null || true
  rm -f "$1/pid"
}

# A rotation on `up`'s provider: a new key (ALG, EdDSA by default) signs from now on, the old
# ones stay in its JWKS (their tokens verify) until `oidc-retire` drops the oldest. onsale takes
# the new key at its first token, without a restart.
oidc_rotate() {
  node "$(oidc_tools)/keys.mjs" "$1" "$STACK_DIR/oidc/keys.json" ${2:-EdDSA}
  oidc_up "$STACK_DIR/oidc"
}

# A Prometheus server (Debian's) scraping onsale and evaluating its alerting rules: what the ops
# console asks which alerts fire.
prom_up() {
  local dir=$1 port=$2 target=$3 every=${4:-1}
  prom_tools >/dev/null
  mkdir -p "$dir/prometheus"
  cat >"$dir/prometheus/prometheus.yml" <<YAML
global:
  scrape_interval: ${every}s
  evaluation_interval: ${every}s
rule_files:
  - $ROOT/telemetry/alerts/onsale.rules.yml
scrape_configs:
  - job_name: onsale
    static_configs:
      - targets: ['${target//,/\',\'}']
YAML
  nohup prometheus --config.file="$dir/prometheus/prometheus.yml" \
    --storage.tsdb.path="$dir/prometheus/data" --web.listen-address="127.0.0.1:$port" \
    >"$dir/prometheus/prometheus.log" 2>&1 &
  echo $! >"$dir/prometheus/prometheus.pid"
  answers "http://127.0.0.1:$port/-/ready" 20 "prometheus" "$dir/prometheus/prometheus.log" || return 1
  echo "prometheus on 127.0.0.1:$port scraping $target"
}

prom_down() {
  local dir=$1
  if [ -f "$dir/prometheus/prometheus.pid" ]; then
    kill "$(cat "$dir/prometheus/prometheus.pid")" 2>/dev/null || true
    rm -f "$dir/prometheus/prometheus.pid"
  fi
}

# Kafka Connect's standalone worker (kafka/debezium/pom.xml) and Debezium's PostgreSQL
# connector (its plugin archive, which carries its own jars), resolved once into the cache for
# `make bench-cdc`. Prints the worker's jar directory and the plugin directory, a line each.
DEBEZIUM_VERSION=3.6.1.Final

debezium_tools() {
  local lib plugins=$CACHE/debezium-$DEBEZIUM_VERSION
  lib=$(maven_lib connect "$ROOT/kafka/debezium/pom.xml" "Kafka Connect")
  if [ ! -f "$plugins/.complete" ]; then
    echo "resolving Debezium's PostgreSQL connector $DEBEZIUM_VERSION from Maven Central into $plugins" >&2
    rm -rf "$plugins"
    mkdir -p "$plugins"
    mvn -q -B dependency:copy -Dartifact="io.debezium:debezium-connector-postgres:$DEBEZIUM_VERSION:tar.gz:plugin" \
      -DoutputDirectory="$plugins" >"$CACHE/maven-debezium.log" 2>&1 || { cat "$CACHE/maven-debezium.log" >&2; return 1; }
    tar -xzf "$plugins"/*.tar.gz -C "$plugins"
    rm "$plugins"/*.tar.gz
    touch "$plugins/.complete"
  fi
  echo "$lib"
  echo "$plugins"
}
