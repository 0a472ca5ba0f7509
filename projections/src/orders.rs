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

/// A batch of [`Row`]s as the columns of one `UNNEST`.
#[derive(Default)]
struct OrderColumns {
    order_id: Vec<String>,
    show_id: Vec<String>,
    hold_id: Vec<String>,
    account_id: Vec<String>,
    status: Vec<String>,
    seat_ids: Vec<String>,
    total_cents: Vec<i64>,
    placed_at: Vec<chrono::DateTime<chrono::Utc>>,
    updated_at: Vec<chrono::DateTime<chrono::Utc>>,
    sequence: Vec<i64>,
    make_good: Vec<bool>,
    failure_reason: Vec<Option<&'static str>>,
}

impl OrderColumns {
    fn push(&mut self, r: Row) -> serde_json::Result<()> {
        self.seat_ids.push(serde_json::to_string(&r.seat_ids)?);
        self.order_id.push(r.order_id);
        self.show_id.push(r.show_id);
        self.hold_id.push(r.hold_id);
        self.account_id.push(r.account_id);
        self.status.push(r.status);
        self.total_cents.push(r.total_cents);
        self.placed_at.push(r.placed_at);
        self.updated_at.push(r.updated_at);
        self.sequence.push(r.sequence);
        self.make_good.push(r.make_good);
        self.failure_reason.push(r.failure_reason);
        Ok(())
    }
}

/// A batch of [`HoldRow`]s as the columns of one `UNNEST`.
#[derive(Default)]
struct HoldColumns {
    hold_id: Vec<String>,
    show_id: Vec<String>,
    account_id: Vec<String>,
    seat_ids: Vec<String>,
    expires_at: Vec<chrono::DateTime<chrono::Utc>>,
    status: Vec<&'static str>,
    sequence: Vec<i64>,
}

impl HoldColumns {
    fn push(&mut self, h: HoldRow) -> serde_json::Result<()> {
        self.seat_ids.push(serde_json::to_string(&h.seat_ids)?);
        self.hold_id.push(h.hold_id);
        self.show_id.push(h.show_id);
        self.account_id.push(h.account_id);
        self.expires_at.push(h.expires_at);
        self.status.push(h.status);
        self.sequence.push(h.sequence);
        Ok(())
    }
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
        // One statement per table for the whole batch: under a rush a batch holds thousands of
        // holds, and a statement per row made a round trip to PostgreSQL per hold. A row's
        // seat ids go over as a JSON array (an array of arrays would have to be rectangular).
        if !self.changed.is_empty() {
            let mut c = OrderColumns::default();
            for (_, r) in self.changed.drain() {
                c.push(r)?;
            }
            sqlx::query(
                "INSERT INTO orders_view (order_id, show_id, hold_id, account_id, status, seat_ids,
                                          total_cents, placed_at, updated_at, sequence, make_good,
                                          failure_reason)
                 SELECT o, s, h, a, st, ARRAY(SELECT json_array_elements_text(seats::json)),
                        t, p, u, q, m, f
                   FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                               $7::bigint[], $8::timestamptz[], $9::timestamptz[], $10::bigint[],
                               $11::bool[], $12::text[])
                        AS x(o, s, h, a, st, seats, t, p, u, q, m, f)
                 ON CONFLICT (order_id) DO UPDATE
                   SET status = EXCLUDED.status, updated_at = EXCLUDED.updated_at, sequence = EXCLUDED.sequence,
                       make_good = EXCLUDED.make_good, failure_reason = EXCLUDED.failure_reason
                 WHERE orders_view.sequence < EXCLUDED.sequence",
            )
            .bind(&c.order_id)
            .bind(&c.show_id)
            .bind(&c.hold_id)
            .bind(&c.account_id)
            .bind(&c.status)
            .bind(&c.seat_ids)
            .bind(&c.total_cents)
            .bind(&c.placed_at)
            .bind(&c.updated_at)
            .bind(&c.sequence)
            .bind(&c.make_good)
            .bind(&c.failure_reason)
            .execute(&mut *tx)
            .await?;
        }
        if !self.holds.is_empty() {
            let mut c = HoldColumns::default();
            for (_, h) in self.holds.drain() {
                c.push(h)?;
            }
            sqlx::query(
                "INSERT INTO holds_view (hold_id, show_id, account_id, seat_ids, expires_at, status, sequence)
                 SELECT h, s, a, ARRAY(SELECT json_array_elements_text(seats::json)), e, st, q
                   FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[],
                               $6::text[], $7::bigint[]) AS x(h, s, a, seats, e, st, q)
                 ON CONFLICT (hold_id) DO UPDATE
                   SET status = EXCLUDED.status, sequence = EXCLUDED.sequence
                 WHERE holds_view.sequence < EXCLUDED.sequence",
            )
            .bind(&c.hold_id)
            .bind(&c.show_id)
            .bind(&c.account_id)
            .bind(&c.seat_ids)
            .bind(&c.expires_at)
            .bind(&c.status)
            .bind(&c.sequence)
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

/// Row `T` of order `order` (`order_id, show_id, hold_id, account_id, status, seat_ids,
/// total_cents, placed_at, updated_at, make_good, failure_reason`).
pub async fn order<T>(
    reads: &sqlx::PgPool,
    order: onsale_domain::OrderId,
) -> Result<Option<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(
        "SELECT order_id, show_id, hold_id, account_id, status, seat_ids, total_cents, placed_at, updated_at,
                make_good, failure_reason
           FROM orders_view WHERE order_id = $1",
    )
    .bind(order.to_string())
    .fetch_optional(reads)
    .await
}

/// Row `T` of hold `hold` (`hold_id, show_id, seat_ids, expires_at, status, account_id`).
pub async fn hold<T>(
    reads: &sqlx::PgPool,
    hold: onsale_domain::HoldId,
) -> Result<Option<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(
        "SELECT hold_id, show_id, seat_ids, expires_at, status, account_id
           FROM holds_view WHERE hold_id = $1",
    )
    .bind(hold.to_string())
    .fetch_optional(reads)
    .await
}

/// `(status, orders)` of `show`'s orders, by status.
pub async fn count_by_status(
    reads: &sqlx::PgPool,
    show: &str,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT status, count(*) FROM orders_view WHERE show_id = $1 GROUP BY status ORDER BY status",
    )
    .bind(show)
    .fetch_all(reads)
    .await
}
