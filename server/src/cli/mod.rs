//! The `onsale` binary's commands, by who runs them; `main.rs` lists them.

pub(crate) mod analysts;
pub(crate) mod audit;
pub(crate) mod dev;
pub(crate) mod placement;
pub(crate) mod processes;
