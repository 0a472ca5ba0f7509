//! Tickets in the simulation. What to issue and revoke is decided by the real issuer's rules
//! (`onsale_payments::tickets::TicketChanges`, fed by the same fold as the seat map); where
//! it goes is `tickets` and `ticket_orders`, kept here as the statements of
//! `payments/src/tickets.rs` keep them: one ticket per (order, seat) (`ON CONFLICT DO
//! NOTHING`), nothing issued for an order whose cancellation began, a cancellation refused if a
//! ticket was scanned, else every unscanned ticket revoked before `CancelOrder` is sent, a scan
//! only of a ticket neither revoked nor scanned.

use std::collections::BTreeMap;

use onsale_payments::tickets::Change;

#[derive(Debug, Clone)]
struct Ticket {
    revoked: bool,
    scanned: bool,
}

#[derive(Debug, Default, Clone)]
struct TicketOrder {
    /// The cancellation began (its tickets were revoked), by whom.
    cancelled_by: Option<String>,
    /// `CancelOrder` is in the log.
    recorded: bool,
}

/// What revoking an order's tickets for its cancellation found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    Revoked,
    AlreadyScanned(String),
}

#[derive(Debug, Default)]
pub struct TicketBook {
    /// (order, seat) -> ticket.
    tickets: BTreeMap<(String, String), Ticket>,
    orders: BTreeMap<String, TicketOrder>,
}

impl TicketBook {
    /// Writes what the issuer asks, as its `flush` does.
    pub fn apply(&mut self, change: Change) {
        match change {
            Change::Issue {
                order_id, seats, ..
            } => {
                if self
                    .orders
                    .entry(order_id.clone())
                    .or_default()
                    .cancelled_by
                    .is_some()
                {
                    return;
                }
                for (seat, _) in seats {
                    self.tickets
                        .entry((order_id.clone(), seat.to_string()))
                        .or_insert(Ticket {
                            revoked: false,
                            scanned: false,
                        });
                }
            }
            Change::Revoke { order_id, .. } => {
                self.revoke(&order_id, None);
                self.orders.entry(order_id).or_default().recorded = true;
            }
        }
    }

    fn revoke(&mut self, order: &str, by: Option<&str>) {
        let row = self.orders.entry(order.to_owned()).or_default();
        if row.cancelled_by.is_none() {
            row.cancelled_by = Some(by.unwrap_or("onsale").to_owned());
        }
        for ((o, _), t) in self.tickets.iter_mut() {
            if o == order && !t.scanned {
                t.revoked = true;
            }
        }
    }

    /// The cancellation's first step (`revoke_for_cancel`).
    pub fn revoke_for_cancel(&mut self, order: &str, by: &str) -> Revocation {
        if let Some(((_, seat), _)) = self
            .tickets
            .iter()
            .find(|((o, _), t)| o == order && t.scanned)
        {
            return Revocation::AlreadyScanned(seat.clone());
        }
        self.revoke(order, Some(by));
        Revocation::Revoked
    }

    /// The cancellation's last step (`cancellation_recorded`).
    pub fn recorded(&mut self, order: &str) {
        if let Some(row) = self.orders.get_mut(order) {
            row.recorded = true;
        }
    }

    /// Cancellations begun and never recorded (`unfinished_cancellations`): order and who.
    pub fn unfinished(&self) -> Vec<(String, String)> {
        self.orders
            .iter()
            .filter(|(_, r)| !r.recorded)
            .filter_map(|(o, r)| Some((o.clone(), r.cancelled_by.clone()?)))
            .collect()
    }

    /// The gate scans the ticket of (order, seat): admitted or not.
    pub fn scan(&mut self, order: &str, seat: &str) -> bool {
        match self.tickets.get_mut(&(order.to_owned(), seat.to_owned())) {
            Some(t) if !t.revoked && !t.scanned => {
                t.scanned = true;
                true
            }
            _ => false,
        }
    }

    /// Every ticket issued: (order, seat).
    pub fn issued(&self) -> Vec<(String, String)> {
        self.tickets.keys().cloned().collect()
    }

    /// The tickets that still open the gate (or opened it), per seat: more than one is a seat
    /// sold twice at the door.
    pub fn seat_with_two_live_tickets(&self) -> Option<String> {
        let mut live: BTreeMap<&str, usize> = BTreeMap::new();
        for ((_, seat), t) in &self.tickets {
            if !t.revoked {
                *live.entry(seat.as_str()).or_default() += 1;
            }
        }
        live.into_iter()
            .find(|(_, n)| *n > 1)
            .map(|(seat, _)| seat.to_owned())
    }

    /// Whether any ticket of `order` still opens the gate.
    pub fn live(&self, order: &str) -> bool {
        self.tickets
            .iter()
            .any(|((o, _), t)| o == order && !t.revoked)
    }

    /// Seats of `order` with a ticket.
    pub fn seats_of(&self, order: &str) -> usize {
        self.tickets.keys().filter(|(o, _)| o == order).count()
    }
}
