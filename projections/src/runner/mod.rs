//! Drives projections: one consumer, one parse and one fold of each show for all of them;
//! deduplicate, fill gaps from the table, write in one transaction with each one's positions,
//! tick.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use onsale_domain::{Show, ShowId};
use onsale_eventlog::EventLog;
use onsale_kafka::KafkaConfig;
use onsale_telemetry::trace;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};
use sqlx::postgres::{PgConnection, PgPool};

use crate::fold::{self, EventCtx, LogEvent};

mod batch;
mod consumer;
mod gaps;
mod loads;
mod projection;
#[cfg(test)]
mod tests;

use batch::tell;
use consumer::Positions;
pub use gaps::read_events;
use loads::Loads;
use projection::Member;
pub use projection::Projection;

#[derive(Debug, Clone, clap::Args)]
pub struct RunnerConfig {
    /// Most messages folded into one transaction.
    #[arg(
        id = "projection_batch",
        long = "projection-batch",
        env = "ONSALE_PROJECTION_BATCH",
        default_value_t = 2_000
    )]
    pub batch: usize,
    /// How long a batch waits to fill once it has a message.
    #[arg(
        id = "projection_linger_ms",
        long = "projection-linger-ms",
        env = "ONSALE_PROJECTION_LINGER_MS",
        default_value_t = 5
    )]
    pub linger_ms: u64,
    /// The delta tick of the seat map.
    #[arg(
        id = "projection_tick_ms",
        long = "projection-tick-ms",
        env = "ONSALE_PROJECTION_TICK_MS",
        default_value_t = 1_000
    )]
    pub tick_ms: u64,
    /// How often shows are compared with the events table (a show with more events there and
    /// no progress since the last check is filled from the table).
    #[arg(
        id = "projection_check_ms",
        long = "projection-check-ms",
        env = "ONSALE_PROJECTION_CHECK_MS",
        default_value_t = 3_000
    )]
    pub check_ms: u64,
    /// A show's fold is dropped after this many seconds with no event (and loaded again from
    /// the log when one comes): a projection process holds the shows on sale, not every show
    /// it ever folded.
    #[arg(
        id = "projection_idle_secs",
        long = "projection-idle-secs",
        env = "ONSALE_PROJECTION_IDLE_SECS",
        default_value_t = 300
    )]
    pub idle_secs: u64,
}

/// One show's fold, shared by every projection of the runner.
struct Folded {
    show: Show,
    /// The last event folded.
    last_sequence: i64,
    /// Its hash: the next event from the topic must chain from it.
    head: [u8; 32],
    /// Each projection's stored position (by the runner's order of them) when the fold was
    /// loaded or last committed: a projection is told of the events past its own.
    stored: Vec<i64>,
    /// `last_sequence` at the previous table check.
    checked_at: i64,
    /// When the fold was loaded or last folded an event.
    touched: Instant,
}

/// Folds the log into one or more projections: one consumer of the topic, one parse of each
/// message, one fold of each show, each projection told the events past its own position and
/// its rows written in one transaction with every projection's positions and offsets.
pub struct Runner {
    pool: PgPool,
    /// The event log (every shard's): gaps and stalls are filled from it.
    log: Arc<dyn EventLog>,
    members: Vec<Box<dyn Member>>,
    /// The projections' names, in `members`' order.
    names: Vec<String>,
    kafka: KafkaConfig,
    config: RunnerConfig,
    shows: HashMap<ShowId, Folded>,
    /// Next offset per partition of the messages folded since the last commit.
    pending_offsets: Vec<(i32, i64)>,
    /// The positions the rebalance callback starts assigned partitions at.
    positions: Option<Arc<Positions>>,
    lsn: Option<u64>,
    lag: Vec<f64>,
    /// The spans of the traced events folded since the last commit: they end with it.
    traced: Vec<tracing::Span>,
    /// Events read from the log to load folds (after a snapshot, up to the stored positions).
    loaded_events: u64,
    /// Folds being read from the log off the runner's task.
    loads: Loads,
    /// Batches commit without waiting for their WAL to be flushed (see
    /// [`Runner::commit_asynchronously`]).
    asynchronous: bool,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("projections", &self.names)
            .finish_non_exhaustive()
    }
}

/// Deletes a projection's read model and positions: it rebuilds from zero when it next runs.
pub async fn reset<P: Projection>(pool: &PgPool) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    P::reset(&mut tx).await?;
    sqlx::query("DELETE FROM projection_positions WHERE projection = $1")
        .bind(P::NAME)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM projection_status WHERE projection = $1")
        .bind(P::NAME)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM projection_offsets WHERE projection = $1")
        .bind(P::NAME)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

impl Runner {
    /// A runner of `projection`, writing its read model on `pool`, filling gaps from `log`.
    pub fn new<P: Projection>(
        pool: PgPool,
        log: Arc<dyn EventLog>,
        projection: P,
        kafka: KafkaConfig,
        config: RunnerConfig,
    ) -> Self {
        Self {
            log,
            pool,
            names: vec![P::NAME.to_owned()],
            members: vec![Box::new(projection)],
            kafka,
            config,
            shows: HashMap::new(),
            pending_offsets: Vec::new(),
            positions: None,
            lsn: None,
            lag: Vec::new(),
            traced: Vec::new(),
            loaded_events: 0,
            loads: Loads::new(),
            asynchronous: false,
        }
    }

    /// Each batch's transaction commits without waiting for its WAL to reach the disk or a
    /// synchronous standby (`synchronous_commit = off`, for that transaction only). For read
    /// models alone: their rows, positions and topic offsets commit together, so a tail a
    /// crash or a failover loses takes its offsets with it and is read from the topic again,
    /// never skipped. The tick (the seat map's deltas, which readers are told of by sequence)
    /// still commits synchronously, and its flush carries every batch before it: a delta a
    /// reader has seen never goes back. Not for consumers whose writes act on the world
    /// (payments, tickets): they keep the default.
    pub fn commit_asynchronously(mut self) -> Self {
        self.asynchronous = true;
        self
    }

    /// The same runner also folding into `projection` (its own positions, the same consumer,
    /// parse and fold).
    pub fn with<P: Projection>(mut self, projection: P) -> Self {
        self.names.push(P::NAME.to_owned());
        self.members.push(Box::new(projection));
        self
    }

    /// The projections' names joined: the consumer group's suffix and the logs' `projection`.
    fn label(&self) -> String {
        self.names.join("+")
    }

    /// Counts one of the runner's happenings for each of its projections.
    fn count(&self, metric: &'static str) {
        for name in &self.names {
            metrics::counter!(metric, "projection" => name.clone()).increment(1);
        }
    }

    /// Catches up from the table, then consumes until `shutdown` resolves. Errors (broker or
    /// database away) are retried: the fold is dropped and reloaded from what was committed.
    pub async fn run(mut self, shutdown: impl Future<Output = ()> + Send) {
        tokio::pin!(shutdown);
        let mut backoff = onsale_kafka::Backoff::new(Duration::from_millis(200));
        loop {
            let result = tokio::select! {
                _ = &mut shutdown => return,
                r = self.run_once() => r,
            };
            if let Err(e) = result {
                self.count(onsale_telemetry::metrics::PROJECTION_ERRORS_TOTAL);
                tracing::warn!(projection = %self.label(), error = %format!("{e:#}"), "projection failed; restarting it");
                // What was not committed is forgotten: reload from the stored positions.
                self.unload_all();
                self.pending_offsets.clear();
                tokio::select! {
                    _ = &mut shutdown => return,
                    () = backoff.wait() => {}
                }
            }
        }
    }

    /// Drops the folds of shows with no event for `idle` whose every event is committed (and,
    /// right after a tick, published): each is loaded from the log again when its next event
    /// comes. Returns how many were dropped.
    pub fn drop_idle(&mut self, idle: Duration) -> usize {
        let idle: Vec<ShowId> = self
            .shows
            .iter()
            .filter(|(_, f)| {
                f.touched.elapsed() >= idle && f.stored.iter().all(|s| *s == f.last_sequence)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &idle {
            self.unload(*id);
        }
        for name in &self.names {
            metrics::gauge!(onsale_telemetry::metrics::PROJECTION_FOLDS, "projection" => name.clone())
                .set(self.shows.len() as f64);
        }
        idle.len()
    }

    /// Forgets a show's fold, here and in every projection.
    fn unload(&mut self, show_id: ShowId) {
        self.shows.remove(&show_id);
        for member in &mut self.members {
            member.unloaded(show_id);
        }
    }

    fn unload_all(&mut self) {
        self.loads.forget();
        let ids: Vec<ShowId> = self.shows.keys().copied().collect();
        for id in ids {
            self.unload(id);
        }
    }

    /// The shows whose fold is held here.
    pub fn folds(&self) -> usize {
        self.shows.len()
    }

    async fn tick(&mut self) -> anyhow::Result<()> {
        let mut tx = self.pool.begin().await?;
        for member in &mut self.members {
            member.tick(&mut tx).await?;
        }
        self.heartbeat(&mut tx).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// `(projection, lag in ms, ms since its last heartbeat)` of every projection that reported.
pub async fn statuses(pool: &PgPool) -> Result<Vec<(String, i64, f64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT projection, lag_ms, EXTRACT(EPOCH FROM now() - heartbeat_at)::float8 * 1000 FROM projection_status",
    )
    .fetch_all(pool)
    .await
}

/// The last sequence of `show` the projection `name` folded (`None` before its first).
pub async fn folded(pool: &PgPool, name: &str, show: ShowId) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT last_sequence FROM projection_positions WHERE projection = $1 AND show_id = $2",
    )
    .bind(name)
    .bind(show.to_string())
    .fetch_optional(pool)
    .await
}
