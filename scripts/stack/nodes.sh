# shellcheck shell=bash
# scripts/stack.sh's Many command nodes: the router (HAProxy) over them, each started, paused, killed (ADR 011).
# Sourced by scripts/stack.sh, whose settings (ROOT, CACHE, the ports) it reads.

# --- Many command nodes behind a router (`make up NODES=3`, docs/adr/011) ---
# HAProxy (Debian) on the API's ports routes each request to a node by a consistent hash of the
# show it names: /v1/events/{show}/..., /v1/holds/h_{show}_..., /v1/orders/o_{show}_..., and
# POST /v1/orders by the holdId in its body. A node whose /healthz stops answering is out
# within about a second, and its shows' requests go to the next node on the ring (which
# claims the show once the dead node's registration lapsed, or forwards to its live owner).
# gRPC (reads only) is spread round robin. Node i: HTTP NODE_HTTP_BASE+i, gRPC NODE_GRPC_BASE+i.
router_up() {
  local dir=$1 listen=$2 grpc=$3 n=$4 http_base=$5 grpc_base=$6 i servers="" gservers="" maxconn
  ensure_ha
  mkdir -p "$dir"
  # Two descriptors per proxied connection, within this shell's limit.
  maxconn=$(( ($(ulimit -n) - 200) / 2 ))
  [ "$maxconn" -le 50000 ] || maxconn=50000
  for i in $(seq 1 "$n"); do
    servers="$servers  server node$i 127.0.0.1:$((http_base + i)) check"$'\n'
    gservers="$gservers  server node$i 127.0.0.1:$((grpc_base + i)) check"$'\n'
  done
  # The router's own errors (no node up, a node died mid-request) are the API's: problem+json,
  # 503 with Retry-After.
  local code
  for code in 502 503 504; do
    printf 'HTTP/1.0 %s Service Unavailable\r\nCache-Control: no-cache\r\nConnection: close\r\nContent-Type: application/problem+json\r\nRetry-After: 1\r\n\r\n{"type":"https://onsale.dev/problems/unavailable","title":"Service Unavailable","status":503,"code":"UNAVAILABLE","detail":"no node can answer this request right now; retry shortly"}\n' 503 >"$dir/$code.http"
  done
  cat >"$dir/router.cfg" <<CFG
global
  maxconn $maxconn
defaults
  timeout connect 2s
  timeout client 1h
  timeout server 1h
  timeout check 1s
  timeout http-request 10s
  errorfile 502 $dir/502.http
  errorfile 503 $dir/503.http
  errorfile 504 $dir/504.http
frontend api
  mode http
  bind $listen
  option http-buffer-request
  # The nodes rate-limit per client address: they trust the address appended here.
  option forwardfor
  # Node-to-node forwarding is never reachable from outside.
  http-request deny deny_status 404 if { path_beg /internal/ }
  http-request set-var(txn.show) path,field(4,/) if { path_beg /v1/events/ }
  http-request set-var(txn.show) path,field(4,/),field(2,_) if { path_beg /v1/holds/ } || { path_beg /v1/orders/ }
  http-request set-var(txn.show) req.body,json_query('\$.holdId'),field(2,_) if { method POST } { path /v1/orders }
  http-request set-var(txn.show) path unless { var(txn.show) -m found }
  default_backend nodes
backend nodes
  mode http
  balance hash var(txn.show)
  hash-type consistent
  # A node that refuses the connection (it just died) is retried on the next one.
  retries 2
  option redispatch 1
  option httpchk GET /healthz
  default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions
$servers
frontend grpc
  mode tcp
  bind $grpc
  default_backend grpc_nodes
backend grpc_nodes
  mode tcp
  balance roundrobin
  default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions
$gservers
CFG
  haproxy -c -q -f "$dir/router.cfg" || { echo "the router's configuration is invalid: $dir/router.cfg" >&2; return 1; }
  nohup haproxy -f "$dir/router.cfg" -db >"$dir/router.log" 2>&1 &
  echo $! >"$dir/router.pid"
  echo "router on $listen (REST, SSE) and $grpc (gRPC) over $n nodes"
}

router_down() {
  local dir=$1
  if [ -f "$dir/router.pid" ]; then kill "$(cat "$dir/router.pid")" 2>/dev/null || true; rm -f "$dir/router.pid"; fi
}

node_http() { echo "127.0.0.1:$((NODE_HTTP_BASE + $1))"; }

node_grpc() { echo "127.0.0.1:$((NODE_GRPC_BASE + $1))"; }

node_internal() { echo "127.0.0.1:$((NODE_INTERNAL_BASE + $1))"; }

# Starts node I of `up NODES=n` (an `onsale serve` on its own ports).
node_start() {
  local i=$1 page=$LISTEN grpc_web=$GRPC_LISTEN
  # Browsers reach every node through the router: the page's origin and gRPC-web are its.
  LISTEN=$(node_http "$i") GRPC_LISTEN=$(node_grpc "$i") ONSALE_TRUSTED_PROXIES=127.0.0.1 \
    ONSALE_INTERNAL_LISTEN=$(node_internal "$i") \
    ONSALE_PUBLIC_GRPC_WEB_URL="http://$grpc_web" \
    ONSALE_CORS_ORIGINS="http://$page,http://localhost:${page##*:},http://localhost:5173,http://127.0.0.1:5173" \
    ONSALE_PROCESSOR_URL="http://$PROCESSOR_LISTEN" start_onsale "node$i" serve
}

node_signal() {
  local sig=$1 i=$2 f=$STACK_DIR/node$2.pid
  [ -f "$f" ] || { echo "node $i is not running" >&2; return 1; }
  kill "-$sig" "$(cat "$f")"
  case $sig in KILL|TERM) rm -f "$f" ;; esac
  echo "node $i: SIG$sig"
}

# The node that owns the most recently claimed show (the demo's show).
node_owner() {
  local port
  port=$(psql -h 127.0.0.1 -p "$PG_PORT" -U onsale -d onsale -Atc \
    "SELECT split_part(n.addr, ':', 2) FROM show_owners o JOIN nodes n USING (node_id) ORDER BY o.claimed_at DESC LIMIT 1")
  [ -n "$port" ] || { echo "no show has an owner yet" >&2; return 1; }
  echo $((port - NODE_INTERNAL_BASE))
}

# The node drills: SIGKILL the show's node; or pause it (SIGSTOP) for SECS, then let it run on
# (SIGCONT) after another node has taken its show.
node_kill_owner() {
  local i
  i=$(node_owner) && node_signal KILL "$i"
}

node_pause_owner() {
  local secs=$1 i
  i=$(node_owner) || return 1
  node_signal STOP "$i"
  sleep "$secs"
  node_signal CONT "$i"
}
