//! The integration tests against the real servers `make test` starts (PostgreSQL, Apache Kafka,
//! Redis, Chromium, the processor simulator): one binary, so the workspace links the whole stack
//! once for them, and libtest runs tests of different files side by side.
//!
//! They are built only with the `stack` feature, which `make test` turns on after starting the
//! servers; a plain `cargo test` says so in one line instead of failing each test.

// Ignored on purpose, and hiding nothing: built only without the `stack` feature, it stands in
// for this binary's integration tests under a plain `cargo test` and prints, as its ignore
// reason, the one line saying how to run them (`make test` builds with the feature and runs
// every one of them; this placeholder does not exist then).
#[cfg(not(feature = "stack"))]
#[test]
#[ignore = "needs the servers `make test` starts: run `make test`"]
fn integration_tests() {}

#[cfg(feature = "stack")]
mod api;
#[cfg(feature = "stack")]
mod bots;
#[cfg(feature = "stack")]
mod broker;
#[cfg(feature = "stack")]
mod browser;
#[cfg(feature = "stack")]
mod catalog;
#[cfg(feature = "stack")]
mod concurrency;
#[cfg(feature = "stack")]
mod failover;
#[cfg(feature = "stack")]
mod fuzz_api;
#[cfg(feature = "stack")]
mod general_admission;
#[cfg(feature = "stack")]
mod join_rules;
#[cfg(feature = "stack")]
mod limits;
#[cfg(feature = "stack")]
mod payments;
#[cfg(feature = "stack")]
mod read_path;
#[cfg(feature = "stack")]
mod sale_policies;
#[cfg(feature = "stack")]
mod shards;
#[cfg(feature = "stack")]
mod store;
#[cfg(feature = "stack")]
mod waiting_room;
