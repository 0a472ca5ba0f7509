//! The load generator run as its make targets run it, on the servers `make test` starts (built
//! with the `stack` feature, which `make test` turns on; a plain `cargo test` says so in one line).

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
