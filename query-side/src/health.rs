//! The read path's health: relay lag (WAL bytes its slot has not confirmed) and each
//! projection's lag and heartbeat, read once a second, for `/readyz` and `/metrics`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use sqlx::postgres::PgPool;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::QueryConfig;

/// The projections `/readyz` expects to hear from.
pub const PROJECTIONS: [&str; 4] = ["seat_map", "orders", "seat_history", "catalog"];

#[derive(Debug, Clone)]
pub struct Health {
    verdict: Arc<RwLock<Result<(), String>>>,
}

impl Health {
    /// Checks the read path every second until `shutdown` is cancelled.
    pub fn start(
        pool: PgPool,
        config: QueryConfig,
        relay_slot: String,
        shutdown: CancellationToken,
        tasks: &TaskTracker,
    ) -> Self {
        let health = Self {
            verdict: Arc::new(RwLock::new(Err(
                "the read path has not been checked yet".into()
            ))),
        };
        let verdict = health.verdict.clone();
        tasks.spawn(async move {
            loop {
                let v = check(&pool, &config, &relay_slot)
                    .await
                    .unwrap_or_else(|e| Err(format!("read path unreachable: {e}")));
                if let Ok(mut slot) = verdict.write() {
                    *slot = v;
                }
                let pause = tokio::time::sleep(Duration::from_secs(1));
                if shutdown.run_until_cancelled(pause).await.is_none() {
                    break;
                }
            }
        });
        health
    }

    pub fn ready(&self) -> Result<(), String> {
        self.verdict
            .read()
            .map_err(|_| "health lock poisoned".to_owned())?
            .clone()
    }
}

async fn check(
    pool: &PgPool,
    config: &QueryConfig,
    relay_slot: &str,
) -> anyhow::Result<Result<(), String>> {
    let mut problems = Vec::new();
    let relay: Option<i64> = sqlx::query_scalar(
        "SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint
           FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(relay_slot)
    .fetch_optional(pool)
    .await?;
    match relay {
        Some(lag) => {
            metrics::gauge!(onsale_telemetry::metrics::RELAY_LAG_BYTES).set(lag as f64);
            if lag > config.ready_max_relay_lag_bytes {
                problems.push(format!("the relay is {lag} bytes of WAL behind"));
            }
        }
        None => problems.push(format!("the relay's slot {} does not exist", relay_slot)),
    }
    let rows: Vec<(String, i64, f64)> = sqlx::query_as(
        "SELECT projection, lag_ms, EXTRACT(EPOCH FROM now() - heartbeat_at)::float8 * 1000 FROM projection_status",
    )
    .fetch_all(pool)
    .await?;
    for name in PROJECTIONS {
        match rows.iter().find(|(p, _, _)| p == name) {
            None => problems.push(format!("projection {name} has not reported")),
            Some((_, lag_ms, silent_ms)) => {
                metrics::gauge!(onsale_telemetry::metrics::PROJECTION_LAG_MS, "projection" => name)
                    .set(*lag_ms as f64);
                metrics::gauge!(onsale_telemetry::metrics::PROJECTION_SILENCE_MS, "projection" => name)
                    .set(*silent_ms);
                if *lag_ms > config.ready_max_lag_ms {
                    problems.push(format!("projection {name} lags its commits by {lag_ms} ms"));
                }
                if *silent_ms > config.ready_max_silence_ms as f64 {
                    problems.push(format!(
                        "projection {name} has been silent for {:.0} s",
                        silent_ms / 1000.0
                    ));
                }
            }
        }
    }
    Ok(if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    })
}
