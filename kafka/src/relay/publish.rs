//! One event onto the topic: its Debezium-style envelope, keyed by its show, with its trace.

use super::*;

/// The `traceparent` a row's metadata carries, if any.
pub(super) fn traceparent_of(metadata: &RawValue) -> Option<String> {
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
pub(super) fn pg_time_ms(micros: i64) -> i64 {
    const PG_EPOCH_MS: i64 = 946_684_800_000;
    micros.div_euclid(1_000) + PG_EPOCH_MS
}

impl Relay {
    pub(super) fn source(
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

    pub(super) async fn publish(&self, mut envelope: RawEnvelope) -> anyhow::Result<()> {
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
