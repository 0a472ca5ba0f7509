# shellcheck shell=bash
# scripts/stack.sh's Redis from Debian's packages.
# Sourced by scripts/stack.sh, whose settings (ROOT, CACHE, the ports) it reads.

# A throwaway Redis (no persistence: the waiting room's state is soft and rebuilt by joins).
redis_up() {
  local dir=$1 port=$2
  ensure_packages
  mkdir -p "$dir"
  if redis-cli -p "$port" ping >/dev/null 2>&1; then
    echo "port $port already answers Redis; refusing to share it" >&2
    return 1
  fi
  # REDIS_SECURE=DIR (prepared by secure_material): TLS only, the certificate of DIR/tls, one
  # user (onsale) with the password of DIR/secure.env and no default user.
  local listen=(--port "$port") ping=(-p "$port")
  if [ -n "${REDIS_SECURE:-}" ]; then
    # shellcheck disable=SC1091
    . "$REDIS_SECURE/secure.env"
    listen=(--port 0 --tls-port "$port" --tls-cert-file "$REDIS_SECURE/tls/server.pem"
      --tls-key-file "$REDIS_SECURE/tls/server.key" --tls-ca-cert-file "$REDIS_SECURE/tls/ca.pem"
      --tls-auth-clients no --user default off --user onsale on ">$REDIS_PASSWORD" '~*' '&*' '+@all')
    ping=(-p "$port" --tls --cacert "$REDIS_SECURE/tls/ca.pem" --user onsale --pass "$REDIS_PASSWORD" --no-auth-warning)
  fi
  redis-server "${listen[@]}" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
  for _ in $(seq 1 50); do
    if redis-cli "${ping[@]}" ping 2>/dev/null | grep -q PONG; then
      echo "redis on 127.0.0.1:$port"
      return 0
    fi
    sleep 0.1
  done
  echo "redis did not start; see $dir/redis.log" >&2
  return 1
}

redis_down() {
  local dir=$1
  if [ -f "$dir/redis.pid" ]; then
    kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
    rm -f "$dir/redis.pid"
  fi
}
