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

/// A committed transaction's events as the stream delivered them.
#[derive(Debug)]
struct Txn {
    xid: u32,
    /// The end of its commit record: the position reported flushed once it is published.
    end: u64,
    commit_ms: i64,
    /// Each event with the WAL position of its insert.
    events: Vec<(u64, RawEventRow)>,
}

/// A replication session of the relay's slot, and what it delivered that is not published
/// yet. Dropping it ends the session (nothing unpublished was reported flushed, so the next
/// session receives it again).
pub struct Stream {
    client: ReplicationClient,
    relations: Relations,
    /// The transaction being received: its Begin came, its Commit not yet.
    open: Option<Txn>,
    /// Committed transactions in commit order, not published yet.
    ready: VecDeque<Txn>,
    /// Events in `ready`.
    queued: usize,
    /// The newest position the server said it had sent everything up to, while nothing was
    /// open or waiting: confirmed as flushed (the transactions before it were published, or
    /// touched no table of the publication).
    idle_at: Option<u64>,
    /// The last sequence published per aggregate since the positions were last recorded.
    unrecorded: HashMap<(String, String), i64>,
    recorded_at: std::time::Instant,
    lag_at: std::time::Instant,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("ready", &self.ready.len())
            .field("queued", &self.queued)
            .finish_non_exhaustive()
    }
}

/// How long a step waits for the stream when nothing is ready, and how long it waits for more
/// before asking again whether a standby has what waits for one.
const IDLE_WAIT: Duration = Duration::from_millis(500);
const DURABLE_RECHECK: Duration = Duration::from_millis(10);
/// How often the relay records its positions and its lag, and tells PostgreSQL how far it is.
const POSITIONS_EVERY: Duration = Duration::from_secs(1);
const STATUS_EVERY: Duration = Duration::from_millis(100);

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

    /// Creates the slot when it is missing (the first start, or a primary promoted since) and
    /// fills the gap: every event after the recorded positions is republished from the table.
    /// The marker is written before the slot, so a gap is filled even if the relay dies in
    /// between or halfway through. Returns how many events the gap fill published.
    pub async fn ensure_slot(&self) -> anyhow::Result<usize> {
        let published: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)")
                .bind(PUBLICATION)
                .fetch_one(&self.pool)
                .await?;
        anyhow::ensure!(
            published,
            "the publication {PUBLICATION} is missing: run the migrations (`onsale migrate`)"
        );
        let plugin: Option<String> = sqlx::query_scalar(
            "SELECT plugin::text FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(&self.config.slot)
        .fetch_optional(&self.pool)
        .await?;
        if plugin.as_deref() != Some("pgoutput") {
            sqlx::query("INSERT INTO relay_gaps (slot) VALUES ($1) ON CONFLICT DO NOTHING")
                .bind(&self.config.slot)
                .execute(&self.pool)
                .await
                .context("mark the gap")?;
            if let Some(plugin) = plugin {
                // An earlier relay's slot (wal2json): what it had published is in the
                // positions, and the gap fill below republishes everything after them.
                sqlx::query("SELECT pg_drop_replication_slot($1)")
                    .bind(&self.config.slot)
                    .execute(&self.pool)
                    .await
                    .with_context(|| format!("drop the {plugin} slot of an earlier relay"))?;
                tracing::warn!(slot = %self.config.slot, %plugin, "an earlier relay's slot dropped");
            }
            // Every transaction committing after the slot's consistent point is decoded from
            // it; every one before is in the table when the gap fill reads it below.
            sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')")
                .bind(&self.config.slot)
                .execute(&self.pool)
                .await
                .context("create the replication slot")?;
            metrics::counter!(onsale_telemetry::metrics::RELAY_SLOTS_CREATED_TOTAL).increment(1);
            tracing::warn!(slot = %self.config.slot, "replication slot created (first start or a promoted primary)");
        }
        let open: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM relay_gaps WHERE slot = $1)")
                .bind(&self.config.slot)
                .fetch_one(&self.pool)
                .await?;
        if !open {
            return Ok(0);
        }
        let published = self.fill_gap().await?;
        sqlx::query("DELETE FROM relay_gaps WHERE slot = $1")
            .bind(&self.config.slot)
            .execute(&self.pool)
            .await
            .context("close the gap")?;
        tracing::warn!(slot = %self.config.slot, published, "gap filled from the events table");
        Ok(published)
    }

    /// Republishes (as `op: "r"`) every event past this slot's recorded positions, in order per
    /// aggregate, recording positions as it goes. The log reads past the positions as they were
    /// when the fill began: the scan only moves forward, so what it records meanwhile is behind it.
    async fn fill_gap(&self) -> anyhow::Result<usize> {
        let marks: Vec<Mark> = sqlx::query_as(
            "SELECT aggregate_type, aggregate_id, sequence FROM relay_positions WHERE slot = $1",
        )
        .bind(&self.config.slot)
        .fetch_all(&self.pool)
        .await
        .context("read the positions")?;
        let mut past = PastMarks::open(&self.pool, &marks)
            .await
            .context("mark the positions")?;
        let mut total = 0;
        loop {
            let rows = past.next(5_000).await.context("read the gap")?;
            let published = self.republish(rows).await?;
            if published.is_empty() {
                return Ok(total);
            }
            let n = published.len();
            total += n;
            let mut last: HashMap<(String, String), i64> = HashMap::new();
            for (t, id, seq) in published {
                let e = last.entry((t, id)).or_insert(seq);
                *e = (*e).max(seq);
            }
            self.record_positions(last).await?;
            metrics::counter!(onsale_telemetry::metrics::RELAY_GAP_EVENTS_TOTAL)
                .increment(n as u64);
        }
    }

    /// Publishes rows of the events table as `op: "r"` (read from the table, not decoded from
    /// the slot), waits for every acknowledgement, and returns their keys in order.
    async fn republish(&self, rows: Vec<LogRow>) -> anyhow::Result<Vec<ScanKey>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let lsn: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
            .fetch_one(&self.pool)
            .await?;
        let now = chrono::Utc::now().timestamp_millis();
        let mut keys = Vec::with_capacity(rows.len());
        let mut pending = Vec::with_capacity(rows.len());
        for r in rows {
            keys.push((r.aggregate_type.clone(), r.aggregate_id.clone(), r.sequence));
            let row = RawEventRow::try_from(r)?;
            pending.push(self.publish(RawEnvelope {
                op: "r",
                before: None,
                after: row,
                source: self.source(lsn.clone(), lsn.clone(), None, now, true),
                ts_ms: now,
            }));
        }
        try_join_all(pending).await?;
        Ok(keys)
    }

    /// Records, after Kafka acknowledged them, the last published sequence of each aggregate.
    /// Positions may trail the topic (the stream records them once a second): a gap fill
    /// then republishes more, never less.
    async fn record_positions(&self, last: HashMap<(String, String), i64>) -> anyhow::Result<()> {
        if last.is_empty() {
            return Ok(());
        }
        let (mut types, mut ids, mut seqs) = (Vec::new(), Vec::new(), Vec::new());
        for ((t, id), seq) in last {
            types.push(t);
            ids.push(id);
            seqs.push(seq);
        }
        sqlx::query(
            "INSERT INTO relay_positions (slot, aggregate_type, aggregate_id, sequence)
             SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bigint[])
             ON CONFLICT (slot, aggregate_type, aggregate_id)
             DO UPDATE SET sequence = GREATEST(relay_positions.sequence, EXCLUDED.sequence)",
        )
        .bind(&self.config.slot)
        .bind(&types)
        .bind(&ids)
        .bind(&seqs)
        .execute(&self.pool)
        .await
        .context("record the relay's positions")?;
        Ok(())
    }

    /// The newest WAL position as durable as an acknowledged commit: on a primary with
    /// synchronous standbys, the one the quorum (`ANY k` or `FIRST k`) has flushed; with no
    /// synchronous replication configured, the primary's own flush. `None` while no standby of
    /// a synchronous primary is connected: nothing may be published then.
    async fn durable_lsn(&self) -> anyhow::Result<Option<u64>> {
        // One round trip: the setting, the primary's flush and the synchronous standbys'.
        let (names, own, standbys): (String, String, Vec<String>) = sqlx::query_as(
            "SELECT current_setting('synchronous_standby_names'),
                    pg_current_wal_flush_lsn()::text,
                    ARRAY(SELECT flush_lsn::text FROM pg_stat_replication
                           WHERE sync_state IN ('sync', 'quorum') AND flush_lsn IS NOT NULL
                           ORDER BY flush_lsn DESC)",
        )
        .fetch_one(&self.pool)
        .await
        .context("read the durable LSN")?;
        let lsn = match quorum_size(&names) {
            None => Some(own),
            Some(k) => standbys.into_iter().nth(k - 1),
        };
        lsn.map(|l| parse_lsn(&l).context("the durable LSN"))
            .transpose()
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

    /// Opens a replication session on the slot, from where it was last confirmed.
    pub async fn open(&self) -> anyhow::Result<Stream> {
        let mut client = ReplicationClient::connect(self.replication.clone())
            .await
            .context("connect for replication")?;
        client
            .wait_started()
            .await
            .with_context(|| format!("start replication on slot {}", self.config.slot))?;
        let now = std::time::Instant::now();
        Ok(Stream {
            client,
            relations: Relations::default(),
            open: None,
            ready: VecDeque::new(),
            queued: 0,
            idle_at: None,
            unrecorded: HashMap::new(),
            recorded_at: now,
            lag_at: now,
        })
    }

    /// One batch: receive what the stream has (waiting a while when nothing is ready), publish
    /// the transactions a synchronous standby has too, await every acknowledgement, and report
    /// the end of the last one flushed.
    pub async fn step(&self, s: &mut Stream) -> anyhow::Result<Step> {
        let started = std::time::Instant::now();
        self.set_phase("receiving");
        let wait = if s.ready.is_empty() {
            IDLE_WAIT
        } else {
            DURABLE_RECHECK
        };
        self.receive(s, wait).await?;
        let received_ms = started.elapsed().as_millis() as u64;
        let mut step = Step::default();
        if !s.ready.is_empty() {
            self.set_phase("reading the durable LSN");
            // Fail closed: a synchronous primary with no standby acknowledges nothing, and the
            // relay publishes nothing.
            let durable = self.durable_lsn().await?;
            let n = s
                .ready
                .iter()
                .take_while(|t| durable.is_some_and(|d| t.end <= d))
                .count();
            if n > 0 {
                let batch: Vec<Txn> = s.ready.drain(..n).collect();
                step = self.publish_batch(s, batch).await?;
            }
            step.waiting = s.ready.len();
            tracing::debug!(
                published = step.published,
                waiting = step.waiting,
                received_ms,
                done_ms = started.elapsed().as_millis() as u64,
                "relay step"
            );
        }
        if s.ready.is_empty() && s.open.is_none() {
            if let Some(at) = s.idle_at.take() {
                s.client.update_applied_lsn(Lsn::from_u64(at));
            }
        }
        if s.recorded_at.elapsed() >= POSITIONS_EVERY {
            self.set_phase("recording positions");
            s.recorded_at = std::time::Instant::now();
            self.record_positions(std::mem::take(&mut s.unrecorded))
                .await?;
        }
        if s.lag_at.elapsed() >= POSITIONS_EVERY {
            s.lag_at = std::time::Instant::now();
            self.record_lag().await;
        }
        Ok(step)
    }

    /// Takes what the stream delivers: waits up to `wait` for a first message, then up to the
    /// linger for more, until a batch is full.
    async fn receive(&self, s: &mut Stream, wait: Duration) -> anyhow::Result<()> {
        let Ok(first) = tokio::time::timeout(wait, s.client.recv()).await else {
            return Ok(());
        };
        self.take(s, first)?;
        let linger = tokio::time::Instant::now() + Duration::from_millis(self.config.linger_ms);
        while s.queued < self.config.batch {
            // What is already there is taken without waiting; then more until the linger ends.
            let next = match s.client.recv().now_or_never() {
                Some(next) => next,
                None if s.ready.is_empty() || self.config.linger_ms == 0 => {
                    match tokio::time::timeout_at(linger, s.client.recv()).await {
                        Ok(next) => next,
                        Err(_) => break,
                    }
                }
                None => match tokio::time::timeout_at(linger, s.client.recv()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
            };
            self.take(s, next)?;
        }
        Ok(())
    }

    /// Files one message of the stream.
    fn take(
        &self,
        s: &mut Stream,
        message: pgwire_replication::Result<Option<ReplicationEvent>>,
    ) -> anyhow::Result<()> {
        let event = message
            .context("the replication stream")?
            .ok_or_else(|| anyhow::anyhow!("the replication stream ended"))?;
        match event {
            ReplicationEvent::Begin {
                xid,
                commit_time_micros,
                ..
            } => {
                s.open = Some(Txn {
                    xid,
                    end: 0,
                    commit_ms: pg_time_ms(commit_time_micros),
                    events: Vec::new(),
                });
            }
            ReplicationEvent::XLogData {
                wal_start, data, ..
            } => {
                let Some(row) = s.relations.read(&data, "public", "events")? else {
                    return Ok(());
                };
                let txn = s.open.as_mut().context("an insert outside a transaction")?;
                txn.events
                    .push((wal_start.as_u64(), RawEventRow::try_from(row)?));
            }
            ReplicationEvent::Commit {
                end_lsn,
                commit_time_micros,
                ..
            } => {
                let mut txn = s.open.take().context("a commit without its begin")?;
                txn.end = end_lsn.as_u64();
                txn.commit_ms = pg_time_ms(commit_time_micros);
                s.idle_at = None;
                if !txn.events.is_empty() {
                    s.queued += txn.events.len();
                    s.ready.push_back(txn);
                }
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                if s.open.is_none() && s.ready.is_empty() {
                    s.idle_at = Some(wal_end.as_u64());
                }
            }
            ReplicationEvent::Message { .. } => {}
            ReplicationEvent::StoppedAt { .. } => {
                anyhow::bail!("the replication stream stopped")
            }
        }
        Ok(())
    }

    /// Publishes whole transactions in one go, awaits every acknowledgement, then reports the
    /// end of the last as flushed.
    async fn publish_batch(&self, s: &mut Stream, batch: Vec<Txn>) -> anyhow::Result<Step> {
        self.set_phase("awaiting Kafka's acknowledgements");
        let now = chrono::Utc::now().timestamp_millis();
        let mut pending = Vec::with_capacity(batch.iter().map(|t| t.events.len()).sum());
        let mut last = 0;
        for txn in batch {
            s.queued -= txn.events.len();
            last = txn.end;
            let commit_lsn = format_lsn(txn.end);
            for (lsn, after) in txn.events {
                let key = (after.aggregate_type.clone(), after.aggregate_id.clone());
                let seq = s.unrecorded.entry(key).or_insert(after.sequence);
                *seq = (*seq).max(after.sequence);
                let envelope = RawEnvelope {
                    op: "c",
                    before: None,
                    after,
                    source: self.source(
                        format_lsn(lsn),
                        commit_lsn.clone(),
                        Some(i64::from(txn.xid)),
                        txn.commit_ms,
                        false,
                    ),
                    ts_ms: now,
                };
                pending.push(self.publish(envelope));
            }
        }
        let published = pending.len();
        try_join_all(pending).await?;
        s.client.update_applied_lsn(Lsn::from_u64(last));
        metrics::counter!(onsale_telemetry::metrics::RELAY_EVENTS_TOTAL)
            .increment(published as u64);
        Ok(Step {
            published,
            advanced_to: Some(last),
            waiting: 0,
        })
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

    fn source(
        &self,
        lsn: String,
        commit_lsn: String,
        tx_id: Option<i64>,
        ts_ms: i64,
        snapshot: bool,
    ) -> Source {
        Source {
            connector: "onsale-relay".into(),
            db: self.db.clone(),
            shard: self.config.shard,
            schema: "public".into(),
            table: "events".into(),
            lsn,
            commit_lsn,
            tx_id,
            ts_ms,
            snapshot: snapshot.to_string(),
        }
    }

    async fn publish(&self, mut envelope: RawEnvelope) -> anyhow::Result<()> {
        let row = &mut envelope.after;
        if let Some(payload) =
            crate::envelope::without_card_token(&row.event_type, row.payload.get())
        {
            // A row from before the card vault: its token stays in the database. The proof of
            // the scrubbed row is made from the previous row's hash, read here (such rows are
            // old: this happens on a backfill, not on the hot path).
            let prev = if row.sequence <= 1 {
                onsale_eventlog::chain::GENESIS
            } else {
                self.log
                    .read_range(&row.aggregate_id, row.sequence - 2, row.sequence - 1, 1)
                    .await?
                    .first()
                    .map(|r| r.hash)
                    .with_context(|| {
                        format!("{}@{} has no row before it", row.aggregate_id, row.sequence)
                    })?
            };
            row.scrub(payload, &prev)?;
            metrics::counter!(onsale_telemetry::metrics::RELAY_SCRUBBED_TOTAL).increment(1);
        }
        let body = serde_json::to_vec(&envelope)?;
        // An event decided under a sampled trace: its publication is a span of that trace, and
        // the message's `traceparent` header names it to the projections (docs/adr/019).
        let span = trace::enabled()
            .then(|| traceparent_of(&envelope.after.metadata))
            .flatten()
            .map(|parent| {
                let span = tracing::info_span!(target: trace::TARGET, "relay.publish", otel.kind = "producer", show = %envelope.after.aggregate_id, sequence = envelope.after.sequence);
                trace::follow(&span, &parent);
                span
            });
        let traceparent = span.as_ref().and_then(trace::traceparent);
        let mut record = FutureRecord::to(&self.kafka.events_topic)
            .key(&envelope.after.aggregate_id)
            .payload(&body);
        if let Some(value) = &traceparent {
            record = record.headers(OwnedHeaders::new().insert(Header {
                key: trace::TRACEPARENT,
                value: Some(value.as_str()),
            }));
        }
        self.producer
            .send(record, Duration::from_secs(15))
            .await
            .map_err(|(e, _)| anyhow::anyhow!("publish: {e}"))?;
        drop(span);
        Ok(())
    }
}

/// How many standbys a commit waits for under `synchronous_standby_names` (`ANY 1 (a, b)`,
/// `FIRST 2 (a, b, c)`, `2 (a, b)`, `a, b`), or `None` when it names none.
fn quorum_size(names: &str) -> Option<usize> {
    let names = names.trim();
    if names.is_empty() {
        return None;
    }
    let rest = names
        .strip_prefix("ANY ")
        .or_else(|| names.strip_prefix("FIRST "))
        .or_else(|| names.strip_prefix("any "))
        .or_else(|| names.strip_prefix("first "))
        .unwrap_or(names)
        .trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if !digits.is_empty() && rest[digits.len()..].trim_start().starts_with('(') {
        return digits.parse().ok().filter(|k| *k > 0);
    }
    // A plain list waits for its first standby.
    Some(1)
}

/// The `traceparent` a row's metadata carries, if any.
fn traceparent_of(metadata: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Meta {
        traceparent: Option<String>,
    }
    serde_json::from_str::<Meta>(metadata.get())
        .ok()?
        .traceparent
}

/// PostgreSQL's timestamps on the stream (microseconds since 2000-01-01) as milliseconds since
/// the Unix epoch.
fn pg_time_ms(micros: i64) -> i64 {
    const PG_EPOCH_MS: i64 = 946_684_800_000;
    micros.div_euclid(1_000) + PG_EPOCH_MS
}

/// The replication session of `slot` on the database `pool` reaches: the same address, user,
/// database and TLS mode. The password is PostgreSQL's `PGPASSWORD` (sqlx's options keep theirs
/// to themselves): a deployment that logs in with one sets it (docs/adr/028).
fn replication_config(pool: &PgPool, slot: &str, db: &str) -> ReplicationConfig {
    let o = pool.connect_options();
    let password = std::env::var("PGPASSWORD").unwrap_or_default();
    let config = match o.get_socket() {
        Some(dir) => ReplicationConfig::unix(
            dir.to_string_lossy(),
            o.get_port(),
            o.get_username(),
            password,
            db,
            slot,
            PUBLICATION,
        ),
        None => ReplicationConfig::new(
            o.get_host(),
            o.get_username(),
            password,
            db,
            slot,
            PUBLICATION,
        )
        .with_port(o.get_port())
        .with_tls(match o.get_ssl_mode() {
            PgSslMode::Disable | PgSslMode::Allow | PgSslMode::Prefer => TlsConfig::disabled(),
            PgSslMode::Require => TlsConfig::require(),
            PgSslMode::VerifyCa => TlsConfig::verify_ca(None),
            PgSslMode::VerifyFull => TlsConfig::verify_full(None),
        }),
    };
    config
        .with_status_interval(STATUS_EVERY)
        .with_application_name(format!("onsale-relay {slot}"))
}

#[cfg(test)]
mod tests {
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
