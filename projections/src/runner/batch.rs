//! One batch: each message folded once per show (deduplicated, chained, the gaps before it
//! filled), each projection told the events past its own position, and one transaction with
//! every projection's rows, positions and offsets.

use super::*;

/// Applies `log` to `show` and tells it to each projection whose position (`stored`, by the
/// runner's order) it is past.
pub(super) fn tell(
    members: &mut [Box<dyn Member>],
    stored: &[i64],
    show: &mut Show,
    log: &LogEvent,
) {
    fold::apply(show, log, |ctx| {
        for (member, at) in members.iter_mut().zip(stored) {
            if log.sequence > *at {
                member.event(ctx);
            }
        }
    });
}

impl Runner {
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
    pub(super) async fn catch_up_to(&mut self, log: &LogEvent) -> anyhow::Result<()> {
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

    pub(super) fn fold(&mut self, mut log: LogEvent) {
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

    pub(super) async fn commit(&mut self) -> anyhow::Result<()> {
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

    pub(super) async fn heartbeat(&mut self, tx: &mut PgConnection) -> anyhow::Result<()> {
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
}
