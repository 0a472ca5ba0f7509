//! One owner task per show. It keeps the live aggregate in memory, serializes that show's
//! commands, and commits the events of many commands in one append (group commit). Each
//! command is decided the moment it is taken in, against the state with every earlier decision
//! applied: a refusal writes nothing and is answered at once; everything else joins the open
//! batch, which is sent as soon as the append in flight has committed, and is answered only
//! after its own append committed. So the owner decides the next batch while PostgreSQL writes
//! the current one, and one append per show is in flight at a time (docs/adr/004).
//!
//! On a version conflict (another process wrote the show) the cached state is dropped, the show
//! is reloaded from snapshot plus tail and what was not committed is decided again. When
//! PostgreSQL fails the cached state is dropped too (it holds effects that may not have
//! committed) and the callers get `Unavailable`: nothing is acknowledged that was not
//! committed.//!
//! [`Shows`] (`registry`) is the registry of this process's owners: it routes each show's
//! work to the show's owner here or forwards it to the node that owns it. `actor` is one
//! owner, a state machine of its queue, its tenure and its append; it shares the node's
//! `context` (the shards, the clock, the tuning, the stop, this node and its leases) and
//! returns why it ended (`actor::Exit`) instead of calling the registry. They share the work
//! they pass (`job`) and the tuning (`config`); the dependencies run one way.

mod actor;
mod config;
mod context;
mod job;
mod registry;

pub use config::OwnerConfig;
pub use registry::Shows;
