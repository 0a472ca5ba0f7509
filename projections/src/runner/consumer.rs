//! The runner's consumer of the topic: its group, where each assigned partition starts (the
//! positions stored with the rows, ADR 009), and the loop that batches, folds, commits and
//! ticks.

use super::*;

/// The `traceparent` header of a message, when the relay set one.
pub(super) fn traceparent_header(m: &rdkafka::message::OwnedMessage) -> Option<String> {
    use rdkafka::message::Headers;
    let headers = m.headers()?;
    headers
        .iter()
        .find(|h| h.key == trace::TRACEPARENT)
        .and_then(|h| std::str::from_utf8(h.value?).ok())
        .map(str::to_owned)
}

/// The consumer group hands partitions out; where to start reading one is the projection's
/// own position, stored with its rows (ADR 009). The runner keeps the positions it knows here
/// (loaded from the table, refreshed at every commit and table check); the rebalance callback
/// starts an assigned partition there. A revocation tells the runner to drop its folds: the
/// shows of those partitions may be folded by another process from now on.
pub(super) struct Positions {
    pub(super) topic: String,
    pub(super) next: Mutex<HashMap<i32, i64>>,
    pub(super) revoked: AtomicBool,
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

impl Runner {
    pub(super) async fn run_once(&mut self) -> anyhow::Result<()> {
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
    pub(super) fn after_revocation(&mut self) {
        if let Some(p) = &self.positions {
            if p.revoked.swap(false, Ordering::SeqCst) {
                self.unload_all();
            }
        }
    }

    /// Reads the stored offsets into what the rebalance callback starts partitions at: per
    /// partition the lowest of the projections' (one without an offset there reads it from
    /// the beginning; the positions drop what the others already folded).
    pub(super) async fn refresh_positions(&mut self) -> anyhow::Result<()> {
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

    /// Every show's stored positions, in `names`' order (0 where a projection has none).
    pub(super) async fn stored_positions(&mut self) -> anyhow::Result<HashMap<String, Vec<i64>>> {
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
}
