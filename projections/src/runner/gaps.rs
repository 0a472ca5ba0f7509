//! The events table as the topic's check: a show with more events there than folded, and no
//! progress since the last check, is filled from it.

use super::*;

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

impl Runner {
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
    pub(super) async fn fill(
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
}
