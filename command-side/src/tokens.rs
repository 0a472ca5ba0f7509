//! Where the edge keeps a card's token between `POST /v1/orders` and the payment worker
//! (issue 16): tokens never enter the log, the topic, snapshots or exports. The token is kept
//! under the order id before the order is decided (so an order the log holds always finds its
//! token); the payment intake moves it into the payment's row in the transaction that starts
//! the payment, and the row forgets it when the payment closes. An order refused outright, or a
//! retry answered with the first order, forgets its token at once; what is left by an answer
//! lost in an outage is deleted by the payment jobs a day later ([`forget_stale`]). This module holds
//! every statement on `payment_tokens` (migrations/OWNERS).

use std::sync::Arc;
use std::time::Duration;

use onsale_domain::OrderId;
use onsale_eventlog::{PgEventLog, ShardedLog};
use sqlx::{PgConnection, PgPool};

use crate::protocol::CommandError;

/// The tokens live on the order's show's shard, with its payments (docs/adr/021): the payment
/// intake moves each into its payment's row there, and a move carries them with the show.
#[derive(Debug, Clone)]
pub struct TokenVault {
    shards: Arc<ShardedLog<PgEventLog>>,
}

impl TokenVault {
    /// The vault on every shard of `shards`, through their pools.
    pub fn new(shards: Arc<ShardedLog<PgEventLog>>) -> Self {
        Self { shards }
    }

    /// Keeps `token` for `order`; unavailable (503) if it cannot be written: no order is
    /// placed whose token is not kept.
    /// A show fenced by a move refuses the token on its old shard: unavailable too, and the
    /// retry finds the show's new shard.
    pub async fn keep(&self, order: OrderId, token: &str) -> Result<(), CommandError> {
        let pool = self.shards.pool_of(order.show()).await.map_err(|e| {
            tracing::warn!(error = %e, "the shard of a payment token is not known");
            CommandError::Unavailable
        })?;
        sqlx::query(
            "INSERT INTO payment_tokens (order_id, show_id, token) VALUES ($1, $2, $3)
             ON CONFLICT (order_id) DO UPDATE SET token = EXCLUDED.token",
        )
        .bind(order.to_string())
        .bind(order.show().to_string())
        .bind(token)
        .execute(pool)
        .await
        .map_err(|e| {
            if onsale_eventlog::moving::is_moved(&e) {
                self.shards.forget(order.show());
            }
            tracing::warn!(error = %e, "a payment token could not be kept");
            CommandError::Unavailable
        })?;
        Ok(())
    }

    /// Forgets the token of an order that was not placed (best effort: the jobs sweep what is
    /// left).
    pub async fn forget(&self, order: OrderId) {
        let Ok(pool) = self.shards.pool_of(order.show()).await else {
            tracing::warn!(
                "a payment token was not forgotten now (its shard is not known); the jobs will"
            );
            return;
        };
        if let Err(e) = sqlx::query("DELETE FROM payment_tokens WHERE order_id = $1")
            .bind(order.to_string())
            .execute(pool)
            .await
        {
            tracing::warn!(error = %e, "a payment token was not forgotten now; the jobs will");
        }
    }
}

/// Takes the token kept for `order` (None if none is kept), in the caller's transaction: the
/// payment intake moves it into the payment's row in the same commit, so it is in one place.
pub async fn take(tx: &mut PgConnection, order: &str) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("DELETE FROM payment_tokens WHERE order_id = $1 RETURNING token")
        .bind(order)
        .fetch_optional(tx)
        .await
}

/// How long a kept token may wait for its order's payment (the intake takes it within a moment
/// of the order's commit; what is older belongs to an order never placed).
pub const KEEP: Duration = Duration::from_secs(24 * 3600);

/// Deletes the tokens kept longer than `older_than` (orders never placed); how many.
pub async fn forget_stale(pool: &PgPool, older_than: Duration) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(
        "DELETE FROM payment_tokens WHERE created_at < now() - make_interval(secs => $1::double precision)",
    )
    .bind(older_than.as_secs_f64())
    .execute(pool)
    .await?
    .rows_affected())
}
