//! Known bugs, planted on purpose one at a time so the simulator (`sim/`, issue 32) can show it
//! finds each: a simulator that finds nothing proves nothing. Compiled only with the
//! `planted-bugs` feature, which only the simulator's own test run enables (`make test` builds
//! it apart from everything else); no deployed build has this module.

use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Bug {
    /// The owner answers a batch's commands whether or not its append committed.
    AckBeforeCommit = 1,
    /// The log commits an append whose epoch is no longer the show's.
    AppendSkipsFence = 2,
    /// The per-account cap counts held seats and forgets ordered ones.
    CapForgetsOrders = 3,
    /// The payment worker charges a retry under a new idempotency key.
    NewKeyOnRetry = 4,
    /// The read models are not told which seats a cancellation frees.
    MapMissesCancellations = 5,
    /// The ticket issuer issues an order's tickets when it is placed, before it is paid.
    TicketsBeforePayment = 6,
    /// The sweep expires holds a few seconds before their expiry.
    ExpiresEarly = 7,
}

impl Bug {
    pub const ALL: [Bug; 7] = [
        Bug::AckBeforeCommit,
        Bug::AppendSkipsFence,
        Bug::CapForgetsOrders,
        Bug::NewKeyOnRetry,
        Bug::MapMissesCancellations,
        Bug::TicketsBeforePayment,
        Bug::ExpiresEarly,
    ];
}

static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// Plants `bug` (`None`: none) in this process.
pub fn plant(bug: Option<Bug>) {
    ACTIVE.store(bug.map_or(0, |b| b as u8), Ordering::Relaxed);
}

pub fn planted(bug: Bug) -> bool {
    ACTIVE.load(Ordering::Relaxed) == bug as u8
}
