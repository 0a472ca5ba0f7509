# Sourced by the scripts that run a local stack (make up, demo, drills, benchmarks).
# A local stack runs in development mode: unset secrets take built-in development values
# (`onsale serve` refuses them otherwise; see docs/security.md).
export ONSALE_DEV_MODE=${ONSALE_DEV_MODE:-1}
# Every simulated fan comes from 127.0.0.1: no rate limit per client address here.
export ONSALE_RATE_ADDRESS_PER_SEC=${ONSALE_RATE_ADDRESS_PER_SEC:-0}
export ONSALE_RATE_READ_ADDRESS_PER_SEC=${ONSALE_RATE_READ_ADDRESS_PER_SEC:-0}
export ONSALE_RATE_READ_ACCOUNT_PER_SEC=${ONSALE_RATE_READ_ACCOUNT_PER_SEC:-0}
export ONSALE_RATE_MISSES_PER_SEC=${ONSALE_RATE_MISSES_PER_SEC:-0}
# ... nor a cap on one address's connections (the load generators open up to 50,000).
export ONSALE_MAX_CONNECTIONS_PER_ADDRESS=${ONSALE_MAX_CONNECTIONS_PER_ADDRESS:-1000000}
# ... nor on one address's streams (bench-fanout's 50,000 subscribers, the demo's line).
export ONSALE_MAX_STREAMS_PER_ADDRESS=${ONSALE_MAX_STREAMS_PER_ADDRESS:-0}
# The API's /metrics on its public listener too (the binary serves them only on an operator
# listener by default): the local Prometheus, the drills and the benches read them there.
export ONSALE_PUBLIC_METRICS=${ONSALE_PUBLIC_METRICS:-1}
