//! Tickets: issued once per (order, seat), scanned once at the gate, revoked when their order
//! is cancelled; and the reads the order page and a seat's history make of them.
//!
//! The store enforces "one ticket per (order, seat)" (a unique key), and a per-order row in
//! `ticket_orders` serializes issuance against cancellation: both lock it first, so a ticket is
//! never issued for an order whose cancellation has begun, and a scan and a revocation of the
//! same ticket cannot both win (they update the same row under a guard).

use chrono::{DateTime, Utc};
use rand::RngCore;
use sqlx::postgres::PgConnection;
use sqlx::PgPool;
use uuid::Uuid;

use crate::barcodes::{step_of, Code};

/// Issues an order's tickets, one per seat (each with a secret of its own), unless its
/// cancellation has begun; issuing them again changes nothing (one ticket per (order, seat)).
pub async fn issue(
    tx: &mut PgConnection,
    order_id: &str,
    show_id: &str,
    account_id: &str,
    seats: Vec<(onsale_domain::SeatId, bool)>,
    at: DateTime<Utc>,
) -> sqlx::Result<()> {
    let cancelled: Option<DateTime<Utc>> = lock_order(tx, order_id, show_id).await?;
    if cancelled.is_some() {
        return Ok(());
    }
    for (seat, general_admission) in seats {
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        sqlx::query(
            "INSERT INTO tickets (ticket_id, order_id, show_id, seat_id, account_id, secret, issued_at,
                                  general_admission)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (order_id, seat_id) DO NOTHING",
        )
        .bind(Uuid::new_v4())
        .bind(order_id)
        .bind(show_id)
        .bind(seat.as_str())
        .bind(account_id)
        .bind(&secret[..])
        .bind(at)
        .bind(general_admission)
        .execute(&mut *tx)
        .await?;
    }
    metrics::counter!(onsale_telemetry::metrics::TICKETS_ISSUED_ORDERS_TOTAL).increment(1);
    Ok(())
}

/// The log has the order's cancellation: its unscanned tickets are revoked (if they were not
/// already) and the cancellation is recorded.
pub async fn revoke_recorded(
    tx: &mut PgConnection,
    order_id: &str,
    show_id: &str,
) -> sqlx::Result<()> {
    revoke_locked(tx, order_id, show_id, None).await?;
    sqlx::query(
        "UPDATE ticket_orders SET cancel_recorded_at = COALESCE(cancel_recorded_at, now())
          WHERE order_id = $1",
    )
    .bind(order_id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Locks the order's ticketing row (creating it), answering when its cancellation began.
async fn lock_order(
    tx: &mut PgConnection,
    order_id: &str,
    show_id: &str,
) -> sqlx::Result<Option<DateTime<Utc>>> {
    sqlx::query_scalar(
        "INSERT INTO ticket_orders (order_id, show_id) VALUES ($1, $2)
         ON CONFLICT (order_id) DO UPDATE SET order_id = EXCLUDED.order_id
         RETURNING cancelled_at",
    )
    .bind(order_id)
    .bind(show_id)
    .fetch_one(&mut *tx)
    .await
}

/// Marks the order cancelled for ticketing (by `by`, when a caller asked) and revokes its
/// unscanned tickets.
async fn revoke_locked(
    tx: &mut PgConnection,
    order_id: &str,
    show_id: &str,
    by: Option<&str>,
) -> sqlx::Result<u64> {
    sqlx::query(
        "INSERT INTO ticket_orders (order_id, show_id, cancelled_at, cancelled_by) VALUES ($1, $2, now(), $3)
         ON CONFLICT (order_id) DO UPDATE SET cancelled_at = COALESCE(ticket_orders.cancelled_at, now()),
                                              cancelled_by = COALESCE(ticket_orders.cancelled_by, EXCLUDED.cancelled_by)",
    )
    .bind(order_id)
    .bind(show_id)
    .bind(by)
    .execute(&mut *tx)
    .await?;
    Ok(sqlx::query(
        "UPDATE tickets SET revoked_at = now()
          WHERE order_id = $1 AND revoked_at IS NULL AND scanned_at IS NULL",
    )
    .bind(order_id)
    .execute(&mut *tx)
    .await?
    .rows_affected())
}

/// What revoking an order's tickets for its cancellation found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    /// Every ticket (if any was issued) is revoked, and none will be issued.
    Revoked,
    /// A ticket was already used at the gate: the cancellation is refused, nothing changed.
    AlreadyScanned { ticket_id: Uuid, seat_id: String },
}

/// The first guarantee of a cancellation: its tickets stop working before its seats go back on
/// sale. One transaction: lock the order's ticketing row and every ticket of the order (so a
/// scan either committed before, and is seen, or waits and then finds its ticket revoked),
/// refuse if a ticket was scanned, else revoke them all and remember who cancelled, until
/// [`cancellation_recorded`].
pub async fn revoke_for_cancel(
    pool: &PgPool,
    order_id: &str,
    show_id: &str,
    by: &str,
) -> sqlx::Result<Revocation> {
    let mut tx = pool.begin().await?;
    lock_order(&mut tx, order_id, show_id).await?;
    let tickets: Vec<(Uuid, String, bool)> = sqlx::query_as(
        "SELECT ticket_id, seat_id, scanned_at IS NOT NULL FROM tickets WHERE order_id = $1
          ORDER BY seat_id FOR UPDATE",
    )
    .bind(order_id)
    .fetch_all(&mut *tx)
    .await?;
    if let Some((ticket_id, seat_id, _)) = tickets.into_iter().find(|t| t.2) {
        tx.rollback().await?;
        return Ok(Revocation::AlreadyScanned { ticket_id, seat_id });
    }
    revoke_locked(&mut tx, order_id, show_id, Some(by)).await?;
    tx.commit().await?;
    Ok(Revocation::Revoked)
}

/// The second step of a cancellation, `CancelOrder`, is in the show's log.
pub async fn cancellation_recorded(pool: &PgPool, order_id: &str) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE ticket_orders SET cancel_recorded_at = COALESCE(cancel_recorded_at, now())
          WHERE order_id = $1",
    )
    .bind(order_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Cancellations whose tickets were revoked at least `age` ago but whose `CancelOrder` was
/// never recorded (the process died, or the command failed, in between): order, show and who
/// cancelled. At most 100, oldest first.
pub async fn unfinished_cancellations(
    pool: &PgPool,
    age: std::time::Duration,
) -> sqlx::Result<Vec<(String, String, String)>> {
    sqlx::query_as(
        "SELECT order_id, show_id, COALESCE(cancelled_by, 'onsale') FROM ticket_orders
          WHERE cancelled_at IS NOT NULL AND cancel_recorded_at IS NULL
            AND cancelled_at < now() - make_interval(secs => $1)
          ORDER BY cancelled_at LIMIT 100",
    )
    .bind(age.as_secs_f64())
    .fetch_all(pool)
    .await
}

/// Why the gate refuses a code (docs/api.md's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanRefusal {
    InvalidCode,
    ExpiredCode,
    Revoked,
    AlreadyScanned,
}

/// Admits the ticket a code names, once: the code must be the ticket's own MAC for the current
/// step or the one before, for this show; then one guarded update marks it used, which a
/// concurrent scan or revocation of the same ticket cannot also pass.
pub async fn scan(
    pool: &PgPool,
    show_id: &str,
    code: &str,
    by: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<Result<(Uuid, String), ScanRefusal>> {
    let Some(code) = Code::parse(code) else {
        return Ok(Err(ScanRefusal::InvalidCode));
    };
    let row: Option<(String, Vec<u8>)> =
        sqlx::query_as("SELECT show_id, secret FROM tickets WHERE ticket_id = $1")
            .bind(code.ticket)
            .fetch_optional(pool)
            .await?;
    let Some((ticket_show, secret)) = row else {
        return Ok(Err(ScanRefusal::InvalidCode));
    };
    if ticket_show != show_id || !code.signed_by(&secret) {
        return Ok(Err(ScanRefusal::InvalidCode));
    }
    let current = step_of(now);
    if code.step > current {
        return Ok(Err(ScanRefusal::InvalidCode));
    }
    if code.step < current - 1 {
        return Ok(Err(ScanRefusal::ExpiredCode));
    }
    let admitted: Option<String> = sqlx::query_scalar(
        "UPDATE tickets SET scanned_at = $2, scanned_by = $3
          WHERE ticket_id = $1 AND scanned_at IS NULL AND revoked_at IS NULL
          RETURNING seat_id",
    )
    .bind(code.ticket)
    .bind(now)
    .bind(by)
    .fetch_optional(pool)
    .await?;
    if let Some(seat) = admitted {
        return Ok(Ok((code.ticket, seat)));
    }
    let (revoked, scanned): (bool, bool) = sqlx::query_as(
        "SELECT revoked_at IS NOT NULL, scanned_at IS NOT NULL FROM tickets WHERE ticket_id = $1",
    )
    .bind(code.ticket)
    .fetch_one(pool)
    .await?;
    Ok(Err(if revoked {
        ScanRefusal::Revoked
    } else if scanned {
        ScanRefusal::AlreadyScanned
    } else {
        ScanRefusal::InvalidCode
    }))
}

/// A ticket's owner, barcode key and whether it was revoked, from whichever shard holds it
/// (ticket ids name no show): an error if it is on none that answered and one did not.
pub async fn find(
    shards: &crate::Shards,
    ticket: Uuid,
) -> sqlx::Result<Option<(String, Vec<u8>, bool)>> {
    let answers = futures::future::join_all(shards.pools().map(|(_, pool)| {
        sqlx::query_as(
            "SELECT account_id, secret, revoked_at IS NOT NULL FROM tickets WHERE ticket_id = $1",
        )
        .bind(ticket)
        .fetch_optional(pool)
    }))
    .await;
    let mut unanswered = None;
    for answer in answers {
        match answer {
            Ok(Some(row)) => return Ok(Some(row)),
            Ok(None) => {}
            Err(e) => unanswered = Some(e),
        }
    }
    match unanswered {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

/// The tickets of `order` on its show's shard `shard`, by seat (rows `T`: `ticket_id, seat_id,
/// revoked, general_admission`).
pub async fn of_order<T>(shard: &PgPool, order: &str) -> Result<Vec<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(
        "SELECT t.ticket_id, t.seat_id, t.revoked_at IS NOT NULL AS revoked, t.general_admission
           FROM tickets t WHERE t.order_id = $1 ORDER BY t.seat_id",
    )
    .bind(order)
    .fetch_all(shard)
    .await
}

/// The page of `seat`'s history its tickets make (issued, scanned, revoked) on the show's shard
/// `shard`, in the order and with the columns of the log's page
/// (`onsale_projections::history::page_of`), so the query side merges the two.
pub async fn seat_page<T>(
    shard: &PgPool,
    show: onsale_domain::ShowId,
    seat: &str,
    after: &onsale_projections::history::After,
    limit: i64,
) -> Result<Vec<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    static TICKETED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        onsale_projections::history::page_of(
            "SELECT NULL::bigint AS sequence, t.issued_at AS at, NULL::timestamptz AS committed_at,
                    'TicketIssued' AS type, NULL AS hold_id, t.order_id, t.account_id,
                    NULL AS lsn, 'onsale:tickets' AS actor, t.ticket_id, NULL::jsonb AS detail, 1 AS src
               FROM tickets t WHERE t.show_id = $1 AND t.seat_id = $2
             UNION ALL
             SELECT NULL, t.scanned_at, NULL, 'TicketScanned', NULL, t.order_id, t.account_id,
                    NULL, t.scanned_by, t.ticket_id, NULL, 2
               FROM tickets t WHERE t.show_id = $1 AND t.seat_id = $2 AND t.scanned_at IS NOT NULL
             UNION ALL
             SELECT NULL, t.revoked_at, NULL, 'TicketRevoked', NULL, t.order_id, t.account_id,
                    NULL, o.cancelled_by, t.ticket_id, NULL, 3
               FROM tickets t LEFT JOIN ticket_orders o ON o.order_id = t.order_id
              WHERE t.show_id = $1 AND t.seat_id = $2 AND t.revoked_at IS NOT NULL",
        )
    });
    onsale_projections::history::bind_page(sqlx::query_as(&TICKETED), show, seat, after, limit)
        .fetch_all(shard)
        .await
}
