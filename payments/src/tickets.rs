//! Tickets from the log: what its events ask of them (issue an order's once its payment is in,
//! revoke them once its cancellation is), and the issuer, a consumer of the log that writes
//! that through the store (`onsale_payments_store::tickets`, which keeps them).

use chrono::{DateTime, Utc};
use onsale_domain::{Show, ShowEvent};
use onsale_payments_store::tickets;
use onsale_payments_store::{write_on_shards, ShardChange, Shards};
use onsale_projections::{EventCtx, Projection};
use sqlx::postgres::PgConnection;

/// What the log asks of the tickets: issue an order's (once its payment is in), or revoke
/// them (its cancellation is in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Issue {
        order_id: String,
        show_id: String,
        account_id: String,
        /// Each seat's name and whether it is a general-admission place.
        seats: Vec<(onsale_domain::SeatId, bool)>,
        at: DateTime<Utc>,
    },
    Revoke {
        order_id: String,
        show_id: String,
    },
}

impl ShardChange for Change {
    fn show_id(&self) -> &str {
        match self {
            Self::Issue { show_id, .. } | Self::Revoke { show_id, .. } => show_id,
        }
    }

    fn write(
        self,
        tx: &mut PgConnection,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send {
        write(tx, self)
    }
}

/// What the log asks of the tickets, event by event: the issuer's rules, without its store (the
/// simulator runs them too).
#[derive(Debug, Default)]
pub struct TicketChanges {
    changes: Vec<Change>,
}

impl TicketChanges {
    /// What the events since the last call ask, in order (what the issuer writes).
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    /// One event of a show's log, folded.
    pub fn event(&mut self, ctx: &EventCtx<'_>) {
        let Some(order_id) = ctx.log.event.order_id() else {
            return;
        };
        let Some(order) = ctx.after.order(&order_id) else {
            return;
        };
        // Paid: captured, or sold again to the order that paid late.
        let paid = matches!(
            &ctx.log.event,
            ShowEvent::PaymentSucceeded { .. } | ShowEvent::OrderReinstated { .. }
        );
        #[cfg(feature = "planted-bugs")]
        let paid = paid
            || (matches!(&ctx.log.event, ShowEvent::OrderPlaced { .. })
                && onsale_domain::plant::planted(onsale_domain::plant::Bug::TicketsBeforePayment));
        match &ctx.log.event {
            _ if paid => {
                self.changes.push(Change::Issue {
                    order_id: order_id.to_string(),
                    show_id: ctx.log.show_id.to_string(),
                    account_id: order.account.to_string(),
                    seats: ctx
                        .after
                        .seat_names(&order.seats)
                        .into_iter()
                        .zip(
                            order
                                .seats
                                .iter()
                                .map(|&s| ctx.after.is_general_admission(s)),
                        )
                        .collect(),
                    at: ctx.log.at,
                });
            }
            ShowEvent::OrderCancelled { .. } => self.changes.push(Change::Revoke {
                order_id: order_id.to_string(),
                show_id: ctx.log.show_id.to_string(),
            }),
            _ => {}
        }
    }
}

/// The ticket issuer, a consumer of the log: its position is the main database's, like every
/// consumer's; tickets are written on their show's shard before the position moves (a batch
/// written again after a crash issues nothing twice: one ticket per (order, seat)).
#[derive(Debug)]
pub struct TicketIssuer {
    changes: TicketChanges,
    shards: Shards,
}

impl TicketIssuer {
    pub fn new(shards: Shards) -> Self {
        Self {
            changes: TicketChanges::default(),
            shards,
        }
    }
}

impl Projection for TicketIssuer {
    const NAME: &'static str = "tickets";

    fn loaded(&mut self, _show_id: onsale_domain::ShowId, _show: &Show) {}

    fn event(&mut self, ctx: &EventCtx<'_>) {
        self.changes.event(ctx);
    }

    async fn flush(&mut self, _positions: &mut PgConnection) -> anyhow::Result<()> {
        write_on_shards(&self.shards, self.changes.take_changes()).await
    }

    /// Tickets are what fans hold, not a view: a rebuild must not mint new ones.
    async fn reset(_tx: &mut PgConnection) -> anyhow::Result<()> {
        Ok(())
    }
}

/// One change, on its show's shard.
async fn write(tx: &mut PgConnection, change: Change) -> anyhow::Result<()> {
    match change {
        Change::Issue {
            order_id,
            show_id,
            account_id,
            seats,
            at,
        } => tickets::issue(tx, &order_id, &show_id, &account_id, seats, at).await?,
        Change::Revoke { order_id, show_id } => {
            tickets::revoke_recorded(tx, &order_id, &show_id).await?
        }
    }
    Ok(())
}
