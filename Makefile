# The two commands a newcomer needs: `make demo` and `make test`. Everything else mirrors CI.
.PHONY: demo test up down kill-broker start-broker kill-primary start-db drill-failover fmt lint bench bench-holds bench-reads bench-queue

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh

# `make up BROKERS=3`: a three-broker Kafka cluster (replication 3, min.insync.replicas 2).
# `make up HA=1`: PostgreSQL as three nodes under Patroni (synchronous quorum commit, HAProxy
# routing to the primary) instead of one.
BROKERS ?= 1
HA ?= 0
up:
	BROKERS=$(BROKERS) HA=$(HA) ./scripts/stack.sh up

# The operator's drill on `make up`'s cluster: SIGKILL broker N, then bring it back.
kill-broker:
	./scripts/stack.sh kill-broker $(N)

start-broker:
	./scripts/stack.sh start-broker $(N)

# The operator's drill on `make up HA=1`: the primary's machine dies (SIGKILL to its Patroni and
# its PostgreSQL), a standby is promoted; `make start-db N=i` brings node i back as a standby.
kill-primary:
	./scripts/stack.sh kill-primary

start-db:
	./scripts/stack.sh start-db $(N)

# An on-sale in flight on `make up HA=1`'s stack, the primary killed at a random moment, and the
# report: time without writes, every acknowledged hold and order checked in the log.
drill-failover:
	./scripts/drill-failover.sh

down:
	./scripts/stack.sh down

fmt:
	cargo fmt --all

lint:
	cargo clippy --workspace --all-targets -- -D warnings

bench: bench-holds bench-reads bench-queue

bench-holds:
	HA=$(HA) ./scripts/bench-holds.sh

bench-reads:
	./scripts/bench-reads.sh

bench-queue:
	./scripts/bench-queue.sh
