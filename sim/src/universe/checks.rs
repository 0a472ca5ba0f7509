//! The invariants checked after every step: nothing acknowledged lost, no seat sold twice,
//! at most one charge per order, the read side equal to the log.

use super::*;

impl Universe {
    /// Checks the rows the log gained since the last check, then every acknowledgement given
    /// since: each must be in the log.
    pub(super) async fn check(&mut self) -> Result<(), String> {
        if let Some(v) = self
            .broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Err(v);
        }
        let rows = self
            .store
            .read_range(&self.show.to_string(), self.oracle.seen, i64::MAX, i64::MAX)
            .await
            .map_err(|e| e.to_string())?;
        let rows = rows
            .iter()
            .map(|r| LogEvent::from_row(self.show, r))
            .collect::<anyhow::Result<Vec<_>>>()
            .map_err(|e| format!("a row the projections cannot read: {e}"))?;
        self.oracle.check(&rows)?;
        self.projected.fold(&rows);
        self.projected.matches(&self.oracle.occupied())?;
        {
            let mut tickets = self.shared.tickets();
            for change in self.projected.issuer.take_changes() {
                tickets.apply(change);
            }
            if let Some(seat) = tickets.seat_with_two_live_tickets() {
                return Err(format!("seat {seat} has two tickets that open the gate"));
            }
            use onsale_domain::OrderStatus as S;
            for (order, state, _) in self.oracle.orders() {
                // Never paid, or cancelled: no ticket of it may open the gate.
                let closed = matches!(
                    state,
                    S::PaymentFailed | S::Failed | S::MakeGood | S::Cancelled | S::Refunded
                );
                if closed && tickets.live(&order.to_string()) {
                    return Err(format!(
                        "order {order} is {state:?} and a ticket of it opens the gate"
                    ));
                }
            }
        }
        let now = self.shared.clock.now();
        let mut money = self.shared.money();
        // The processor's time passes: pending charges settle and raise their webhooks.
        money.ledger.advance(now);
        let raised = money.ledger.take_events();
        money.webhooks.extend(raised);
        // The intake's work, from the log (not from what clients heard: an order whose answer
        // was lost is paid for too): an order placed is a payment to make; a cancellation or a
        // make-good is a refund owed.
        for row in &rows {
            match &row.event {
                ShowEvent::OrderPlaced {
                    order_id,
                    total_cents,
                    placed_at,
                    ..
                } => {
                    let (card, settle_after) = self
                        .shared
                        .cards
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(order_id)
                        .copied()
                        .ok_or(format!("order {order_id} no fan placed"))?;
                    money.payments.entry(*order_id).or_insert(Payment {
                        order: *order_id,
                        amount: *total_cents,
                        card,
                        settle_after,
                        state: PaymentState::Charge,
                        placed_at: *placed_at,
                        attempts: 0,
                        done: false,
                        busy: false,
                    });
                }
                ShowEvent::OrderCancelled { order_id, .. }
                | ShowEvent::MakeGoodOwed { order_id, .. } => {
                    money.refunds.entry(*order_id).or_default();
                }
                _ => {}
            }
        }
        if let Some((order, n)) = money.charged_twice() {
            return Err(format!("order {order} captured {n} times at the processor"));
        }
        drop(money);
        let acks = std::mem::take(&mut *self.shared.acks.lock().unwrap_or_else(|p| p.into_inner()));
        for h in &acks.holds {
            if !self.oracle.has_hold(h) {
                return Err(format!("acknowledged hold {h} is not in the log"));
            }
        }
        for o in &acks.orders {
            if !self.oracle.has_order(o) {
                return Err(format!("acknowledged order {o} is not in the log"));
            }
        }
        for h in &acks.released {
            if !self.oracle.hold_ended(h) {
                return Err(format!("acknowledged release of {h} is not in the log"));
            }
        }
        for o in &acks.cancelled {
            use onsale_domain::OrderStatus as S;
            if !matches!(self.oracle.order_state(o), Some(S::Cancelled | S::Refunded)) {
                return Err(format!(
                    "acknowledged cancellation of {o} is not in the log"
                ));
            }
        }
        Ok(())
    }
}
