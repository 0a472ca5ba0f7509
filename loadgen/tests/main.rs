//! The load generator run as its make targets run it, on the servers `make test` starts (built
//! with the `stack` feature, which `make test` turns on; a plain `cargo test` says so in one line).

// Ignored on purpose, and hiding nothing: built only without the `stack` feature, it stands in
// for this binary's integration tests under a plain `cargo test` and prints, as its ignore
// reason, the one line saying how to run them (`make test` builds with the feature and runs
// every one of them; this placeholder does not exist then).
#[cfg(not(feature = "stack"))]
#[test]
#[ignore = "needs the servers `make test` starts: run `make test`"]
fn integration_tests() {}

#[cfg(feature = "stack")]
mod demo;
#[cfg(feature = "stack")]
mod drill_bots;
#[cfg(feature = "stack")]
mod run;
