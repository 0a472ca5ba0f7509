//! What the API and the other sides read of a show: the read-only queries and the views.

use super::*;

/// A hold as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HoldView {
    pub hold_id: HoldId,
    pub event_id: ShowId,
    pub seat_ids: Vec<SeatId>,
    pub expires_at: DateTime<Utc>,
    pub account: AccountId,
    pub state: HoldState,
}

/// An order as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderView {
    pub order_id: OrderId,
    pub event_id: ShowId,
    pub hold_id: HoldId,
    pub account: AccountId,
    pub status: std::borrow::Cow<'static, str>,
    pub seat_ids: Vec<SeatId>,
    pub total_cents: i64,
    pub placed_at: DateTime<Utc>,
    pub make_good: bool,
    /// Why it failed, while its status is FAILED.
    pub failure_reason: Option<PaymentFailure>,
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
            .map(SeatId::as_str)
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
        #[cfg(feature = "planted-bugs")]
        if crate::plant::planted(crate::plant::Bug::MapMissesCancellations)
            && matches!(event, ShowEvent::OrderCancelled { .. })
        {
            return Vec::new();
        }
        let by_id = |ids: &[SeatId]| self.seat_indices(ids);
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
            ShowEvent::MakeGoodOwed { .. }
            | ShowEvent::OrderRefunded { .. }
            | ShowEvent::SalePolicyChanged { .. } => Vec::new(),
        }
    }

    /// The show as its schedule made it: every seat available, nothing held or sold.
    pub fn as_scheduled(info: ShowInfo, layout: VenueLayout) -> Show {
        let mut show = Show::default();
        cqrs_es::Aggregate::apply(&mut show, ShowEvent::ShowScheduled { info, layout });
        show
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
            Verdict::Refused => Err(ShowError::NotCancellable(
                order.state.public_status().into(),
            )),
            Verdict::To(_) | Verdict::Already => Ok(order),
        }
    }

    pub fn orders(&self) -> impl Iterator<Item = (&OrderId, &Order)> {
        self.orders.iter()
    }

    /// How many holds, orders and idempotency keys the show remembers: what its memory and
    /// its snapshot's size grow with.
    pub fn history_len(&self) -> usize {
        self.holds.len() + self.orders.len() + self.idempotency.len()
    }

    pub fn seat_names(&self, seats: &[u32]) -> Vec<SeatId> {
        seats
            .iter()
            .map(|&i| self.index.seat_names[i as usize].clone())
            .collect()
    }

    /// Whether the seat is a place on a general-admission floor (a ticket without a seat).
    pub fn is_general_admission(&self, seat: u32) -> bool {
        self.index.row_ga[self.index.seat_row[seat as usize] as usize]
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
            status: order.state.public_status().into(),
            seat_ids: self.seat_names(&order.seats),
            total_cents: order.total_cents,
            placed_at: order.placed_at,
            make_good: order.make_good,
            failure_reason: order
                .state
                .is_failed()
                .then(|| order.failure_code.unwrap_or_default()),
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
        let now = lapsed_by(now);
        self.index
            .expiry
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(limit)
            .map(|(_, h)| *h)
            .collect()
    }

    /// When the hold that lapses first lapses (it may be past): how far the sweeper is behind.
    pub fn first_expiry(&self) -> Option<DateTime<Utc>> {
        self.index.expiry.first().map(|(at, _)| *at)
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
            .orders_of(account)
            .filter(|o| o.state.claims_seats())
            .map(|o| o.seats.len())
            .sum();
        #[cfg(feature = "planted-bugs")]
        let ordered = if crate::plant::planted(crate::plant::Bug::CapForgetsOrders) {
            0
        } else {
            ordered
        };
        u32::try_from(held + ordered).unwrap_or(u32::MAX)
    }

    /// The orders of `account` the show remembers.
    pub(super) fn orders_of<'a>(&'a self, account: &AccountId) -> impl Iterator<Item = &'a Order> {
        self.index
            .account_orders
            .get(account)
            .into_iter()
            .flatten()
            .filter_map(|o| self.orders.get(o))
    }
}

/// A hold whose expiry is at or before this has lapsed at `now`: the sweep's cut-off.
pub(super) fn lapsed_by(now: DateTime<Utc>) -> DateTime<Utc> {
    #[cfg(feature = "planted-bugs")]
    if crate::plant::planted(crate::plant::Bug::ExpiresEarly) {
        return now + chrono::Duration::seconds(5);
    }
    now
}
