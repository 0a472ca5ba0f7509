//! The command side of onsale: per-show owners ([`owner`]) that decide with the domain crate
//! and commit to the event log with group commit, behind the REST command API ([`api`]).
//!
//! With many nodes ([`cluster`]) each show is decided by the node that claimed it, under an
//! epoch every append carries; a command reaching another node is forwarded to the owner.
//!
//! It does not wire itself: `onsale-server` builds it. Its reads (the event page, a show's
//! schedule) come from the log's first event ([`catalog`]), never from an owner; the one read
//! model it reads, the catalog's count of available seats for the event page's status, it
//! reads through the projections' API (`onsale_projections::catalog::available`).

pub mod api;
pub mod catalog;
pub mod cluster;
mod known;
pub mod owner;
pub mod protocol;
pub mod tokens;

pub use catalog::Catalog;
pub use owner::{OwnerConfig, Shows};
pub use protocol::{Answer, CommandError};
pub use protocol::{ClusterConfig, Found, ShowQuery};
pub use tokens::TokenVault;
