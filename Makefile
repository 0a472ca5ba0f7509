# The two commands a newcomer needs: `make demo` and `make test`. Everything else mirrors CI.
.PHONY: demo test up down kill-broker start-broker fmt lint bench bench-holds bench-reads bench-queue

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh

# `make up BROKERS=3`: a three-broker Kafka cluster (replication 3, min.insync.replicas 2).
BROKERS ?= 1
up:
	BROKERS=$(BROKERS) ./scripts/stack.sh up

# The operator's drill on `make up`'s cluster: SIGKILL broker N, then bring it back.
kill-broker:
	./scripts/stack.sh kill-broker $(N)

start-broker:
	./scripts/stack.sh start-broker $(N)

down:
	./scripts/stack.sh down

fmt:
	cargo fmt --all

lint:
	cargo clippy --workspace --all-targets -- -D warnings

bench: bench-holds bench-reads bench-queue

bench-holds:
	./scripts/bench-holds.sh

bench-reads:
	./scripts/bench-reads.sh

bench-queue:
	./scripts/bench-queue.sh
