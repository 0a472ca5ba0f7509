# The two commands a newcomer needs: `make demo` and `make test`. Everything else mirrors CI.
.PHONY: demo test up down fmt lint bench bench-holds bench-reads bench-queue

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh

up:
	./scripts/stack.sh up

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
