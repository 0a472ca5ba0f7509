//! The read path's health: relay lag (WAL bytes its slot has not confirmed) and each
//! projection's lag and heartbeat, read once a second, for `/readyz` and `/metrics`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use onsale_telemetry::supervise::Loops;
use sqlx::postgres::PgPool;

use crate::QueryConfig;

/// The projections `/readyz` expects to hear from.
pub const PROJECTIONS: [&str; 4] = ["seat_map", "orders", "seat_history", "catalog"];

#[derive(Debug, Clone)]
pub struct Health {
    verdict: Arc<RwLock<Result<(), String>>>,
}

impl Health {
    /// Checks the read path every second, supervised on `loops`, until their stop: the projections on
    /// `pool`, each shard's relay slot (its pool and the slot's name, docs/adr/021).
    pub fn start(
        pool: PgPool,
        shards: Vec<(PgPool, String)>,
        config: QueryConfig,
        loops: &Loops,
    ) -> Self {
        let health = Self {
            verdict: Arc::new(RwLock::new(Err(
                "the read path has not been checked yet".into()
            ))),
        };
        let verdict = health.verdict.clone();
        let shutdown = loops.stop().clone();
        loops.spawn("read-path check", move || {
            let (pool, shards, config) = (pool.clone(), shards.clone(), config.clone());
            let (verdict, shutdown) = (verdict.clone(), shutdown.clone());
            async move {
                loop {
                    let v = check(&pool, &shards, &config)
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

/// How far the relay of a shard is behind: the WAL bytes its slot has not confirmed, `None`
/// if the slot does not exist.
async fn relay_lag(pool: &PgPool, relay_slot: &str) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint
           FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(relay_slot)
    .fetch_optional(pool)
    .await
}

async fn check(
    pool: &PgPool,
    shards: &[(PgPool, String)],
    config: &QueryConfig,
) -> anyhow::Result<Result<(), String>> {
    let mut problems = Vec::new();
    let lags =
        futures::future::join_all(shards.iter().map(|(shard, slot)| relay_lag(shard, slot))).await;
    let one = shards.len() == 1;
    for ((i, lag), (_, relay_slot)) in lags.into_iter().enumerate().zip(shards) {
        let shard = (i + 1).to_string();
        let of = if one {
            String::new()
        } else {
            format!(" of shard {shard}")
        };
        match lag {
            Ok(Some(lag)) => {
                metrics::gauge!(onsale_telemetry::metrics::RELAY_LAG_BYTES, "shard" => shard)
                    .set(lag as f64);
                if lag > config.ready_max_relay_lag_bytes {
                    problems.push(format!("the relay{of} is {lag} bytes of WAL behind"));
                }
            }
            Ok(None) => problems.push(format!("the relay's slot {relay_slot}{of} does not exist")),
            // The only shard is the read path's own database: unreachable, nothing is served.
            Err(e) if one => return Err(e.into()),
            // A shard that is down fails its own shows' commands (503), not every node's
            // readiness: the shows on the other shards keep selling.
            Err(e) => tracing::warn!(shard, error = %e, "a shard's relay slot is unreachable"),
        }
    }
    let rows = onsale_projections::runner::statuses(pool).await?;
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
