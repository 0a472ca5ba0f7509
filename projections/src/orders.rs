//! Orders as `GET /v1/orders/{id}` serves them: status, seats, price, owner.

use std::collections::HashMap;

use onsale_domain::{Show, ShowId};
use sqlx::postgres::PgConnection;

use crate::fold::EventCtx;
use crate::runner::Projection;

#[derive(Debug, Clone)]
struct Row {
    order_id: String,
    show_id: String,
    hold_id: String,
    account_id: String,
    status: String,
    make_good: bool,
    failure_reason: Option<&'static str>,
    seat_ids: Vec<String>,
    total_cents: i64,
    placed_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
    sequence: i64,
}

#[derive(Debug, Clone)]
struct HoldRow {
    hold_id: String,
    show_id: String,
    account_id: String,
    seat_ids: Vec<String>,
    expires_at: chrono::DateTime<chrono::Utc>,
    status: &'static str,
    sequence: i64,
}

/// The orders projection (and the holds: `GET /v1/holds/{id}`).
#[derive(Debug, Default)]
pub struct Orders {
    changed: HashMap<String, Row>,
    holds: HashMap<String, HoldRow>,
}

impl Projection for Orders {
    const NAME: &'static str = "orders";

    fn loaded(&mut self, _show_id: ShowId, _show: &Show) {}

    fn event(&mut self, ctx: &EventCtx<'_>) {
        if let Some(hold) = ctx
            .log
            .event
            .hold_id()
            .and_then(|id| ctx.after.hold_view(&id))
        {
            self.holds.insert(
                hold.hold_id.to_string(),
                HoldRow {
                    hold_id: hold.hold_id.to_string(),
                    show_id: ctx.log.show_id.to_string(),
                    account_id: hold.account.to_string(),
                    seat_ids: hold.seat_ids.iter().map(ToString::to_string).collect(),
                    expires_at: hold.expires_at,
                    status: onsale_domain::transitions::Transition::name(hold.state),
                    sequence: ctx.log.sequence,
                },
            );
        }
        let Some(view) = ctx
            .log
            .event
            .order_id()
            .and_then(|id| ctx.after.order_view(&id))
        else {
            return;
        };
        self.changed.insert(
            view.order_id.to_string(),
            Row {
                order_id: view.order_id.to_string(),
                show_id: ctx.log.show_id.to_string(),
                hold_id: view.hold_id.to_string(),
                account_id: view.account.to_string(),
                status: view.status.into_owned(),
                make_good: view.make_good,
                failure_reason: view.failure_reason.map(|f| f.as_str()),
                seat_ids: view.seat_ids.iter().map(ToString::to_string).collect(),
                total_cents: view.total_cents,
                placed_at: view.placed_at,
                updated_at: ctx.log.at.max(view.placed_at),
                sequence: ctx.log.sequence,
            },
        );
    }

    async fn flush(&mut self, tx: &mut PgConnection) -> anyhow::Result<()> {
        for r in self.changed.drain().map(|(_, r)| r) {
            sqlx::query(
                "INSERT INTO orders_view (order_id, show_id, hold_id, account_id, status, seat_ids,
                                          total_cents, placed_at, updated_at, sequence, make_good,
                                          failure_reason)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                 ON CONFLICT (order_id) DO UPDATE
                   SET status = EXCLUDED.status, updated_at = EXCLUDED.updated_at, sequence = EXCLUDED.sequence,
                       make_good = EXCLUDED.make_good, failure_reason = EXCLUDED.failure_reason
                 WHERE orders_view.sequence < EXCLUDED.sequence",
            )
            .bind(&r.order_id)
            .bind(&r.show_id)
            .bind(&r.hold_id)
            .bind(&r.account_id)
            .bind(&r.status)
            .bind(&r.seat_ids)
            .bind(r.total_cents)
            .bind(r.placed_at)
            .bind(r.updated_at)
            .bind(r.sequence)
            .bind(r.make_good)
            .bind(r.failure_reason)
            .execute(&mut *tx)
            .await?;
        }
        for h in self.holds.drain().map(|(_, h)| h) {
            sqlx::query(
                "INSERT INTO holds_view (hold_id, show_id, account_id, seat_ids, expires_at, status, sequence)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (hold_id) DO UPDATE
                   SET status = EXCLUDED.status, sequence = EXCLUDED.sequence
                 WHERE holds_view.sequence < EXCLUDED.sequence",
            )
            .bind(&h.hold_id)
            .bind(&h.show_id)
            .bind(&h.account_id)
            .bind(&h.seat_ids)
            .bind(h.expires_at)
            .bind(h.status)
            .bind(h.sequence)
            .execute(&mut *tx)
            .await?;
        }
        Ok(())
    }

    async fn reset(tx: &mut PgConnection) -> anyhow::Result<()> {
        sqlx::query("TRUNCATE orders_view, holds_view")
            .execute(&mut *tx)
            .await?;
        Ok(())
    }
}
