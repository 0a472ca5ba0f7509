//! The deterministic simulator (issue 32, docs/adr/020): the real write path (the command
//! side's owners with group commit, claims, leases and fencing across several nodes; the
//! domain; the event log's contract in memory) driven by seeded fans and faults on tokio's
//! paused clock, with the invariants checked after every step. `make sim SEEDS=1000` runs many
//! universes; a failure prints its seed, and `make sim SEED=n` replays it exactly.

pub mod link;
pub mod oracle;
pub mod payments;
pub mod projection;
pub mod tickets;
pub mod universe;

pub use universe::{run, Config, Report};
