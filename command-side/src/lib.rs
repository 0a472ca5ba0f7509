//! The command side of onsale: per-show owners ([`owner`]) that decide with the domain crate
//! and commit to the event log with group commit, behind the REST command API ([`api`]).
//!
//! It does not read read models, and it does not wire itself: `onsale-server` builds it. What
//! it still answers from a show's committed in-memory state is what a command needs next: a
//! hold (`GET /v1/holds/{id}`) and the event page.

pub mod api;
pub mod owner;

pub use owner::{Answer, CommandError, OwnerConfig, Shows};
