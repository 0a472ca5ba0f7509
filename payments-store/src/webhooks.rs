//! The processor's webhook deliveries already applied (on the main database): a delivery seen
//! before is acknowledged without being applied again.

use sqlx::PgPool;

/// Whether delivery `id` was applied before.
pub async fn seen(pool: &PgPool, id: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM webhook_deliveries WHERE delivery_id = $1)")
        .bind(id)
        .fetch_one(pool)
        .await
}

/// Delivery `id` (of `kind`, about the charge `charge_key`) was applied.
pub async fn applied(pool: &PgPool, id: &str, kind: &str, charge_key: &str) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO webhook_deliveries (delivery_id, kind, charge_key) VALUES ($1, $2, $3)
         ON CONFLICT (delivery_id) DO NOTHING",
    )
    .bind(id)
    .bind(kind)
    .bind(charge_key)
    .execute(pool)
    .await?;
    Ok(())
}
