//! One owner task per show. It keeps the live aggregate in memory, serializes that show's
//! commands, and commits the events of every command waiting in its queue in one append
//! (group commit). A caller is answered only after the append committed, except for a refusal:
//! while an append is in flight the owner keeps deciding newly arrived commands, answers the
//! refused ones at once (a refusal writes nothing) and keeps the rest for the next batch.
//!
//! On a version conflict (another process wrote the show) the cached state is dropped, the show
//! is reloaded from snapshot plus tail and the batch is decided again. When PostgreSQL fails the
//! cached state is dropped too (it holds effects that may not have committed) and the callers
//! get `Unavailable`: nothing is acknowledged that was not committed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cqrs_es::event_sink::EventSink;
use cqrs_es::{Aggregate, DomainEvent};
use onsale_domain::{
    Clock, HoldView, OrderView, Show, ShowCommand, ShowError, ShowEvent, ShowId, ShowServices,
};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, instrument, warn};

use crate::store::{EventStore, StoreError};

/// Tuning of the owners.
#[derive(Debug, Clone)]
pub struct OwnerConfig {
    /// The most commands decided and committed together.
    pub max_batch: usize,
    /// A snapshot is written after this many events since the last one, or as many as the show
    /// has holds and orders if that is more...
    pub snapshot_every: i64,
    /// ...but not more often than this: a snapshot copies the whole show, so during a rush it
    /// must not run on every few thousand events (BENCHMARKS.md shows what that costs).
    pub snapshot_min_interval: Duration,
    /// How often the sweeper looks for lapsed holds.
    pub sweep_every: Duration,
    /// How many reloads a batch may take on version conflicts before giving up.
    pub max_conflict_retries: u32,
    /// Commands waiting for one show beyond this are refused (503) instead of queued.
    pub max_queue: usize,
}

impl Default for OwnerConfig {
    fn default() -> Self {
        Self {
            max_batch: 512,
            snapshot_every: 10_000,
            snapshot_min_interval: Duration::from_secs(10),
            sweep_every: Duration::from_secs(1),
            max_conflict_retries: 5,
            max_queue: 20_000,
        }
    }
}

/// Why a command got no answer from the domain.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Domain(#[from] ShowError),
    #[error("the event store is unavailable")]
    Unavailable,
    #[error("the show's queue is full")]
    Overloaded,
    #[error("internal error: {0}")]
    Internal(String),
}

/// What a command or read answers with, computed from the committed state.
#[derive(Debug, Clone)]
pub enum Answer {
    Done,
    /// A document read from the show (the event page).
    Doc(serde_json::Value),
    Hold(HoldView),
    Order(OrderView),
}

type Read = Box<dyn FnOnce(&Show) -> Result<Answer, CommandError> + Send + Sync>;

enum Work {
    Command(ShowCommand),
    Read(Read),
    Sweep,
}

struct Job {
    work: Work,
    reply: Option<oneshot::Sender<Result<Answer, CommandError>>>,
}

/// The registry of show owners in this process.
#[derive(Clone, Debug)]
pub struct Shows {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: EventStore,
    clock: Arc<dyn Clock>,
    config: OwnerConfig,
    owners: Mutex<HashMap<ShowId, mpsc::Sender<Job>>>,
    /// Whether a show has a waiting room: fixed when it is scheduled, so cached for good.
    waiting_rooms: Mutex<HashMap<ShowId, bool>>,
}

impl Shows {
    pub fn new(store: EventStore, clock: Arc<dyn Clock>, config: OwnerConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                clock,
                config,
                owners: Mutex::new(HashMap::new()),
                waiting_rooms: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub fn store(&self) -> &EventStore {
        &self.inner.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Runs a command on its show and answers once its events are committed.
    pub async fn execute(
        &self,
        show: ShowId,
        command: ShowCommand,
    ) -> Result<Answer, CommandError> {
        self.submit(show, Work::Command(command)).await
    }

    /// Whether the show has a waiting room (read through its owner once, then from memory).
    pub async fn waiting_room(&self, show: ShowId) -> Result<bool, CommandError> {
        if let Some(&w) = self
            .inner
            .waiting_rooms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&show)
        {
            return Ok(w);
        }
        let answer = self
            .read(show, |s| {
                Ok(Answer::Doc(serde_json::json!(s
                    .info()
                    .map(|i| i.waiting_room))))
            })
            .await?;
        let Answer::Doc(serde_json::Value::Bool(w)) = answer else {
            return Err(ShowError::ShowNotFound.into());
        };
        self.inner
            .waiting_rooms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(show, w);
        Ok(w)
    }

    /// Reads the committed state of a show through its owner.
    pub async fn read<F>(&self, show: ShowId, f: F) -> Result<Answer, CommandError>
    where
        F: FnOnce(&Show) -> Result<Answer, CommandError> + Send + Sync + 'static,
    {
        self.submit(show, Work::Read(Box::new(f))).await
    }

    async fn submit(&self, show: ShowId, work: Work) -> Result<Answer, CommandError> {
        let (tx, rx) = oneshot::channel();
        let mut job = Job {
            work,
            reply: Some(tx),
        };
        for _ in 0..2 {
            let sender = self.owner(show);
            match sender.try_send(job) {
                Ok(()) => {
                    return rx
                        .await
                        .map_err(|_| CommandError::Internal("show owner stopped".into()))?
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // Shed load with a clear answer rather than queue without bound.
                    metrics::counter!("onsale_commands_shed_total").increment(1);
                    return Err(CommandError::Overloaded);
                }
                Err(mpsc::error::TrySendError::Closed(back)) => {
                    // The owner retired (an unknown show); start a fresh one.
                    job = back;
                    self.lock().remove(&show);
                }
            }
        }
        Err(CommandError::Internal(
            "could not reach the show owner".into(),
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ShowId, mpsc::Sender<Job>>> {
        self.inner.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn owner(&self, show: ShowId) -> mpsc::Sender<Job> {
        let mut owners = self.lock();
        if let Some(tx) = owners.get(&show).filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::channel(self.inner.config.max_queue);
        owners.insert(show, tx.clone());
        let owner = Owner {
            show_id: show,
            shows: self.clone(),
            state: None,
            services: ShowServices {
                clock: self.inner.clock.clone(),
            },
            carry: Vec::new(),
        };
        tokio::spawn(owner.run(rx));
        tx
    }
}

struct Loaded {
    show: Show,
    version: i64,
    snapshot_version: i64,
    snapshot_at: Option<Instant>,
}

struct Owner {
    show_id: ShowId,
    shows: Shows,
    state: Option<Loaded>,
    services: ShowServices,
    /// Jobs taken in while an append was in flight that need the next batch (everything but
    /// the refusals, which were answered at once).
    carry: Vec<Job>,
}

impl Owner {
    async fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        let sweep_every = self.shows.inner.config.sweep_every;
        let mut sweep = tokio::time::interval(sweep_every);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_sweep = Instant::now();
        loop {
            let first = if self.carry.is_empty() {
                tokio::select! {
                    job = rx.recv() => match job {
                        Some(job) => job,
                        None => break,
                    },
                    _ = sweep.tick() => {
                        if self.state.is_none() {
                            continue;
                        }
                        last_sweep = Instant::now();
                        Job { work: Work::Sweep, reply: None }
                    }
                }
            } else if self.state.is_some() && last_sweep.elapsed() >= sweep_every {
                // Under a steady rush there is always carried work: the sweep must not wait
                // for a quiet moment that never comes.
                last_sweep = Instant::now();
                Job {
                    work: Work::Sweep,
                    reply: None,
                }
            } else {
                self.carry.remove(0)
            };
            // Let the callers just woken by the last commit enqueue their next commands, so
            // batches stay full instead of alternating between a few commands and many.
            tokio::task::yield_now().await;
            let mut batch = vec![first];
            let carried = self.carry.len().min(self.shows.inner.config.max_batch - 1);
            batch.extend(self.carry.drain(..carried));
            while batch.len() < self.shows.inner.config.max_batch {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.process(batch, Some(&mut rx)).await;
            if self.state.as_ref().is_some_and(|s| s.version == 0) {
                // Nothing exists under this id: retire rather than keep an empty owner around.
                self.shows.lock().remove(&self.show_id);
                rx.close();
                for job in std::mem::take(&mut self.carry) {
                    self.process(vec![job], None).await;
                }
                while let Some(job) = rx.recv().await {
                    self.process(vec![job], None).await;
                }
                break;
            }
        }
    }

    async fn ensure_loaded(&mut self) -> Result<(), CommandError> {
        if self.state.is_some() {
            return Ok(());
        }
        let started = Instant::now();
        let loaded = self
            .shows
            .store()
            .load(self.show_id)
            .await
            .map_err(store_error)?;
        metrics::histogram!("onsale_show_load_seconds").record(started.elapsed().as_secs_f64());
        self.state = Some(Loaded {
            show: loaded.show,
            version: loaded.version,
            snapshot_version: loaded.snapshot_version,
            snapshot_at: None,
        });
        Ok(())
    }

    #[instrument(skip_all, fields(show_id = %self.show_id, batch = batch.len()))]
    async fn process(&mut self, batch: Vec<Job>, intake: Option<&mut mpsc::Receiver<Job>>) {
        let mut replies: Vec<Option<oneshot::Sender<Result<Answer, CommandError>>>> = Vec::new();
        let mut works = Vec::with_capacity(batch.len());
        for job in batch {
            replies.push(job.reply);
            works.push(job.work);
        }
        let outcomes = self.decide_and_commit(&mut works, intake).await;
        for ((reply, work), outcome) in replies.into_iter().zip(works).zip(outcomes) {
            let answer = match (outcome, work, self.state.as_ref()) {
                (Ok(()), Work::Command(cmd), Some(state)) => Ok(answer(&state.show, &cmd)),
                (Ok(()), Work::Read(read), Some(state)) => read(&state.show),
                (Ok(()), Work::Sweep, _) => Ok(Answer::Done),
                (Ok(()), _, None) => Err(CommandError::Unavailable),
                (Err(e), _, _) => Err(e),
            };
            if let Some(reply) = reply {
                let _ = reply.send(answer);
            }
        }
    }

    /// Decides every command of the batch against the live state, appends all their events in
    /// one statement, and retries the whole batch from a reload on a version conflict.
    async fn decide_and_commit(
        &mut self,
        works: &mut [Work],
        mut intake: Option<&mut mpsc::Receiver<Job>>,
    ) -> Vec<Result<(), CommandError>> {
        let config = self.shows.inner.config.clone();
        let mut attempt = 0;
        loop {
            if let Err(e) = self.ensure_loaded().await {
                return works.iter().map(|_| Err(e.clone())).collect();
            }
            let now = self.services.clock.now();
            let Some(state) = self.state.as_mut() else {
                return works
                    .iter()
                    .map(|_| Err(CommandError::Unavailable))
                    .collect();
            };
            let mut outcomes = Vec::with_capacity(works.len());
            let mut events: Vec<ShowEvent> = Vec::new();
            for work in works.iter() {
                let command = match work {
                    Work::Command(c) => c.clone(),
                    Work::Sweep => ShowCommand::ExpireHolds {
                        hold_ids: state.show.expired_holds(now, 500),
                    },
                    Work::Read(_) => {
                        outcomes.push(Ok(()));
                        continue;
                    }
                };
                let sink = EventSink::default();
                match state.show.handle(command, &self.services, &sink).await {
                    Ok(()) => {
                        events.extend(sink.collect().await);
                        outcomes.push(Ok(()));
                    }
                    Err(e) => outcomes.push(Err(CommandError::Domain(e))),
                }
            }
            if events.is_empty() {
                return outcomes;
            }
            let started = Instant::now();
            let store = self.shows.store().clone();
            let append = store.append(self.show_id, state.version, now, &events);
            let appended = match intake.as_deref_mut() {
                Some(rx) => {
                    take_in_while(
                        append,
                        rx,
                        &state.show,
                        &mut self.carry,
                        &self.services,
                        config.max_batch,
                    )
                    .await
                }
                None => append.await,
            };
            match appended {
                Ok(()) => {
                    metrics::histogram!("onsale_commit_seconds")
                        .record(started.elapsed().as_secs_f64());
                    metrics::histogram!("onsale_commit_batch_commands").record(works.len() as f64);
                    for e in &events {
                        // By type: OrderPlaced over SeatsHeld is the hold-to-purchase conversion.
                        metrics::counter!("onsale_events_committed_total", "type" => e.event_type())
                            .increment(1);
                    }
                    state.version += events.len() as i64;
                    // A snapshot costs O(show) and saves replaying the tail, so the tail may
                    // grow as long as the show is big: the cost per event stays constant.
                    let tail = state.version - state.snapshot_version;
                    let threshold = config.snapshot_every.max(state.show.history_len() as i64);
                    let due = state
                        .snapshot_at
                        .is_none_or(|at| at.elapsed() >= config.snapshot_min_interval);
                    if due && tail >= threshold {
                        self.snapshot();
                    }
                    return outcomes;
                }
                Err(StoreError::Conflict) if attempt < config.max_conflict_retries => {
                    metrics::counter!("onsale_version_conflicts_total").increment(1);
                    warn!(
                        attempt,
                        "version conflict: another writer owns a newer version; reloading"
                    );
                    self.state = None;
                    attempt += 1;
                }
                Err(e) => {
                    warn!(error = %e, "append failed; dropping the cached show");
                    self.state = None;
                    let e = store_error(e);
                    return outcomes.iter().map(|_| Err(e.clone())).collect();
                }
            }
        }
    }

    /// Copies the committed state and serializes and writes it off the owner's path.
    fn snapshot(&mut self) {
        let Some(state) = self.state.as_mut() else {
            return;
        };
        let show = state.show.clone();
        let version = state.version;
        state.snapshot_version = version;
        state.snapshot_at = Some(Instant::now());
        let store = self.shows.store().clone();
        let show_id = self.show_id;
        tokio::spawn(async move {
            let payload =
                match tokio::task::spawn_blocking(move || serde_json::to_string(&show)).await {
                    Ok(Ok(p)) => p,
                    Ok(Err(e)) => return warn!(error = %e, "snapshot did not serialize"),
                    Err(e) => return warn!(error = %e, "snapshot task failed"),
                };
            match store.save_snapshot(show_id, version, &payload).await {
                Ok(()) => info!(%show_id, version, bytes = payload.len(), "snapshot written"),
                Err(e) => {
                    warn!(%show_id, version, error = %e, "snapshot not written; the log is still complete")
                }
            }
        });
    }
}

/// Awaits `append` while taking in the next jobs: a command the state (with the batch in flight
/// applied) refuses is answered at once, since a refusal writes nothing and needs no commit (if
/// the batch then fails to commit, the refusal was a stale read, which costs the caller a retry
/// and never correctness); every other job waits in `carry` for the next batch, where it is
/// decided again and answered only after its own commit.
async fn take_in_while<F: std::future::Future>(
    append: F,
    rx: &mut mpsc::Receiver<Job>,
    show: &Show,
    carry: &mut Vec<Job>,
    services: &ShowServices,
    max_carry: usize,
) -> F::Output {
    tokio::pin!(append);
    loop {
        if carry.len() >= max_carry {
            return append.await;
        }
        tokio::select! {
            biased;
            done = &mut append => return done,
            job = rx.recv() => {
                let Some(job) = job else { return append.await };
                let refusal = match &job.work {
                    Work::Command(cmd) => show.decide(cmd.clone(), services.clock.now()).err(),
                    Work::Read(_) | Work::Sweep => None,
                };
                match (refusal, job.reply) {
                    (Some(e), Some(reply)) => {
                        metrics::counter!("onsale_refusals_while_committing_total").increment(1);
                        let _ = reply.send(Err(CommandError::Domain(e)));
                    }
                    (_, reply) => carry.push(Job { work: job.work, reply }),
                }
            }
        }
    }
}

fn answer(show: &Show, command: &ShowCommand) -> Answer {
    let hold = |id, idem: &Option<onsale_domain::Idempotency>, account| {
        let id = idem
            .as_ref()
            .and_then(|i| show.hold_for_key(account, &i.key))
            .unwrap_or(id);
        show.hold_view(&id).map_or(Answer::Done, Answer::Hold)
    };
    match command {
        ShowCommand::HoldSeats {
            hold_id,
            idempotency,
            account,
            ..
        }
        | ShowCommand::HoldBestAvailable {
            hold_id,
            idempotency,
            account,
            ..
        } => hold(*hold_id, idempotency, account),
        ShowCommand::PlaceOrder {
            order_id,
            account,
            idempotency,
            ..
        } => {
            let id = show
                .order_for_key(account, &idempotency.key)
                .unwrap_or(*order_id);
            show.order_view(&id).map_or(Answer::Done, Answer::Order)
        }
        _ => Answer::Done,
    }
}

fn store_error(e: StoreError) -> CommandError {
    match e {
        StoreError::Unavailable(_) | StoreError::Conflict => CommandError::Unavailable,
        StoreError::Corrupt(m) => CommandError::Internal(m),
    }
}
