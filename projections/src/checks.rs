//! What the payments' invariant monitor and reconciliation read from the read models (every
//! statement on them lives in this crate: migrations/OWNERS).

use sqlx::PgPool;

/// `(check, show, seat)` for each breach the read models show on their own: a seat with two
/// confirmed orders (`seat_confirmed_twice`), a seat the map shows sold without exactly one
/// order paying for it or the other way round (`sold_seat_order_mismatch`). A show's seat map
/// and orders are compared only when both projections stand at the same position, so lag is
/// not a breach.
pub async fn seat_breaches(reads: &PgPool) -> Result<Vec<(String, String, String)>, sqlx::Error> {
    sqlx::query_as(
        "WITH settled AS (
             SELECT a.show_id FROM projection_positions a
               JOIN projection_positions b ON b.show_id = a.show_id AND b.projection = 'orders'
              WHERE a.projection = 'seat_map' AND a.last_sequence = b.last_sequence),
         claims AS (
             SELECT o.show_id, s AS seat_id, count(*) AS n
               FROM orders_view o, unnest(o.seat_ids) s
              WHERE o.status IN ('PENDING_PAYMENT', 'CONFIRMED')
                AND o.show_id IN (SELECT show_id FROM settled)
              GROUP BY 1, 2),
         sold AS (
             SELECT show_id, seat_id FROM seat_map_seats
              WHERE status = 'SOLD' AND show_id IN (SELECT show_id FROM settled))
         SELECT 'seat_confirmed_twice' AS check, o.show_id, s AS seat_id
           FROM orders_view o, unnest(o.seat_ids) s
          WHERE o.status = 'CONFIRMED'
          GROUP BY o.show_id, s HAVING count(*) > 1
         UNION ALL
         SELECT 'sold_seat_order_mismatch', sold.show_id, sold.seat_id
           FROM sold LEFT JOIN claims USING (show_id, seat_id)
          WHERE claims.n IS DISTINCT FROM 1
         UNION ALL
         SELECT 'sold_seat_order_mismatch', claims.show_id, claims.seat_id
           FROM claims LEFT JOIN sold USING (show_id, seat_id)
          WHERE sold.seat_id IS NULL",
    )
    .fetch_all(reads)
    .await
}

/// `(order, show, seat, confirmed at)` for each seat of an order confirmed more than
/// `older_secs` and less than `within_secs` ago.
pub async fn confirmed_seats(
    reads: &PgPool,
    older_secs: f64,
    within_secs: f64,
) -> Result<Vec<(String, String, String, chrono::DateTime<chrono::Utc>)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT o.order_id, o.show_id, s, o.updated_at
           FROM orders_view o, unnest(o.seat_ids) s
          WHERE o.status = 'CONFIRMED'
            AND o.updated_at < now() - make_interval(secs => $1)
            AND o.updated_at > now() - make_interval(secs => $2)",
    )
    .bind(older_secs)
    .bind(within_secs)
    .fetch_all(reads)
    .await
}

/// How long past its expiry the longest-lapsed hold the orders projection still has active
/// is, in seconds (0 when none).
pub async fn hold_expiry_lag(reads: &PgPool) -> Result<f64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT coalesce((SELECT extract(epoch FROM now() - min(expires_at))::float8
                            FROM holds_view WHERE status = 'ACTIVE' AND expires_at < now()), 0)",
    )
    .fetch_one(reads)
    .await
}

/// `(order, status)` of those of `orders` that are confirmed, cancelled or refunded: the
/// orders a settlement must have captured.
pub async fn settled_orders(
    reads: &PgPool,
    orders: &[String],
) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT order_id, status FROM orders_view
          WHERE order_id = ANY($1) AND status IN ('CONFIRMED', 'CANCELLED', 'REFUNDED')
          ORDER BY order_id",
    )
    .bind(orders)
    .fetch_all(reads)
    .await
}
