//! The invariant, monitored rather than assumed: no seat has more than one confirmed order,
//! every seat the map shows sold has exactly one order that pays for it (pending or confirmed)
//! and the other way round, no seat has two live tickets, and every seat of an order confirmed
//! for a minute has a live ticket. It reads the read models, which
//! are built by other code than the aggregate that guarantees these, and compares a show's seat
//! map and orders only when both projections stand at the same position (so lag is not an
//! alarm).

use serde::Serialize;
use sqlx::PgPool;

#[derive(Debug, Clone, Serialize, PartialEq, Eq, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    pub check: String,
    pub show_id: String,
    pub seat_id: String,
}

pub const CHECKS: [&str; 4] = [
    "seat_confirmed_twice",
    "sold_seat_order_mismatch",
    "seat_ticketed_twice",
    "confirmed_without_ticket",
];

/// How long after its confirmation an order's seat may still be without a live ticket (the
/// ticket issuer is a log consumer; a cancellation between its two steps is finished within
/// seconds).
pub const TICKET_WINDOW_SECS: i64 = 60;

pub async fn check(pool: &PgPool) -> anyhow::Result<Vec<Violation>> {
    let violations: Vec<Violation> = sqlx::query_as(
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
          WHERE sold.seat_id IS NULL
         UNION ALL
         SELECT 'seat_ticketed_twice', show_id, seat_id
           FROM tickets WHERE revoked_at IS NULL
          GROUP BY show_id, seat_id HAVING count(*) > 1
         UNION ALL
         SELECT 'confirmed_without_ticket', o.show_id, s
           FROM orders_view o, unnest(o.seat_ids) s
          WHERE o.status = 'CONFIRMED' AND o.updated_at < now() - make_interval(secs => $1)
            AND NOT EXISTS (SELECT 1 FROM tickets t
                             WHERE t.order_id = o.order_id AND t.seat_id = s AND t.revoked_at IS NULL)",
    )
    .bind(TICKET_WINDOW_SECS as f64)
    .fetch_all(pool)
    .await?;
    for c in CHECKS {
        let n = violations.iter().filter(|v| v.check == c).count();
        metrics::gauge!(onsale_telemetry::metrics::INVARIANT_VIOLATIONS, "check" => c)
            .set(n as f64);
    }
    for v in &violations {
        tracing::error!(check = %v.check, show = %v.show_id, seat = %v.seat_id, "INVARIANT VIOLATED");
    }
    Ok(violations)
}

/// The lags the alerts watch, read from the tables (so a stuck sweeper, issuer or worker is
/// seen by another process than itself): holds still active past their expiry, confirmed
/// seats without a live ticket, and the payment work list's depth and oldest unclaimed row.
#[derive(Debug, Clone, Copy, PartialEq, sqlx::FromRow)]
pub struct Lags {
    pub hold_expiry_secs: f64,
    pub ticket_issuance_secs: f64,
    pub payment_outbox_depth: i64,
    pub payment_oldest_unclaimed_secs: f64,
}

pub async fn lags<'e>(db: impl sqlx::PgExecutor<'e>) -> anyhow::Result<Lags> {
    let lags: Lags = sqlx::query_as(
        "SELECT
           coalesce((SELECT extract(epoch FROM now() - min(expires_at))::float8
                       FROM holds_view WHERE status = 'ACTIVE' AND expires_at < now()), 0)
             AS hold_expiry_secs,
           coalesce((SELECT extract(epoch FROM now() - min(o.updated_at))::float8
                       FROM orders_view o, unnest(o.seat_ids) s
                      WHERE o.status = 'CONFIRMED'
                        AND NOT EXISTS (SELECT 1 FROM tickets t
                                         WHERE t.order_id = o.order_id AND t.seat_id = s
                                           AND t.revoked_at IS NULL)), 0)
             AS ticket_issuance_secs,
           (SELECT count(*) FROM payments WHERE state <> 'done') AS payment_outbox_depth,
           coalesce((SELECT extract(epoch FROM now() - min(due_at))::float8
                       FROM payments
                      WHERE state <> 'done' AND due_at < now()
                        AND (lease_until IS NULL OR lease_until < now())), 0)
             AS payment_oldest_unclaimed_secs",
    )
    .fetch_one(db)
    .await?;
    use onsale_telemetry::metrics as m;
    metrics::gauge!(m::HOLD_EXPIRY_LAG_SECONDS).set(lags.hold_expiry_secs);
    metrics::gauge!(m::TICKET_ISSUANCE_LAG_SECONDS).set(lags.ticket_issuance_secs);
    metrics::gauge!(m::PAYMENT_OUTBOX_DEPTH).set(lags.payment_outbox_depth as f64);
    metrics::gauge!(m::PAYMENT_OLDEST_UNCLAIMED_SECONDS).set(lags.payment_oldest_unclaimed_secs);
    Ok(lags)
}
