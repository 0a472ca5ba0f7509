#!/usr/bin/env bash
# make fuzz-api: schemathesis against the local stack's /openapi.json, every check
# (scripts/fuzz/schemathesis.toml), once per role with that role's token, FUZZ_EXAMPLES
# examples per operation and phase (default 120: over 10,000 requests in all). Reports the
# requests made and fails on any failure or error. Starts the stack and always stops it.
set -euo pipefail
export ONSALE_DEV_MODE=${ONSALE_DEV_MODE:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LISTEN=${ONSALE_LISTEN:-127.0.0.1:8080}
EXAMPLES=${FUZZ_EXAMPLES:-120}
ST=$("$ROOT/scripts/stack.sh" fuzz-tools)
trap '"$ROOT/scripts/stack.sh" down >/dev/null 2>&1 || true' EXIT
"$ROOT/scripts/stack.sh" up
OUT=$(mktemp -d /tmp/onsale-fuzz.XXXXXX)
BASE=http://$LISTEN
json() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
# Real ids for the operations that take one, so the fuzzer reaches past "not found": a show on
# sale, a hold and an order of the fan, the order's ticket once it is paid.
admin=$("$ROOT/target/release/onsale" token --sub fuzz-admin --role admin)
fan=$("$ROOT/target/release/onsale" token --sub fuzz-fan --role fan)
venue=$(curl -fsS -H "Authorization: Bearer $admin" -H 'content-type: application/json' \
  -d '{"name":"Fuzz Hall","city":"Oslo","sections":[{"section":"S1","priceTier":"A","rows":[{"row":"R1","seats":50},{"row":"R2","seats":50}]}]}' \
  "$BASE/v1/venues" | json venueId)
event=$(curl -fsS -H "Authorization: Bearer $admin" -H 'content-type: application/json' \
  -d "{\"name\":\"Fuzz\",\"performer\":\"Band\",\"venueId\":\"$venue\",\"startsAt\":\"$(date -u -d '+30 days' +%FT%TZ)\",\"onSaleAt\":\"$(date -u -d '-1 minute' +%FT%TZ)\",\"prices\":{\"A\":5000}}" \
  "$BASE/v1/events" | json eventId)
hold=$(curl -fsS -H "Authorization: Bearer $fan" -H 'content-type: application/json' \
  -d '{"seatIds":["S1-R1-1"]}' "$BASE/v1/events/$event/holds" | json holdId)
paid=$(curl -fsS -H "Authorization: Bearer $fan" -H 'content-type: application/json' \
  -d '{"seatIds":["S1-R1-2"]}' "$BASE/v1/events/$event/holds" | json holdId)
order=$(curl -fsS -H "Authorization: Bearer $fan" -H 'content-type: application/json' -H 'Idempotency-Key: fuzz-order' \
  -d "{\"holdId\":\"$paid\",\"paymentToken\":\"tok_ok\"}" "$BASE/v1/orders" | json orderId)
ticket=""
for _ in $(seq 1 60); do
  ticket=$(curl -fsS -H "Authorization: Bearer $fan" "$BASE/v1/orders/$order" |
    python3 -c 'import json,sys; t=json.load(sys.stdin).get("tickets") or [{}]; print(t[0].get("ticketId",""))')
  [ -n "$ticket" ] && break
  sleep 0.5
done
[ -n "$ticket" ] || { echo "the seeded order got no ticket" >&2; exit 1; }
CONFIG=$OUT/schemathesis.toml
cp "$ROOT/scripts/fuzz/schemathesis.toml" "$CONFIG"
cat >>"$CONFIG" <<TOML

[[operations]]
include-path-regex = "^/v1/events/\\\\{id\\\\}"
parameters = { "path.id" = "$event" }

[[operations]]
include-path = "/v1/holds/{id}"
parameters = { "path.id" = "$hold" }

[[operations]]
include-path = "/v1/venues/{id}"
parameters = { "path.id" = "$venue" }

[[operations]]
include-path-regex = "^/v1/orders/\\\\{id\\\\}"
parameters = { "path.id" = "$order" }

[[operations]]
include-path = "/v1/tickets/{ticketId}/barcode"
parameters = { "path.ticketId" = "$ticket" }
TOML
total=0
status=0
for role in admin fan scanner auditor; do
  gates=()
  # A scanner's token names the gates it admits at.
  [ "$role" = scanner ] && gates=(--venue fuzz-venue)
  token=$("$ROOT/target/release/onsale" token --sub "fuzz-$role" --role "$role" "${gates[@]}" --ttl-secs 3600)
  # One worker: the generator's Python parses schemas in threads, which CPython 3.11 does not
  # always survive (SystemError: AST constructor recursion depth mismatch).
  set +e
  "$ST" --config-file "$CONFIG" run "http://$LISTEN/openapi.json" \
    --checks all --workers 1 --max-examples "$EXAMPLES" \
    -H "Authorization: Bearer $token" >"$OUT/$role.log" 2>&1
  rc=$?
  set -e
  n=$(grep -Eo '^ *[0-9]+ generated' "$OUT/$role.log" | tail -1 | tr -dc 0-9)
  total=$((total + ${n:-0}))
  echo "$role: ${n:-0} requests, exit $rc ($OUT/$role.log)"
  if [ "$rc" != 0 ]; then
    status=1
    sed -n '/^=* FAILURES =*/,/^=* SUMMARY =*/p' "$OUT/$role.log" | cut -c1-300 | head -80
  fi
done
echo "fuzz-api: $total requests over 4 roles, exit $status"
exit "$status"
