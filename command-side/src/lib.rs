//! The command side of onsale: per-show owners ([`owner`]) that decide with the domain crate
//! and commit to the event log with group commit, behind the REST command API ([`api`]).
//!
//! With many nodes ([`cluster`]) each show is decided by the node that claimed it, under an
//! epoch every append carries; a command reaching another node is forwarded to the owner.
//!
//! It does not wire itself: `onsale-server` builds it. Whether a show exists and has a waiting
//! room it reads from the catalog beside the log (`onsale_eventlog::Catalog`), never from an
//! owner; it reads no read model (the event and venue pages are the query side's).

pub mod api;
pub mod cluster;
mod known;
pub mod owner;
pub mod protocol;
pub mod tokens;

pub use owner::{OwnerConfig, Shows};
pub use protocol::{Answer, CommandError};
pub use protocol::{ClusterConfig, Found, ShowQuery};
pub use tokens::TokenVault;
