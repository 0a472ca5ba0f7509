//! One active instance of a job among all processes that run it (the relay, reconciliation
//! and the invariant monitor), elected by PostgreSQL: a session-level advisory lock held on a
//! connection of its own. The others stand by and try the lock twice a second; when the
//! active process dies its connection closes, PostgreSQL frees the lock, and a standby takes
//! over within about a second. A process that loses its lock connection (a failover cut it)
//! stops the job before it tries again, so two never run together for long — and each job
//! stays correct if they briefly do (the relay's consumers drop duplicates, reconciliation is
//! keyed, the monitor only reads).

use std::future::Future;
use std::time::Duration;

use sqlx::postgres::{PgConnection, PgPool};
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

/// The advisory lock keys of onsale's singletons.
pub mod keys {
    pub const RELAY: i64 = 0x6f6e_7361_6c65_0001;
    pub const JOBS: i64 = 0x6f6e_7361_6c65_0002;
    pub const CHECKPOINTS: i64 = 0x6f6e_7361_6c65_0003;
}

async fn try_lock(pool: &PgPool, key: i64) -> Result<Option<PgConnection>, sqlx::Error> {
    let mut conn = pool.acquire().await?.detach();
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(&mut conn)
        .await?;
    Ok(locked.then_some(conn))
}

/// Runs `work` while this process holds the lock `key`, until `stop`; stands by otherwise.
/// `work` gets a token cancelled when the lock is lost (or at `stop`) and should return then.
pub async fn lead<W, Fut>(
    pool: PgPool,
    key: i64,
    job: &'static str,
    stop: CancellationToken,
    mut work: W,
) where
    W: FnMut(CancellationToken) -> Fut,
    Fut: Future<Output = ()>,
{
    let gauge = metrics::gauge!(onsale_telemetry::metrics::SINGLETON_ACTIVE, "job" => job);
    loop {
        let mut conn = loop {
            if stop.is_cancelled() {
                return;
            }
            match try_lock(&pool, key).await {
                Ok(Some(conn)) => break conn,
                Ok(None) => {}
                Err(e) => tracing::warn!(job, error = %e, "singleton lock not tried"),
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        };
        tracing::info!(job, "this process is the active instance");
        gauge.set(1.0);
        let term = stop.child_token();
        let watch = async {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if conn.ping().await.is_err() {
                    return;
                }
            }
        };
        tokio::select! {
            () = work(term.clone()) => {}
            () = watch => {
                tracing::warn!(job, "lost the singleton lock's connection; standing by");
                term.cancel();
            }
        }
        gauge.set(0.0);
        let _ = conn.close().await;
        if stop.is_cancelled() {
            return;
        }
    }
}
