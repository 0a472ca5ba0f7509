# shellcheck shell=bash
# scripts/stack.sh's Two regions: the link between them (Toxiproxy), MirrorMaker 2, region b's standbys and processes, failing, promoting and rejoining a region (ADR 024).
# Sourced by scripts/stack.sh, whose settings (ROOT, CACHE, the ports) it reads.

# Toxiproxy's server, built once from its Go module into the cache (this machine's links have no
# `tc netem`: the delay between regions is a proxy's). Prints its path.
TOXIPROXY_VERSION=v2.12.0

toxiproxy_bin() {
  local bin=$CACHE/toxiproxy-$TOXIPROXY_VERSION/toxiproxy-server
  if [ ! -x "$bin" ]; then
    command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
    echo "building Toxiproxy $TOXIPROXY_VERSION into $(dirname "$bin")" >&2
    mkdir -p "$(dirname "$bin")"
    GOBIN=$(dirname "$bin") GOPATH=$CACHE/gopath GOFLAGS=-modcacherw \
      go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" >&2
    mv "$(dirname "$bin")/server" "$bin"
  fi
  echo "$bin"
}

# MirrorMaker 2's jars (kafka/mirror/pom.xml) resolved once into the cache; prints their dir.
mirror_lib() {
  maven_lib mirror "$ROOT/kafka/mirror/pom.xml" "MirrorMaker 2"
}

# The clusters of a region, one `name:port` a line: its main database, then each shard.
region_clusters() {
  local region=$1 shard
  if [ "$region" = a ]; then
    echo "main:$PG_PORT"
    if [ "$SHARDS" -gt 1 ]; then for shard in $(seq 1 "$SHARDS"); do echo "shard$shard:$(shard_port "$shard")"; done; fi
  else
    echo "main:$REGION_B_PG_PORT"
    if [ "$SHARDS" -gt 1 ]; then for shard in $(seq 1 "$SHARDS"); do echo "shard$shard:$((REGION_B_PG_PORT + 10 + shard))"; done; fi
  fi
}

# A region cluster's data directory.
region_dir() {
  local region=$1 name=$2
  if [ "$region" = a ]; then
    if [ "$name" = main ]; then echo "$STACK_DIR"; else echo "$STACK_DIR/$name"; fi
  else
    echo "$STACK_DIR/region-b/$name"
  fi
}

# The link between the regions: Toxiproxy with a proxy in front of each of `from`'s clusters,
# REGION_DELAY_MS added each way; the other region's standbys stream through it.
region_link_up() {
  local from=$1 line name port proxy
  local dir=$STACK_DIR/region-link
  mkdir -p "$dir"
  if [ ! -f "$dir/toxiproxy.pid" ] || ! kill -0 "$(cat "$dir/toxiproxy.pid")" 2>/dev/null; then
    local bin
    bin=$(toxiproxy_bin)
    nohup "$bin" -host "${TOXIPROXY_API%:*}" -port "${TOXIPROXY_API#*:}" >"$dir/toxiproxy.log" 2>&1 &
    echo $! >"$dir/toxiproxy.pid"
    for _ in $(seq 1 50); do curl -fsS "http://$TOXIPROXY_API/version" >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  for line in $(region_clusters "$from"); do
    name=${line%%:*} port=${line#*:} proxy=$((port + REGION_LINK_OFFSET))
    curl -fsS -XDELETE "http://$TOXIPROXY_API/proxies/${from}_$name" >/dev/null 2>&1 || true
    curl -fsS -XPOST "http://$TOXIPROXY_API/proxies" \
      -d "{\"name\":\"${from}_$name\",\"listen\":\"127.0.0.1:$proxy\",\"upstream\":\"127.0.0.1:$port\",\"enabled\":true}" >/dev/null
    for stream in upstream downstream; do
      curl -fsS -XPOST "http://$TOXIPROXY_API/proxies/${from}_$name/toxics" \
        -d "{\"name\":\"distance_$stream\",\"type\":\"latency\",\"stream\":\"$stream\",\"attributes\":{\"latency\":$REGION_DELAY_MS,\"jitter\":0}}" >/dev/null
    done
  done
}

region_link_down() {
  local dir=$STACK_DIR/region-link
  if [ -f "$dir/toxiproxy.pid" ]; then kill "$(cat "$dir/toxiproxy.pid")" 2>/dev/null || true; rm -f "$dir/toxiproxy.pid"; fi
}

# Region `to`'s clusters become standbys of region `from`'s (through the link), and every
# commit in `from` waits for `to`'s flush (synchronous commit across the regions).
region_standbys_up() {
  local from=$1 to=$2 line name port
  local -a ups
  mapfile -t ups < <(region_clusters "$from")
  local i=0
  for line in $(region_clusters "$to"); do
    name=${line%%:*} port=${line#*:}
    local up=${ups[$i]#*:}
    pg_standby_up "$(region_dir "$to" "$name")" "$port" "$((up + REGION_LINK_OFFSET))" "${to}_$name" >/dev/null
    pg_sync "$up" "\"${to}_$name\""
    i=$((i + 1))
  done
}

# MirrorMaker 2 copies region a's topics into region b's Kafka (as `a.<topic>`).
mirror_up() {
  local dir=$STACK_DIR/region-b lib
  lib=$(mirror_lib)
  cat >"$dir/mirror.properties" <<PROPS
clusters = a, b
a.bootstrap.servers = $(brokers_list)
b.bootstrap.servers = 127.0.0.1:$REGION_B_KAFKA_PORT
a->b.enabled = true
a->b.topics = onsale\\..*
b->a.enabled = false
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
sync.topic.acls.enabled = false
refresh.topics.interval.seconds = 5
emit.heartbeats.interval.seconds = 5
PROPS
  nohup java -Xmx384m -Dlog4j2.configurationFile="$ROOT/kafka/broker/log4j2.properties" \
    -cp "$lib/*" org.apache.kafka.connect.mirror.MirrorMaker "$dir/mirror.properties" \
    >"$dir/mirror.log" 2>&1 &
  echo $! >"$dir/mirror.pid"
}

# Stops the mirror: a graceful stop waits on a's cluster, which may be dark, so after 5 s it is
# killed (at once with `now`: a promotion has nothing left for it to copy).
mirror_down() {
  local f=$STACK_DIR/region-b/mirror.pid pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if [ "${1:-}" != now ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 25); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

# Region b's shard URLs (as ONSALE_SHARD_URLS lists them), as login $1 (the owner by default).
region_b_shard_urls() {
  if [ "$SHARDS" -gt 1 ]; then
    region_clusters b | tail -n +2 | sed "s|.*:|postgres://${1:-onsale}@127.0.0.1:|; s|\$|/onsale|" | paste -sd,
  fi
}

# One of region b's onsale processes (standing by until b writes).
start_region_b() {
  local name=$1
  shift
  DATABASE_URL="postgres://$NODE_LOGIN@127.0.0.1:$REGION_B_PG_PORT/onsale" \
    ONSALE_REGION=b ONSALE_KAFKA_BROKERS="127.0.0.1:$REGION_B_KAFKA_PORT" \
    ONSALE_REDIS_URL="redis://127.0.0.1:$REGION_B_REDIS_PORT/" \
    ONSALE_PROCESSOR_URL="http://$PROCESSOR_LISTEN" \
    ONSALE_LISTEN=$REGION_B_LISTEN ONSALE_GRPC_LISTEN=$REGION_B_GRPC RUST_LOG=${RUST_LOG:-warn} \
    ONSALE_WEB_DIR="$ROOT/web/dist" \
    with_shards "$(region_b_shard_urls "$NODE_LOGIN")" nohup "$ROOT/target/release/onsale" "$@" >"$STACK_DIR/region-b/$name.log" 2>&1 &
  echo $! >"$STACK_DIR/region-b/$name.pid"
}

# The region router: every request to the region whose processes write (`/writerz` says
# `writer`); while
# none does (a region dark, the other not promoted yet) it answers 503 with Retry-After.
region_router_up() {
  local dir=$STACK_DIR/region-router code
  ensure_ha
  mkdir -p "$dir"
  for code in 502 503 504; do
    printf 'HTTP/1.0 %s Service Unavailable\r\nCache-Control: no-cache\r\nConnection: close\r\nContent-Type: application/problem+json\r\nRetry-After: 1\r\n\r\n{"type":"https://onsale.dev/problems/unavailable","title":"Service Unavailable","status":503,"code":"UNAVAILABLE","detail":"no region takes writes right now; retry shortly"}\n' 503 >"$dir/$code.http"
  done
  cat >"$dir/router.cfg" <<CFG
global
  maxconn 9000
defaults
  mode http
  timeout connect 2s
  timeout client 1h
  timeout server 1h
  timeout check 1s
  errorfile 502 $dir/502.http
  errorfile 503 $dir/503.http
  errorfile 504 $dir/504.http
frontend regions
  bind $REGION_LISTEN
  option forwardfor
  default_backend writer
backend writer
  option httpchk GET /writerz
  http-check expect string writer
  retries 2
  option redispatch 1
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
  server a $LISTEN check
  server b $REGION_B_LISTEN check
CFG
  haproxy -c -q -f "$dir/router.cfg" || { echo "the region router's configuration is invalid" >&2; return 1; }
  nohup haproxy -f "$dir/router.cfg" -db >"$dir/router.log" 2>&1 &
  echo $! >"$dir/router.pid"
}

# Region b beside `up`'s region a.
region_b_up() {
  [ "${HA:-0}" = 1 ] && { echo "REGIONS=2 runs each region's clusters without Patroni (HA=0): see docs/adr/024" >&2; return 1; }
  [ "$NODES" -gt 1 ] && { echo "REGIONS=2 runs one node per region (NODES=1)" >&2; return 1; }
  mkdir -p "$STACK_DIR/region-b"
  region_link_up a
  region_standbys_up a b
  broker_up "$STACK_DIR/region-b" "$REGION_B_KAFKA_PORT" 1 >/dev/null
  redis_up "$STACK_DIR/region-b" "$REGION_B_REDIS_PORT" >/dev/null
  mirror_up
  start_region_b onsale serve
  start_region_b relay relay --metrics-listen 127.0.0.1:9201
  start_region_b project project --metrics-listen 127.0.0.1:9202
  region_router_up
  echo "region b (a's standby, ${REGION_DELAY_MS} ms away each way): reads on http://$REGION_B_LISTEN, gRPC on $REGION_B_GRPC, Kafka on 127.0.0.1:$REGION_B_KAFKA_PORT (a's topic mirrored as a.onsale.events)"
  echo "the region router (to whichever region writes): http://$REGION_LISTEN"
}

# The pid files of a region's processes.
region_pids() {
  if [ "$1" = a ]; then
    ls "$STACK_DIR"/{onsale,relay,project}.pid 2>/dev/null || true
  else
    ls "$STACK_DIR"/region-b/{onsale,relay,project}.pid 2>/dev/null || true
  fi
}

# The region goes dark: its onsale processes killed, its PostgreSQL clusters stopped as a
# machine dies (immediate), its Kafka killed.
fail_region() {
  local region=$1 f line
  for f in $(region_pids "$region"); do kill -9 "$(cat "$f")" 2>/dev/null || true; done
  for line in $(region_clusters "$region"); do pg_stop "$(region_dir "$region" "${line%%:*}")" immediate; done
  if [ "$region" = a ]; then
    local i
    for i in $(seq 1 "$BROKERS"); do broker_kill "$STACK_DIR" "$i" >/dev/null 2>&1 || true; done
  else
    broker_kill "$STACK_DIR/region-b" 1 >/dev/null 2>&1 || true
  fi
  echo "region $region is dark"
}

# `onsale region promote` for the region, on its databases.
promote_region() {
  local region=$1 url shards
  if [ "$region" = a ]; then
    url="postgres://onsale@127.0.0.1:$PG_PORT/onsale" shards=$(shard_urls)
  else
    url="postgres://onsale@127.0.0.1:$REGION_B_PG_PORT/onsale" shards=$(region_b_shard_urls)
  fi
  (DATABASE_URL=$url with_shards "$shards" "$ROOT/target/release/onsale" region promote --region "$region")
  # The copy of the old writer's topic ends: the promoted region publishes its own.
  mirror_down now
}

# The dark region comes back as the standby of the region that writes now: each cluster
# checked (`onsale region follow-check`: the writer must be a later epoch), rewound onto the
# writer's timeline and following it; the writer commits synchronously to it again; its Kafka
# and processes start again (standing by).
rejoin_region() {
  local region=$1 writer line name port i=0 wurl
  writer=$([ "$region" = a ] && echo b || echo a)
  local -a ws
  mapfile -t ws < <(region_clusters "$writer")
  wurl="postgres://onsale@127.0.0.1:${ws[0]#*:}/onsale"
  # The region's record, read from its main database started alone (nothing of it runs).
  local main_dir
  main_dir=$(region_dir "$region" main)
  pg_start "$main_dir"
  DATABASE_URL="postgres://onsale@127.0.0.1:$(region_clusters "$region" | head -1 | cut -d: -f2)/onsale" \
    "$ROOT/target/release/onsale" region follow-check --writer-url "$wurl"
  region_link_up "$writer"
  for line in $(region_clusters "$region"); do
    name=${line%%:*} port=${line#*:}
    pg_rejoin "$(region_dir "$region" "$name")" "$port" "$(( ${ws[$i]#*:} + REGION_LINK_OFFSET ))" "${region}_$name" >/dev/null
    pg_sync "${ws[$i]#*:}" "\"${region}_$name\""
    i=$((i + 1))
  done
  if [ "$region" = a ]; then
    for i in $(seq 1 "$BROKERS"); do broker_start "$STACK_DIR" "$i" >/dev/null; done
    start_one_node
  else
    broker_start "$STACK_DIR/region-b" 1 >/dev/null
    start_region_b onsale serve
    start_region_b relay relay --metrics-listen 127.0.0.1:9201
    start_region_b project project --metrics-listen 127.0.0.1:9202
  fi
  echo "region $region follows region $writer"
}

region_down() {
  local f
  [ -d "$STACK_DIR/region-b" ] || [ -d "$STACK_DIR/region-link" ] || return 0
  router_down "$STACK_DIR/region-router"
  mirror_down
  for f in "$STACK_DIR"/region-b/*.pid; do
    [ -f "$f" ] || continue
    case $(basename "$f") in onsale.pid|relay.pid|project.pid) kill "$(cat "$f")" 2>/dev/null || true ;; esac
  done
  sleep 0.5
  broker_down "$STACK_DIR/region-b"
  redis_down "$STACK_DIR/region-b"
  for f in "$STACK_DIR"/region-b/*; do
    if [ -d "$f/data" ]; then pg_down "$f"; fi
  done
  region_link_down
  rm -rf "$STACK_DIR/region-b" "$STACK_DIR/region-link" "$STACK_DIR/region-router"
}
