# The two commands a newcomer needs: `make demo` and `make test`. Everything else mirrors CI.
.PHONY: demo test sim sim-soak web fuzz-api drill-bots drill-shards kill-shard start-shard bench-shards up down kill-broker start-broker kill-primary start-db drill-failover drill-nodes kill-node stop-node cont-node start-node fmt lint bench bench-holds bench-reads bench-queue bench-nodes bench-limits bench-search bench-replay bench-ga bench-join bench-tail bench-ab bench-owner bench-floor bench-cdc bench-trace bench-fanout bench-chart fail-region promote-region rejoin-region drill-region oidc-rotate oidc-retire

demo:
	NODES=$(NODES) ./scripts/demo.sh

test:
	./scripts/test.sh

# The deterministic simulator (issue 32, docs/adr/020): SEEDS universes (the real owners,
# fencing and domain on the in-memory log, with faults, on a paused clock), every invariant
# after every step; a failure prints its seed. `make sim SEED=n` replays one with its trace.
# `make sim-soak SOAK_SECONDS=600` runs universes for that long: the hunt before a release.
SEEDS ?= 1000
SEED ?=
SOAK_SECONDS ?= 600
sim:
	cargo build --release -q -p onsale-sim
	./target/release/onsale-sim $(if $(SEED),--seed $(SEED),--seeds $(SEEDS))

sim-soak:
	cargo build --release -q -p onsale-sim
	./target/release/onsale-sim --soak-seconds $(SOAK_SECONDS) --first $$(date +%s)

# The fan app and ops console (web/) built into web/dist; `make up` and `make demo` build it.
web:
	./scripts/web.sh

# schemathesis against the local stack's /openapi.json: every check, a token for each role,
# FUZZ_EXAMPLES (120) examples per operation and phase; 0 server errors and 0 schema
# violations or it fails. `make test` runs a short, seeded version (tests/tests/fuzz_api.rs).
FUZZ_EXAMPLES ?= 120
fuzz-api:
	SECURE=$(SECURE) FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) ./scripts/fuzz-api.sh

# `make up BROKERS=3`: a three-broker Kafka cluster (replication 3, min.insync.replicas 2).
# `make up HA=1`: PostgreSQL as three nodes under Patroni (synchronous quorum commit, HAProxy
# routing to the primary) instead of one.
# `make up NODES=3`: three `onsale serve` nodes behind HAProxy on :8080 and :50051, each show
# owned by one node at a time (docs/adr/011), a hot-standby relay and two projection processes.
# `make up SHARDS=2`: the shows' logs, ownership and snapshots on two PostgreSQL clusters of
# their own (:54341, :54342), each show placed on one when it is scheduled; the directory and
# the read models on :54329; a relay per shard into the one topic (docs/adr/021).
# `make up REGIONS=2`: region b beside region a (docs/adr/024): b's PostgreSQL clusters are
# synchronous standbys of a's through Toxiproxy (REGION_DELAY_MS, 5, each way), its own Kafka
# (MirrorMaker 2 copies a's topic), Redis and processes, reads on :8081, writes refused naming
# a; the region router on :8070 sends requests to whichever region writes.
# `make up SECURE=1`: Kafka only over TLS with SCRAM users and ACLs (the relay's user writes
# the events topic and cannot read it, the others read it and cannot write it), Redis only
# over TLS with a password; certificates and passwords generated into the stack's directory.
# `make up TRACING=1`: Zipkin on :9411 (http://127.0.0.1:9411/zipkin), every process sending
# it the spans of TRACE_SAMPLE (0.1) of the requests (docs/adr/019).
BROKERS ?= 1
HA ?= 0
NODES ?= 1
SHARDS ?= 1
TRACING ?= 0
TRACE_SAMPLE ?= 0.1
REGIONS ?= 1
REGION_DELAY_MS ?= 5
SECURE ?= 0
up:
	SECURE=$(SECURE) BROKERS=$(BROKERS) HA=$(HA) NODES=$(NODES) SHARDS=$(SHARDS) TRACING=$(TRACING) TRACE_SAMPLE=$(TRACE_SAMPLE) REGIONS=$(REGIONS) REGION_DELAY_MS=$(REGION_DELAY_MS) ./scripts/stack.sh up

# Regions on `make up REGIONS=2` (docs/adr/024), named a and b: `make fail-region R=a` (its
# processes, PostgreSQL and Kafka stopped as if its machines died), `make promote-region R=b`
# (`onsale region promote`: refused while the old writer answers as a primary), `make
# rejoin-region R=a` (rewound onto the writer and following it; its processes stand by).
R ?= a
fail-region:
	SHARDS=$(SHARDS) REGIONS=2 ./scripts/stack.sh fail-region $(R)

promote-region:
	SHARDS=$(SHARDS) REGIONS=2 ./scripts/stack.sh promote-region $(R)

rejoin-region:
	SHARDS=$(SHARDS) REGIONS=2 ./scripts/stack.sh rejoin-region $(R)

# An on-sale in region a through the region router, a cut off at a random moment, b promoted,
# the sale going on in b, a back as b's standby; the report: every acknowledged hold and order
# in b's log, sold twice, charged twice, the write gap, a's attempts after it came back.
drill-region:
	SHARDS=$(SHARDS) ./scripts/drill-region.sh

# The operator's drills on `make up NODES=3`: SIGKILL node N (its shows answer from another node
# within seconds), SIGSTOP it (paused: another node takes its shows; SIGCONT with cont-node and
# its stale decisions are fenced), start it again.
kill-node:
	./scripts/stack.sh kill-node $(N)

stop-node:
	./scripts/stack.sh stop-node $(N)

cont-node:
	./scripts/stack.sh cont-node $(N)

start-node:
	./scripts/stack.sh start-node $(N)

# An on-sale in flight on three nodes, the show's node SIGKILLed at a random moment (PAUSE=20:
# SIGSTOPped for 20 s, then SIGCONT), and the report: time without writes, every acknowledged
# hold and order checked in the log.
drill-nodes:
	PAUSE=$(PAUSE) ./scripts/drill-nodes.sh

# Bots during an on-sale (issue 29): honest fans calm, then beside bots flooding made-up ids,
# card testing and anonymous reads, on the local stack with production rate limits; the goals
# checked (honest throughput >= 90% and p99 <= 2x of calm, no 5xx, no admission pause, >= 90% of
# bot requests 429), then what one show remembers under each bot loop. DRILL_SECONDS per phase.
drill-bots:
	DRILL_SECONDS=$(DRILL_SECONDS) ./scripts/drill-bots.sh

# The operator's drills on `make up SHARDS=2` (HA=1: each shard a Patroni trio): shard N's
# primary dies (SIGKILL; with HA=1 its trio promotes a standby), then comes back.
kill-shard:
	HA=$(HA) ./scripts/stack.sh kill-shard $(N)

start-shard:
	HA=$(HA) ./scripts/stack.sh start-shard $(N)

# An on-sale on three shows over two shards, shard 1's primary killed at a random moment, a show
# moved between shards mid-sale; per show: lost, sold twice, the write gap (docs/adr/022).
drill-shards:
	HA=$(HA) DRILL_SECONDS=$(DRILL_SECONDS) ./scripts/drill-shards.sh

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

# The identity provider of `make up` rotates its signing key (ALG=EdDSA|ES256|RS256): the new
# key signs from now on, onsale takes it at its first token; `oidc-retire` drops the oldest key
# (its tokens refused from onsale's next fetch of the JWKS).
oidc-rotate:
	./scripts/stack.sh oidc-rotate $(or $(ALG),EdDSA)

oidc-retire:
	./scripts/stack.sh oidc-retire

down:
	./scripts/stack.sh down

fmt:
	cargo fmt --all

lint:
	cargo clippy --workspace --all-targets --features onsale-tests/stack,onsale-server/stack,onsale-loadgen/stack -- -D warnings

bench: bench-holds bench-reads bench-queue

# `make bench-holds STACK=1`: REST holds against the whole `make up` stack, pgbench beside.
STACK ?= 0
bench-holds:
	HA=$(HA) STACK=$(STACK) ./scripts/bench-holds.sh

bench-tail:
	./scripts/bench-tail.sh

# Two builds or settings of the service alternated on one `make up` stack at one open-loop rate
# (issue 30): AB_A / AB_B (environment on top), AB_A_BIN / AB_B_BIN, AB_RATE, AB_ROUNDS.
bench-ab:
	./scripts/bench-ab.sh

# The owner's worst command as one show's memory grows, and the copy a snapshot takes on the
# owner's task, in the domain alone (issue 30; ADR 003).
bench-owner:
	cargo run --release -q -p onsale-loadgen -- bench-owner

# What a hold costs at the least here, piece by piece, and the ceiling that leaves (issue 30).
bench-floor:
	./scripts/bench-floor.sh

# The relay beside Debezium's PostgreSQL connector on Kafka Connect, same table and load, one
# run: CPU per event of each process and its PostgreSQL backends, events/s, commit-to-topic
# latency (issue 52).
bench-cdc:
	./scripts/bench-cdc.sh

# What a second write cluster adds: the command layer holding seats on four shows all on
# shard 1, then spread over two shards, interleaved; holds/s and commits/s per shard.
bench-shards:
	./scripts/bench-shards.sh

# What tracing costs the hold path (docs/adr/019): rounds without a collector against rounds
# exporting TRACE_SAMPLE (0.1) of the requests to Zipkin, on one `make up TRACING=1` stack.
bench-trace:
	./scripts/bench-trace.sh

# 50,000 subscribers of one show's deltas on one serving process, over SSE and over gRPC:
# hold-to-delta latency for every (subscriber, hold) pair, memory per subscriber.
bench-fanout:
	./scripts/bench-fanout.sh

bench-reads:
	./scripts/bench-reads.sh

# The venue chart at 50,000 seats in Chromium: first draw, frames at 1,000 changes a second.
bench-chart:
	./scripts/bench-chart.sh

bench-queue:
	./scripts/bench-queue.sh

# What the per-account rate limit costs the REST hold path: on against off, in one run.
bench-limits:
	./scripts/bench-limits.sh

# Catalog search on 100,000 shows: PostgreSQL in process and over HTTP (ADR 013) beside the
# search index over HTTP and its type-ahead (ADR 033); then how soon a search says a show was
# scheduled, sold out or released.
bench-search:
	./scripts/bench-search.sh

bench-replay:
	./scripts/bench-replay.sh

# General-admission holds/s of one hot floor: onsale (REST and command layer) beside the design
# document's counter SQL with one bucket and with 16, by pgbench, in one run.
bench-ga:
	./scripts/bench-ga.sh

# What a waiting-room join costs when the show asks a proof of work: the fan's search in Chromium
# and natively, the server's check.
bench-join:
	./scripts/bench-join.sh

# Hold attempts/s over 20 shows on one node direct, one node behind the router, three nodes
# behind the router (docs/capacity.md uses the figures).
bench-nodes:
	./scripts/bench-nodes.sh
