//! The invariants, checked on every row the log gains, in order. An oracle of its own: it keeps
//! who occupies each seat and how much money moved per order from the events alone, and asks
//! the domain's state table ([`onsale_domain::transitions`]) only whether each event is a real
//! move from the state the log had put its hold or order in. It never decides anything the
//! domain decides (which seats, which answer): it only says what the log may never show.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use onsale_domain::transitions::{HoldMove, HoldState, OrderMove, OrderState, Transition, Verdict};
use onsale_domain::{AccountId, HoldId, OrderId, ShowEvent, MAX_SEATS_PER_ACCOUNT};
use onsale_projections::fold::LogEvent;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Occupant {
    Hold(HoldId),
    Order(OrderId),
}

#[derive(Debug)]
struct Hold {
    account: AccountId,
    seats: Vec<String>,
    expires_at: DateTime<Utc>,
    state: HoldState,
}

#[derive(Debug)]
struct Order {
    account: AccountId,
    seats: Vec<String>,
    state: OrderState,
    captures: u32,
    refunds: u32,
    /// The rows that moved it, for a violation's message.
    history: Vec<i64>,
}

/// What the log has shown so far, and the rules it must keep.
#[derive(Debug, Default)]
pub struct Oracle {
    /// The sequence of the last row checked.
    pub seen: i64,
    seats: BTreeMap<String, Occupant>,
    holds: BTreeMap<HoldId, Hold>,
    orders: BTreeMap<OrderId, Order>,
    cap: u32,
}

/// Why the log broke a rule: the row and the rule.
pub type Violation = String;

impl Oracle {
    /// Checks `rows`, the next rows of the show's log in order (read as the projections read
    /// them: the event and the time its row says it was decided).
    pub fn check(&mut self, rows: &[LogEvent]) -> Result<(), Violation> {
        for row in rows {
            if row.sequence != self.seen + 1 {
                return Err(format!(
                    "the log skips from {} to {}",
                    self.seen, row.sequence
                ));
            }
            self.seen = row.sequence;
            self.apply(row.event.clone(), row.at).map_err(|why| {
                format!("row {} ({}): {why}", row.sequence, row.event.event_type())
            })?;
        }
        Ok(())
    }

    /// Whether the log has the hold (an acknowledged hold must be there).
    pub fn has_hold(&self, hold: &HoldId) -> bool {
        self.holds.contains_key(hold)
    }

    pub fn has_order(&self, order: &OrderId) -> bool {
        self.orders.contains_key(order)
    }

    /// The hold is over in the log (released, lapsed or ordered).
    pub fn hold_ended(&self, hold: &HoldId) -> bool {
        self.holds.get(hold).is_some_and(|h| h.state.is_terminal())
    }

    /// The order's state in the log.
    pub fn order_state(&self, order: &OrderId) -> Option<OrderState> {
        self.orders.get(order).map(|o| o.state)
    }

    /// Every order the log has, with its state and the rows that moved it.
    pub fn orders(&self) -> impl Iterator<Item = (&OrderId, OrderState, &[i64])> {
        self.orders
            .iter()
            .map(|(id, o)| (id, o.state, o.history.as_slice()))
    }

    /// How many seats the order has.
    pub fn order_seats(&self, order: &OrderId) -> usize {
        self.orders.get(order).map_or(0, |o| o.seats.len())
    }

    /// Seats in use as the log says: held, awaiting payment, or sold (what a fold of the log
    /// must agree with).
    pub fn occupied(&self) -> Vec<String> {
        self.seats.keys().cloned().collect()
    }

    fn apply(&mut self, event: ShowEvent, at: DateTime<Utc>) -> Result<(), String> {
        match event {
            ShowEvent::ShowScheduled { info, .. } => self.cap = info.seat_cap(),
            ShowEvent::SalePolicyChanged { policy, .. } => {
                self.cap = policy
                    .max_seats_per_account
                    .unwrap_or(MAX_SEATS_PER_ACCOUNT);
            }
            ShowEvent::SeatsHeld {
                hold_id,
                account_id,
                seat_ids,
                expires_at,
                ..
            } => {
                if self.holds.contains_key(&hold_id) {
                    return Err(format!("hold {hold_id} made twice"));
                }
                let seats: Vec<String> = seat_ids.iter().map(ToString::to_string).collect();
                for seat in &seats {
                    if let Some(by) = self.seats.get(seat) {
                        return Err(format!("seat {seat} held while {by:?} has it"));
                    }
                }
                for seat in &seats {
                    self.seats.insert(seat.clone(), Occupant::Hold(hold_id));
                }
                self.holds.insert(
                    hold_id,
                    Hold {
                        account: account_id.clone(),
                        seats,
                        expires_at,
                        state: HoldState::Active,
                    },
                );
                let claimed = self.claimed_by(&account_id, at);
                if claimed > self.cap as usize {
                    return Err(format!(
                        "{account_id} has {claimed} seats, above the cap of {}",
                        self.cap
                    ));
                }
            }
            ShowEvent::HoldReleased { hold_id } => self.end_hold(hold_id, HoldMove::Release, at)?,
            ShowEvent::HoldExpired { hold_id } => self.end_hold(hold_id, HoldMove::Expire, at)?,
            ShowEvent::OrderPlaced {
                order_id,
                hold_id,
                account_id,
                seat_ids,
                placed_at,
                ..
            } => {
                if self.orders.contains_key(&order_id) {
                    return Err(format!("order {order_id} placed twice"));
                }
                let hold = self
                    .holds
                    .get_mut(&hold_id)
                    .ok_or(format!("order on unknown hold {hold_id}"))?;
                if hold.account != account_id {
                    return Err(format!("{account_id} ordered {}'s hold", hold.account));
                }
                // The order's own time: a row's `at` is when its batch was sent, which a slow
                // append before it can put after the hold's expiry although the order was
                // decided (and the seats kept) while the hold was live.
                if hold.expires_at <= placed_at {
                    return Err(format!("ordered hold {hold_id} after it lapsed"));
                }
                hold.state = to(hold.state, HoldMove::Order, "hold")?;
                let seats: Vec<String> = seat_ids.iter().map(ToString::to_string).collect();
                if seats != hold.seats {
                    return Err(format!("order seats {seats:?} are not the hold's"));
                }
                for seat in &seats {
                    if self.seats.get(seat) != Some(&Occupant::Hold(hold_id)) {
                        return Err(format!("ordered seat {seat} the hold no longer has"));
                    }
                    self.seats.insert(seat.clone(), Occupant::Order(order_id));
                }
                self.orders.insert(
                    order_id,
                    Order {
                        account: account_id,
                        seats,
                        state: OrderState::PendingPayment,
                        captures: 0,
                        refunds: 0,
                        history: Vec::new(),
                    },
                );
            }
            ShowEvent::PaymentSucceeded { order_id, .. } => {
                self.order_move(order_id, OrderMove::Succeed)?;
                self.captured(order_id)?;
            }
            ShowEvent::PaymentFailed { order_id, .. } => {
                self.order_move(order_id, OrderMove::Fail)?;
            }
            ShowEvent::PaymentAmbiguous { order_id, .. } => {
                self.order_move(order_id, OrderMove::Ambiguous)?;
            }
            ShowEvent::OrderCompensated { order_id, .. } => {
                self.order_move(order_id, OrderMove::Compensate)?;
                self.free(Occupant::Order(order_id));
            }
            ShowEvent::OrderReinstated {
                order_id, seat_ids, ..
            } => {
                self.order_move(order_id, OrderMove::Reinstate)?;
                self.captured(order_id)?;
                for seat in seat_ids.iter().map(ToString::to_string) {
                    match self.seats.get(&seat) {
                        None => {}
                        Some(Occupant::Order(o)) if *o == order_id => {}
                        Some(by) => {
                            return Err(format!("seat {seat} reinstated while {by:?} has it"))
                        }
                    }
                    self.seats.insert(seat, Occupant::Order(order_id));
                }
            }
            ShowEvent::MakeGoodOwed { order_id, .. } => {
                self.order_move(order_id, OrderMove::MakeGood)?;
                self.captured(order_id)?;
                self.free(Occupant::Order(order_id));
            }
            ShowEvent::OrderCancelled { order_id, .. } => {
                self.order_move(order_id, OrderMove::Cancel)?;
                self.free(Occupant::Order(order_id));
            }
            ShowEvent::OrderRefunded { order_id, .. } => {
                self.order_move(order_id, OrderMove::Refund)?;
                let order = self.orders.get_mut(&order_id).ok_or("unknown order")?;
                order.refunds += 1;
                if order.refunds > order.captures {
                    return Err(format!(
                        "order {order_id} refunded {} times for {} captures",
                        order.refunds, order.captures
                    ));
                }
            }
        }
        Ok(())
    }

    fn end_hold(&mut self, hold_id: HoldId, by: HoldMove, at: DateTime<Utc>) -> Result<(), String> {
        let hold = self
            .holds
            .get_mut(&hold_id)
            .ok_or(format!("unknown hold {hold_id}"))?;
        if by == HoldMove::Expire && hold.expires_at > at {
            return Err(format!(
                "hold {hold_id} expired at {at} before its expiry {}",
                hold.expires_at
            ));
        }
        hold.state = to(hold.state, by, "hold")?;
        self.free(Occupant::Hold(hold_id));
        Ok(())
    }

    fn order_move(&mut self, order_id: OrderId, by: OrderMove) -> Result<(), String> {
        let order = self
            .orders
            .get_mut(&order_id)
            .ok_or(format!("unknown order {order_id}"))?;
        order.state = to(order.state, by, "order")?;
        order.history.push(self.seen);
        Ok(())
    }

    /// A capture: at most one per order, ever.
    fn captured(&mut self, order_id: OrderId) -> Result<(), String> {
        let order = self.orders.get_mut(&order_id).ok_or("unknown order")?;
        order.captures += 1;
        if order.captures > 1 {
            return Err(format!("order {order_id} charged {} times", order.captures));
        }
        Ok(())
    }

    /// Every seat `who` occupies is free again.
    fn free(&mut self, who: Occupant) {
        self.seats.retain(|_, by| *by != who);
    }

    /// Seats `account` holds (holds not lapsed at `at`) and has ordered (orders that keep
    /// their seats): what the per-account cap bounds.
    fn claimed_by(&self, account: &AccountId, at: DateTime<Utc>) -> usize {
        let held: usize = self
            .holds
            .values()
            .filter(|h| &h.account == account && h.state == HoldState::Active && h.expires_at > at)
            .map(|h| h.seats.len())
            .sum();
        let ordered: usize = self
            .orders
            .values()
            .filter(|o| &o.account == account && o.state.claims_seats())
            .map(|o| o.seats.len())
            .sum();
        held + ordered
    }
}

/// The state `by` moves `from` to; an event the table refuses, or one that changes nothing (a
/// duplicate the domain should have answered without writing), breaks the rules.
fn to<S: Transition + std::fmt::Debug>(from: S, by: S::Move, what: &str) -> Result<S, String>
where
    S::Move: std::fmt::Debug,
{
    match from.verdict(by) {
        Verdict::To(next) => Ok(next),
        Verdict::Already => Err(format!("{what} {from:?} written again by {by:?}")),
        Verdict::Refused => Err(format!(
            "{what} {from:?} moved by {by:?}: refused by the table"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_move_is_a_violation_and_a_real_one_is_not() {
        assert!(to(HoldState::Active, HoldMove::Release, "hold").is_ok());
        assert!(to(HoldState::Released, HoldMove::Release, "hold").is_err());
        assert!(to(OrderState::Refunded, OrderMove::Succeed, "order").is_err());
    }
}
