//! The relay loop: a replication session on the slot (`START_REPLICATION ... LOGICAL`,
//! pgoutput, the `onsale_events` publication: inserts into `events` only) streams each
//! committed transaction once, decoded once by PostgreSQL's walsender; the relay publishes what
//! arrived in one go, waits for every acknowledgement, then reports the end of the last
//! transaction published as flushed, so the slot never moves past what Kafka holds (docs/adr/028).
//!
//! On a replicated primary (docs/adr/010) the relay publishes only transactions a synchronous
//! standby has flushed: PostgreSQL 15's walsender sends what the primary alone has flushed, and
//! an event on the topic that a failover then loses would be a phantom every consumer keeps.
//! Such transactions wait in the relay until the standbys have them. And since PostgreSQL 15
//! does not carry logical slots to standbys, a promoted primary has no slot: the relay creates
//! it and republishes from the events table every event after the positions it recorded
//! (`relay_positions`), under a marker (`relay_gaps`) that survives a crash halfway.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use anyhow::Context;
use futures::future::try_join_all;
use futures::FutureExt;
use onsale_eventlog::scan::{Mark, PastMarks};
use onsale_eventlog::{EventLog, LogRow, PgEventLog, ScanKey};
use onsale_telemetry::trace;
use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig, ReplicationEvent, TlsConfig};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::Deserialize;
use serde_json::value::RawValue;
use sqlx::postgres::{PgPool, PgSslMode};

use crate::envelope::{format_lsn, parse_lsn, RawEnvelope, RawEventRow, Source};
use crate::pgoutput::Relations;
use crate::topics::KafkaConfig;

mod publish;
mod slot;
mod stream;

use publish::pg_time_ms;
use slot::replication_config;
pub use stream::Stream;
use stream::STATUS_EVERY;

/// The publication the slot is read through (migrations/0028): inserts into `events` only.
pub const PUBLICATION: &str = "onsale_events";

#[derive(Debug, Clone, clap::Args)]
pub struct RelayConfig {
    /// The logical replication slot (wal2json) the relay reads and advances.
    #[arg(
        id = "relay_slot",
        long = "relay-slot",
        env = "ONSALE_RELAY_SLOT",
        default_value = "onsale_relay"
    )]
    pub slot: String,
    /// Most events published in one go: the relay takes what the stream has ready, up to this.
    #[arg(
        id = "relay_batch",
        long = "relay-batch",
        env = "ONSALE_RELAY_BATCH",
        default_value_t = 5_000
    )]
    pub batch: usize,
    /// How long (milliseconds) the relay goes on gathering after the first transaction of a
    /// batch arrives, unless the batch fills first: each batch pays a round trip to Kafka and
    /// one to PostgreSQL whatever its size, and the projections fold what one batch carries
    /// together. At 4,500 holds/s, 25 against 5: the projector and its backends 0.05 cores
    /// less, hold p50 and p99 lower (BENCHMARKS.md, "The relay's linger").
    #[arg(
        id = "relay_linger_ms",
        long = "relay-linger-ms",
        env = "ONSALE_RELAY_LINGER_MS",
        default_value_t = 25
    )]
    pub linger_ms: u64,
    /// The longest a step may take before it is abandoned (with a warning naming where it
    /// stood) and the session opened again; abandoning one is safe: nothing is reported flushed
    /// past what Kafka acknowledged, and consumers drop what is published twice.
    #[arg(
        id = "relay_step_timeout_secs",
        long = "relay-step-timeout-secs",
        env = "ONSALE_RELAY_STEP_TIMEOUT_SECS",
        default_value_t = 30
    )]
    pub step_timeout_secs: u64,
    /// The write cluster this relay reads (docs/adr/021): every shard has its own relay, slot
    /// and leader, and its envelopes say which shard their LSNs are of.
    #[arg(skip = 1u16)]
    pub shard: u16,
}

impl RelayConfig {
    /// The relay of `shard`: its envelopes say so, and its slot is named for it past shard 1
    /// (`onsale_relay_s2`; shard 1 keeps the name a deployment had before shards), so two
    /// shards' databases may even share a cluster.
    pub fn for_shard(&self, shard: u16) -> Self {
        Self {
            shard,
            slot: slot_of(&self.slot, shard),
            ..self.clone()
        }
    }
}

/// The slot `slot` names on `shard` (see [`RelayConfig::for_shard`]).
pub fn slot_of(slot: &str, shard: u16) -> String {
    if shard == 1 {
        slot.to_owned()
    } else {
        format!("{slot}_s{shard}")
    }
}

pub struct Relay {
    pool: PgPool,
    /// The event log on the same database: what a backfill republishes.
    log: PgEventLog,
    producer: FutureProducer,
    kafka: KafkaConfig,
    config: RelayConfig,
    db: String,
    /// The replication session's address and login: the pool's (docs/adr/028).
    replication: ReplicationConfig,
    /// Where the current step stands, for the warning when one takes too long.
    phase: std::sync::Mutex<&'static str>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("kafka", &self.kafka)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What one step did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub published: usize,
    /// The end of the last transaction published: reported to PostgreSQL as flushed.
    pub advanced_to: Option<u64>,
    /// Transactions received but not published yet (no synchronous standby has them).
    pub waiting: usize,
}

impl Relay {
    /// Connects, creates the topic and the slot when missing.
    pub async fn start(
        pool: PgPool,
        kafka: KafkaConfig,
        config: RelayConfig,
    ) -> anyhow::Result<Self> {
        let relay = Self::connect(pool, kafka, config).await?;
        relay.ensure_slot().await?;
        Ok(relay)
    }

    async fn connect(
        pool: PgPool,
        kafka: KafkaConfig,
        config: RelayConfig,
    ) -> anyhow::Result<Self> {
        kafka.ensure_topic().await?;
        let producer: FutureProducer = kafka
            .client()
            // Every in-sync replica (two of three on a cluster) has each message before the
            // slot moves past it; idempotence keeps a retried batch from being written twice
            // or out of order within a partition.
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "2")
            .set("compression.type", "lz4")
            .set("message.timeout.ms", "15000")
            .create()
            .context("kafka producer")?;
        let db: String = sqlx::query_scalar("SELECT current_database()")
            .fetch_one(&pool)
            .await?;
        let replication = replication_config(&pool, &config.slot, &db);
        Ok(Self {
            log: PgEventLog::new(pool.clone()),
            pool,
            producer,
            kafka,
            config,
            db,
            replication,
            phase: std::sync::Mutex::new("idle"),
        })
    }

    /// Runs until `shutdown` resolves: a session at a time, each stepped until it fails (a
    /// broker or the database away, a failover); then a backoff, the topic and the slot made
    /// again where missing, and a new session.
    pub async fn run(&self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut backoff = crate::Backoff::new(Duration::from_millis(100));
        loop {
            let session = async {
                let mut stream = self.open().await?;
                loop {
                    let bound = Duration::from_secs(self.config.step_timeout_secs.max(1));
                    let step = tokio::time::timeout(bound, self.step(&mut stream))
                        .await
                        .unwrap_or_else(|_| {
                            Err(anyhow::anyhow!(
                                "the step took longer than {bound:?} ({}); abandoned",
                                self.phase()
                            ))
                        })?;
                    if step.published > 0 {
                        backoff.reset();
                    }
                }
            };
            let failed: anyhow::Result<()> = tokio::select! {
                _ = &mut shutdown => return,
                e = session => e,
            };
            let Err(e) = failed else { continue };
            // Waits (backoff, the topic's return) give way to shutdown too.
            let recover = async {
                metrics::counter!(onsale_telemetry::metrics::RELAY_ERRORS_TOTAL).increment(1);
                tracing::warn!(error = %format!("{e:#}"), "relay session failed; opening another");
                backoff.wait().await;
                // A broker that came back empty has no topic: make it again first.
                if let Err(e) = self.kafka.ensure_topic().await {
                    tracing::warn!(error = %format!("{e:#}"), "events topic not ready");
                }
                // A promoted primary has no slot: make it and fill the gap.
                if let Err(e) = self.ensure_slot().await {
                    tracing::warn!(error = %format!("{e:#}"), "replication slot not ready");
                }
            };
            tokio::select! {
                _ = &mut shutdown => return,
                () = recover => {}
            }
        }
    }

    fn set_phase(&self, phase: &'static str) {
        if let Ok(mut p) = self.phase.lock() {
            *p = phase;
        }
    }

    fn phase(&self) -> &'static str {
        self.phase.lock().map(|p| *p).unwrap_or("unknown")
    }

    /// Republishes the events table (one show, or all) as `op: "r"`: for a topic whose broker
    /// lost its data, or a new consumer that must start from zero. Consumers deduplicate.
    pub async fn backfill(&self, show: Option<&str>) -> anyhow::Result<usize> {
        let mut after: ScanKey = (String::new(), String::new(), 0);
        let mut total = 0;
        loop {
            let rows = self.log.scan(&after, show, 5_000).await?;
            let published = self.republish(rows).await?;
            let Some(last) = published.last() else {
                return Ok(total);
            };
            after = last.clone();
            total += published.len();
        }
    }

    /// Bytes of WAL the slot has not confirmed: how far the relay is behind PostgreSQL.
    pub async fn lag_bytes(&self) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint
               FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(&self.config.slot)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn record_lag(&self) {
        if let Ok(lag) = self.lag_bytes().await {
            metrics::gauge!(onsale_telemetry::metrics::RELAY_LAG_BYTES).set(lag as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::slot::quorum_size;
    use super::*;

    #[test]
    fn the_quorum_size_is_read_from_synchronous_standby_names() {
        assert_eq!(quorum_size(""), None);
        assert_eq!(quorum_size("ANY 1 (pg2,pg3)"), Some(1));
        assert_eq!(quorum_size("ANY 1 (*)"), Some(1));
        assert_eq!(quorum_size("FIRST 2 (a, b, c)"), Some(2));
        assert_eq!(quorum_size("2 (a, b)"), Some(2));
        assert_eq!(quorum_size("a, b"), Some(1));
        assert_eq!(quorum_size("*"), Some(1));
    }

    #[test]
    fn commit_timestamps_convert() {
        assert_eq!(pg_time_ms(0), 946_684_800_000, "PostgreSQL's epoch");
        assert_eq!(pg_time_ms(1_500_000), 946_684_801_500);
        assert_eq!(pg_time_ms(-1), 946_684_799_999, "before 2000 rounds down");
        assert_eq!(format_lsn(parse_lsn("0/10").expect("parses")), "0/10");
    }
}
