//! The payments' store: the tables of the payments and refunds the worker owes (its work
//! lists), the processor's webhook deliveries, the tickets and their orders, and the
//! reconciliation runs, with every statement on them (migrations/OWNERS). It decides nothing:
//! the payments crate (the worker, the log consumers, reconciliation, cancellation) writes and
//! reads through it, and the query side reads an order's tickets and a seat's ticket history
//! through it too, without building on the command side.
//!
//! - [`work`]: the payments and refunds owed, claimed under a lease;
//! - [`tickets`]: tickets issued, scanned and revoked, and the reads of them;
//! - [`barcodes`]: the rotating codes a ticket shows and the gate checks;
//! - [`webhooks`]: the deliveries already applied;
//! - [`audits`]: what the invariant monitor and reconciliation read, and the runs' reports.
//!
//! A show's rows live on its shard, beside its log, and move with it (docs/adr/022).

pub mod audits;
pub mod barcodes;
pub mod tickets;
pub mod webhooks;
pub mod work;

use std::sync::Arc;

use onsale_domain::ShowId;
use onsale_eventlog::{PgEventLog, ShardId, ShardedLog};
use sqlx::postgres::PgConnection;
use sqlx::PgPool;

/// Every shard's database, found by show (docs/adr/021): a show's payments, refunds, tickets,
/// cancellations and its orders' card tokens live on its shard, beside its log, and move with
/// it (docs/adr/022).
pub type Shards = Arc<ShardedLog<PgEventLog>>;

/// `items` grouped by the shard their show lives on, each group in the order given.
pub async fn by_shard<T>(
    shards: &ShardedLog<PgEventLog>,
    items: Vec<T>,
    show: impl Fn(&T) -> &str,
) -> anyhow::Result<Vec<(&PgPool, Vec<ShowId>, Vec<T>)>> {
    let mut groups: Vec<(ShardId, &PgPool, Vec<ShowId>, Vec<T>)> = Vec::new();
    for item in items {
        let id: ShowId = show(&item).parse()?;
        let shard = shards.locate(id).await?;
        match groups.iter_mut().find(|g| g.0 == shard) {
            Some(g) => {
                g.2.push(id);
                g.3.push(item);
            }
            None => groups.push((shard, shards.log(shard)?.pool(), vec![id], vec![item])),
        }
    }
    Ok(groups
        .into_iter()
        .map(|(_, p, ids, g)| (p, ids, g))
        .collect())
}

/// A change a log consumer (the payment intake, the ticket issuer) writes on its show's shard.
pub trait ShardChange: Send {
    fn show_id(&self) -> &str;
    /// Writes it in `tx`, a transaction of the show's shard; idempotent.
    fn write(
        self,
        tx: &mut PgConnection,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send;
}

/// Writes `changes` on their shows' shards, each shard's share in one transaction, in order.
/// A shard that refuses because a show moved off it (migration 0025) makes its shows looked up
/// again, so the consumer's retry of the batch writes them on their new shard.
pub async fn write_on_shards<C: ShardChange>(
    shards: &ShardedLog<PgEventLog>,
    changes: Vec<C>,
) -> anyhow::Result<()> {
    for (pool, shows, changes) in by_shard(shards, changes, |c| c.show_id()).await? {
        let written = async {
            let mut tx = pool.begin().await?;
            for change in changes {
                change.write(&mut tx).await?;
            }
            tx.commit().await?;
            anyhow::Ok(())
        };
        if let Err(e) = written.await {
            if e.downcast_ref::<sqlx::Error>()
                .is_some_and(onsale_eventlog::moving::is_moved)
            {
                for show in &shows {
                    shards.forget(*show);
                }
            }
            return Err(e);
        }
    }
    Ok(())
}

/// A show's rows on one shard's `pool`: (payments, of them still open, live tickets).
pub async fn show_rows(pool: &PgPool, show: &str) -> Result<(i64, i64, i64), sqlx::Error> {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM payments WHERE show_id = $1),
                (SELECT count(*) FROM payments WHERE show_id = $1 AND state <> 'done'),
                (SELECT count(*) FROM tickets WHERE show_id = $1 AND revoked_at IS NULL)",
    )
    .bind(show)
    .fetch_one(pool)
    .await
}
