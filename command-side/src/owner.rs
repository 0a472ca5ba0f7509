//! One owner task per show. It keeps the live aggregate in memory, serializes that show's
//! commands, and commits the events of many commands in one append (group commit). Each
//! command is decided the moment it is taken in, against the state with every earlier decision
//! applied: a refusal writes nothing and is answered at once; everything else joins the open
//! batch, which is sent as soon as the append in flight has committed, and is answered only
//! after its own append committed. So the owner decides the next batch while PostgreSQL writes
//! the current one, and one append per show is in flight at a time (docs/adr/004).
//!
//! On a version conflict (another process wrote the show) the cached state is dropped, the show
//! is reloaded from snapshot plus tail and what was not committed is decided again. When
//! PostgreSQL fails the cached state is dropped too (it holds effects that may not have
//! committed) and the callers get `Unavailable`: nothing is acknowledged that was not
//! committed.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cqrs_es::event_sink::EventSink;
use cqrs_es::{Aggregate, DomainEvent};
use onsale_domain::{
    Clock, HoldView, OrderView, Show, ShowCommand, ShowError, ShowEvent, ShowId, ShowServices,
};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use onsale_eventlog::{EventLog, StoreError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Tuning of the owners.
#[derive(Debug, Clone, clap::Args)]
pub struct OwnerConfig {
    /// The most commands decided and committed together.
    #[arg(
        id = "max_batch",
        long = "max-batch",
        env = "ONSALE_MAX_BATCH",
        default_value_t = 512
    )]
    pub max_batch: usize,
    /// A snapshot is written after this many events since the last one, or as many as the show
    /// has holds and orders if that is more...
    #[arg(
        id = "snapshot_every",
        long = "snapshot-every",
        env = "ONSALE_SNAPSHOT_EVERY",
        default_value_t = 10_000
    )]
    pub snapshot_every: i64,
    /// ...but not more often than this (seconds): a snapshot copies the whole show, so during a
    /// rush it must not run on every few thousand events (BENCHMARKS.md shows what that costs).
    #[arg(long = "snapshot-min-secs", env = "ONSALE_SNAPSHOT_MIN_SECS", default_value = "10", value_parser = secs)]
    pub snapshot_min_interval: Duration,
    /// How often (milliseconds) the sweeper looks for lapsed holds.
    #[arg(long = "sweep-every-ms", env = "ONSALE_SWEEP_EVERY_MS", default_value = "1000", value_parser = millis)]
    pub sweep_every: Duration,
    /// How many reloads a batch may take on version conflicts before giving up.
    #[arg(
        id = "max_conflict_retries",
        long = "max-conflict-retries",
        env = "ONSALE_MAX_CONFLICT_RETRIES",
        default_value_t = 5
    )]
    pub max_conflict_retries: u32,
    /// How long (milliseconds) a caller waits for its command to be decided and committed. Past
    /// it the answer is 503 UNAVAILABLE with Retry-After and nothing is acknowledged: a primary
    /// whose synchronous standbys are all gone holds every commit (it fails closed), and a
    /// commit that lands later is found by the retry's Idempotency-Key.
    #[arg(long = "commit-timeout-ms", env = "ONSALE_COMMIT_TIMEOUT_MS", default_value = "5000", value_parser = millis)]
    pub commit_timeout: Duration,
    /// Commands waiting for one show beyond this are answered 503 OVERLOADED instead of queued.
    #[arg(id = "max_queue", long = "max-queue", env = "ONSALE_MAX_QUEUE", default_value_t = 20_000, value_parser = at_least_one)]
    pub max_queue: usize,
}

fn secs(s: &str) -> Result<Duration, std::num::ParseIntError> {
    s.parse().map(Duration::from_secs)
}

fn millis(s: &str) -> Result<Duration, std::num::ParseIntError> {
    s.parse().map(Duration::from_millis)
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s} is not a whole number of at least 1")),
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
    #[error("this process is shutting down")]
    ShuttingDown,
    #[error("internal error: {0}")]
    Internal(String),
}

/// What a command answers with, computed from the committed state.
#[derive(Debug, Clone)]
pub enum Answer {
    Done,
    Hold(HoldView),
    Order(OrderView),
}

/// A query's result on its way out of the owner, typed again by [`Shows::query`].
type Value = Box<dyn Any + Send>;

/// A query runs against the live state and is answered once everything decided before it has
/// committed; it may run again if that state is reloaded.
type Read = Arc<dyn Fn(&Show) -> Result<Value, CommandError> + Send + Sync>;

/// What a job is answered with.
enum Reply {
    Answer(Answer),
    Value(Value),
}

enum Work {
    Command(ShowCommand),
    Read(Read),
    Sweep,
}

struct Job {
    work: Work,
    reply: Option<oneshot::Sender<Result<Reply, CommandError>>>,
    /// How many times the job was decided again after a version conflict.
    attempts: u32,
}

/// The registry of show owners in this process.
#[derive(Clone, Debug)]
pub struct Shows {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    log: Arc<dyn EventLog>,
    clock: Arc<dyn Clock>,
    /// Cancelled: owners take no more commands, commit and answer what they took, and stop.
    shutdown: CancellationToken,
    /// Every owner and every append and snapshot they start: the server waits for them.
    tasks: TaskTracker,
    config: OwnerConfig,
    owners: Mutex<HashMap<ShowId, mpsc::Sender<Job>>>,
    /// Whether a show has a waiting room: fixed when it is scheduled, so cached for good.
    waiting_rooms: Mutex<HashMap<ShowId, bool>>,
}

impl Shows {
    pub fn new(
        log: Arc<dyn EventLog>,
        clock: Arc<dyn Clock>,
        config: OwnerConfig,
        shutdown: CancellationToken,
        tasks: TaskTracker,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                log,
                clock,
                shutdown,
                tasks,
                config,
                owners: Mutex::new(HashMap::new()),
                waiting_rooms: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub fn log(&self) -> &Arc<dyn EventLog> {
        &self.inner.log
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
        match self.submit(show, Work::Command(command)).await? {
            Reply::Answer(a) => Ok(a),
            Reply::Value(_) => Err(CommandError::Internal("a command answered a query".into())),
        }
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
        let w = self
            .query(show, |s| {
                s.info()
                    .map(|i| i.waiting_room)
                    .ok_or(ShowError::ShowNotFound)
            })
            .await?;
        self.inner
            .waiting_rooms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(show, w);
        Ok(w)
    }

    /// Asks the committed state of a show, through its owner, with the domain's own rules:
    /// `f` runs once everything decided before it is committed (and again if the show is
    /// reloaded meanwhile).
    pub async fn query<T, F>(&self, show: ShowId, f: F) -> Result<T, CommandError>
    where
        T: Send + 'static,
        F: Fn(&Show) -> Result<T, ShowError> + Send + Sync + 'static,
    {
        let read: Read = Arc::new(move |s| Ok(Box::new(f(s)?) as Value));
        match self.submit(show, Work::Read(read)).await? {
            Reply::Value(v) => v
                .downcast::<T>()
                .map(|v| *v)
                .map_err(|_| CommandError::Internal("a query answered another type".into())),
            Reply::Answer(_) => Err(CommandError::Internal("a query answered a command".into())),
        }
    }

    async fn submit(&self, show: ShowId, work: Work) -> Result<Reply, CommandError> {
        if self.inner.shutdown.is_cancelled() {
            // Shutting down: nothing new is taken (503 with Retry-After; another node or this
            // one once restarted answers the retry).
            return Err(CommandError::ShuttingDown);
        }
        let (tx, rx) = oneshot::channel();
        let mut job = Job {
            work,
            reply: Some(tx),
            attempts: 0,
        };
        for _ in 0..2 {
            let sender = self.owner(show);
            match sender.try_send(job) {
                Ok(()) => {
                    let bound = self.inner.config.commit_timeout;
                    return match tokio::time::timeout(bound, rx).await {
                        Ok(answer) => answer
                            .map_err(|_| CommandError::Internal("show owner stopped".into()))?,
                        Err(_) => {
                            metrics::counter!(onsale_telemetry::metrics::COMMITS_TIMED_OUT_TOTAL)
                                .increment(1);
                            Err(CommandError::Unavailable)
                        }
                    };
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // Shed load with a clear answer rather than queue without bound.
                    metrics::counter!(onsale_telemetry::metrics::COMMANDS_SHED_TOTAL).increment(1);
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
        self.inner
            .tasks
            .spawn(Owner::new(show, self.clone()).run(rx));
        tx
    }
}

struct Loaded {
    /// The committed state plus the batch in flight and the open batch.
    show: Show,
    /// The sequence of the last committed event.
    committed: i64,
    snapshot_version: i64,
    snapshot_at: Option<Instant>,
}

/// A job decided against the live state, answered once the batch it joined commits.
struct Decided {
    job: Job,
    answer: Result<Reply, CommandError>,
}

/// The batch being decided while the one before it commits.
#[derive(Default)]
struct Batch {
    events: Vec<ShowEvent>,
    decided: Vec<Decided>,
}

/// The append in flight.
struct InFlight {
    decided: Vec<Decided>,
    types: Vec<String>,
    started: Instant,
}

struct Owner {
    show_id: ShowId,
    shows: Shows,
    state: Option<Loaded>,
    services: ShowServices,
    open: Batch,
    in_flight: Option<InFlight>,
    done_tx: mpsc::UnboundedSender<Result<(), StoreError>>,
    done_rx: mpsc::UnboundedReceiver<Result<(), StoreError>>,
    /// An append failed: once it has settled the show is reloaded and `redo` (then the open
    /// batch) decided again.
    broken: bool,
    redo: Vec<Job>,
    snapshot_due: bool,
}

impl Owner {
    fn new(show_id: ShowId, shows: Shows) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let services = ShowServices {
            clock: shows.inner.clock.clone(),
        };
        Self {
            show_id,
            shows,
            state: None,
            services,
            open: Batch::default(),
            in_flight: None,
            done_tx,
            done_rx,
            broken: false,
            redo: Vec::new(),
            snapshot_due: false,
        }
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        let config = self.shows.inner.config.clone();
        let mut sweep = tokio::time::interval(config.sweep_every);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut retiring, mut closed, mut stopping) = (false, false, false);
        let shutdown = self.shows.inner.shutdown.clone();
        loop {
            if self.broken && self.in_flight.is_none() {
                self.recover().await;
            }
            self.dispatch();
            if self.in_flight.is_none() && self.open.events.is_empty() {
                // Nothing uncommitted: answers that wrote nothing go out, and a due snapshot
                // copies exactly the committed state.
                self.release_open();
                if self.snapshot_due {
                    self.snapshot();
                }
                if closed {
                    break;
                }
                if !retiring && self.state.as_ref().is_some_and(|s| s.committed == 0) {
                    // Nothing exists under this id: retire rather than keep an empty owner
                    // around, after answering what is already queued. (Once: a later command
                    // for this id starts a fresh owner, whose entry must stay.)
                    retiring = true;
                    self.shows.lock().remove(&self.show_id);
                    rx.close();
                }
            }
            let accepting = !closed
                && !self.broken
                && !self.snapshot_due
                && self.open.decided.len() < config.max_batch;
            tokio::select! {
                biased;
                Some(result) = self.done_rx.recv(), if self.in_flight.is_some() => {
                    // What is already queued joins the batch about to be sent.
                    if accepting {
                        self.take_queued(&mut rx).await;
                    }
                    self.settle(result);
                }
                job = rx.recv(), if accepting => match job {
                    Some(job) => {
                        self.take(job).await;
                        self.take_queued(&mut rx).await;
                    }
                    None => closed = true,
                },
                _ = sweep.tick(), if accepting && self.state.is_some() => {
                    self.take(Job { work: Work::Sweep, reply: None, attempts: 0 }).await;
                }
                _ = shutdown.cancelled(), if !stopping => {
                    // What is queued is still taken, committed and answered; then `closed`.
                    stopping = true;
                    rx.close();
                }
                else => tokio::task::yield_now().await,
            }
        }
    }

    /// Takes whatever is already queued into the open batch, up to the batch limit.
    async fn take_queued(&mut self, rx: &mut mpsc::Receiver<Job>) {
        while self.open.decided.len() < self.shows.inner.config.max_batch {
            match rx.try_recv() {
                Ok(job) => self.take(job).await,
                Err(_) => break,
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
            .log()
            .load(self.show_id)
            .await
            .map_err(store_error)?;
        metrics::histogram!(onsale_telemetry::metrics::SHOW_LOAD_SECONDS)
            .record(started.elapsed().as_secs_f64());
        self.state = Some(Loaded {
            show: loaded.show,
            committed: loaded.version,
            snapshot_version: loaded.snapshot_version,
            snapshot_at: None,
        });
        Ok(())
    }

    /// Decides one job against the live state. A refusal writes nothing and is answered at
    /// once (if a batch it was decided against then fails to commit, it was a stale read: the
    /// caller tries again, and no seat is ever sold on it). Everything else joins the open
    /// batch and is answered when that batch commits.
    async fn take(&mut self, job: Job) {
        if let Err(e) = self.ensure_loaded().await {
            return reply(job, Err(e));
        }
        let Some(state) = self.state.as_mut() else {
            return reply(job, Err(CommandError::Unavailable));
        };
        let command = match &job.work {
            Work::Read(read) => {
                let answer = read(&state.show).map(Reply::Value);
                self.open.decided.push(Decided { job, answer });
                return;
            }
            Work::Command(command) => command.clone(),
            Work::Sweep => {
                let hold_ids = state.show.expired_holds(self.services.clock.now(), 500);
                if hold_ids.is_empty() {
                    return;
                }
                ShowCommand::ExpireHolds { hold_ids }
            }
        };
        let sink = EventSink::default();
        match state.show.handle(command, &self.services, &sink).await {
            Ok(()) => {
                let answer = match &job.work {
                    Work::Command(command) => Ok(Reply::Answer(answer(&state.show, command))),
                    _ => Ok(Reply::Answer(Answer::Done)),
                };
                self.open.events.extend(sink.collect().await);
                self.open.decided.push(Decided { job, answer });
            }
            Err(e) => {
                if job.reply.is_some() {
                    metrics::counter!(onsale_telemetry::metrics::REFUSALS_TOTAL).increment(1);
                }
                reply(job, Err(CommandError::Domain(e)));
            }
        }
    }

    /// Sends the open batch when no append is in flight. Its events were decided while the
    /// previous append was in flight; they are serialized and written by the append's task.
    fn dispatch(&mut self) {
        if self.broken || self.in_flight.is_some() || self.open.events.is_empty() {
            return;
        }
        let Some(state) = self.state.as_ref() else {
            return;
        };
        let Batch { events, decided } = std::mem::take(&mut self.open);
        let after = state.committed;
        let types = events.iter().map(DomainEvent::event_type).collect();
        let (log, done) = (self.shows.log().clone(), self.done_tx.clone());
        let (show, at) = (self.show_id, self.services.clock.now());
        self.shows.inner.tasks.spawn(async move {
            let _ = done.send(log.append(show, after, at, &events).await);
        });
        self.in_flight = Some(InFlight {
            decided,
            types,
            started: Instant::now(),
        });
    }

    /// The append in flight finished. On success the next batch is sent before this one's
    /// callers are answered, so answering overlaps PostgreSQL's work on the next append.
    fn settle(&mut self, result: Result<(), StoreError>) {
        let Some(batch) = self.in_flight.take() else {
            return;
        };
        if let Err(e) = result {
            self.broken = true;
            return self.failed(batch.decided, e);
        }
        let config = &self.shows.inner.config;
        metrics::histogram!(onsale_telemetry::metrics::COMMIT_SECONDS)
            .record(batch.started.elapsed().as_secs_f64());
        metrics::histogram!(onsale_telemetry::metrics::COMMIT_BATCH_COMMANDS)
            .record(batch.decided.len() as f64);
        for t in &batch.types {
            // By type: OrderPlaced over SeatsHeld is the hold-to-purchase conversion.
            metrics::counter!(onsale_telemetry::metrics::EVENTS_COMMITTED_TOTAL, "type" => t.clone()).increment(1);
        }
        if let Some(state) = self.state.as_mut() {
            state.committed += batch.types.len() as i64;
            // A snapshot costs O(show) and saves replaying the tail, so the tail may grow as
            // long as the show is big: the cost per event stays constant.
            let tail = state.committed - state.snapshot_version;
            let threshold = config.snapshot_every.max(state.show.history_len() as i64);
            let due = state
                .snapshot_at
                .is_none_or(|at| at.elapsed() >= config.snapshot_min_interval);
            if due && tail >= threshold {
                self.snapshot_due = true;
            }
        }
        self.dispatch();
        for d in batch.decided {
            reply(d.job, d.answer);
        }
    }

    /// An append that did not commit, or whose commit went unanswered. On a version conflict
    /// its jobs are decided again after the reload (a bounded number of times); otherwise
    /// their callers hear that the store is unavailable: nothing is acknowledged that may not
    /// have committed.
    fn failed(&mut self, decided: Vec<Decided>, e: StoreError) {
        let max = self.shows.inner.config.max_conflict_retries;
        match e {
            StoreError::Conflict => {
                metrics::counter!(onsale_telemetry::metrics::VERSION_CONFLICTS_TOTAL).increment(1);
                warn!("version conflict: another writer appended to this show; reloading");
                for d in decided {
                    if d.job.attempts < max {
                        self.redo.push(d.job);
                    } else {
                        reply(d.job, Err(CommandError::Unavailable));
                    }
                }
            }
            e => {
                warn!(error = %e, "append failed; dropping the cached show");
                let e = store_error(e);
                for d in decided {
                    reply(d.job, Err(e.clone()));
                }
            }
        }
    }

    /// After a failed append: reload the show from the store and decide again what was not
    /// committed (the conflicted batch, then the open one).
    async fn recover(&mut self) {
        self.broken = false;
        self.state = None;
        let mut jobs = std::mem::take(&mut self.redo);
        jobs.extend(
            std::mem::take(&mut self.open)
                .decided
                .into_iter()
                .map(|d| d.job),
        );
        for mut job in jobs {
            job.attempts += 1;
            self.take(job).await;
        }
    }

    /// Answers the open batch's jobs when it wrote nothing and nothing is in flight.
    fn release_open(&mut self) {
        for d in std::mem::take(&mut self.open.decided) {
            reply(d.job, d.answer);
        }
    }

    /// Copies the committed state (called only when nothing uncommitted is applied to it) and
    /// serializes and writes it off the owner's path.
    fn snapshot(&mut self) {
        self.snapshot_due = false;
        let Some(state) = self.state.as_mut() else {
            return;
        };
        let show = state.show.clone();
        let version = state.committed;
        state.snapshot_version = version;
        state.snapshot_at = Some(Instant::now());
        let log = self.shows.log().clone();
        let show_id = self.show_id;
        self.shows.inner.tasks.spawn(async move {
            let payload =
                match tokio::task::spawn_blocking(move || serde_json::to_string(&show)).await {
                    Ok(Ok(p)) => p,
                    Ok(Err(e)) => return warn!(error = %e, "snapshot did not serialize"),
                    Err(e) => return warn!(error = %e, "snapshot task failed"),
                };
            match log.save_snapshot(show_id, version, &payload).await {
                Ok(()) => info!(%show_id, version, bytes = payload.len(), "snapshot written"),
                Err(e) => {
                    warn!(%show_id, version, error = %e, "snapshot not written; the log is still complete")
                }
            }
        });
    }
}

fn reply(job: Job, answer: Result<Reply, CommandError>) {
    if let Some(reply) = job.reply {
        let _ = reply.send(answer);
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
