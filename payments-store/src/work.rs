//! The payments and refunds owed: each order's payment from its `OrderPlaced` until its outcome
//! is in the log, each refund from the event that owes it until the processor made it. The
//! worker claims due rows under a lease (a worker that dies mid-call leaves them to be claimed
//! again) and moves them on; the log's consumer adds them and closes them (every write here is
//! idempotent: the log is read again after a crash).

use std::time::Duration;

use chrono::{DateTime, Utc};
use onsale_eventlog::{PgEventLog, ShardedLog};
use sqlx::postgres::PgConnection;
use sqlx::PgPool;

/// Where a payment stands in the worker's work list (`payments.state`, text). Statements that
/// filter on it keep the literal `'done'` so the partial indexes (`WHERE state <> 'done'`) serve
/// them; everything the worker reads or writes goes through this type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum PaymentState {
    /// Charge the card (again, with the same key: the processor answers the first charge).
    Charge,
    /// The charge's outcome is not known: ask the status endpoint.
    Unknown,
    /// The ambiguity bound passed: the order failed, the charge must be voided.
    Void,
    /// Resolved: the outcome is in the log.
    Done,
}

/// A payment the worker claimed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PaymentRow {
    pub order_id: String,
    pub amount_cents: i64,
    /// The card's token while the payment is open (`None` once closed, or if the edge's record
    /// of it was lost: the charge is then declined by the processor, and the order fails).
    pub token: Option<String>,
    pub state: PaymentState,
    pub placed_at: DateTime<Utc>,
    pub attempts: i32,
}

/// A refund the worker claimed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RefundRow {
    pub order_id: String,
    pub amount_cents: i64,
    pub attempts: i32,
}

/// An order was placed: its payment is owed, with the card's `token` (taken from where the
/// edge kept it, in the same transaction `tx`: it is never in the log).
pub async fn owe_payment(
    tx: &mut PgConnection,
    order_id: &str,
    show_id: &str,
    amount_cents: i64,
    placed_at: DateTime<Utc>,
    token: Option<String>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO payments (order_id, show_id, amount_cents, token, state, placed_at, due_at)
         VALUES ($1, $2, $3, $6, $5, $4, now())
         ON CONFLICT (order_id) DO NOTHING",
    )
    .bind(order_id)
    .bind(show_id)
    .bind(amount_cents)
    .bind(placed_at)
    .bind(PaymentState::Charge)
    .bind(token)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The log has the payment's outcome: nothing more is owed (a forced failure stays open for
/// its void unless the money was `captured` after all).
pub async fn payment_resolved(
    tx: &mut PgConnection,
    order_id: &str,
    captured: bool,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE payments SET state = 'done', token = NULL, resolved_at = now(), lease_until = NULL
          WHERE order_id = $1 AND state <> 'done' AND ($2 OR forced_at IS NULL)",
    )
    .bind(order_id)
    .bind(captured)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A refund of `amount_cents` is owed for `reason` (`cancelled`, `make_good`) since `at`.
pub async fn owe_refund(
    tx: &mut PgConnection,
    order_id: &str,
    show_id: &str,
    amount_cents: i64,
    reason: &str,
    at: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO refunds (order_id, show_id, amount_cents, reason, state, due_at, created_at)
         VALUES ($1, $2, $3, $4, 'due', now(), $5)
         ON CONFLICT (order_id) DO NOTHING",
    )
    .bind(order_id)
    .bind(show_id)
    .bind(amount_cents)
    .bind(reason)
    .bind(at)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Leases up to `limit` due payments for `lease`. Rows of a show being moved off this shard
/// (`moved`) are left alone (the move fences them, and carries them to the show's new shard).
pub async fn claim_payments(
    pool: &PgPool,
    lease: Duration,
    limit: usize,
    moved: &[String],
) -> sqlx::Result<Vec<PaymentRow>> {
    claim(
        pool,
        "payments",
        "order_id, amount_cents, token, state, placed_at, attempts",
        lease,
        limit,
        moved,
    )
    .await
}

/// Leases up to `limit` due refunds for `lease`, as [`claim_payments`].
pub async fn claim_refunds(
    pool: &PgPool,
    lease: Duration,
    limit: usize,
    moved: &[String],
) -> sqlx::Result<Vec<RefundRow>> {
    claim(
        pool,
        "refunds",
        "order_id, amount_cents, attempts",
        lease,
        limit,
        moved,
    )
    .await
}

/// Leases up to `limit` due rows of a work list (`payments` or `refunds`, which share the
/// columns `state`, `due_at`, `lease_until`, `attempts`).
async fn claim<T>(
    pool: &PgPool,
    table: &str,
    returning: &str,
    lease: Duration,
    limit: usize,
    moved: &[String],
) -> sqlx::Result<Vec<T>>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    let sql = format!(
        "UPDATE {table} SET lease_until = now() + make_interval(secs => $1::double precision),
                            attempts = attempts + 1
          WHERE order_id IN (SELECT order_id FROM {table}
                              WHERE state <> 'done' AND due_at <= now()
                                AND (lease_until IS NULL OR lease_until < now())
                                AND NOT (show_id = ANY($3))
                              ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED)
          RETURNING {returning}"
    );
    sqlx::query_as(&sql)
        .bind(lease.as_secs_f64())
        .bind(limit as i64)
        .bind(moved)
        .fetch_all(pool)
        .await
}

/// The ambiguity bound passed: the payment is to be voided now (`why` kept as its last error).
pub async fn force_void(pool: &PgPool, order_id: &str, why: &str) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE payments SET state = $3, forced_at = COALESCE(forced_at, now()),
                             due_at = now(), lease_until = NULL, last_error = $2
          WHERE order_id = $1",
    )
    .bind(order_id)
    .bind(why)
    .bind(PaymentState::Void)
    .execute(pool)
    .await?;
    Ok(())
}

/// The payment's outcome is in the log: it is done, its token forgotten.
pub async fn close_payment(pool: &PgPool, order_id: &str) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE payments SET state = 'done', token = NULL, resolved_at = now(), lease_until = NULL WHERE order_id = $1",
    )
    .bind(order_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// The payment is due again in `after`, in `state` (an open one only), `why` kept.
pub async fn reschedule_payment(
    pool: &PgPool,
    order_id: &str,
    state: PaymentState,
    after: Duration,
    why: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE payments SET state = $2, due_at = now() + make_interval(secs => $3::double precision),
                             lease_until = NULL, last_error = $4
          WHERE order_id = $1 AND state <> 'done'",
    )
    .bind(order_id)
    .bind(state)
    .bind(after.as_secs_f64())
    .bind(why)
    .execute(pool)
    .await?;
    Ok(())
}

/// The refund was made (`refund_id` at the processor) and recorded on the show.
pub async fn close_refund(pool: &PgPool, order_id: &str, refund_id: &str) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE refunds SET state = 'done', refund_id = $2, resolved_at = now(), lease_until = NULL
          WHERE order_id = $1",
    )
    .bind(order_id)
    .bind(refund_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// The refund is due again in `after`, `why` kept.
pub async fn reschedule_refund(
    pool: &PgPool,
    order_id: &str,
    after: Duration,
    why: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE refunds SET due_at = now() + make_interval(secs => $2::double precision),
                            lease_until = NULL, last_error = $3
          WHERE order_id = $1",
    )
    .bind(order_id)
    .bind(after.as_secs_f64())
    .bind(why)
    .execute(pool)
    .await?;
    Ok(())
}

/// How long the oldest open payment and the oldest open refund have waited, in seconds (`None`:
/// there is none).
pub async fn oldest_open(pool: &PgPool) -> sqlx::Result<(Option<f64>, Option<f64>)> {
    sqlx::query_as(
        "SELECT (SELECT extract(epoch FROM now() - min(placed_at))::float8 FROM payments WHERE state <> 'done'),
                (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM refunds WHERE state <> 'done')",
    )
    .fetch_one(pool)
    .await
}

/// The payment work list's depth and its oldest unclaimed due row's wait, in seconds.
pub async fn backlog(pool: &PgPool) -> sqlx::Result<(i64, f64)> {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM payments WHERE state <> 'done'),
                coalesce((SELECT extract(epoch FROM now() - min(due_at))::float8
                            FROM payments
                           WHERE state <> 'done' AND due_at < now()
                             AND (lease_until IS NULL OR lease_until < now())), 0)",
    )
    .fetch_one(pool)
    .await
}

/// How many payments failing together make an outage (one bad card is not).
pub const FAILING_PAYMENTS: i64 = 3;

/// Payments failing at the processor now: at least [`FAILING_PAYMENTS`] open payments (over
/// every shard) have been refused or left unanswered twice or more, and none resolved in the
/// last 30 s. A processor that answers some calls is not down; one that answers none while
/// payments queue is. A shard that does not answer is left out (the store's health is the
/// waiting room's other signal).
pub async fn processor_failing(shards: &ShardedLog<PgEventLog>) -> bool {
    let (mut failing, mut resolved) = (0, false);
    for (shard, db) in shards.pools() {
        let found: Result<(i64, bool), _> = sqlx::query_as(
            "SELECT (SELECT count(*) FROM payments
                      WHERE state <> 'done' AND attempts >= 2 AND last_error IS NOT NULL),
                    EXISTS (SELECT 1 FROM payments WHERE resolved_at > now() - interval '30 seconds')",
        )
        .fetch_one(db)
        .await;
        match found {
            Ok((f, r)) => {
                failing += f;
                resolved |= r;
            }
            Err(e) => tracing::debug!(%shard, error = %e, "payments not read on this shard"),
        }
    }
    failing >= FAILING_PAYMENTS && !resolved
}
