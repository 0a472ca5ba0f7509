//! The show aggregate. One instance holds every seat of one performance, so a multi-seat hold,
//! the per-account cap and the hold/order fence are decided in one place, in one step.
//!
//! `decide` holds all the rules and emits events; `apply` only moves state. `decide` validates
//! everything before emitting anything, because cqrs-es's `EventSink::write` applies an event to
//! the live aggregate the moment it is written.
//!
//! The module is split by concern: [`messages`] (commands and events, the log's vocabulary),
//! `decide` (the rules), `apply` (the state changes and cqrs-es's `Aggregate`), [`views`] (what
//! the API reads of a show) and `index` (lookups derived from the layout and the seats).

mod apply;
mod decide;
mod index;
pub mod messages;
pub mod views;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::{Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::error::{Result, ShowError};
use crate::ids::{AccountId, HoldId, IdempotencyKey, OrderId, SeatId, ShowId, VenueId};
use crate::layout::{seat_id, VenueLayout};
use crate::transitions::{
    HoldMove, HoldState, OrderMove, OrderState, SeatMove, SeatStatus, Transition, Verdict,
};

/// The per-account cap: seats across one account's live holds and live orders for a show.
pub const MAX_SEATS_PER_ACCOUNT: u32 = 8;
/// The highest price of a seat: a million in the currency's units. With at most a few dozen
/// seats per order, a total stays far inside an `i64`.
pub const MAX_PRICE_CENTS: i64 = 100_000_000;
/// The hold TTL when a show does not set its own.
pub const DEFAULT_HOLD_TTL_SECONDS: u32 = 600;
/// Finished holds (released or expired, never ordered, made without an idempotency key) a show
/// remembers per account, newest first: enough to answer `HOLD_EXPIRED` for the holds a fan
/// just had; older ones are forgotten, so a fan looping hold -> release grows nothing.
pub const FINISHED_HOLDS_KEPT_PER_ACCOUNT: usize = 16;
/// How long an idempotency key (and the finished hold it made) is remembered: docs/api.md promises
/// at least 24 hours. Measured from the hold's expiry or the order's placing.
pub const IDEMPOTENCY_KEY_HOURS: i64 = 24;
/// Finished holds made under an idempotency key a show remembers per account (with their
/// keys), newest first: a retry comes within minutes, not after 64 newer holds, and a bot
/// looping keyed hold -> release grows nothing past them.
pub const KEYED_FINISHED_HOLDS_KEPT_PER_ACCOUNT: usize = 64;
/// Declined payments one account may have on one show within [`IDEMPOTENCY_KEY_HOURS`] before
/// its next order is refused (`PAYMENT_ATTEMPTS_EXCEEDED`), unless the show's policy says
/// otherwise: card testing by hold -> order -> decline stops there, and a failed order is
/// forgotten with its key, so the show remembers at most this many per account.
pub const DEFAULT_MAX_FAILED_PAYMENTS: u32 = 5;

pub use crate::transitions::{HoldState as HoldStatus, OrderState as OrderStatus};

use index::Index;
pub use messages::{
    Actor, BestAvailableOnly, Currency, Idempotency, PaymentFailure, SalePolicy, ShowCommand,
    ShowEvent, ShowInfo,
};
pub use views::{HoldView, OrderView};

/// One seat's state, naming its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Seat {
    Available,
    Held(HoldId),
    PendingPayment(OrderId),
    Sold(OrderId),
}

impl Seat {
    pub fn status(&self) -> SeatStatus {
        match self {
            Self::Available => SeatStatus::Available,
            Self::Held(_) => SeatStatus::Held,
            Self::PendingPayment(_) => SeatStatus::PendingPayment,
            Self::Sold(_) => SeatStatus::Sold,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub account: AccountId,
    pub seats: Vec<u32>,
    pub expires_at: DateTime<Utc>,
    pub state: HoldState,
    pub order: Option<OrderId>,
    /// Made under an idempotency key: remembered as long as the key is.
    #[serde(default)]
    pub keyed: bool,
    /// The key it was made under (absent in snapshots written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<IdempotencyKey>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub account: AccountId,
    pub hold_id: HoldId,
    pub seats: Vec<u32>,
    pub total_cents: i64,
    pub placed_at: DateTime<Utc>,
    pub state: OrderState,
    pub ambiguous_since: Option<DateTime<Utc>>,
    pub failure: Option<String>,
    /// The last failure's code (absent in snapshots written before it existed).
    #[serde(default)]
    pub failure_code: Option<PaymentFailure>,
    /// Captured after it failed while its seats went to others: the buyer is owed a make-good.
    #[serde(default)]
    pub make_good: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Outcome {
    Hold(HoldId),
    Order(OrderId),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct IdempotencyRecord {
    account: AccountId,
    key: IdempotencyKey,
    fingerprint: String,
    outcome: Outcome,
    /// When the key was used, as the log says (the hold's expiry, the order's placing): the
    /// key is forgotten [`IDEMPOTENCY_KEY_HOURS`] after it.
    #[serde(default)]
    at: DateTime<Utc>,
}

/// The services a show needs from outside: only the clock.
#[derive(Debug, Clone)]
pub struct ShowServices {
    pub clock: Arc<dyn Clock>,
}

/// The aggregate. Its serialized form (the snapshot) is [`ShowSnapshot`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(into = "ShowSnapshot", from = "ShowSnapshot")]
pub struct Show {
    info: Option<ShowInfo>,
    layout: VenueLayout,
    seats: Vec<Seat>,
    // Persistent (structurally shared) maps: a snapshot's copy shares them instead of copying
    // every hold, order and key on the owner's task, and they never rehash a whole table as
    // they grow (ADR 026).
    holds: imbl::HashMap<HoldId, Hold>,
    orders: imbl::HashMap<OrderId, Order>,
    idempotency: imbl::HashMap<(AccountId, IdempotencyKey), IdempotencyRecord>,
    index: Index,
}

/// Everything a show is, minus what can be derived: what a snapshot stores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShowSnapshot {
    info: Option<ShowInfo>,
    layout: VenueLayout,
    seats: Vec<Seat>,
    holds: BTreeMap<HoldId, Hold>,
    orders: BTreeMap<OrderId, Order>,
    idempotency: Vec<IdempotencyRecord>,
}

impl From<Show> for ShowSnapshot {
    fn from(s: Show) -> Self {
        let mut idempotency: Vec<_> = s.idempotency.into_iter().map(|(_, r)| r).collect();
        idempotency.sort_by(|a, b| (&a.account, &a.key).cmp(&(&b.account, &b.key)));
        Self {
            info: s.info,
            layout: s.layout,
            seats: s.seats,
            holds: s.holds.into_iter().collect(),
            orders: s.orders.into_iter().collect(),
            idempotency,
        }
    }
}

/// A show's state copied for a snapshot, without its derived index: what the owner takes on its
/// own task, serialized off it by [`SnapshotCopy::to_json`] into the same form as `Show`'s. The
/// holds, orders and keys are shared with the show, not copied (the owner's later changes copy
/// the few nodes they touch), so the copy costs the seats and the layout, not the show's
/// history (ADR 026).
#[derive(Debug)]
pub struct SnapshotCopy(Show);

impl SnapshotCopy {
    /// The snapshot's JSON, equal to `serde_json::to_string(&show)` of the show copied.
    pub fn to_json(self) -> serde_json::Result<String> {
        serde_json::to_string(&ShowSnapshot::from(self.0))
    }
}

impl Show {
    /// The state a snapshot stores, copied without the index (see [`SnapshotCopy`]).
    pub fn snapshot_copy(&self) -> SnapshotCopy {
        SnapshotCopy(Show {
            info: self.info.clone(),
            layout: self.layout.clone(),
            seats: self.seats.clone(),
            holds: self.holds.clone(),
            orders: self.orders.clone(),
            idempotency: self.idempotency.clone(),
            index: Index::default(),
        })
    }
}

impl From<ShowSnapshot> for Show {
    fn from(s: ShowSnapshot) -> Self {
        let mut show = Show {
            info: s.info,
            layout: s.layout,
            seats: s.seats,
            holds: s.holds.into_iter().collect(),
            orders: s.orders.into_iter().collect(),
            idempotency: s
                .idempotency
                .into_iter()
                .map(|r| ((r.account.clone(), r.key.clone()), r))
                .collect(),
            index: Index::default(),
        };
        show.rebuild_index();
        show
    }
}

impl Hold {
    /// Finished without an order or a key: nothing but the fan's memory refers to it.
    fn forgettable(&self) -> bool {
        self.finished() && !self.keyed
    }

    /// Released or expired without an order.
    fn finished(&self) -> bool {
        matches!(self.state, HoldState::Released | HoldState::Expired) && self.order.is_none()
    }
}

impl Order {
    /// Declined (or failed for a reason of the card's), its seats returned: what the limit on
    /// failed payments counts. A processor that never answered is not the buyer's doing.
    pub fn declined(&self) -> bool {
        matches!(self.state, OrderState::PaymentFailed | OrderState::Failed)
            && self.failure_code != Some(PaymentFailure::PaymentTimedOut)
    }
}
