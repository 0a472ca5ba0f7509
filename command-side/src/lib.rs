//! The command side of onsale: per-show owners that decide with the domain crate and commit
//! to the PostgreSQL event store with group commit, behind the REST command API.
//!
//! It must not serve reads that belong to the query side once that exists; what it reads
//! (an order, a hold, the event page) comes from the show's committed, in-memory state.

pub mod api;
pub mod app;
pub mod owner;
pub mod store;
pub mod telemetry;

pub use app::{App, Config};
