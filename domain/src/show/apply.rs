//! The state changes: `apply` moves seats, holds and orders by what an event says (the rules
//! were checked when it was decided), and cqrs-es's `Aggregate` for the show.

use super::*;

impl Show {
    /// Moves one seat by the table. A move the table refuses (or one to another state than the
    /// table's) is a bug in `decide` or a log that was changed: the fold stops there, loudly,
    /// in every build, rather than go on from a seat map that could sell a seat twice. The
    /// show's owner then answers nothing for it, and the simulator names the seed.
    fn move_seat(&mut self, seat: u32, by: SeatMove, to: Seat) {
        let from = self.seats[seat as usize];
        match from.status().verdict(by) {
            Verdict::To(status) if status == to.status() => {}
            verdict => panic!(
                "an impossible seat move: seat {} is {from:?}, and {by:?} to {to:?} is {verdict:?} \
                 by the seat's table",
                self.index.seat_names[seat as usize]
            ),
        }
        let row = self.index.seat_row[seat as usize] as usize;
        match from {
            Seat::Available => self.index.row_available[row] -= 1,
            Seat::Held(h) => {
                let until = self.held_until(&h);
                let holds = &mut self.index.row_holds[row];
                if let Some(n) = holds.get_mut(&until) {
                    *n -= 1;
                    if *n == 0 {
                        holds.remove(&until);
                    }
                }
            }
            _ => {}
        }
        match to {
            Seat::Available => self.index.row_available[row] += 1,
            Seat::Held(h) => {
                let until = self.held_until(&h);
                *self.index.row_holds[row].entry(until).or_default() += 1;
            }
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
        self.forget_finished(hold_id);
    }

    /// A hold that just finished joins its account's finished holds; past the few kept, the
    /// oldest is forgotten (no rule needs it: its seats are free, it has no order and no key).
    /// A keyed one joins the account's keyed finished holds, of which the oldest past
    /// [`KEYED_FINISHED_HOLDS_KEPT_PER_ACCOUNT`] is forgotten with its key.
    fn forget_finished(&mut self, hold_id: &HoldId) {
        let Some(hold) = self.holds.get(hold_id).filter(|h| h.finished()) else {
            return;
        };
        if hold.keyed {
            if hold.key.is_none() {
                // From a snapshot older than the key on the hold: kept until the key ages out.
                return;
            }
            let account = hold.account.clone();
            let finished = self
                .index
                .account_keyed_finished
                .entry(account)
                .or_default();
            finished.insert(*hold_id);
            let oldest = (finished.len() > KEYED_FINISHED_HOLDS_KEPT_PER_ACCOUNT)
                .then(|| finished.pop_first())
                .flatten();
            if let Some(oldest) = oldest {
                if let Some(h) = self.holds.remove(&oldest) {
                    if let Some(key) = h.key {
                        self.forget_key(&h.account, &key);
                    }
                }
            }
            return;
        }
        let finished = match self.index.account_finished.get_mut(&hold.account) {
            Some(finished) => finished,
            None => self
                .index
                .account_finished
                .entry(hold.account.clone())
                .or_default(),
        };
        finished.insert(*hold_id);
        while finished.len() > FINISHED_HOLDS_KEPT_PER_ACCOUNT {
            if let Some(oldest) = finished.pop_first() {
                self.holds.remove(&oldest);
            }
        }
    }

    /// Forgets the idempotency keys used more than [`IDEMPOTENCY_KEY_HOURS`] before `now`, and
    /// the finished holds they kept.
    fn forget_old_keys(&mut self, now: DateTime<Utc>) {
        let horizon = now - Duration::hours(IDEMPOTENCY_KEY_HOURS);
        while let Some((at, account, key)) = self.index.key_ages.first().cloned() {
            if at >= horizon {
                break;
            }
            self.index.key_ages.pop_first();
            let Some(record) = self.idempotency.remove(&(account, key)) else {
                continue;
            };
            match record.outcome {
                Outcome::Hold(h) => {
                    if let Some(hold) = self.holds.get_mut(&h) {
                        if hold.keyed && hold.finished() {
                            if let Some(f) =
                                self.index.account_keyed_finished.get_mut(&hold.account)
                            {
                                f.remove(&h);
                                if f.is_empty() {
                                    self.index.account_keyed_finished.remove(&hold.account);
                                }
                            }
                        }
                        hold.keyed = false;
                        hold.key = None;
                    }
                    self.forget_finished(&h);
                }
                // A failed order (its seats returned, nothing captured) goes with its key: no
                // rule needs it any more (a capture that arrives later still is refunded by
                // reconciliation, which finds no order for it).
                Outcome::Order(o) => {
                    if self
                        .orders
                        .get(&o)
                        .is_some_and(|o| o.state == OrderState::Failed)
                    {
                        self.forget_order(&o);
                    }
                }
            }
        }
    }

    /// Forgets an idempotency key before it ages out (its hold is forgotten).
    fn forget_key(&mut self, account: &AccountId, key: &IdempotencyKey) {
        if let Some(r) = self.idempotency.remove(&(account.clone(), key.clone())) {
            self.index
                .key_ages
                .remove(&(r.at, account.clone(), key.clone()));
        }
    }

    /// Forgets a failed order and the hold it was placed from.
    fn forget_order(&mut self, order_id: &OrderId) {
        let Some(order) = self.orders.remove(order_id) else {
            return;
        };
        if let Some(orders) = self.index.account_orders.get_mut(&order.account) {
            orders.retain(|o| o != order_id);
            if orders.is_empty() {
                self.index.account_orders.remove(&order.account);
            }
        }
        if let Some(hold) = self.holds.remove(&order.hold_id) {
            if let Some(key) = hold.key {
                self.forget_key(&hold.account, &key);
            }
        }
    }

    /// A hold of `seat_ids` until `expires_at`: known before its seats move (the row counts
    /// them by its expiry), its key remembered.
    fn held(
        &mut self,
        hold_id: HoldId,
        account_id: AccountId,
        seat_ids: &[SeatId],
        expires_at: DateTime<Utc>,
        idempotency: Option<Idempotency>,
    ) {
        let seats = self.seat_indices(seat_ids);
        let keyed = idempotency.is_some();
        let key = idempotency.as_ref().map(|i| i.key.clone());
        if let Some(idem) = idempotency {
            self.remember(&account_id, idem, Outcome::Hold(hold_id), expires_at);
        }
        push_to(&mut self.index.account_holds, &account_id, hold_id);
        self.index.expiry.insert((expires_at, hold_id));
        self.holds.insert(
            hold_id,
            Hold {
                account: account_id,
                seats: seats.clone(),
                expires_at,
                state: HoldState::Active,
                order: None,
                keyed,
                key,
            },
        );
        for &i in &seats {
            self.move_seat(i, SeatMove::Hold, Seat::Held(hold_id));
        }
    }

    /// An order of its hold's seats, pending payment: the hold ends, the seats move, the key
    /// is remembered.
    fn placed(&mut self, order_id: OrderId, order: Order, idempotency: Idempotency) {
        self.end_hold(&order.hold_id, HoldMove::Order);
        if let Some(hold) = self.holds.get_mut(&order.hold_id) {
            hold.order = Some(order_id);
        }
        for &i in &order.seats {
            self.move_seat(i, SeatMove::Order, Seat::PendingPayment(order_id));
        }
        self.remember(
            &order.account,
            idempotency,
            Outcome::Order(order_id),
            order.placed_at,
        );
        push_to(&mut self.index.account_orders, &order.account, order_id);
        self.orders.insert(order_id, order);
    }

    /// A late capture reinstates the order: its seats sold to it, from pending or from free.
    fn reinstated(&mut self, order_id: OrderId) {
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

    /// A cancelled order's seats it still holds go back on sale.
    fn cancelled(&mut self, order_id: OrderId) {
        if let Some(seats) = self.order_to(&order_id, OrderMove::Cancel) {
            for i in seats {
                if self.seats[i as usize] == Seat::Sold(order_id) {
                    self.move_seat(i, SeatMove::Cancel, Seat::Available);
                }
            }
        }
    }

    /// A compensated order's seats return, guarded on the order id: only seats this order
    /// still claims.
    fn compensated(&mut self, order_id: OrderId) {
        if let Some(seats) = self.order_to(&order_id, OrderMove::Compensate) {
            for i in seats {
                if self.seats[i as usize] == Seat::PendingPayment(order_id) {
                    self.move_seat(i, SeatMove::Compensate, Seat::Available);
                }
            }
        }
    }

    /// When a hold's seats lapse; a seat held by a hold not known (none should be) counts as
    /// lapsed, so best available looks at it.
    pub(super) fn held_until(&self, hold_id: &HoldId) -> DateTime<Utc> {
        self.holds
            .get(hold_id)
            .map_or(DateTime::<Utc>::MIN_UTC, |h| h.expires_at)
    }
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
            } => self.held(hold_id, account_id, &seat_ids, expires_at, idempotency),
            ShowEvent::HoldReleased { hold_id } => self.end_hold(&hold_id, HoldMove::Release),
            ShowEvent::HoldExpired { hold_id } => self.end_hold(&hold_id, HoldMove::Expire),
            ShowEvent::OrderPlaced {
                order_id,
                hold_id,
                account_id,
                seat_ids,
                total_cents,
                placed_at,
                idempotency,
            } => {
                let order = Order {
                    account: account_id,
                    hold_id,
                    seats: self.seat_indices(&seat_ids),
                    total_cents,
                    placed_at,
                    state: OrderState::PendingPayment,
                    ambiguous_since: None,
                    failure: None,
                    failure_code: None,
                    make_good: false,
                };
                self.placed(order_id, order, idempotency);
            }
            ShowEvent::PaymentSucceeded { order_id, .. } => {
                if let Some(seats) = self.order_to(&order_id, OrderMove::Succeed) {
                    for i in seats {
                        self.move_seat(i, SeatMove::Pay, Seat::Sold(order_id));
                    }
                }
            }
            ShowEvent::PaymentFailed {
                order_id,
                code,
                reason,
                ..
            } => {
                self.order_to(&order_id, OrderMove::Fail);
                if let Some(o) = self.orders.get_mut(&order_id) {
                    o.failure = Some(reason);
                    o.failure_code = Some(code);
                }
            }
            ShowEvent::PaymentAmbiguous { order_id, at, .. } => {
                if let Some(o) = self.orders.get_mut(&order_id) {
                    o.ambiguous_since.get_or_insert(at);
                }
            }
            ShowEvent::OrderReinstated { order_id, .. } => self.reinstated(order_id),
            ShowEvent::MakeGoodOwed { order_id, .. } => {
                self.order_to(&order_id, OrderMove::MakeGood);
                if let Some(o) = self.orders.get_mut(&order_id) {
                    o.make_good = true;
                }
            }
            ShowEvent::OrderCancelled { order_id, .. } => self.cancelled(order_id),
            ShowEvent::OrderRefunded { order_id, .. } => {
                self.order_to(&order_id, OrderMove::Refund);
            }
            ShowEvent::SalePolicyChanged {
                hold_ttl_seconds,
                policy,
                ..
            } => {
                if let Some(info) = self.info.as_mut() {
                    info.hold_ttl_seconds = hold_ttl_seconds;
                    info.policy = policy;
                }
            }
            ShowEvent::OrderCompensated { order_id, .. } => self.compensated(order_id),
        }
    }
}

/// Adds `item` to `account`'s list, cloning the account id only for its first item (a log
/// replay applies millions of events: a clone per event is measurable).
fn push_to<T: Clone>(map: &mut imbl::HashMap<AccountId, Vec<T>>, account: &AccountId, item: T) {
    match map.get_mut(account) {
        Some(items) => items.push(item),
        None => {
            map.insert(account.clone(), vec![item]);
        }
    }
}

impl Show {
    fn remember(
        &mut self,
        account: &AccountId,
        idem: Idempotency,
        outcome: Outcome,
        at: DateTime<Utc>,
    ) {
        self.forget_old_keys(at);
        self.index
            .key_ages
            .insert((at, account.clone(), idem.key.clone()));
        let key = (account.clone(), idem.key.clone());
        self.idempotency.insert(
            key,
            IdempotencyRecord {
                account: account.clone(),
                key: idem.key,
                fingerprint: idem.fingerprint,
                outcome,
                at,
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
