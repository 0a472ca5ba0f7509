//! What the invariant monitor and settlement reconciliation read of a shard's payments, refunds
//! and tickets, and the reconciliation runs' reports (on the main database).

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::PgPool;

/// Seats with more than one live ticket: (show, seat).
pub async fn ticketed_twice(pool: &PgPool) -> sqlx::Result<Vec<(String, String)>> {
    sqlx::query_as(
        "SELECT show_id, seat_id FROM tickets WHERE revoked_at IS NULL
          GROUP BY show_id, seat_id HAVING count(*) > 1",
    )
    .fetch_all(pool)
    .await
}

/// Of `seats` (order, show, seat, confirmed at), those without a live ticket on `pool`, their
/// show's shard: (show, seat, confirmed at).
pub async fn unticketed(
    pool: &PgPool,
    seats: Vec<(String, String, String, DateTime<Utc>)>,
) -> sqlx::Result<Vec<(String, String, DateTime<Utc>)>> {
    let mut columns: (Vec<String>, Vec<String>, Vec<String>, Vec<_>) = Default::default();
    for (order, show, seat, at) in seats {
        columns.0.push(order);
        columns.1.push(show);
        columns.2.push(seat);
        columns.3.push(at);
    }
    sqlx::query_as(
        "SELECT w.show_id, w.seat_id, w.confirmed_at
           FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
                AS w(order_id, show_id, seat_id, confirmed_at)
          WHERE NOT EXISTS (SELECT 1 FROM tickets t
                             WHERE t.order_id = w.order_id AND t.seat_id = w.seat_id
                               AND t.revoked_at IS NULL)",
    )
    .bind(&columns.0)
    .bind(&columns.1)
    .bind(&columns.2)
    .bind(&columns.3)
    .fetch_all(pool)
    .await
}

/// The orders whose payment was settled on `day`.
pub async fn settled_on(pool: &PgPool, day: NaiveDate) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar("SELECT order_id FROM payments WHERE resolved_at::date = $1")
        .bind(day)
        .fetch_all(pool)
        .await
}

/// The orders refunded on `day`.
pub async fn refunded_on(pool: &PgPool, day: NaiveDate) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT order_id FROM refunds WHERE state = 'done' AND resolved_at::date = $1",
    )
    .bind(day)
    .fetch_all(pool)
    .await
}

/// Keeps a reconciliation run's report of `day`, with `mismatches` left unresolved.
pub async fn reconciled(
    pool: &PgPool,
    day: NaiveDate,
    mismatches: usize,
    report: serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO reconciliation_runs (day, mismatches, report) VALUES ($1, $2, $3)")
        .bind(day)
        .bind(i32::try_from(mismatches).unwrap_or(i32::MAX))
        .bind(report)
        .execute(pool)
        .await?;
    Ok(())
}
