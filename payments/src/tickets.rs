//! Tickets: issued once per (order, seat) from the payment's event, barcodes that rotate, the
//! gate's scan, and the revocation a cancellation starts with.
//!
//! The store enforces "one ticket per (order, seat)" (a unique key), and a per-order row in
//! `ticket_orders` serializes issuance against cancellation: both lock it first, so a ticket is
//! never issued for an order whose cancellation has begun, and a scan and a revocation of the
//! same ticket cannot both win (they update the same row under a guard).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, TimeZone, Utc};
use hmac::{Hmac, KeyInit, Mac};
use onsale_domain::{Show, ShowEvent};
use onsale_projections::{EventCtx, Projection};
use rand::RngCore;
use sha2::Sha256;
use sqlx::postgres::PgConnection;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{write_on_shards, ShardChange, Shards};

/// A barcode is good for one step of this many seconds (and the one before, for clock skew).
pub const STEP_SECS: i64 = 15;
const MAC_LEN: usize = 12;

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
        } => {
            let cancelled: Option<DateTime<Utc>> = lock_order(tx, &order_id, &show_id).await?;
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
                .bind(&order_id)
                .bind(&show_id)
                .bind(seat.as_str())
                .bind(&account_id)
                .bind(&secret[..])
                .bind(at)
                .bind(general_admission)
                .execute(&mut *tx)
                .await?;
            }
            metrics::counter!(onsale_telemetry::metrics::TICKETS_ISSUED_ORDERS_TOTAL).increment(1);
        }
        Change::Revoke { order_id, show_id } => {
            // The log has the cancellation: it is recorded.
            revoke_locked(tx, &order_id, &show_id, None).await?;
            sqlx::query(
                "UPDATE ticket_orders SET cancel_recorded_at = COALESCE(cancel_recorded_at, now())
                  WHERE order_id = $1",
            )
            .bind(&order_id)
            .execute(&mut *tx)
            .await?;
        }
    }
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

fn step_mac(secret: &[u8], ticket: Uuid, step: i64) -> [u8; MAC_LEN] {
    let mut m =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes keys of any length");
    m.update(ticket.as_bytes());
    m.update(&step.to_be_bytes());
    let full = m.finalize().into_bytes();
    let mut out = [0u8; MAC_LEN];
    out.copy_from_slice(&full[..MAC_LEN]);
    out
}

pub fn step_of(at: DateTime<Utc>) -> i64 {
    at.timestamp().div_euclid(STEP_SECS)
}

/// The barcode of `ticket` for the step containing `at`, and when it stops being current.
pub fn barcode(secret: &[u8], ticket: Uuid, at: DateTime<Utc>) -> (String, DateTime<Utc>) {
    let step = step_of(at);
    let mut raw = Vec::with_capacity(16 + 8 + MAC_LEN);
    raw.extend_from_slice(ticket.as_bytes());
    raw.extend_from_slice(&step.to_be_bytes());
    raw.extend_from_slice(&step_mac(secret, ticket, step));
    let valid_until = Utc
        .timestamp_opt((step + 1) * STEP_SECS, 0)
        .single()
        .unwrap_or(at);
    (URL_SAFE_NO_PAD.encode(raw), valid_until)
}

/// A code as the scanner read it: the ticket it names and its step (not yet verified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code {
    pub ticket: Uuid,
    pub step: i64,
    mac: [u8; MAC_LEN],
}

impl Code {
    pub fn parse(code: &str) -> Option<Self> {
        let raw = URL_SAFE_NO_PAD.decode(code.trim()).ok()?;
        if raw.len() != 16 + 8 + MAC_LEN {
            return None;
        }
        let ticket = Uuid::from_slice(&raw[..16]).ok()?;
        let step = i64::from_be_bytes(raw[16..24].try_into().ok()?);
        let mac = raw[24..].try_into().ok()?;
        Some(Self { ticket, step, mac })
    }

    /// The MAC is the ticket's own, compared in constant time.
    pub fn signed_by(&self, secret: &[u8]) -> bool {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(secret)
            .expect("HMAC takes keys of any length");
        m.update(self.ticket.as_bytes());
        m.update(&self.step.to_be_bytes());
        m.verify_truncated_left(&self.mac).is_ok()
    }
}

/// Why the gate refuses a code (docs/api.md's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanRefusal {
    InvalidCode,
    ExpiredCode,
    Revoked,
    AlreadyScanned,
}

impl ScanRefusal {
    pub fn code(self) -> onsale_edge::ErrorCode {
        use onsale_edge::ErrorCode;
        match self {
            Self::InvalidCode => ErrorCode::InvalidCode,
            Self::ExpiredCode => ErrorCode::ExpiredCode,
            Self::Revoked => ErrorCode::TicketRevoked,
            Self::AlreadyScanned => ErrorCode::AlreadyScanned,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    #[test]
    fn a_code_names_its_ticket_and_step_and_only_its_secret_signs_it() {
        let t = Uuid::new_v4();
        let (code, valid_until) = barcode(b"secret-1", t, at(7));
        let parsed = Code::parse(&code).expect("parses");
        assert_eq!(parsed.ticket, t);
        assert_eq!(parsed.step, step_of(at(7)));
        assert!(parsed.signed_by(b"secret-1"));
        assert!(!parsed.signed_by(b"secret-2"));
        assert!(valid_until > at(7) && valid_until <= at(7) + chrono::Duration::seconds(STEP_SECS));
    }

    #[test]
    fn the_code_rotates_every_step_and_a_tampered_one_fails() {
        let t = Uuid::new_v4();
        let (a, _) = barcode(b"k", t, at(0));
        let (b, _) = barcode(b"k", t, at(STEP_SECS * 3));
        assert_ne!(a, b);
        let mut raw = URL_SAFE_NO_PAD.decode(&a).expect("b64");
        raw[20] ^= 1; // move the step
        let forged = Code::parse(&URL_SAFE_NO_PAD.encode(raw)).expect("parses");
        assert!(!forged.signed_by(b"k"));
        assert!(Code::parse("not a code").is_none());
    }
}
