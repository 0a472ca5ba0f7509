//! The invariant, monitored rather than assumed: no seat has more than one confirmed order,
//! every seat the map shows sold has exactly one order that pays for it (pending or confirmed)
//! and the other way round, no seat has two live tickets, and every seat of an order confirmed
//! for a minute has a live ticket. It reads the read models (and each shard's tickets), which
//! are built by other code than the aggregate that guarantees these, and compares a show's seat
//! map and orders only when both projections stand at the same position (so lag is not an
//! alarm).

use serde::Serialize;
use sqlx::PgPool;

use crate::{by_shard, Shards};

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

/// How far back confirmed orders are checked for their tickets: a seat left without one is
/// alarmed on for this long after its order's confirmation (every 10 s by default), long enough
/// for any alert to fire, without reading every order ever sold on every turn.
pub const TICKET_LOOKBACK_SECS: i64 = 24 * 3600;

/// The invariant's checks: those of the read models on the main database (`reads`), those of
/// the tickets on each shard. A shard that does not answer is left out of this turn (logged);
/// the others are checked.
pub async fn check(reads: &PgPool, shards: &Shards) -> anyhow::Result<Vec<Violation>> {
    let mut violations: Vec<Violation> = onsale_projections::checks::seat_breaches(reads)
        .await?
        .into_iter()
        .map(|(check, show_id, seat_id)| Violation {
            check,
            show_id,
            seat_id,
        })
        .collect();
    for (shard, db) in shards.pools() {
        let twice: Result<Vec<Violation>, _> = sqlx::query_as(
            "SELECT 'seat_ticketed_twice' AS check, show_id, seat_id
               FROM tickets WHERE revoked_at IS NULL
              GROUP BY show_id, seat_id HAVING count(*) > 1",
        )
        .fetch_all(db)
        .await;
        match twice {
            Ok(found) => violations.extend(found),
            Err(e) => tracing::warn!(%shard, error = %e, "tickets not checked on this shard"),
        }
    }
    violations.extend(
        unticketed(reads, shards, TICKET_WINDOW_SECS)
            .await?
            .into_iter()
            .map(|u| Violation {
                check: "confirmed_without_ticket".into(),
                show_id: u.show_id,
                seat_id: u.seat_id,
            }),
    );
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

/// A seat of a confirmed order with no live ticket.
#[derive(Debug, Clone, sqlx::FromRow)]
struct Unticketed {
    show_id: String,
    seat_id: String,
    confirmed_at: chrono::DateTime<chrono::Utc>,
}

/// The seats of orders confirmed at least `age_secs` ago (and within
/// [`TICKET_LOOKBACK_SECS`]) that have no live ticket: the orders from the main database, the
/// tickets from each one's shard (a shard that does not answer is left out, logged).
async fn unticketed(
    reads: &PgPool,
    shards: &Shards,
    age_secs: i64,
) -> anyhow::Result<Vec<Unticketed>> {
    type Seat = (String, String, String, chrono::DateTime<chrono::Utc>);
    let confirmed: Vec<Seat> = onsale_projections::checks::confirmed_seats(
        reads,
        age_secs as f64,
        TICKET_LOOKBACK_SECS as f64,
    )
    .await?;
    let mut found = Vec::new();
    for (db, _, seats) in by_shard(shards, confirmed, |s| &s.1).await? {
        let mut columns: (Vec<String>, Vec<String>, Vec<String>, Vec<_>) = Default::default();
        for (order, show, seat, at) in seats {
            columns.0.push(order);
            columns.1.push(show);
            columns.2.push(seat);
            columns.3.push(at);
        }
        let missing: Result<Vec<Unticketed>, _> = sqlx::query_as(
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
        .fetch_all(db)
        .await;
        match missing {
            Ok(m) => found.extend(m),
            Err(e) => tracing::warn!(error = %e, "tickets not read on a shard"),
        }
    }
    Ok(found)
}

/// The lags the alerts watch, read from the tables (so a stuck sweeper, issuer or worker is
/// seen by another process than itself): holds still active past their expiry, confirmed
/// seats without a live ticket, and the payment work list's depth and oldest unclaimed row
/// (over every shard).
#[derive(Debug, Clone, Copy, PartialEq, sqlx::FromRow)]
pub struct Lags {
    pub hold_expiry_secs: f64,
    pub ticket_issuance_secs: f64,
    pub payment_outbox_depth: i64,
    pub payment_oldest_unclaimed_secs: f64,
}

pub async fn lags(reads: &PgPool, shards: &Shards) -> anyhow::Result<Lags> {
    let hold_expiry_secs = onsale_projections::checks::hold_expiry_lag(reads).await?;
    let now = chrono::Utc::now();
    let ticket_issuance_secs = unticketed(reads, shards, 0)
        .await?
        .iter()
        .map(|u| (now - u.confirmed_at).num_milliseconds() as f64 / 1e3)
        .fold(0.0, f64::max);
    let (mut payment_outbox_depth, mut payment_oldest_unclaimed_secs) = (0, 0.0f64);
    for (shard, db) in shards.pools() {
        let work: Result<(i64, f64), _> = sqlx::query_as(
            "SELECT (SELECT count(*) FROM payments WHERE state <> 'done'),
                    coalesce((SELECT extract(epoch FROM now() - min(due_at))::float8
                                FROM payments
                               WHERE state <> 'done' AND due_at < now()
                                 AND (lease_until IS NULL OR lease_until < now())), 0)",
        )
        .fetch_one(db)
        .await;
        match work {
            Ok((depth, oldest)) => {
                payment_outbox_depth += depth;
                payment_oldest_unclaimed_secs = payment_oldest_unclaimed_secs.max(oldest);
            }
            Err(e) => tracing::warn!(%shard, error = %e, "payments not read on this shard"),
        }
    }
    let lags = Lags {
        hold_expiry_secs,
        ticket_issuance_secs,
        payment_outbox_depth,
        payment_oldest_unclaimed_secs,
    };
    use onsale_telemetry::metrics as m;
    metrics::gauge!(m::HOLD_EXPIRY_LAG_SECONDS).set(lags.hold_expiry_secs);
    metrics::gauge!(m::TICKET_ISSUANCE_LAG_SECONDS).set(lags.ticket_issuance_secs);
    metrics::gauge!(m::PAYMENT_OUTBOX_DEPTH).set(lags.payment_outbox_depth as f64);
    metrics::gauge!(m::PAYMENT_OLDEST_UNCLAIMED_SECONDS).set(lags.payment_oldest_unclaimed_secs);
    Ok(lags)
}
