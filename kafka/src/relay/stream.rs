//! The relay's replication session: transactions received from its slot, batched, published
//! once a synchronous standby has them, and reported flushed only then.

use super::*;

/// A committed transaction's events as the stream delivered them.
#[derive(Debug)]
pub(super) struct Txn {
    pub(super) xid: u32,
    /// The end of its commit record: the position reported flushed once it is published.
    pub(super) end: u64,
    pub(super) commit_ms: i64,
    /// Each event with the WAL position of its insert.
    pub(super) events: Vec<(u64, RawEventRow)>,
}

/// A replication session of the relay's slot, and what it delivered that is not published
/// yet. Dropping it ends the session (nothing unpublished was reported flushed, so the next
/// session receives it again).
pub struct Stream {
    pub(super) client: ReplicationClient,
    pub(super) relations: Relations,
    /// The transaction being received: its Begin came, its Commit not yet.
    pub(super) open: Option<Txn>,
    /// Committed transactions in commit order, not published yet.
    pub(super) ready: VecDeque<Txn>,
    /// Events in `ready`.
    pub(super) queued: usize,
    /// The newest position the server said it had sent everything up to, while nothing was
    /// open or waiting: confirmed as flushed (the transactions before it were published, or
    /// touched no table of the publication).
    pub(super) idle_at: Option<u64>,
    /// The last sequence published per aggregate since the positions were last recorded.
    pub(super) unrecorded: HashMap<(String, String), i64>,
    pub(super) recorded_at: std::time::Instant,
    pub(super) lag_at: std::time::Instant,
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
pub(super) const IDLE_WAIT: Duration = Duration::from_millis(500);

pub(super) const DURABLE_RECHECK: Duration = Duration::from_millis(10);

/// How often the relay records its positions and its lag, and tells PostgreSQL how far it is.
pub(super) const POSITIONS_EVERY: Duration = Duration::from_secs(1);

pub(super) const STATUS_EVERY: Duration = Duration::from_millis(100);

impl Relay {
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
    pub(super) async fn receive(&self, s: &mut Stream, wait: Duration) -> anyhow::Result<()> {
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
    pub(super) fn take(
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
    pub(super) async fn publish_batch(
        &self,
        s: &mut Stream,
        batch: Vec<Txn>,
    ) -> anyhow::Result<Step> {
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
}
