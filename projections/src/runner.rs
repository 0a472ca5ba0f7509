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

/// The `traceparent` header of a message, when the relay set one.
fn traceparent_header(m: &rdkafka::message::OwnedMessage) -> Option<String> {
    use rdkafka::message::Headers;
    let headers = m.headers()?;
    headers
        .iter()
        .find(|h| h.key == trace::TRACEPARENT)
        .and_then(|h| std::str::from_utf8(h.value?).ok())
        .map(str::to_owned)
}

/// A read model folded from the log.
pub trait Projection: Send + 'static {
    /// Its name: the key of its positions (and of its metrics' `projection` label).
    const NAME: &'static str;

    /// A show's fold was loaded from the table at the projection's stored position.
    fn loaded(&mut self, show_id: ShowId, show: &Show);

    /// The show's fold was dropped (idle, or after an error or a rebalance): forget what is kept
    /// of it; [`Projection::loaded`] comes again before its next event, and what was told since
    /// the last flush is told again.
    fn unloaded(&mut self, _show_id: ShowId) {}

    /// One event, applied to the show's fold.
    fn event(&mut self, ctx: &EventCtx<'_>);

    /// Writes what the events since the last flush changed, in the batch's transaction.
    fn flush(&mut self, tx: &mut PgConnection) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// About once a second, in a transaction of its own.
    fn tick(&mut self, _tx: &mut PgConnection) -> impl Future<Output = anyhow::Result<()>> + Send {
        async { Ok(()) }
    }

    /// Deletes every row of the read model (its positions are deleted by [`reset`]).
    fn reset(tx: &mut PgConnection) -> impl Future<Output = anyhow::Result<()>> + Send;
}

type Io<'a> = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send + 'a>>;

/// A [`Projection`] as a runner drives it beside others.
trait Member: Send {
    fn loaded(&mut self, show_id: ShowId, show: &Show);
    fn unloaded(&mut self, show_id: ShowId);
    fn event(&mut self, ctx: &EventCtx<'_>);
    fn flush<'a>(&'a mut self, tx: &'a mut PgConnection) -> Io<'a>;
    fn tick<'a>(&'a mut self, tx: &'a mut PgConnection) -> Io<'a>;
}

impl<P: Projection> Member for P {
    fn loaded(&mut self, show_id: ShowId, show: &Show) {
        Projection::loaded(self, show_id, show);
    }

    fn unloaded(&mut self, show_id: ShowId) {
        Projection::unloaded(self, show_id);
    }

    fn event(&mut self, ctx: &EventCtx<'_>) {
        Projection::event(self, ctx);
    }

    fn flush<'a>(&'a mut self, tx: &'a mut PgConnection) -> Io<'a> {
        Box::pin(Projection::flush(self, tx))
    }

    fn tick<'a>(&'a mut self, tx: &'a mut PgConnection) -> Io<'a> {
        Box::pin(Projection::tick(self, tx))
    }
}
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

/// The consumer group hands partitions out; where to start reading one is the projection's
/// own position, stored with its rows (ADR 009). The runner keeps the positions it knows here
/// (loaded from the table, refreshed at every commit and table check); the rebalance callback
/// starts an assigned partition there. A revocation tells the runner to drop its folds: the
/// shows of those partitions may be folded by another process from now on.
struct Positions {
    topic: String,
    next: Mutex<HashMap<i32, i64>>,
    revoked: AtomicBool,
}

impl ClientContext for Positions {}

impl ConsumerContext for Positions {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let next = self.next.lock().map(|m| m.clone()).unwrap_or_default();
                let partitions: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
                for p in &partitions {
                    let offset = next
                        .get(p)
                        .map_or(Offset::Beginning, |o| Offset::Offset(*o));
                    if let Err(e) = tpl.set_partition_offset(&self.topic, *p, offset) {
                        tracing::warn!(partition = p, error = %e, "cannot start the partition at its position");
                    }
                }
                tracing::info!(?partitions, "partitions assigned");
                consumer.assign(tpl)
            }
            _ => {
                self.revoked.store(true, Ordering::SeqCst);
                tracing::info!("partitions revoked");
                consumer.unassign()
            }
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "rebalance");
        }
    }
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

/// A show's fold as read from the log by a load task: each projection's stored position (by
/// the runner's order) and the show as it stood at the lowest of them.
#[derive(Debug)]
struct Loaded {
    stored: Vec<i64>,
    lowest: i64,
    show: Show,
    /// Events read after the snapshot to reach `lowest`.
    events: i64,
}

/// What a load task answers: the runner's generation it was started in, the show, its fold.
type LoadDone = (u64, ShowId, anyhow::Result<Loaded>);

/// Loads of folds in flight. A show's fold is read from the log (its newest snapshot at or
/// before its position, and the events after it: seconds for a big show) in a task of its
/// own, so every other show's events go on being folded meanwhile; the show's own events wait
/// in the table and are filled from it once the fold is in (ADR 025 decision 8).
struct Loads {
    pending: HashSet<ShowId>,
    /// Bumped when the runner forgets its folds: a load started before answers a stale fold.
    generation: u64,
    done_tx: tokio::sync::mpsc::UnboundedSender<LoadDone>,
    done_rx: tokio::sync::mpsc::UnboundedReceiver<LoadDone>,
    /// At most [`LOADS_AT_ONCE`] loads read at a time (a restart finds many shows behind).
    permits: Arc<tokio::sync::Semaphore>,
}

/// How many folds are read from the log at once.
const LOADS_AT_ONCE: usize = 2;

impl Loads {
    fn new() -> Self {
        let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
        Self {
            pending: HashSet::new(),
            generation: 0,
            done_tx,
            done_rx,
            permits: Arc::new(tokio::sync::Semaphore::new(LOADS_AT_ONCE)),
        }
    }

    /// Every load in flight answers a fold nobody wants any more.
    fn forget(&mut self) {
        self.generation += 1;
        self.pending.clear();
    }
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

    async fn run_once(&mut self) -> anyhow::Result<()> {
        self.kafka.ensure_topic().await?;
        // A consumer group per runner shares the partitions among its processes; the offsets
        // stay in PostgreSQL with the rows (nothing is committed to the broker), and the
        // per-show sequences drop what a partition moving between processes re-delivers.
        let mut client = self.kafka.client();
        client
            .set(
                "group.id",
                format!("{}.projection.{}", self.kafka.events_topic, self.label()),
            )
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // A topic deleted and re-created starts again at offset 0: read it from there.
            .set("auto.offset.reset", "earliest")
            .set("partition.assignment.strategy", "range")
            .set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "1000")
            // Kafka answers a fetch as soon as a message arrives (fetch.min.bytes is 1); the
            // wait only bounds an empty poll. 10 ms (kept from tansu, which does not hold a
            // fetch) made every idle consumer ask each leader 100 times a second.
            .set("fetch.wait.max.ms", "500");
        let consumer: StreamConsumer<Positions> = client
            .create_with_context(Positions {
                topic: self.kafka.events_topic.clone(),
                next: Mutex::new(HashMap::new()),
                revoked: AtomicBool::new(false),
            })
            .context("kafka consumer")?;
        self.positions = Some(consumer.context().clone());
        self.refresh_positions().await?;
        consumer.subscribe(&[&self.kafka.events_topic])?;
        self.check_table(true).await?;
        let mut tick = tokio::time::interval(Duration::from_millis(self.config.tick_ms));
        let mut check = tokio::time::interval(Duration::from_millis(self.config.check_ms));
        loop {
            tokio::select! {
                msg = consumer.recv() => {
                    let first = msg?.detach();
                    self.after_revocation();
                    let mut batch = vec![first];
                    let deadline = Instant::now() + Duration::from_millis(self.config.linger_ms);
                    while batch.len() < self.config.batch {
                        match tokio::time::timeout_at(deadline.into(), consumer.recv()).await {
                            Ok(m) => batch.push(m?.detach()),
                            Err(_) => break,
                        }
                    }
                    let mut offsets: Vec<(i32, i64)> = Vec::new();
                    let mut logs = Vec::with_capacity(batch.len());
                    for m in &batch {
                        match offsets.iter_mut().find(|(p, _)| *p == m.partition()) {
                            Some(o) => o.1 = o.1.max(m.offset() + 1),
                            None => offsets.push((m.partition(), m.offset() + 1)),
                        }
                        let Some(body) = m.payload() else { continue };
                        match LogEvent::from_message(body) {
                            Ok(Some(mut log)) => {
                                if trace::enabled() {
                                    log.trace = traceparent_header(m);
                                }
                                logs.push(log);
                            }
                            Ok(None) => {}
                            Err(e) => {
                                // Not ours to decide: the table is the truth, and a gap check fills it.
                                self.count(onsale_telemetry::metrics::PROJECTION_BAD_MESSAGES_TOTAL);
                                tracing::warn!(projection = %self.label(), error = %e, "unreadable message skipped");
                            }
                        }
                    }
                    // The offsets go into the same transaction as the rows they produced.
                    self.pending_offsets = offsets;
                    self.apply_batch(logs).await?;
                }
                _ = tick.tick() => {
                    self.tick().await?;
                    self.drop_idle(Duration::from_secs(self.config.idle_secs));
                }
                _ = check.tick() => {
                    self.after_revocation();
                    self.check_table(false).await?;
                    self.refresh_positions().await?;
                }
                Some((generation, show_id, loaded)) = self.loads.done_rx.recv() => {
                    self.after_revocation();
                    self.finish_load(generation, show_id, loaded).await?;
                }
            }
        }
    }

    /// After a rebalance took partitions away, another process may fold their shows: forget
    /// every fold (each is reloaded from the table at its stored position when next needed).
    fn after_revocation(&mut self) {
        if let Some(p) = &self.positions {
            if p.revoked.swap(false, Ordering::SeqCst) {
                self.unload_all();
            }
        }
    }

    /// Reads the stored offsets into what the rebalance callback starts partitions at: per
    /// partition the lowest of the projections' (one without an offset there reads it from
    /// the beginning; the positions drop what the others already folded).
    async fn refresh_positions(&mut self) -> anyhow::Result<()> {
        let Some(positions) = &self.positions else {
            return Ok(());
        };
        let stored: Vec<(i32, i64)> = sqlx::query_as(
            "SELECT partition, min(next_offset)::bigint FROM projection_offsets
              WHERE projection = ANY($1) AND topic = $2
              GROUP BY partition HAVING count(*) = cardinality($1)",
        )
        .bind(&self.names)
        .bind(&self.kafka.events_topic)
        .fetch_all(&self.pool)
        .await?;
        if let Ok(mut next) = positions.next.lock() {
            *next = stored.into_iter().collect();
        }
        Ok(())
    }

    /// Folds one batch: every event in one transaction with the positions. A show whose fold
    /// cannot be read now (its shard is down) is left where it stands: its events here are
    /// skipped, its position does not move, and the gap check fills it from the log once its
    /// shard answers (docs/adr/021); the batch goes on for every other show.
    pub async fn apply_batch(&mut self, logs: Vec<LogEvent>) -> anyhow::Result<()> {
        let mut fresh = Vec::new();
        let mut unreadable: HashSet<ShowId> = HashSet::new();
        for log in logs {
            if unreadable.contains(&log.show_id) {
                continue;
            }
            // A show whose fold is being read waits: its events are filled from the table
            // once the fold is in (the table is the truth; the offsets may move past them).
            if !self.loaded_or_loading(log.show_id) {
                continue;
            }
            if let Err(e) = self.catch_up_to(&log).await {
                self.count(onsale_telemetry::metrics::PROJECTION_SHOWS_DEFERRED_TOTAL);
                tracing::warn!(projection = %self.label(), show = %log.show_id, error = %format!("{e:#}"),
                    "a show's log is not readable now; its events wait for the gap check");
                unreadable.insert(log.show_id);
                continue;
            }
            let folded = &self.shows[&log.show_id];
            if log.sequence <= folded.last_sequence {
                self.count(onsale_telemetry::metrics::PROJECTION_DUPLICATES_TOTAL);
                continue;
            }
            if !log.chains_from(&folded.head) {
                // Not written by the log: whoever could produce to the topic is not believed.
                // The table's event of that sequence is folded instead, by the next message
                // or the gap check.
                self.count(onsale_telemetry::metrics::PROJECTION_UNCHAINED_TOTAL);
                tracing::error!(projection = %self.label(), show = %log.show_id, sequence = log.sequence,
                    "a message on the topic does not chain from the show's log; refused");
                continue;
            }
            if let Some(at) = log.committed_at {
                fresh.push(at);
            }
            self.fold(log);
        }
        self.commit().await?;
        self.traced.clear();
        let now = Utc::now();
        for at in fresh {
            let lag = (now - at).num_microseconds().unwrap_or(0) as f64 / 1e6;
            for name in &self.names {
                metrics::histogram!(onsale_telemetry::metrics::PROJECTION_LAG_SECONDS, "projection" => name.clone())
                    .record(lag);
            }
            self.lag.push(lag);
        }
        Ok(())
    }

    /// Fills the show's fold from the log up to just before `log` (events the topic skipped,
    /// or that were deferred); nothing to do for a duplicate.
    async fn catch_up_to(&mut self, log: &LogEvent) -> anyhow::Result<()> {
        let last = self.shows[&log.show_id].last_sequence;
        if log.sequence > last + 1 {
            self.count(onsale_telemetry::metrics::PROJECTION_GAP_FILLS_TOTAL);
            let mut after = last;
            while after < log.sequence - 1 {
                let chunk = read_events(&self.log, log.show_id, after, log.sequence - 1).await?;
                let Some(end) = chunk.last().map(|l| l.sequence) else {
                    anyhow::bail!(
                        "{}@{} is on the topic but not in the table",
                        log.show_id,
                        log.sequence
                    );
                };
                for missing in chunk {
                    self.fold(missing);
                }
                after = end;
            }
        }
        Ok(())
    }

    fn fold(&mut self, mut log: LogEvent) {
        if let Some(parent) = log.trace.take() {
            let span = tracing::info_span!(target: trace::TARGET, "projection.fold", otel.kind = "consumer", projection = %self.label(), show = %log.show_id, sequence = log.sequence);
            trace::follow(&span, &parent);
            log.trace = trace::traceparent(&span);
            self.traced.push(span);
        }
        let folded = self
            .shows
            .get_mut(&log.show_id)
            .expect("loaded before folding");
        debug_assert_eq!(log.sequence, folded.last_sequence + 1);
        if let Some(lsn) = log.commit_lsn {
            self.lsn = Some(self.lsn.map_or(lsn, |l| l.max(lsn)));
        }
        tell(&mut self.members, &folded.stored, &mut folded.show, &log);
        folded.last_sequence = log.sequence;
        folded.head = log.hash;
        folded.touched = Instant::now();
    }

    async fn commit(&mut self) -> anyhow::Result<()> {
        let mut tx = self.pool.begin().await?;
        if self.asynchronous {
            sqlx::query("SET LOCAL synchronous_commit = off")
                .execute(&mut *tx)
                .await?;
        }
        for member in &mut self.members {
            member.flush(&mut tx).await?;
        }
        // Per projection and show it moved: the new position and the one it moved from.
        let (mut names, mut ids, mut seqs, mut from) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (id, f) in &self.shows {
            for (name, stored) in self.names.iter().zip(&f.stored) {
                if f.last_sequence > *stored {
                    names.push(name.as_str());
                    ids.push(id.to_string());
                    seqs.push(f.last_sequence);
                    from.push(*stored);
                }
            }
        }
        // Each show's position moves only from where this fold started: if another process
        // (a partition that moved, a table fill of a show another process consumes) moved it
        // meanwhile, nothing of this batch is written and the fold is reloaded.
        let moved: i64 = sqlx::query_scalar(
            "WITH batch AS (SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS u(p, s, q, f)),
             created AS (
               INSERT INTO projection_positions (projection, show_id, last_sequence, applied)
               SELECT p, s, q, q FROM batch WHERE f = 0
               ON CONFLICT (projection, show_id) DO NOTHING RETURNING 1),
             advanced AS (
               UPDATE projection_positions pp SET last_sequence = b.q, applied = pp.applied + (b.q - b.f)
                 FROM batch b
                WHERE pp.projection = b.p AND pp.show_id = b.s AND b.f > 0
                  AND pp.last_sequence = b.f
               RETURNING 1)
             SELECT (SELECT count(*) FROM created) + (SELECT count(*) FROM advanced)",
        )
        .bind(&names)
        .bind(&ids)
        .bind(&seqs)
        .bind(&from)
        .fetch_one(&mut *tx)
        .await?;
        if moved != ids.len() as i64 {
            tx.rollback().await?;
            self.count(onsale_telemetry::metrics::PROJECTION_CONFLICTS_TOTAL);
            anyhow::bail!(
                "{} of {} positions were moved by another process since they were loaded",
                ids.len() as i64 - moved,
                ids.len()
            );
        }
        let (parts, next): (Vec<i32>, Vec<i64>) = self.pending_offsets.drain(..).unzip();
        sqlx::query(
            "INSERT INTO projection_offsets (projection, topic, partition, next_offset)
             SELECT n, $2, p, o FROM UNNEST($1::text[]) AS m(n), UNNEST($3::int[], $4::bigint[]) AS u(p, o)
             ON CONFLICT (projection, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset",
        )
        .bind(&self.names)
        .bind(&self.kafka.events_topic)
        .bind(&parts)
        .bind(&next)
        .execute(&mut *tx)
        .await?;
        self.heartbeat(&mut tx).await?;
        tx.commit().await?;
        for f in self.shows.values_mut() {
            let at = f.last_sequence;
            f.stored.iter_mut().for_each(|s| *s = (*s).max(at));
        }
        if let Some(positions) = &self.positions {
            if let Ok(mut known) = positions.next.lock() {
                known.extend(parts.iter().copied().zip(next.iter().copied()));
            }
        }
        Ok(())
    }

    async fn heartbeat(&mut self, tx: &mut PgConnection) -> anyhow::Result<()> {
        let lag_ms = self.lag.iter().copied().fold(0.0, f64::max) * 1000.0;
        self.lag.clear();
        let lsn = onsale_kafka::envelope::format_lsn(self.lsn.unwrap_or(0));
        sqlx::query(
            "INSERT INTO projection_status (projection, lsn, heartbeat_at, lag_ms)
             SELECT n, $2::pg_lsn, now(), $3 FROM UNNEST($1::text[]) AS m(n)
             ON CONFLICT (projection) DO UPDATE
               SET lsn = GREATEST(projection_status.lsn, EXCLUDED.lsn),
                   heartbeat_at = now(), lag_ms = EXCLUDED.lag_ms",
        )
        .bind(&self.names)
        .bind(lsn)
        .bind(lag_ms as i64)
        .execute(&mut *tx)
        .await?;
        Ok(())
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

    /// Events read from the log so far to load folds: those after each show's snapshot up to
    /// its projections' stored positions (not the events folded into the read models).
    pub fn loaded_events(&self) -> u64 {
        self.loaded_events
    }

    fn note_loaded_events(&mut self, n: i64) {
        let n = u64::try_from(n).unwrap_or(0);
        self.loaded_events += n;
        for name in &self.names {
            metrics::counter!(onsale_telemetry::metrics::PROJECTION_LOAD_EVENTS_TOTAL, "projection" => name.clone())
                .increment(n);
        }
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

    /// Every show's stored positions, in `names`' order (0 where a projection has none).
    async fn stored_positions(&mut self) -> anyhow::Result<HashMap<String, Vec<i64>>> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT projection, show_id, last_sequence FROM projection_positions WHERE projection = ANY($1)",
        )
        .bind(&self.names)
        .fetch_all(&self.pool)
        .await?;
        let mut stored: HashMap<String, Vec<i64>> = HashMap::new();
        for (projection, show, at) in rows {
            if let Some(i) = self.names.iter().position(|n| *n == projection) {
                stored
                    .entry(show)
                    .or_insert_with(|| vec![0; self.names.len()])[i] = at;
            }
        }
        Ok(stored)
    }

    /// Compares every show with the table; fills a show that is behind and (unless `all`) made
    /// no progress since the last check: Kafka lost or has not delivered its events.
    pub async fn check_table(&mut self, all: bool) -> anyhow::Result<()> {
        let heads = self.log.heads().await?;
        let stored = self.stored_positions().await?;
        for (show_id, head) in heads {
            let moved_elsewhere = |id: &ShowId, at: i64| {
                stored
                    .get(&id.to_string())
                    .is_some_and(|s| s.iter().any(|p| *p > at))
            };
            let show_id: ShowId = show_id.parse()?;
            // A show not folded here whose every projection is at its head needs nothing: it
            // is loaded when its next event comes (a projection holds the shows on sale, not
            // every show the log ever had).
            if !self.shows.contains_key(&show_id)
                && stored
                    .get(&show_id.to_string())
                    .is_some_and(|s| s.iter().all(|p| *p >= head))
            {
                continue;
            }
            // Another process of these projections (its partition is theirs now) moved the
            // show since this fold was loaded: it is not stalled, and this fold is stale.
            if self
                .shows
                .get(&show_id)
                .is_some_and(|f| moved_elsewhere(&show_id, f.last_sequence))
            {
                self.unload(show_id);
                continue;
            }
            // A show whose log cannot be read now (its shard went down since the heads were
            // read) is checked again next time; the others are not held back.
            if let Err(e) = self.fill(show_id, head, all).await? {
                tracing::warn!(projection = %self.label(), show = %show_id, error = %format!("{e:#}"),
                    "a show's log is not readable now; checked again next time");
            }
        }
        Ok(())
    }

    /// Fills the show's fold from the log up to `head` if it is behind and (unless `all`) made
    /// no progress since the last check, committing as it goes. The inner error is the show's
    /// log not read (the others go on); the outer, a commit that failed.
    async fn fill(
        &mut self,
        show_id: ShowId,
        head: i64,
        all: bool,
    ) -> anyhow::Result<anyhow::Result<()>> {
        if !self.loaded_or_loading(show_id) {
            // Filled once its fold is in.
            return Ok(Ok(()));
        }
        let f = self.shows.get_mut(&show_id).expect("loaded");
        let stalled = f.last_sequence == f.checked_at;
        f.checked_at = f.last_sequence;
        if head > f.last_sequence && (all || stalled) {
            let from = f.last_sequence;
            if !all {
                self.count(onsale_telemetry::metrics::PROJECTION_GAP_FILLS_TOTAL);
            }
            let mut after = from;
            loop {
                let chunk = match read_events(&self.log, show_id, after, head).await {
                    Ok(chunk) => chunk,
                    Err(e) => return Ok(Err(e)),
                };
                let Some(last) = chunk.last().map(|l| l.sequence) else {
                    break;
                };
                for log in chunk {
                    self.fold(log);
                }
                self.commit().await?;
                after = last;
            }
        }
        // A projection behind the others was told their events when the fold was loaded:
        // written now, not whenever the next batch comes (an idle show may see none).
        if self
            .shows
            .get(&show_id)
            .is_some_and(|f| f.stored.iter().any(|s| *s < f.last_sequence))
        {
            self.commit().await?;
        }
        Ok(Ok(()))
    }

    /// Whether the show's fold is here; if not, its load is started (unless it is under way).
    fn loaded_or_loading(&mut self, show_id: ShowId) -> bool {
        if self.shows.contains_key(&show_id) {
            return true;
        }
        if self.loads.pending.insert(show_id) {
            let (pool, log, names) = (self.pool.clone(), self.log.clone(), self.names.clone());
            let (done, permits) = (self.loads.done_tx.clone(), self.loads.permits.clone());
            let generation = self.loads.generation;
            tokio::spawn(async move {
                let loaded = match permits.acquire_owned().await {
                    Ok(_permit) => read_fold(&pool, &log, &names, show_id).await,
                    Err(e) => Err(e.into()),
                };
                // The runner may be gone (shut down): nobody waits for the fold then.
                let _ = done.send((generation, show_id, loaded));
            });
        }
        false
    }

    /// Waits for every load in flight and takes each fold in, filled from the table up to its
    /// show's head: what [`Runner::run`] does as each one comes back.
    pub async fn finish_loads(&mut self) -> anyhow::Result<()> {
        while !self.loads.pending.is_empty() {
            let Some((generation, show_id, loaded)) = self.loads.done_rx.recv().await else {
                anyhow::bail!("the load tasks are gone");
            };
            self.finish_load(generation, show_id, loaded).await?;
        }
        Ok(())
    }

    /// Takes in a fold a load task read, unless the runner forgot its folds since it started:
    /// each projection told it was loaded at its own position and then told the events past
    /// it, so all of them stand at the highest; then filled from the table to the show's head
    /// (the events that came while it loaded). A show whose log could not be read is loaded
    /// again when its next event comes. The error: a commit that failed.
    async fn finish_load(
        &mut self,
        generation: u64,
        show_id: ShowId,
        loaded: anyhow::Result<Loaded>,
    ) -> anyhow::Result<()> {
        if generation != self.loads.generation || !self.loads.pending.remove(&show_id) {
            return Ok(());
        }
        let taken = match loaded {
            Ok(loaded) => self.take_in(show_id, loaded).await,
            Err(e) => Err(e),
        };
        if let Err(e) = taken {
            self.count(onsale_telemetry::metrics::PROJECTION_SHOWS_DEFERRED_TOTAL);
            tracing::warn!(projection = %self.label(), show = %show_id, error = %format!("{e:#}"),
                "a show's log is not readable now; loaded again when its next event comes");
            return Ok(());
        }
        if let Err(e) = self.fill(show_id, i64::MAX, true).await? {
            tracing::warn!(projection = %self.label(), show = %show_id, error = %format!("{e:#}"),
                "a show's log is not readable now; checked again next time");
        }
        Ok(())
    }

    async fn take_in(&mut self, show_id: ShowId, loaded: Loaded) -> anyhow::Result<()> {
        let Loaded {
            stored,
            lowest,
            mut show,
            events,
        } = loaded;
        self.note_loaded_events(events);
        let mut order: Vec<usize> = (0..stored.len()).collect();
        order.sort_by_key(|&i| stored[i]);
        // Until a projection is told it was loaded it is told no event (its position: MAX).
        let mut told = vec![i64::MAX; stored.len()];
        let mut after = lowest;
        let mut head = None;
        for i in order {
            let position = stored[i];
            while after < position {
                let chunk = read_events(&self.log, show_id, after, position).await?;
                let Some(last) = chunk.last().map(|l| l.sequence) else {
                    anyhow::bail!(
                        "{} is at {show_id}@{position} but the table ends at {after}",
                        self.names[i]
                    );
                };
                self.note_loaded_events(chunk.len() as i64);
                // Past the lowest position, at least one projection was told it was loaded.
                for log in chunk {
                    tell(&mut self.members, &told, &mut show, &log);
                    head = Some(log.hash);
                }
                after = last;
            }
            self.members[i].loaded(show_id, &show);
            told[i] = position;
        }
        // Loaded from a snapshot with no event after it: the hash is the table's.
        let head = match head {
            Some(h) => h,
            None if after == 0 => onsale_eventlog::chain::GENESIS,
            None => self
                .log
                .read_range(&show_id.to_string(), after - 1, after, 1)
                .await?
                .first()
                .map(|r| r.hash)
                .with_context(|| format!("{show_id}@{after} is not in the table"))?,
        };
        self.shows.insert(
            show_id,
            Folded {
                show,
                last_sequence: after,
                head,
                stored,
                checked_at: -1,
                touched: Instant::now(),
            },
        );
        Ok(())
    }
}

/// Reads a show's fold from the log up to the lowest of the projections' stored positions
/// (`names`' order), from its newest snapshot at or before it (the owner writes them): a show
/// woken after its fold was dropped, or loaded again after a restart or a rebalance in the
/// middle of an on-sale, reads the events since that snapshot, not its whole history (ADR 025
/// decision 7).
async fn read_fold(
    pool: &PgPool,
    log: &Arc<dyn EventLog>,
    names: &[String],
    show_id: ShowId,
) -> anyhow::Result<Loaded> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT projection, last_sequence FROM projection_positions
          WHERE projection = ANY($1) AND show_id = $2",
    )
    .bind(names)
    .bind(show_id.to_string())
    .fetch_all(pool)
    .await?;
    let mut stored = vec![0; names.len()];
    for (projection, at) in rows {
        if let Some(i) = names.iter().position(|n| *n == projection) {
            stored[i] = at;
        }
    }
    let lowest = stored.iter().copied().min().unwrap_or(0);
    let (mut show, mut events) = (Show::default(), 0);
    if lowest > 0 {
        let loaded = log.load_upto(show_id, lowest).await?;
        anyhow::ensure!(
            loaded.version == lowest,
            "{show_id} is folded to {lowest} but the table ends at {}",
            loaded.version
        );
        events = lowest - loaded.snapshot_version;
        show = loaded.show;
    }
    Ok(Loaded {
        stored,
        lowest,
        show,
        events,
    })
}

/// Applies `log` to `show` and tells it to each projection whose position (`stored`, by the
/// runner's order) it is past.
fn tell(members: &mut [Box<dyn Member>], stored: &[i64], show: &mut Show, log: &LogEvent) {
    fold::apply(show, log, |ctx| {
        for (member, at) in members.iter_mut().zip(stored) {
            if log.sequence > *at {
                member.event(ctx);
            }
        }
    });
}

/// Events `after + 1 ..= upto` of a show from the event log, at most 5,000.
pub async fn read_events(
    log: &Arc<dyn EventLog>,
    show_id: ShowId,
    after: i64,
    upto: i64,
) -> anyhow::Result<Vec<LogEvent>> {
    log.read_range(&show_id.to_string(), after, upto, 5_000)
        .await?
        .iter()
        .map(|r| LogEvent::from_row(show_id, r))
        .collect()
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
