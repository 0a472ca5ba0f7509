//! The relay loop: peek a batch of whole transactions from the slot, publish, wait for every
//! acknowledgement, record the positions, then advance the slot past them.
//!
//! On a replicated primary (docs/adr/010) the relay publishes only transactions a synchronous
//! standby has flushed: PostgreSQL 15 decodes what the primary alone has written, and an event
//! on the topic that a failover then loses would be a phantom every consumer keeps. And since
//! PostgreSQL 15 does not carry logical slots to standbys, a promoted primary has no slot: the
//! relay creates it and republishes from the events table every event after the positions it
//! recorded (`relay_positions`), under a marker (`relay_gaps`) that survives a crash halfway.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use futures::future::try_join_all;
use onsale_eventlog::scan::{Mark, PastMarks};
use onsale_eventlog::{EventLog, LogRow, PgEventLog, ScanKey};
use onsale_telemetry::trace;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::Deserialize;
use serde_json::value::RawValue;
use sqlx::postgres::PgPool;
use sqlx::Row;

use crate::envelope::{parse_lsn, RawEnvelope, RawEventRow, Source};
use crate::topics::KafkaConfig;

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
    /// Most changes decoded per step (whole transactions, so a step may return a few more).
    #[arg(
        id = "relay_batch",
        long = "relay-batch",
        env = "ONSALE_RELAY_BATCH",
        default_value_t = 5_000
    )]
    pub batch: i32,
    /// The least time (milliseconds) from one step's start to the next's, unless a step found
    /// a full batch (a backlog: the next starts at once). Every peek and advance starts logical
    /// decoding afresh, so a relay stepping as fast as commits arrive (up to a hundred steps a
    /// second) kept 0.40 cores of the database's CPU busy at 60 holds a second, 0.14 idle;
    /// paced, a step carries what a pace's commits wrote (BENCHMARKS.md, "The relay, paced").
    #[arg(
        id = "relay_pace_ms",
        long = "relay-pace-ms",
        env = "ONSALE_RELAY_PACE_MS",
        default_value_t = 50
    )]
    pub pace_ms: u64,
    /// How often a running-transactions record is forced into the WAL so the slot's restart
    /// point keeps up (0: never; PostgreSQL then writes one every 15 s). Every peek and advance
    /// decodes from the restart point, so at 1,000 ms each re-decoded ~0.5 s of WAL on average:
    /// at ~5,500 holds/s the relay's PostgreSQL backends took 0.25 cores, at 200 ms 0.16
    /// (50 and 100 ms: no less); idle, 0.03 and 0.04 (BENCHMARKS.md, "The relay's mark").
    #[arg(
        id = "relay_mark_ms",
        long = "relay-mark-ms",
        env = "ONSALE_RELAY_MARK_MS",
        default_value_t = 200
    )]
    pub mark_ms: u64,
    /// The longest a step may take before it is abandoned (with a warning naming where it
    /// stood) and tried again; abandoning one is safe: nothing is advanced past what Kafka
    /// acknowledged, and consumers drop what is published twice.
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
    /// One connection of its own for the slot's peeks and advances: each decoding call drops
    /// its backend's catalog caches (PostgreSQL's `InvalidateSystemCaches`, before decoding and
    /// after), so a statement run next on that backend is planned again and its relations'
    /// descriptors rebuilt. The relay's other statements stay on backends that keep theirs.
    decoding: PgPool,
    /// The event log on the same database: what a backfill republishes.
    log: PgEventLog,
    producer: FutureProducer,
    kafka: KafkaConfig,
    config: RelayConfig,
    db: String,
    /// When a running-transactions record was last forced into the WAL (see [`Relay::mark`]).
    marked: std::sync::Mutex<std::time::Instant>,
    /// The connection marks are made on (see [`Relay::mark`]).
    mark_conn: tokio::sync::Mutex<Option<sqlx::postgres::PgConnection>>,
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
    pub advanced_to: Option<u64>,
    /// The peek returned as many changes as it may: more are waiting.
    pub full: bool,
}

impl Step {
    /// When the step after this one (started at `started`) may start: at once after a full
    /// peek (a backlog), else a pace after this one started, however much it published, so
    /// commits arriving one by one are carried a pace's worth at a time.
    pub fn next_start(
        &self,
        started: tokio::time::Instant,
        pace: Duration,
    ) -> tokio::time::Instant {
        if self.full {
            started
        } else {
            started + pace
        }
    }
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
        let decoding = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with((*pool.connect_options()).clone());
        Ok(Self {
            log: PgEventLog::new(pool.clone()),
            pool,
            decoding,
            producer,
            kafka,
            config,
            db,
            marked: std::sync::Mutex::new(std::time::Instant::now()),
            mark_conn: tokio::sync::Mutex::new(None),
            phase: std::sync::Mutex::new("idle"),
        })
    }

    /// Creates the slot when it is missing (the first start, or a primary promoted since) and
    /// fills the gap: every event after the recorded positions is republished from the table.
    /// The marker is written before the slot, so a gap is filled even if the relay dies in
    /// between or halfway through. Returns how many events the gap fill published.
    pub async fn ensure_slot(&self) -> anyhow::Result<usize> {
        // Marks were permanent slots before: one a crash left behind would pin WAL.
        sqlx::query(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
              WHERE slot_name = $1 AND NOT temporary AND NOT active",
        )
        .bind(format!("{}_mark", self.config.slot))
        .execute(&self.pool)
        .await
        .context("drop a stale mark slot")?;
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
        )
        .bind(&self.config.slot)
        .fetch_one(&self.pool)
        .await?;
        if !exists {
            sqlx::query("INSERT INTO relay_gaps (slot) VALUES ($1) ON CONFLICT DO NOTHING")
                .bind(&self.config.slot)
                .execute(&self.pool)
                .await
                .context("mark the gap")?;
            // Every transaction committing after the slot's consistent point is decoded from
            // it; every one before is in the table when the gap fill reads it below.
            sqlx::query("SELECT pg_create_logical_replication_slot($1, 'wal2json')")
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
            total += published.len();
            self.record_positions(&published).await?;
            metrics::counter!(onsale_telemetry::metrics::RELAY_GAP_EVENTS_TOTAL)
                .increment(published.len() as u64);
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
    async fn record_positions(&self, published: &[ScanKey]) -> anyhow::Result<()> {
        let mut last: HashMap<(&str, &str), i64> = HashMap::new();
        for (t, id, seq) in published {
            let e = last.entry((t.as_str(), id.as_str())).or_insert(*seq);
            *e = (*e).max(*seq);
        }
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
    async fn durable_lsn(&self) -> anyhow::Result<Option<String>> {
        let names: String =
            sqlx::query_scalar("SELECT current_setting('synchronous_standby_names')")
                .fetch_one(&self.pool)
                .await?;
        let Some(k) = quorum_size(&names) else {
            return Ok(Some(
                sqlx::query_scalar("SELECT pg_current_wal_flush_lsn()::text")
                    .fetch_one(&self.pool)
                    .await?,
            ));
        };
        Ok(sqlx::query_scalar(
            "SELECT flush_lsn::text FROM pg_stat_replication
              WHERE sync_state IN ('sync', 'quorum') AND flush_lsn IS NOT NULL
              ORDER BY flush_lsn DESC OFFSET $1 LIMIT 1",
        )
        .bind(k as i64 - 1)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Runs until `shutdown` resolves; an error (broker or database away) is retried with backoff.
    pub async fn run(&self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut backoff = crate::Backoff::new(Duration::from_millis(100));
        loop {
            let bound = Duration::from_secs(self.config.step_timeout_secs.max(1));
            let started = tokio::time::Instant::now();
            let step = tokio::select! {
                _ = &mut shutdown => return,
                s = tokio::time::timeout(bound, self.step()) => s.unwrap_or_else(|_| {
                    Err(anyhow::anyhow!(
                        "the step took longer than {bound:?} ({}); abandoned",
                        self.phase()
                    ))
                }),
            };
            // Waits (the pace, backoff, the topic's return) give way to shutdown too.
            let pause = async {
                match step {
                    Ok(s) => {
                        backoff.reset();
                        let pace = Duration::from_millis(self.config.pace_ms);
                        tokio::time::sleep_until(s.next_start(started, pace)).await;
                    }
                    Err(e) => {
                        metrics::counter!(onsale_telemetry::metrics::RELAY_ERRORS_TOTAL)
                            .increment(1);
                        tracing::warn!(error = %format!("{e:#}"), "relay step failed; retrying");
                        backoff.wait().await;
                        // A broker that came back empty has no topic: make it again first.
                        if let Err(e) = self.kafka.ensure_topic().await {
                            tracing::warn!(error = %format!("{e:#}"), "events topic not ready");
                        }
                        // A promoted primary has no slot: make it and fill the gap.
                        if let Err(e) = self.ensure_slot().await {
                            tracing::warn!(error = %format!("{e:#}"), "replication slot not ready");
                        }
                    }
                }
            };
            tokio::select! {
                _ = &mut shutdown => return,
                () = pause => {}
            }
        }
    }

    /// A peek decodes from the slot's `restart_lsn`, which only moves to a WAL record of running
    /// transactions; PostgreSQL 15 writes one every 15 s, so under load each peek would decode up
    /// to 15 s of WAL again. Creating (and dropping) a logical slot writes such a record, so
    /// every `mark_ms` (200) the relay makes one and the next advance can move `restart_lsn` up
    /// to it (ADR 005; PostgreSQL 16 has `pg_log_standby_snapshot()` for this).
    ///
    /// The mark only saves work: it never stands in the way of a step. The slot is temporary
    /// (a relay killed halfway leaves nothing behind: its session's end drops it), a mark that
    /// fails (another relay's mark of the same name, still being made) is skipped, and one that
    /// waits longer than a second is abandoned.
    async fn mark(&self) {
        let due = self
            .marked
            .lock()
            .map(|m| m.elapsed() >= Duration::from_millis(self.config.mark_ms))
            .unwrap_or(true);
        if !due {
            return;
        }
        if let Ok(mut m) = self.marked.lock() {
            *m = std::time::Instant::now();
        }
        let name = format!("{}_mark", self.config.slot);
        // On a connection of its own, out of the pool: an abandoned mark drops it, and with it
        // the session and any temporary slot it was making.
        let kept = self.mark_conn.lock().await.take();
        let mark = async {
            let mut conn = match kept {
                Some(c) => c,
                None => self.pool.acquire().await?.detach(),
            };
            sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput', true)")
                .bind(&name)
                .execute(&mut conn)
                .await?;
            sqlx::query("SELECT pg_drop_replication_slot($1)")
                .bind(&name)
                .execute(&mut conn)
                .await?;
            Ok::<_, sqlx::Error>(conn)
        };
        match tokio::time::timeout(Duration::from_secs(1), mark).await {
            Ok(Ok(conn)) => *self.mark_conn.lock().await = Some(conn),
            Ok(Err(e)) => tracing::debug!(error = %e, "WAL mark skipped"),
            Err(_) => tracing::debug!("WAL mark abandoned after 1 s"),
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

    /// One batch: decode, publish, await every acknowledgement, advance.
    pub async fn step(&self) -> anyhow::Result<Step> {
        let started = std::time::Instant::now();
        if self.config.mark_ms > 0 {
            self.set_phase("marking the WAL");
            self.mark().await;
        }
        self.set_phase("reading the durable LSN");
        let marked_ms = started.elapsed().as_millis() as u64;
        let Some(durable) = self.durable_lsn().await? else {
            // Fail closed: a synchronous primary with no standby acknowledges nothing, and the
            // relay publishes nothing.
            return Ok(Step::default());
        };
        let durable_at = parse_lsn(&durable).context("the durable LSN")?;
        self.set_phase("peeking the slot");
        let rows = sqlx::query(
            "SELECT lsn::text AS lsn, data FROM pg_logical_slot_peek_changes($1, $3::pg_lsn, $2,
               'format-version', '2', 'include-lsn', '1', 'include-timestamp', '1',
               'include-xids', '1', 'add-tables', 'public.events')",
        )
        .bind(&self.config.slot)
        .bind(self.config.batch)
        .bind(&durable)
        .fetch_all(&self.decoding)
        .await
        .context("peek the slot")?;
        let mut last_lsn = None;
        let mut reached = Vec::new();
        let mut pending = Vec::new();
        let mut tx_changes: Vec<(String, RawEventRow)> = Vec::new();
        let mut tx_id = None;
        for row in &rows {
            let lsn: String = row.try_get("lsn")?;
            let data: String = row.try_get("data")?;
            let change: Change<'_> = serde_json::from_str(&data).context("wal2json output")?;
            match change.action {
                "B" => {
                    tx_id = change.xid;
                    tx_changes.clear();
                }
                "I" => tx_changes.push((lsn, event_row(change.columns)?)),
                "C" => {
                    // A commit's row carries the end of its record: a transaction ending past
                    // what the standbys flushed waits for the next step.
                    if parse_lsn(&lsn).is_none_or(|end| end > durable_at) {
                        break;
                    }
                    last_lsn = Some(lsn.clone());
                    let ts_ms = change
                        .timestamp
                        .as_deref()
                        .and_then(parse_pg_time)
                        .unwrap_or_else(|| chrono::Utc::now().timestamp_millis());
                    for (change_lsn, after) in tx_changes.drain(..) {
                        reached.push((
                            after.aggregate_type.clone(),
                            after.aggregate_id.clone(),
                            after.sequence,
                        ));
                        let envelope = RawEnvelope {
                            op: "c",
                            before: None,
                            after,
                            source: self.source(change_lsn, lsn.clone(), tx_id, ts_ms, false),
                            ts_ms: chrono::Utc::now().timestamp_millis(),
                        };
                        pending.push(self.publish(envelope));
                    }
                }
                // The events table is append-only: an update, a delete or a truncate of it
                // is not part of the log and is not relayed.
                _ => {}
            }
        }
        let peeked_ms = started.elapsed().as_millis() as u64;
        let Some(last_lsn) = last_lsn else {
            tracing::debug!(%durable, rows = rows.len(), marked_ms, peeked_ms, "relay step: nothing to publish");
            self.record_lag().await;
            return Ok(Step::default());
        };
        let published = pending.len();
        self.set_phase("awaiting Kafka's acknowledgements");
        try_join_all(pending).await?;
        let acked_ms = started.elapsed().as_millis() as u64;
        self.set_phase("recording positions");
        self.record_positions(&reached).await?;
        self.set_phase("advancing the slot");
        sqlx::query("SELECT pg_replication_slot_advance($1, $2::pg_lsn)")
            .bind(&self.config.slot)
            .bind(&last_lsn)
            .execute(&self.decoding)
            .await
            .context("advance the slot")?;
        metrics::counter!(onsale_telemetry::metrics::RELAY_EVENTS_TOTAL)
            .increment(published as u64);
        tracing::debug!(%durable, rows = rows.len(), published, %last_lsn, marked_ms, peeked_ms, acked_ms,
            done_ms = started.elapsed().as_millis() as u64, "relay step");
        self.record_lag().await;
        Ok(Step {
            published,
            advanced_to: parse_lsn(&last_lsn),
            full: rows.len() >= usize::try_from(self.config.batch).unwrap_or(usize::MAX),
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

    async fn publish(&self, envelope: RawEnvelope) -> anyhow::Result<()> {
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

/// One row of `pg_logical_slot_peek_changes` with wal2json's format 2: a transaction's begin
/// ("B"), an insert ("I") with its columns, or its commit ("C").
#[derive(Deserialize)]
struct Change<'a> {
    #[serde(borrow)]
    action: &'a str,
    xid: Option<i64>,
    timestamp: Option<String>,
    #[serde(default, borrow)]
    columns: Vec<Column<'a>>,
}

#[derive(Deserialize)]
struct Column<'a> {
    #[serde(borrow)]
    name: &'a str,
    #[serde(borrow)]
    value: &'a RawValue,
}

/// The `events` row of a wal2json (format 2) insert. wal2json hands the json columns over as
/// their text, which goes on as it is (checked to be JSON, not parsed into a tree).
fn event_row(columns: Vec<Column<'_>>) -> anyhow::Result<RawEventRow> {
    let (mut aggregate_type, mut aggregate_id, mut sequence) = (None, None, None);
    let (mut event_type, mut event_version, mut payload, mut metadata) = (None, None, None, None);
    for col in columns {
        let text = || serde_json::from_str::<String>(col.value.get());
        match col.name {
            "aggregate_type" => aggregate_type = Some(text()?),
            "aggregate_id" => aggregate_id = Some(text()?),
            "sequence" => sequence = Some(serde_json::from_str::<i64>(col.value.get())?),
            "event_type" => event_type = Some(text()?),
            "event_version" => event_version = Some(text()?),
            "payload" => payload = Some(text()?),
            "metadata" => metadata = Some(text()?),
            _ => {}
        }
    }
    let missing = |name: &str| anyhow::anyhow!("an events insert without {name}");
    Ok(RawEventRow::try_from(LogRow {
        aggregate_type: aggregate_type.ok_or_else(|| missing("aggregate_type"))?,
        aggregate_id: aggregate_id.ok_or_else(|| missing("aggregate_id"))?,
        sequence: sequence.ok_or_else(|| missing("sequence"))?,
        event_type: event_type.ok_or_else(|| missing("event_type"))?,
        event_version: event_version.ok_or_else(|| missing("event_version"))?,
        payload: payload.ok_or_else(|| missing("payload"))?,
        metadata: metadata.ok_or_else(|| missing("metadata"))?,
    })?)
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

/// wal2json's timestamps: "2026-11-29 10:11:38.123456+00".
fn parse_pg_time(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_str(&format!("{s}00"), "%Y-%m-%d %H:%M:%S%.f%z")
        .ok()
        .map(|t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::format_lsn;
    use serde_json::json;

    #[test]
    fn a_step_waits_out_the_pace_unless_its_peek_was_full() {
        let started = tokio::time::Instant::now();
        let pace = Duration::from_millis(50);
        let paced = started + pace;
        let idle = Step::default();
        assert_eq!(idle.next_start(started, pace), paced, "nothing found");
        let one = Step {
            published: 1,
            advanced_to: Some(7),
            full: false,
        };
        assert_eq!(
            one.next_start(started, pace),
            paced,
            "a commit carried alone"
        );
        let backlog = Step {
            published: 5_000,
            advanced_to: Some(9),
            full: true,
        };
        assert_eq!(
            backlog.next_start(started, pace),
            started,
            "a backlog goes on at once"
        );
    }

    #[test]
    fn wal2json_insert_becomes_an_event_row() {
        let data = json!({"action": "I", "lsn": "0/16B3748", "schema": "public", "table": "events", "columns": [
            {"name": "aggregate_type", "type": "text", "value": "show"},
            {"name": "aggregate_id", "type": "text", "value": "s1"},
            {"name": "sequence", "type": "bigint", "value": 7},
            {"name": "event_type", "type": "text", "value": "HoldReleased"},
            {"name": "event_version", "type": "text", "value": "1"},
            {"name": "payload", "type": "json", "value": "{\"HoldReleased\":{\"hold_id\":\"h\"}}"},
            {"name": "metadata", "type": "json", "value": "{\"traceparent\":\"00-ab-cd-01\"}"},
            {"name": "xid", "type": "xid8", "value": 812},
            {"name": "hash", "type": "bytea", "value": null}]})
        .to_string();
        let change: Change<'_> = serde_json::from_str(&data).expect("a change");
        assert_eq!(change.action, "I");
        let row = event_row(change.columns).expect("an insert parses");
        assert_eq!(row.sequence, 7);
        assert_eq!(
            (row.aggregate_type.as_str(), row.aggregate_id.as_str()),
            ("show", "s1")
        );
        assert_eq!(row.payload.get(), r#"{"HoldReleased":{"hold_id":"h"}}"#);
        assert_eq!(
            traceparent_of(&row.metadata).as_deref(),
            Some("00-ab-cd-01")
        );
        let begin: Change<'_> =
            serde_json::from_str(r#"{"action":"B","xid":812}"#).expect("a begin");
        assert_eq!((begin.action, begin.xid), ("B", Some(812)));
        let no_payload = json!({"action": "I", "columns": [
            {"name": "aggregate_type", "type": "text", "value": "show"}]})
        .to_string();
        let change: Change<'_> = serde_json::from_str(&no_payload).expect("a change");
        assert!(
            event_row(change.columns).is_err(),
            "an insert missing columns fails"
        );
    }

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
    fn commit_timestamps_parse() {
        assert_eq!(parse_pg_time("1970-01-01 00:00:01.5+00"), Some(1500));
        assert_eq!(format_lsn(parse_lsn("0/10").expect("parses")), "0/10");
    }
}
