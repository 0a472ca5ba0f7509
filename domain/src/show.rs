//! The show aggregate. One instance holds every seat of one performance, so a multi-seat hold,
//! the per-account cap and the hold/order fence are decided in one place, in one step.
//!
//! `decide` holds all the rules and emits events; `apply` only moves state. `decide` validates
//! everything before emitting anything, because cqrs-es's `EventSink::write` applies an event to
//! the live aggregate the moment it is written.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::{Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::error::{Result, ShowError};
use crate::ids::{AccountId, HoldId, IdempotencyKey, OrderId, ShowId, VenueId};
use crate::layout::{seat_id, VenueLayout};
use crate::transitions::{
    HoldMove, HoldState, OrderMove, OrderState, SeatMove, SeatStatus, Transition, Verdict,
};

/// The per-account cap: seats across one account's live holds and live orders for a show.
pub const MAX_SEATS_PER_ACCOUNT: u32 = 8;
/// The hold TTL when a show does not set its own.
pub const DEFAULT_HOLD_TTL_SECONDS: u32 = 600;

pub use crate::transitions::{HoldState as HoldStatus, OrderState as OrderStatus};

/// What the edge stamps on a request that carries an `Idempotency-Key`: the key, and a
/// fingerprint of the request (route and body) so the same key with another body is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Idempotency {
    pub key: IdempotencyKey,
    pub fingerprint: String,
}

/// The catalog facts of a show, fixed when it is scheduled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShowInfo {
    pub show_id: ShowId,
    pub venue_id: VenueId,
    pub venue_name: String,
    pub city: String,
    pub name: String,
    pub performer: String,
    pub starts_at: DateTime<Utc>,
    pub on_sale_at: DateTime<Utc>,
    /// Cents per price tier.
    pub prices: BTreeMap<String, i64>,
    pub waiting_room: bool,
    pub hold_ttl_seconds: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ShowCommand {
    Schedule {
        info: ShowInfo,
        layout: VenueLayout,
    },
    HoldSeats {
        hold_id: HoldId,
        account: AccountId,
        seat_ids: Vec<String>,
        idempotency: Option<Idempotency>,
    },
    HoldBestAvailable {
        hold_id: HoldId,
        account: AccountId,
        quantity: u32,
        section: Option<String>,
        idempotency: Option<Idempotency>,
    },
    ReleaseHold {
        hold_id: HoldId,
        account: AccountId,
    },
    PlaceOrder {
        order_id: OrderId,
        hold_id: HoldId,
        account: AccountId,
        payment_token: String,
        idempotency: Idempotency,
    },
    RecordPaymentSucceeded {
        order_id: OrderId,
    },
    RecordPaymentFailed {
        order_id: OrderId,
        reason: String,
    },
    RecordPaymentAmbiguous {
        order_id: OrderId,
        reason: String,
    },
    CompensateOrder {
        order_id: OrderId,
    },
    /// The buyer (or an admin) cancels a paid order: its seats go back on sale and a refund is
    /// owed. The edge revokes the order's tickets before it sends this.
    CancelOrder {
        order_id: OrderId,
        account: AccountId,
        admin: bool,
    },
    /// The processor refunded the order (a cancellation or a make-good).
    RecordRefund {
        order_id: OrderId,
        refund_id: String,
    },
    /// The sweeper's command: each hold is expired only if it is still that hold, still active
    /// and past its expiry, so a late sweep can never release somebody else's newer hold.
    ExpireHolds {
        hold_ids: Vec<HoldId>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ShowEvent {
    ShowScheduled {
        info: ShowInfo,
        layout: VenueLayout,
    },
    SeatsHeld {
        hold_id: HoldId,
        account_id: AccountId,
        seat_ids: Vec<String>,
        expires_at: DateTime<Utc>,
        best_available: bool,
        idempotency: Option<Idempotency>,
    },
    HoldReleased {
        hold_id: HoldId,
    },
    HoldExpired {
        hold_id: HoldId,
    },
    OrderPlaced {
        order_id: OrderId,
        hold_id: HoldId,
        account_id: AccountId,
        seat_ids: Vec<String>,
        total_cents: i64,
        payment_token: String,
        placed_at: DateTime<Utc>,
        idempotency: Idempotency,
    },
    PaymentSucceeded {
        order_id: OrderId,
        at: DateTime<Utc>,
    },
    PaymentFailed {
        order_id: OrderId,
        reason: String,
        at: DateTime<Utc>,
    },
    PaymentAmbiguous {
        order_id: OrderId,
        reason: String,
        at: DateTime<Utc>,
    },
    OrderCompensated {
        order_id: OrderId,
        seat_ids: Vec<String>,
        at: DateTime<Utc>,
    },
    /// A capture arrived after the order had failed, and its seats were still free: they are
    /// sold to the order that paid for them (ADR 006).
    OrderReinstated {
        order_id: OrderId,
        seat_ids: Vec<String>,
        at: DateTime<Utc>,
    },
    /// A capture arrived after the order had failed, and somebody else has (some of) its seats
    /// now: they are not taken back; the charge is refunded and the buyer owed a make-good.
    MakeGoodOwed {
        order_id: OrderId,
        taken_seat_ids: Vec<String>,
        /// Why the seats could not go back to the order: taken by others, or the buyer's
        /// per-account cap is full with what they bought since.
        #[serde(default)]
        reason: String,
        at: DateTime<Utc>,
    },
    OrderCancelled {
        order_id: OrderId,
        seat_ids: Vec<String>,
        by: AccountId,
        at: DateTime<Utc>,
    },
    OrderRefunded {
        order_id: OrderId,
        refund_id: String,
        at: DateTime<Utc>,
    },
}

impl DomainEvent for ShowEvent {
    fn event_type(&self) -> String {
        match self {
            Self::ShowScheduled { .. } => "ShowScheduled",
            Self::SeatsHeld { .. } => "SeatsHeld",
            Self::HoldReleased { .. } => "HoldReleased",
            Self::HoldExpired { .. } => "HoldExpired",
            Self::OrderPlaced { .. } => "OrderPlaced",
            Self::PaymentSucceeded { .. } => "PaymentSucceeded",
            Self::PaymentFailed { .. } => "PaymentFailed",
            Self::PaymentAmbiguous { .. } => "PaymentAmbiguous",
            Self::OrderCompensated { .. } => "OrderCompensated",
            Self::OrderReinstated { .. } => "OrderReinstated",
            Self::MakeGoodOwed { .. } => "MakeGoodOwed",
            Self::OrderCancelled { .. } => "OrderCancelled",
            Self::OrderRefunded { .. } => "OrderRefunded",
        }
        .to_owned()
    }
    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

impl ShowEvent {
    /// The order the event is about, if any.
    pub fn order_id(&self) -> Option<OrderId> {
        match self {
            Self::OrderPlaced { order_id, .. }
            | Self::PaymentSucceeded { order_id, .. }
            | Self::PaymentFailed { order_id, .. }
            | Self::PaymentAmbiguous { order_id, .. }
            | Self::OrderCompensated { order_id, .. }
            | Self::OrderReinstated { order_id, .. }
            | Self::MakeGoodOwed { order_id, .. }
            | Self::OrderCancelled { order_id, .. }
            | Self::OrderRefunded { order_id, .. } => Some(*order_id),
            Self::ShowScheduled { .. }
            | Self::SeatsHeld { .. }
            | Self::HoldReleased { .. }
            | Self::HoldExpired { .. } => None,
        }
    }

    /// The hold the event is about, if it names one.
    pub fn hold_id(&self) -> Option<HoldId> {
        match self {
            Self::SeatsHeld { hold_id, .. }
            | Self::HoldReleased { hold_id }
            | Self::HoldExpired { hold_id }
            | Self::OrderPlaced { hold_id, .. } => Some(*hold_id),
            _ => None,
        }
    }
}

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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub account: AccountId,
    pub hold_id: HoldId,
    pub seats: Vec<u32>,
    pub total_cents: i64,
    pub payment_token: String,
    pub placed_at: DateTime<Utc>,
    pub state: OrderState,
    pub ambiguous_since: Option<DateTime<Utc>>,
    pub failure: Option<String>,
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
}

/// A hold as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HoldView {
    pub hold_id: HoldId,
    pub event_id: ShowId,
    pub seat_ids: Vec<String>,
    pub expires_at: DateTime<Utc>,
    pub account: AccountId,
    pub state: HoldState,
}

/// An order as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderView {
    pub order_id: OrderId,
    pub event_id: ShowId,
    pub hold_id: HoldId,
    pub account: AccountId,
    pub status: &'static str,
    pub seat_ids: Vec<String>,
    pub total_cents: i64,
    pub placed_at: DateTime<Utc>,
    pub make_good: bool,
}

/// The services a show needs from outside: only the clock.
#[derive(Debug, Clone)]
pub struct ShowServices {
    pub clock: Arc<dyn Clock>,
}

#[derive(Debug, Clone, Copy)]
struct RowSpan {
    section: u32,
    start: u32,
    len: u32,
}

/// Lookup structures derived from the layout and the seats; rebuilt after a snapshot load.
#[derive(Debug, Clone, Default)]
struct Index {
    seat_by_id: HashMap<String, u32>,
    seat_names: Vec<String>,
    seat_row: Vec<u32>,
    rows: Vec<RowSpan>,
    section_by_name: HashMap<String, u32>,
    section_rows: Vec<std::ops::Range<u32>>,
    section_price: Vec<i64>,
    row_available: Vec<u32>,
    row_held: Vec<u32>,
    /// Per row, no later than the earliest expiry of its held seats (`None`: none held). A row
    /// whose floor is in the future has no lapsed hold to reclaim, so best-available skips its
    /// held seats without looking at each (on a filling show, most rows are like that).
    row_hold_floor: Vec<Option<DateTime<Utc>>>,
    /// Per account, its active holds (ended ones are dropped as they end).
    account_holds: HashMap<AccountId, Vec<HoldId>>,
    account_orders: HashMap<AccountId, Vec<OrderId>>,
    expiry: BTreeSet<(DateTime<Utc>, HoldId)>,
}

/// The aggregate. Its serialized form (the snapshot) is [`ShowSnapshot`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(into = "ShowSnapshot", from = "ShowSnapshot")]
pub struct Show {
    info: Option<ShowInfo>,
    layout: VenueLayout,
    seats: Vec<Seat>,
    holds: HashMap<HoldId, Hold>,
    orders: HashMap<OrderId, Order>,
    idempotency: HashMap<(AccountId, IdempotencyKey), IdempotencyRecord>,
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
        let mut idempotency: Vec<_> = s.idempotency.into_values().collect();
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

impl Show {
    pub fn info(&self) -> Option<&ShowInfo> {
        self.info.as_ref()
    }

    pub fn layout(&self) -> &VenueLayout {
        &self.layout
    }

    pub fn seat_count(&self) -> usize {
        self.seats.len()
    }

    /// Each seat's id and state, in layout order.
    pub fn seats(&self) -> impl Iterator<Item = (&str, &Seat)> {
        self.index
            .seat_names
            .iter()
            .map(String::as_str)
            .zip(self.seats.iter())
    }

    pub fn seat(&self, seat_id: &str) -> Option<&Seat> {
        self.index
            .seat_by_id
            .get(seat_id)
            .map(|&i| &self.seats[i as usize])
    }

    /// The seat at index `i` (layout order): its id and state.
    pub fn seat_at(&self, i: u32) -> Option<(&str, &Seat)> {
        let name = self.index.seat_names.get(i as usize)?;
        Some((name.as_str(), self.seats.get(i as usize)?))
    }

    /// The seats `event` moves, read from the state before it is applied: what a read model
    /// must look at again after applying it.
    pub fn seats_touched_by(&self, event: &ShowEvent) -> Vec<u32> {
        let by_id = |ids: &[String]| {
            ids.iter()
                .filter_map(|id| self.index.seat_by_id.get(id).copied())
                .collect()
        };
        let of_order = |id: &OrderId| {
            self.orders
                .get(id)
                .map_or_else(Vec::new, |o| o.seats.clone())
        };
        match event {
            ShowEvent::ShowScheduled { layout, .. } => (0..layout.seat_count()).collect(),
            ShowEvent::SeatsHeld { seat_ids, .. }
            | ShowEvent::OrderPlaced { seat_ids, .. }
            | ShowEvent::OrderCompensated { seat_ids, .. }
            | ShowEvent::OrderReinstated { seat_ids, .. }
            | ShowEvent::OrderCancelled { seat_ids, .. } => by_id(seat_ids),
            ShowEvent::HoldReleased { hold_id } | ShowEvent::HoldExpired { hold_id } => self
                .holds
                .get(hold_id)
                .map_or_else(Vec::new, |h| h.seats.clone()),
            ShowEvent::PaymentSucceeded { order_id, .. }
            | ShowEvent::PaymentFailed { order_id, .. }
            | ShowEvent::PaymentAmbiguous { order_id, .. } => of_order(order_id),
            ShowEvent::MakeGoodOwed { .. } | ShowEvent::OrderRefunded { .. } => Vec::new(),
        }
    }

    pub fn hold(&self, id: &HoldId) -> Option<&Hold> {
        self.holds.get(id)
    }

    pub fn holds(&self) -> impl Iterator<Item = (&HoldId, &Hold)> {
        self.holds.iter()
    }

    pub fn order(&self, id: &OrderId) -> Option<&Order> {
        self.orders.get(id)
    }

    /// The order `account` (or an admin) may cancel: `CancelOrder`'s rule, asked before any
    /// side effect of a cancellation (revoking tickets) so a refusal changes nothing. A
    /// cancelled or refunded order passes (cancelling it again is a no-op).
    pub fn cancellable(
        &self,
        order_id: &OrderId,
        account: &AccountId,
        admin: bool,
    ) -> Result<&Order, ShowError> {
        let order = self
            .orders
            .get(order_id)
            .filter(|o| admin || &o.account == account)
            .ok_or(ShowError::OrderNotFound)?;
        match order.state.verdict(OrderMove::Cancel) {
            Verdict::Refused => Err(ShowError::NotCancellable(order.state.public_status())),
            Verdict::To(_) | Verdict::Already => Ok(order),
        }
    }

    pub fn orders(&self) -> impl Iterator<Item = (&OrderId, &Order)> {
        self.orders.iter()
    }

    /// How many holds and orders the show remembers: what a snapshot's size grows with.
    pub fn history_len(&self) -> usize {
        self.holds.len() + self.orders.len()
    }

    pub fn seat_names(&self, seats: &[u32]) -> Vec<String> {
        seats
            .iter()
            .map(|&i| self.index.seat_names[i as usize].clone())
            .collect()
    }

    pub fn hold_view(&self, id: &HoldId) -> Option<HoldView> {
        let hold = self.holds.get(id)?;
        Some(HoldView {
            hold_id: *id,
            event_id: id.show(),
            seat_ids: self.seat_names(&hold.seats),
            expires_at: hold.expires_at,
            account: hold.account.clone(),
            state: hold.state,
        })
    }

    pub fn order_view(&self, id: &OrderId) -> Option<OrderView> {
        let order = self.orders.get(id)?;
        Some(OrderView {
            order_id: *id,
            event_id: id.show(),
            hold_id: order.hold_id,
            account: order.account.clone(),
            status: order.state.public_status(),
            seat_ids: self.seat_names(&order.seats),
            total_cents: order.total_cents,
            placed_at: order.placed_at,
            make_good: order.make_good,
        })
    }

    /// The hold a request with this key created, if any.
    pub fn hold_for_key(&self, account: &AccountId, key: &IdempotencyKey) -> Option<HoldId> {
        match self
            .idempotency
            .get(&(account.clone(), key.clone()))?
            .outcome
        {
            Outcome::Hold(h) => Some(h),
            Outcome::Order(_) => None,
        }
    }

    /// The order a request with this key created, if any.
    pub fn order_for_key(&self, account: &AccountId, key: &IdempotencyKey) -> Option<OrderId> {
        match self
            .idempotency
            .get(&(account.clone(), key.clone()))?
            .outcome
        {
            Outcome::Order(o) => Some(o),
            Outcome::Hold(_) => None,
        }
    }

    /// Active holds whose expiry has passed, oldest first: the sweeper's work list.
    pub fn expired_holds(&self, now: DateTime<Utc>, limit: usize) -> Vec<HoldId> {
        self.index
            .expiry
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(limit)
            .map(|(_, h)| *h)
            .collect()
    }

    /// Seats the account has in live holds and in orders that still claim seats.
    pub fn seats_claimed_by(&self, account: &AccountId, now: DateTime<Utc>) -> u32 {
        let held: usize = self
            .index
            .account_holds
            .get(account)
            .into_iter()
            .flatten()
            .filter_map(|h| self.holds.get(h))
            .filter(|h| h.state == HoldState::Active && h.expires_at > now)
            .map(|h| h.seats.len())
            .sum();
        let ordered: usize = self
            .index
            .account_orders
            .get(account)
            .into_iter()
            .flatten()
            .filter_map(|o| self.orders.get(o))
            .filter(|o| o.state.claims_seats())
            .map(|o| o.seats.len())
            .sum();
        u32::try_from(held + ordered).unwrap_or(u32::MAX)
    }

    /// The whole rule book: what this command does to this show at `now`, as events.
    /// Nothing is emitted unless the whole command is valid.
    pub fn decide(&self, command: ShowCommand, now: DateTime<Utc>) -> Result<Vec<ShowEvent>> {
        if let ShowCommand::Schedule { info, layout } = command {
            return self.schedule(info, layout);
        }
        let info = self.info.as_ref().ok_or(ShowError::ShowNotFound)?;
        match command {
            ShowCommand::Schedule { .. } => Err(ShowError::ShowAlreadyExists),
            ShowCommand::HoldSeats {
                hold_id,
                account,
                seat_ids,
                idempotency,
            } => {
                if let Some(replay) = self.replayed(&account, idempotency.as_ref(), Kind::Hold)? {
                    return Ok(replay);
                }
                self.open_for_sale(info, now)?;
                let mut seen = BTreeSet::new();
                let wanted: Vec<&String> = seat_ids.iter().filter(|s| seen.insert(*s)).collect();
                if wanted.is_empty() {
                    return Err(ShowError::Invalid("seatIds must not be empty".into()));
                }
                let unknown: Vec<String> = wanted
                    .iter()
                    .filter(|s| !self.index.seat_by_id.contains_key(s.as_str()))
                    .map(|s| (*s).clone())
                    .collect();
                if !unknown.is_empty() {
                    return Err(ShowError::UnknownSeat(unknown));
                }
                let seats: Vec<u32> = wanted
                    .iter()
                    .map(|s| self.index.seat_by_id[s.as_str()])
                    .collect();
                self.check_cap(&account, seats.len(), now)?;
                let lost: Vec<String> = seats
                    .iter()
                    .filter(|&&i| !self.is_free(i, now))
                    .map(|&i| self.index.seat_names[i as usize].clone())
                    .collect();
                if !lost.is_empty() {
                    return Err(ShowError::SeatUnavailable { lost });
                }
                self.acquire(hold_id, account, seats, false, idempotency, info, now)
            }
            ShowCommand::HoldBestAvailable {
                hold_id,
                account,
                quantity,
                section,
                idempotency,
            } => {
                if let Some(replay) = self.replayed(&account, idempotency.as_ref(), Kind::Hold)? {
                    return Ok(replay);
                }
                self.open_for_sale(info, now)?;
                if quantity == 0 {
                    return Err(ShowError::Invalid("quantity must be at least 1".into()));
                }
                let section = match section {
                    Some(name) => Some(
                        *self
                            .index
                            .section_by_name
                            .get(&name)
                            .ok_or(ShowError::UnknownSection(name))?,
                    ),
                    None => None,
                };
                self.check_cap(&account, quantity as usize, now)?;
                let seats = self
                    .best_available(quantity, section, now)
                    .ok_or(ShowError::SeatUnavailable { lost: Vec::new() })?;
                self.acquire(hold_id, account, seats, true, idempotency, info, now)
            }
            ShowCommand::ReleaseHold { hold_id, account } => {
                let hold = self.own_hold(&hold_id, &account)?;
                match hold.state.verdict(HoldMove::Release) {
                    Verdict::To(_) => Ok(vec![ShowEvent::HoldReleased { hold_id }]),
                    Verdict::Already => Ok(Vec::new()),
                    Verdict::Refused => Err(match hold.order {
                        Some(order) => ShowError::HoldOrdered(order),
                        None => refused("hold", hold.state.name(), "release"),
                    }),
                }
            }
            ShowCommand::PlaceOrder {
                order_id,
                hold_id,
                account,
                payment_token,
                idempotency,
            } => {
                if let Some(replay) = self.replayed(&account, Some(&idempotency), Kind::Order)? {
                    return Ok(replay);
                }
                let hold = self.own_hold(&hold_id, &account)?;
                if let Some(order) = hold.order {
                    return Err(ShowError::HoldOrdered(order));
                }
                // The fence: this hold, still active, and not past its expiry at this instant.
                if hold.state != HoldState::Active || hold.expires_at <= now {
                    return Err(ShowError::HoldExpired);
                }
                if self.orders.contains_key(&order_id) {
                    return Err(ShowError::Invalid("order id already used".into()));
                }
                let total_cents = hold.seats.iter().map(|&i| self.seat_price(i)).sum();
                Ok(vec![ShowEvent::OrderPlaced {
                    order_id,
                    hold_id,
                    account_id: account,
                    seat_ids: self.seat_names(&hold.seats),
                    total_cents,
                    payment_token,
                    placed_at: now,
                    idempotency,
                }])
            }
            ShowCommand::RecordPaymentSucceeded { order_id } => {
                let order = self.orders.get(&order_id).ok_or(ShowError::OrderNotFound)?;
                if matches!(order.state, OrderState::PaymentFailed | OrderState::Failed) {
                    return Ok(self.late_capture(order_id, order, now));
                }
                self.order_move(&order_id, OrderMove::Succeed, "payment succeeded", || {
                    ShowEvent::PaymentSucceeded { order_id, at: now }
                })
            }
            ShowCommand::RecordPaymentFailed { order_id, reason } => {
                let order = self.orders.get(&order_id).ok_or(ShowError::OrderNotFound)?;
                let mut events =
                    self.order_move(&order_id, OrderMove::Fail, "payment failed", || {
                        ShowEvent::PaymentFailed {
                            order_id,
                            reason,
                            at: now,
                        }
                    })?;
                // A definitive failure returns the seats in the same commit, guarded on the
                // order: no window where a declined order still blocks them.
                if matches!(
                    order.state,
                    OrderState::PendingPayment | OrderState::PaymentFailed
                ) {
                    events.push(ShowEvent::OrderCompensated {
                        order_id,
                        seat_ids: self.seat_names(&order.seats),
                        at: now,
                    });
                }
                Ok(events)
            }
            ShowCommand::RecordPaymentAmbiguous { order_id, reason } => {
                self.order_move(&order_id, OrderMove::Ambiguous, "payment ambiguous", || {
                    ShowEvent::PaymentAmbiguous {
                        order_id,
                        reason,
                        at: now,
                    }
                })
            }
            ShowCommand::CompensateOrder { order_id } => {
                let seat_ids = self
                    .orders
                    .get(&order_id)
                    .map(|o| self.seat_names(&o.seats))
                    .unwrap_or_default();
                self.order_move(&order_id, OrderMove::Compensate, "compensation", || {
                    ShowEvent::OrderCompensated {
                        order_id,
                        seat_ids,
                        at: now,
                    }
                })
            }
            ShowCommand::CancelOrder {
                order_id,
                account,
                admin,
            } => {
                let order = self.cancellable(&order_id, &account, admin)?;
                match order.state.verdict(OrderMove::Cancel) {
                    Verdict::To(_) => Ok(vec![ShowEvent::OrderCancelled {
                        order_id,
                        seat_ids: self.seat_names(&order.seats),
                        by: account,
                        at: now,
                    }]),
                    Verdict::Already | Verdict::Refused => Ok(Vec::new()),
                }
            }
            ShowCommand::RecordRefund {
                order_id,
                refund_id,
            } => self.order_move(&order_id, OrderMove::Refund, "refund", || {
                ShowEvent::OrderRefunded {
                    order_id,
                    refund_id,
                    at: now,
                }
            }),
            ShowCommand::ExpireHolds { hold_ids } => {
                let mut seen = BTreeSet::new();
                Ok(hold_ids
                    .into_iter()
                    .filter(|h| seen.insert(*h))
                    .filter(|h| {
                        self.holds.get(h).is_some_and(|hold| {
                            matches!(hold.state.verdict(HoldMove::Expire), Verdict::To(_))
                                && hold.expires_at <= now
                        })
                    })
                    .map(|hold_id| ShowEvent::HoldExpired { hold_id })
                    .collect())
            }
        }
    }

    fn schedule(&self, info: ShowInfo, layout: VenueLayout) -> Result<Vec<ShowEvent>> {
        if self.info.is_some() {
            return Err(ShowError::ShowAlreadyExists);
        }
        for tier in layout.price_tiers() {
            match info.prices.get(tier) {
                Some(&cents) if cents >= 0 => {}
                Some(_) => {
                    return Err(ShowError::Invalid(format!(
                        "price of tier {tier} is negative"
                    )))
                }
                None => return Err(ShowError::Invalid(format!("no price for tier {tier}"))),
            }
        }
        if info.hold_ttl_seconds == 0 || info.hold_ttl_seconds > 3_600 {
            return Err(ShowError::Invalid(
                "holdTtlSeconds must be 1 to 3600".into(),
            ));
        }
        if info.on_sale_at >= info.starts_at {
            return Err(ShowError::Invalid(
                "onSaleAt must be before startsAt".into(),
            ));
        }
        Ok(vec![ShowEvent::ShowScheduled { info, layout }])
    }

    fn open_for_sale(&self, info: &ShowInfo, now: DateTime<Utc>) -> Result<()> {
        if now < info.on_sale_at {
            return Err(ShowError::SaleNotOpen);
        }
        if now >= info.starts_at {
            return Err(ShowError::SaleClosed);
        }
        Ok(())
    }

    /// `Some(no events)` when this request was already answered under its key; an error when
    /// the key was used for a different request.
    fn replayed(
        &self,
        account: &AccountId,
        idempotency: Option<&Idempotency>,
        kind: Kind,
    ) -> Result<Option<Vec<ShowEvent>>> {
        let Some(idem) = idempotency else {
            return Ok(None);
        };
        let Some(record) = self.idempotency.get(&(account.clone(), idem.key.clone())) else {
            return Ok(None);
        };
        let same_kind = matches!(
            (kind, record.outcome),
            (Kind::Hold, Outcome::Hold(_)) | (Kind::Order, Outcome::Order(_))
        );
        if same_kind && record.fingerprint == idem.fingerprint {
            Ok(Some(Vec::new()))
        } else {
            Err(ShowError::IdempotencyKeyReused)
        }
    }

    fn check_cap(&self, account: &AccountId, wanted: usize, now: DateTime<Utc>) -> Result<()> {
        let already = self.seats_claimed_by(account, now);
        if u64::from(already) + wanted as u64 > u64::from(MAX_SEATS_PER_ACCOUNT) {
            return Err(ShowError::HoldLimit {
                limit: MAX_SEATS_PER_ACCOUNT,
                already,
            });
        }
        Ok(())
    }

    fn own_hold(&self, hold_id: &HoldId, account: &AccountId) -> Result<&Hold> {
        // Someone else's hold answers exactly like a missing one.
        self.holds
            .get(hold_id)
            .filter(|h| &h.account == account)
            .ok_or(ShowError::HoldNotFound)
    }

    fn order_move(
        &self,
        order_id: &OrderId,
        by: OrderMove,
        what: &'static str,
        event: impl FnOnce() -> ShowEvent,
    ) -> Result<Vec<ShowEvent>> {
        let order = self.orders.get(order_id).ok_or(ShowError::OrderNotFound)?;
        match order.state.verdict(by) {
            Verdict::To(_) => Ok(vec![event()]),
            Verdict::Already => Ok(Vec::new()),
            Verdict::Refused => Err(refused("order", order.state.name(), what)),
        }
    }

    /// The late-success policy (ADR 006): a capture for an order that already failed. Its seats
    /// are sold to it again if every one is still free (lapsed holds on them end first);
    /// otherwise nobody loses a seat they now hold or bought (and nobody ends up above the
    /// per-account cap): the order owes a refund and a make-good.
    fn late_capture(&self, order_id: OrderId, order: &Order, now: DateTime<Utc>) -> Vec<ShowEvent> {
        let mut lapsed = BTreeSet::new();
        let mut taken = Vec::new();
        for &i in &order.seats {
            match self.seats[i as usize] {
                Seat::Available => {}
                Seat::PendingPayment(o) if o == order_id => {}
                Seat::Held(h) if self.holds.get(&h).is_some_and(|h| h.expires_at <= now) => {
                    lapsed.insert(h);
                }
                _ => taken.push(i),
            }
        }
        if !taken.is_empty() {
            return vec![ShowEvent::MakeGoodOwed {
                order_id,
                taken_seat_ids: self.seat_names(&taken),
                reason: "its seats went to somebody else".into(),
                at: now,
            }];
        }
        // The cap holds for reinstated orders too: a fan who bought other seats since is not
        // handed more than the cap allows.
        let own = if order.state.claims_seats() {
            order.seats.len()
        } else {
            0
        };
        let claimed = self.seats_claimed_by(&order.account, now) as usize - own;
        if claimed + order.seats.len() > MAX_SEATS_PER_ACCOUNT as usize {
            return vec![ShowEvent::MakeGoodOwed {
                order_id,
                taken_seat_ids: Vec::new(),
                reason: "the buyer's per-account limit is full with seats bought since".into(),
                at: now,
            }];
        }
        let mut events: Vec<ShowEvent> = lapsed
            .into_iter()
            .map(|hold_id| ShowEvent::HoldExpired { hold_id })
            .collect();
        events.push(ShowEvent::OrderReinstated {
            order_id,
            seat_ids: self.seat_names(&order.seats),
            at: now,
        });
        events
    }

    /// A seat may be taken now: available, or held by a hold whose expiry has passed (the
    /// acquire reclaims it, so no reaper sits on the write path).
    fn is_free(&self, seat: u32, now: DateTime<Utc>) -> bool {
        match &self.seats[seat as usize] {
            Seat::Available => true,
            Seat::Held(h) => self.holds.get(h).is_some_and(|h| h.expires_at <= now),
            Seat::PendingPayment(_) | Seat::Sold(_) => false,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        hold_id: HoldId,
        account: AccountId,
        seats: Vec<u32>,
        best_available: bool,
        idempotency: Option<Idempotency>,
        info: &ShowInfo,
        now: DateTime<Utc>,
    ) -> Result<Vec<ShowEvent>> {
        if self.holds.contains_key(&hold_id) {
            return Err(ShowError::Invalid("hold id already used".into()));
        }
        // Lapsed holds on the wanted seats end first, visibly, then the new hold takes them.
        let mut lapsed = BTreeSet::new();
        for &i in &seats {
            if let Seat::Held(h) = self.seats[i as usize] {
                lapsed.insert(h);
            }
        }
        let mut events: Vec<ShowEvent> = lapsed
            .into_iter()
            .map(|hold_id| ShowEvent::HoldExpired { hold_id })
            .collect();
        events.push(ShowEvent::SeatsHeld {
            hold_id,
            account_id: account,
            seat_ids: self.seat_names(&seats),
            expires_at: now + Duration::seconds(i64::from(info.hold_ttl_seconds)),
            best_available,
            idempotency,
        });
        Ok(events)
    }

    /// Best available: the first run of `quantity` adjacent free seats in one row, walking
    /// sections and rows in layout order (best first); failing that, the first free seats.
    fn best_available(
        &self,
        quantity: u32,
        section: Option<u32>,
        now: DateTime<Utc>,
    ) -> Option<Vec<u32>> {
        let rows = match section {
            Some(s) => self.index.section_rows[s as usize].clone(),
            None => 0..self.index.rows.len() as u32,
        };
        let candidate = |r: u32| {
            let r = r as usize;
            let lapsed = self.index.row_hold_floor[r].is_some_and(|f| f <= now);
            self.index.row_available[r] + if lapsed { self.index.row_held[r] } else { 0 }
        };
        for r in rows.clone() {
            if candidate(r) < quantity {
                continue;
            }
            let span = self.index.rows[r as usize];
            let mut run = 0;
            for i in span.start..span.start + span.len {
                if self.is_free(i, now) {
                    run += 1;
                    if run == quantity {
                        return Some((i + 1 - quantity..=i).collect());
                    }
                } else {
                    run = 0;
                }
            }
        }
        let mut picked = Vec::new();
        for r in rows {
            if candidate(r) == 0 {
                continue;
            }
            let span = self.index.rows[r as usize];
            for i in span.start..span.start + span.len {
                if self.is_free(i, now) {
                    picked.push(i);
                    if picked.len() == quantity as usize {
                        return Some(picked);
                    }
                }
            }
        }
        None
    }

    fn lower_hold_floor(&mut self, seat: u32, expires_at: DateTime<Utc>) {
        let row = self.index.seat_row[seat as usize] as usize;
        let floor = &mut self.index.row_hold_floor[row];
        *floor = Some(floor.map_or(expires_at, |f| f.min(expires_at)));
    }

    fn seat_price(&self, seat: u32) -> i64 {
        let row = self.index.seat_row[seat as usize];
        self.index.section_price[self.index.rows[row as usize].section as usize]
    }

    fn seat_indices(&self, ids: &[String]) -> Vec<u32> {
        ids.iter()
            .filter_map(|s| self.index.seat_by_id.get(s).copied())
            .collect()
    }

    /// Moves one seat by the table; a move the table refuses is a bug in `decide` and leaves
    /// the seat where it is.
    fn move_seat(&mut self, seat: u32, by: SeatMove, to: Seat) {
        let from = self.seats[seat as usize];
        match from.status().verdict(by) {
            Verdict::To(status) => debug_assert_eq!(status, to.status()),
            Verdict::Already | Verdict::Refused => {
                debug_assert!(false, "seat {seat}: {from:?} refused {by:?}");
                return;
            }
        }
        let row = self.index.seat_row[seat as usize] as usize;
        match from {
            Seat::Available => self.index.row_available[row] -= 1,
            Seat::Held(_) => {
                self.index.row_held[row] -= 1;
                if self.index.row_held[row] == 0 {
                    self.index.row_hold_floor[row] = None;
                }
            }
            _ => {}
        }
        match to {
            Seat::Available => self.index.row_available[row] += 1,
            Seat::Held(_) => self.index.row_held[row] += 1,
            _ => {}
        }
        self.seats[seat as usize] = to;
    }

    fn end_hold(&mut self, hold_id: &HoldId, by: HoldMove) {
        let Some(hold) = self.holds.get_mut(hold_id) else {
            return;
        };
        let Verdict::To(state) = hold.state.verdict(by) else {
            return;
        };
        hold.state = state;
        let (seats, expires_at) = (hold.seats.clone(), hold.expires_at);
        self.index.expiry.remove(&(expires_at, *hold_id));
        // Only live holds count against the account's cap: keep its list to those.
        if let Some(holds) = self.index.account_holds.get_mut(&hold.account) {
            holds.retain(|h| h != hold_id);
            if holds.is_empty() {
                self.index.account_holds.remove(&hold.account);
            }
        }
        if by == HoldMove::Order {
            return;
        }
        for i in seats {
            if self.seats[i as usize] == Seat::Held(*hold_id) {
                self.move_seat(i, SeatMove::Release, Seat::Available);
            }
        }
    }

    fn rebuild_index(&mut self) {
        let mut ix = Index::default();
        let mut seat = 0u32;
        for (s, section) in self.layout.sections().iter().enumerate() {
            let first_row = ix.rows.len() as u32;
            ix.section_by_name.insert(section.section.clone(), s as u32);
            let price = self
                .info
                .as_ref()
                .and_then(|i| i.prices.get(&section.price_tier).copied())
                .unwrap_or(0);
            ix.section_price.push(price);
            for row in &section.rows {
                let r = ix.rows.len() as u32;
                ix.rows.push(RowSpan {
                    section: s as u32,
                    start: seat,
                    len: row.seats,
                });
                ix.row_available.push(0);
                ix.row_held.push(0);
                ix.row_hold_floor.push(None);
                for n in 1..=row.seats {
                    let name = seat_id(&section.section, &row.row, n);
                    ix.seat_by_id.insert(name.clone(), seat);
                    ix.seat_names.push(name);
                    ix.seat_row.push(r);
                    seat += 1;
                }
            }
            ix.section_rows.push(first_row..ix.rows.len() as u32);
        }
        if self.seats.len() != seat as usize {
            self.seats = vec![Seat::Available; seat as usize];
        }
        for (i, s) in self.seats.iter().enumerate() {
            let row = ix.seat_row[i] as usize;
            match s {
                Seat::Available => ix.row_available[row] += 1,
                Seat::Held(h) => {
                    ix.row_held[row] += 1;
                    // A seat held by a hold we do not know is treated as lapsed: looked at.
                    let expiry = self
                        .holds
                        .get(h)
                        .map_or(DateTime::<Utc>::MIN_UTC, |h| h.expires_at);
                    let floor = &mut ix.row_hold_floor[row];
                    *floor = Some(floor.map_or(expiry, |f| f.min(expiry)));
                }
                _ => {}
            }
        }
        for (id, hold) in &self.holds {
            if hold.state == HoldState::Active {
                ix.account_holds
                    .entry(hold.account.clone())
                    .or_default()
                    .push(*id);
                ix.expiry.insert((hold.expires_at, *id));
            }
        }
        for (id, order) in &self.orders {
            ix.account_orders
                .entry(order.account.clone())
                .or_default()
                .push(*id);
        }
        self.index = ix;
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Hold,
    Order,
}

fn refused(entity: &'static str, from: &'static str, by: &'static str) -> ShowError {
    ShowError::InvalidTransition { entity, from, by }
}

impl Aggregate for Show {
    const TYPE: &'static str = "show";
    type Command = ShowCommand;
    type Event = ShowEvent;
    type Error = ShowError;
    type Services = ShowServices;

    async fn handle(
        &mut self,
        command: ShowCommand,
        services: &ShowServices,
        sink: &EventSink<Self>,
    ) -> Result<()> {
        let events = self.decide(command, services.clock.now())?;
        for event in events {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: ShowEvent) {
        match event {
            ShowEvent::ShowScheduled { info, layout } => {
                self.info = Some(info);
                self.layout = layout;
                self.seats.clear();
                self.rebuild_index();
            }
            ShowEvent::SeatsHeld {
                hold_id,
                account_id,
                seat_ids,
                expires_at,
                idempotency,
                ..
            } => {
                let seats = self.seat_indices(&seat_ids);
                for &i in &seats {
                    self.move_seat(i, SeatMove::Hold, Seat::Held(hold_id));
                    self.lower_hold_floor(i, expires_at);
                }
                if let Some(idem) = idempotency {
                    self.remember(&account_id, idem, Outcome::Hold(hold_id));
                }
                self.index
                    .account_holds
                    .entry(account_id.clone())
                    .or_default()
                    .push(hold_id);
                self.index.expiry.insert((expires_at, hold_id));
                self.holds.insert(
                    hold_id,
                    Hold {
                        account: account_id,
                        seats,
                        expires_at,
                        state: HoldState::Active,
                        order: None,
                    },
                );
            }
            ShowEvent::HoldReleased { hold_id } => self.end_hold(&hold_id, HoldMove::Release),
            ShowEvent::HoldExpired { hold_id } => self.end_hold(&hold_id, HoldMove::Expire),
            ShowEvent::OrderPlaced {
                order_id,
                hold_id,
                account_id,
                seat_ids,
                total_cents,
                payment_token,
                placed_at,
                idempotency,
            } => {
                self.end_hold(&hold_id, HoldMove::Order);
                if let Some(hold) = self.holds.get_mut(&hold_id) {
                    hold.order = Some(order_id);
                }
                let seats = self.seat_indices(&seat_ids);
                for &i in &seats {
                    self.move_seat(i, SeatMove::Order, Seat::PendingPayment(order_id));
                }
                self.remember(&account_id, idempotency, Outcome::Order(order_id));
                self.index
                    .account_orders
                    .entry(account_id.clone())
                    .or_default()
                    .push(order_id);
                self.orders.insert(
                    order_id,
                    Order {
                        account: account_id,
                        hold_id,
                        seats,
                        total_cents,
                        payment_token,
                        placed_at,
                        state: OrderState::PendingPayment,
                        ambiguous_since: None,
                        failure: None,
                        make_good: false,
                    },
                );
            }
            ShowEvent::PaymentSucceeded { order_id, .. } => {
                if let Some(seats) = self.order_to(&order_id, OrderMove::Succeed) {
                    for i in seats {
                        self.move_seat(i, SeatMove::Pay, Seat::Sold(order_id));
                    }
                }
            }
            ShowEvent::PaymentFailed {
                order_id, reason, ..
            } => {
                self.order_to(&order_id, OrderMove::Fail);
                if let Some(o) = self.orders.get_mut(&order_id) {
                    o.failure = Some(reason);
                }
            }
            ShowEvent::PaymentAmbiguous { order_id, at, .. } => {
                if let Some(o) = self.orders.get_mut(&order_id) {
                    o.ambiguous_since.get_or_insert(at);
                }
            }
            ShowEvent::OrderReinstated { order_id, .. } => {
                if let Some(seats) = self.order_to(&order_id, OrderMove::Reinstate) {
                    for i in seats {
                        match self.seats[i as usize] {
                            Seat::PendingPayment(o) if o == order_id => {
                                self.move_seat(i, SeatMove::Pay, Seat::Sold(order_id));
                            }
                            _ => self.move_seat(i, SeatMove::Reinstate, Seat::Sold(order_id)),
                        }
                    }
                }
            }
            ShowEvent::MakeGoodOwed { order_id, .. } => {
                self.order_to(&order_id, OrderMove::MakeGood);
                if let Some(o) = self.orders.get_mut(&order_id) {
                    o.make_good = true;
                }
            }
            ShowEvent::OrderCancelled { order_id, .. } => {
                if let Some(seats) = self.order_to(&order_id, OrderMove::Cancel) {
                    for i in seats {
                        if self.seats[i as usize] == Seat::Sold(order_id) {
                            self.move_seat(i, SeatMove::Cancel, Seat::Available);
                        }
                    }
                }
            }
            ShowEvent::OrderRefunded { order_id, .. } => {
                self.order_to(&order_id, OrderMove::Refund);
            }
            ShowEvent::OrderCompensated { order_id, .. } => {
                if let Some(seats) = self.order_to(&order_id, OrderMove::Compensate) {
                    for i in seats {
                        // Guarded on the order id: only seats this order still claims return.
                        if self.seats[i as usize] == Seat::PendingPayment(order_id) {
                            self.move_seat(i, SeatMove::Compensate, Seat::Available);
                        }
                    }
                }
            }
        }
    }
}

impl Show {
    fn remember(&mut self, account: &AccountId, idem: Idempotency, outcome: Outcome) {
        let key = (account.clone(), idem.key.clone());
        self.idempotency.insert(
            key,
            IdempotencyRecord {
                account: account.clone(),
                key: idem.key,
                fingerprint: idem.fingerprint,
                outcome,
            },
        );
    }

    /// Moves an order by the table and hands back its seats when it really moved.
    fn order_to(&mut self, order_id: &OrderId, by: OrderMove) -> Option<Vec<u32>> {
        let order = self.orders.get_mut(order_id)?;
        match order.state.verdict(by) {
            Verdict::To(state) => {
                order.state = state;
                Some(order.seats.clone())
            }
            Verdict::Already | Verdict::Refused => None,
        }
    }
}
