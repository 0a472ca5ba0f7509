//! The server's own tests: the API and operations documents and the secrets check need
//! nothing; the rest run real `onsale` processes on the servers `make test` starts (built with
//! the `stack` feature, which `make test` turns on; a plain `cargo test` says so in one line).
//! One binary, so the whole server is linked once for them.

// Ignored on purpose, and hiding nothing: built only without the `stack` feature, it stands in
// for this binary's integration tests under a plain `cargo test` and prints, as its ignore
// reason, the one line saying how to run them (`make test` builds with the feature and runs
// every one of them; this placeholder does not exist then).
#[cfg(not(feature = "stack"))]
#[test]
#[ignore = "needs the servers `make test` starts: run `make test`"]
fn integration_tests() {}

#[cfg(feature = "stack")]
mod alerts;
#[cfg(feature = "stack")]
mod analysts;
mod api_doc;
#[cfg(feature = "stack")]
mod audit;
#[cfg(feature = "stack")]
mod docs_examples;
#[cfg(feature = "stack")]
mod nodes;
mod operations_doc;
#[cfg(feature = "stack")]
mod regions;
mod secrets;
#[cfg(feature = "stack")]
mod shards;
#[cfg(feature = "stack")]
mod shutdown;
#[cfg(feature = "stack")]
mod topic;
#[cfg(feature = "stack")]
mod trace;
