//! The invariant, monitored rather than assumed: no seat has more than one confirmed order,
//! every seat the map shows sold has exactly one order that pays for it (pending or confirmed)
//! and the other way round, no seat has two live tickets, and every seat of an order confirmed
//! for a minute has a live ticket. It reads the read models (and each shard's tickets), which
//! are built by other code than the aggregate that guarantees these, and compares a show's seat
//! map and orders only when both projections stand at the same position (so lag is not an
//! alarm).

use serde::Serialize;
use sqlx::PgPool;

use onsale_payments_store::{audits, by_shard, Shards};

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
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
        match audits::ticketed_twice(db).await {
            Ok(found) => violations.extend(found.into_iter().map(|(show_id, seat_id)| Violation {
                check: "seat_ticketed_twice".into(),
                show_id,
                seat_id,
            })),
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
#[derive(Debug, Clone)]
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
        match audits::unticketed(db, seats).await {
            Ok(m) => {
                found.extend(
                    m.into_iter()
                        .map(|(show_id, seat_id, confirmed_at)| Unticketed {
                            show_id,
                            seat_id,
                            confirmed_at,
                        }),
                )
            }
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
        match onsale_payments_store::work::backlog(db).await {
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
