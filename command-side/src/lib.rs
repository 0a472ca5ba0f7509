//! The command side of onsale: per-show owners that decide with the domain crate and commit
//! to the PostgreSQL event store with group commit, behind the REST command API.
//!
//! Reads belong to the query side (`onsale-query`, orders included); what the command side still
//! answers from a show's committed in-memory state is what a command needs next: a hold
//! (`GET /v1/holds/{id}`) and the event page.

pub mod admission;
pub mod api;
pub mod app;
pub mod owner;
pub mod store;
pub mod telemetry;

pub use app::{App, Config};
pub use owner::Shows;
