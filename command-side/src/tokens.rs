//! Where the edge keeps a card's token between `POST /v1/orders` and the payment worker
//! (issue 16): tokens never enter the log, the topic, snapshots or exports. The token is kept
//! under the order id before the order is decided (so an order the log holds always finds its
//! token); the payment intake moves it into the payment's row in the transaction that starts
//! the payment, and the row forgets it when the payment closes. An order refused outright, or a
//! retry answered with the first order, forgets its token at once; what is left by an answer
//! lost in an outage is deleted by the jobs a day later (`onsale_payments::forget_stale_tokens`).

use onsale_domain::OrderId;
use sqlx::PgPool;

use crate::owner::CommandError;

#[derive(Debug, Clone)]
pub struct TokenVault {
    pool: PgPool,
}

impl TokenVault {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Keeps `token` for `order`; unavailable (503) if it cannot be written: no order is
    /// placed whose token is not kept.
    pub async fn keep(&self, order: OrderId, token: &str) -> Result<(), CommandError> {
        sqlx::query(
            "INSERT INTO payment_tokens (order_id, token) VALUES ($1, $2)
             ON CONFLICT (order_id) DO UPDATE SET token = EXCLUDED.token",
        )
        .bind(order.to_string())
        .bind(token)
        .execute(&self.pool)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "a payment token could not be kept");
            CommandError::Unavailable
        })?;
        Ok(())
    }

    /// Forgets the token of an order that was not placed (best effort: the jobs sweep what is
    /// left).
    pub async fn forget(&self, order: OrderId) {
        if let Err(e) = sqlx::query("DELETE FROM payment_tokens WHERE order_id = $1")
            .bind(order.to_string())
            .execute(&self.pool)
            .await
        {
            tracing::warn!(error = %e, "a payment token was not forgotten now; the jobs will");
        }
    }
}
