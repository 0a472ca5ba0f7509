//! Folds read from the log off the runner's task (ADR 025 decision 8): a show's newest
//! snapshot at or before its position and the events after it, while every other show's
//! events go on being folded.

use super::*;

/// A show's fold as read from the log by a load task: each projection's stored position (by
/// the runner's order) and the show as it stood at the lowest of them.
#[derive(Debug)]
pub(super) struct Loaded {
    pub(super) stored: Vec<i64>,
    pub(super) lowest: i64,
    pub(super) show: Show,
    /// Events read after the snapshot to reach `lowest`.
    pub(super) events: i64,
}

/// What a load task answers: the runner's generation it was started in, the show, its fold.
pub(super) type LoadDone = (u64, ShowId, anyhow::Result<Loaded>);

/// Loads of folds in flight. A show's fold is read from the log (its newest snapshot at or
/// before its position, and the events after it: seconds for a big show) in a task of its
/// own, so every other show's events go on being folded meanwhile; the show's own events wait
/// in the table and are filled from it once the fold is in (ADR 025 decision 8).
pub(super) struct Loads {
    pub(super) pending: HashSet<ShowId>,
    /// Bumped when the runner forgets its folds: a load started before answers a stale fold.
    pub(super) generation: u64,
    pub(super) done_tx: tokio::sync::mpsc::UnboundedSender<LoadDone>,
    pub(super) done_rx: tokio::sync::mpsc::UnboundedReceiver<LoadDone>,
    /// At most [`LOADS_AT_ONCE`] loads read at a time (a restart finds many shows behind).
    pub(super) permits: Arc<tokio::sync::Semaphore>,
}

/// How many folds are read from the log at once.
pub(super) const LOADS_AT_ONCE: usize = 2;

impl Loads {
    pub(super) fn new() -> Self {
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
    pub(super) fn forget(&mut self) {
        self.generation += 1;
        self.pending.clear();
    }
}

/// Reads a show's fold from the log up to the lowest of the projections' stored positions
/// (`names`' order), from its newest snapshot at or before it (the owner writes them): a show
/// woken after its fold was dropped, or loaded again after a restart or a rebalance in the
/// middle of an on-sale, reads the events since that snapshot, not its whole history (ADR 025
/// decision 7).
pub(super) async fn read_fold(
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

impl Runner {
    /// Events read from the log so far to load folds: those after each show's snapshot up to
    /// its projections' stored positions (not the events folded into the read models).
    pub fn loaded_events(&self) -> u64 {
        self.loaded_events
    }

    pub(super) fn note_loaded_events(&mut self, n: i64) {
        let n = u64::try_from(n).unwrap_or(0);
        self.loaded_events += n;
        for name in &self.names {
            metrics::counter!(onsale_telemetry::metrics::PROJECTION_LOAD_EVENTS_TOTAL, "projection" => name.clone())
                .increment(n);
        }
    }

    /// Whether the show's fold is here; if not, its load is started (unless it is under way).
    pub(super) fn loaded_or_loading(&mut self, show_id: ShowId) -> bool {
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
    pub(super) async fn finish_load(
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

    pub(super) async fn take_in(&mut self, show_id: ShowId, loaded: Loaded) -> anyhow::Result<()> {
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
