//! The worker's work list, read off the log: `OrderPlaced` is the outbox row (it exists iff the
//! order committed), so each one becomes a payment to make; a cancellation or a make-good
//! becomes a refund owed; an outcome in the log closes the payment, whoever recorded it (the
//! worker, a webhook, reconciliation).
//!
//! It runs as a projection ([`onsale_projections::Runner`]): each event at most once, in the
//! transaction that stores its position. Its rows are work, not a view: a rebuild does not
//! delete them (every write here is idempotent, so re-reading the log changes nothing).

use chrono::{DateTime, Utc};
use onsale_domain::{Show, ShowEvent};
use onsale_payments_store::work;
use onsale_payments_store::{write_on_shards, ShardChange, Shards};
use onsale_projections::{EventCtx, Projection};
use sqlx::postgres::PgConnection;

#[derive(Debug)]
enum Change {
    Charge {
        order_id: String,
        show_id: String,
        amount_cents: i64,
        placed_at: DateTime<Utc>,
    },
    /// The outcome is in the log: captured (always closes) or failed (closes unless the failure
    /// was forced at the ambiguity bound and the void is still owed).
    Resolved {
        order_id: String,
        show_id: String,
        captured: bool,
    },
    Refund {
        order_id: String,
        show_id: String,
        amount_cents: i64,
        reason: &'static str,
        at: DateTime<Utc>,
    },
}

impl ShardChange for Change {
    fn show_id(&self) -> &str {
        match self {
            Self::Charge { show_id, .. }
            | Self::Resolved { show_id, .. }
            | Self::Refund { show_id, .. } => show_id,
        }
    }

    fn write(
        self,
        tx: &mut PgConnection,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send {
        write(tx, self)
    }
}

/// The intake: its position is the main database's, like every consumer's; the work it finds
/// is written on each show's shard, before the position moves (a batch written again after a
/// crash changes nothing: every write here is idempotent).
#[derive(Debug)]
pub struct PaymentIntake {
    changes: Vec<Change>,
    shards: Shards,
}

impl PaymentIntake {
    pub fn new(shards: Shards) -> Self {
        Self {
            changes: Vec::new(),
            shards,
        }
    }
}

impl Projection for PaymentIntake {
    const NAME: &'static str = "payment_intake";

    fn loaded(&mut self, _show_id: onsale_domain::ShowId, _show: &Show) {}

    fn event(&mut self, ctx: &EventCtx<'_>) {
        let Some(order_id) = ctx.log.event.order_id() else {
            return;
        };
        let Some(order) = ctx.after.order(&order_id) else {
            return;
        };
        let id = order_id.to_string();
        let show_id = ctx.log.show_id.to_string();
        match &ctx.log.event {
            ShowEvent::OrderPlaced { placed_at, .. } => self.changes.push(Change::Charge {
                order_id: id,
                show_id,
                amount_cents: order.total_cents,
                placed_at: *placed_at,
            }),
            ShowEvent::PaymentSucceeded { .. } | ShowEvent::OrderReinstated { .. } => {
                self.changes.push(Change::Resolved {
                    order_id: id,
                    show_id,
                    captured: true,
                });
            }
            ShowEvent::PaymentFailed { .. } => self.changes.push(Change::Resolved {
                order_id: id,
                show_id,
                captured: false,
            }),
            ShowEvent::MakeGoodOwed { at, .. } => {
                self.changes.push(Change::Resolved {
                    order_id: id.clone(),
                    show_id: show_id.clone(),
                    captured: true,
                });
                self.changes.push(Change::Refund {
                    order_id: id,
                    show_id,
                    amount_cents: order.total_cents,
                    reason: "make_good",
                    at: *at,
                });
            }
            ShowEvent::OrderCancelled { at, .. } => self.changes.push(Change::Refund {
                order_id: id,
                show_id,
                amount_cents: order.total_cents,
                reason: "cancelled",
                at: *at,
            }),
            _ => {}
        }
    }

    async fn flush(&mut self, _positions: &mut PgConnection) -> anyhow::Result<()> {
        write_on_shards(&self.shards, std::mem::take(&mut self.changes)).await
    }

    /// Work is not a view: nothing to delete (re-reading the log is idempotent).
    async fn reset(_tx: &mut PgConnection) -> anyhow::Result<()> {
        Ok(())
    }
}

/// One change, on its show's shard.
async fn write(tx: &mut PgConnection, change: Change) -> anyhow::Result<()> {
    match change {
        Change::Charge {
            order_id,
            show_id,
            amount_cents,
            placed_at,
        } => {
            // The token moves from where the edge kept it into the payment's row,
            // in this transaction: it is never in the log.
            let token = onsale_command::tokens::take(&mut *tx, &order_id).await?;
            work::owe_payment(tx, &order_id, &show_id, amount_cents, placed_at, token).await?;
        }
        Change::Resolved {
            order_id, captured, ..
        } => work::payment_resolved(tx, &order_id, captured).await?,
        Change::Refund {
            order_id,
            show_id,
            amount_cents,
            reason,
            at,
        } => work::owe_refund(tx, &order_id, &show_id, amount_cents, reason, at).await?,
    }
    Ok(())
}
