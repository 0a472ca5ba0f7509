//! The onsale domain: one aggregate per show holding every seat, hold and order of that show.
//!
//! This crate decides; it performs no I/O. It has no database, broker, HTTP or Redis code: the
//! command side feeds it commands and a clock, persists the events it emits, and applies them
//! back. Every seat, hold and order transition is checked against the tables in
//! [`transitions`], so a terminal state can never regress and a seat can never be sold twice.
//!
//! - [`ids`]: validated identifiers; an invalid one cannot be built. Amounts are integer
//!   cents (`i64`, named `*_cents`), never floats.
//! - [`layout`]: the venue's sections, rows and seats, and the seat-id grammar.
//! - [`show`]: the [`Show`] aggregate, its commands and events.
//! - [`transitions`]: the one state table for seats, holds and orders.

pub mod chart;
pub mod clock;
pub mod error;
pub mod ids;
pub mod layout;
#[cfg(feature = "planted-bugs")]
pub mod plant;
pub mod region;
pub mod show;
pub mod transitions;
pub mod venue;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Result, ShowError};
pub use ids::{AccountId, HoldId, IdempotencyKey, InvalidId, OrderId, SeatId, ShowId, VenueId};
pub use layout::{RowLayout, SectionLayout, VenueLayout};
pub use show::{
    Actor, BestAvailableOnly, Currency, HoldStatus, HoldView, Idempotency, OrderStatus, OrderView,
    PaymentFailure, SalePolicy, Show, ShowCommand, ShowEvent, ShowInfo, ShowServices, SnapshotCopy,
    DEFAULT_MAX_FAILED_PAYMENTS, FINISHED_HOLDS_KEPT_PER_ACCOUNT, IDEMPOTENCY_KEY_HOURS,
    KEYED_FINISHED_HOLDS_KEPT_PER_ACCOUNT, MAX_PRICE_CENTS, MAX_SEATS_PER_ACCOUNT,
};
pub use venue::{VenueEvent, VENUE_TYPE};

#[cfg(test)]
mod show_tests;
