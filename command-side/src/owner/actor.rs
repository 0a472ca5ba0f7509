//! One show's owner: the task that holds the live aggregate, decides each job against it and
//! commits the decisions in batches (the module docs of `owner` say how). Its life is three
//! small state machines: its queue ([`Queue`]), whose the show is ([`Tenure`]) and its append
//! ([`Append`]); `run` decides each step from them. It shares the node's [`Context`] (read-only
//! but for the lease a claim renews) and calls nothing of the registry that started it: it
//! returns why it ended ([`Exit`]), and the registry acts on that.

use std::sync::Arc;

use cqrs_es::event_sink::EventSink;
use cqrs_es::{Aggregate, DomainEvent};
use onsale_domain::{Show, ShowCommand, ShowEvent, ShowId, ShowServices};
use onsale_eventlog::{Claim, EventLog, Node, ShardId, StoreError, Traced};
use onsale_telemetry::trace;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{info, warn};

use super::context::Context;
use super::job::{reply, store_error, Job, Reply, Work};
use crate::known::KnownIds;
use crate::protocol::{Answer, CommandError};

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
    /// Of `decided`, the refusals waiting for what they were decided on to commit: they write
    /// nothing, so they do not count against the batch's size.
    refused: usize,
    /// The events decided for a sampled trace, with the span of the job they were decided for.
    traced: Vec<(std::ops::Range<usize>, tracing::Span)>,
}

/// The append in flight.
struct InFlight {
    decided: Vec<Decided>,
    types: Vec<String>,
    started: Instant,
}

/// Why an owner ended: what the registry that started it does next.
pub(super) enum Exit {
    /// Its queue closed and everything it took was answered (the process stops, or nothing
    /// exists under the id and it retired).
    Done,
    /// The show is another node's (`owner`, when a claim said which): `jobs`, taken or queued
    /// here and not answered, go to the show's owner.
    Moved { owner: Option<Node>, jobs: Vec<Job> },
}

/// The owner's queue of jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    /// Taking jobs.
    Open,
    /// Closed to new jobs (the process stops, or the owner retired); those already queued are
    /// still taken, committed and answered.
    Closing,
    /// Closed and empty: the owner ends once nothing is uncommitted.
    Closed,
}

/// Whose the show is, as far as this owner knows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tenure {
    /// This owner's (once claimed), or nobody's yet.
    Owned,
    /// Nothing exists under the id: its claim is released and the owner ends once its queue is
    /// drained.
    Retired,
    /// Another node's (fenced, or found claimed): what reaches this owner is routed anew once
    /// the append in flight settles.
    Moved(Option<Node>),
}

/// The owner's append.
enum Append {
    /// Nothing in flight.
    Idle,
    InFlight(InFlight),
    /// An append failed: the show is reloaded and `redo` (then the open batch) decided again
    /// before anything else.
    Failed,
}

pub(super) struct Owner {
    show_id: ShowId,
    ctx: Arc<Context>,
    /// The shard the show lives on and its log, found before the claim: the claim, the load,
    /// every append and snapshot go there (a show moved away since is fenced there).
    shard: Option<(ShardId, Arc<dyn EventLog>)>,
    /// The epoch the show was claimed with: every append carries it (the fence).
    epoch: Option<i64>,
    queue: Queue,
    tenure: Tenure,
    append: Append,
    /// Jobs taken after the show was found to be another node's, to route anew.
    adrift: Vec<Job>,
    state: Option<Loaded>,
    services: ShowServices,
    open: Batch,
    done_tx: mpsc::UnboundedSender<Result<(), StoreError>>,
    done_rx: mpsc::UnboundedReceiver<Result<(), StoreError>>,
    /// Jobs of a failed append, decided again after the reload.
    redo: Vec<Job>,
    snapshot_due: bool,
    /// The last sweep found a full chunk of lapsed holds: sweep again now, not at the next
    /// tick (a burst of short holds lapses faster than one chunk a tick).
    sweep_more: bool,
    /// The ids of the show, for lookups that skip the queue.
    known: Arc<KnownIds>,
}

impl Owner {
    pub(super) fn new(show_id: ShowId, ctx: Arc<Context>, known: Arc<KnownIds>) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let services = ShowServices {
            clock: ctx.clock.clone(),
        };
        Self {
            show_id,
            ctx,
            shard: None,
            epoch: None,
            queue: Queue::Open,
            tenure: Tenure::Owned,
            append: Append::Idle,
            adrift: Vec::new(),
            state: None,
            services,
            open: Batch::default(),
            done_tx,
            done_rx,
            redo: Vec::new(),
            snapshot_due: false,
            sweep_more: false,
            known,
        }
    }

    /// The show's shard's log once it is found (the claim finds it first), else the log
    /// that finds it.
    fn log(&self) -> Arc<dyn EventLog> {
        match &self.shard {
            Some((_, log)) => log.clone(),
            None => self.ctx.shards.clone(),
        }
    }

    /// Whether this node's lease on the show's shard is proven.
    fn lease_held(&self) -> bool {
        self.shard
            .as_ref()
            .is_some_and(|(shard, _)| self.ctx.leases.held_on(*shard))
    }

    fn in_flight(&self) -> bool {
        matches!(self.append, Append::InFlight(_))
    }

    /// Runs until the queue is closed and drained (or the show turns out to be another
    /// node's), and says why it ended.
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Job>) -> Exit {
        let config = self.ctx.config.clone();
        let mut sweep = tokio::time::interval(config.sweep_every);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shutdown = self.ctx.shutdown.clone();
        loop {
            if matches!(self.tenure, Tenure::Moved(_)) && !self.in_flight() {
                return self.hand_over(rx);
            }
            if matches!(self.append, Append::Failed) {
                self.recover().await;
            }
            self.dispatch();
            if !self.in_flight() && self.open.events.is_empty() {
                // Nothing uncommitted: answers that wrote nothing go out, and a due snapshot
                // copies exactly the committed state.
                self.release_open();
                if self.snapshot_due {
                    self.snapshot();
                }
                if self.queue == Queue::Closed {
                    return Exit::Done;
                }
                if self.tenure == Tenure::Owned
                    && self.state.as_ref().is_some_and(|s| s.committed == 0)
                {
                    self.retire(&mut rx);
                }
            }
            let accepting = self.queue != Queue::Closed
                && !matches!(self.append, Append::Failed)
                && !self.snapshot_due
                && self.open.decided.len().saturating_sub(self.open.refused) < config.max_batch;
            if accepting && self.sweep_more && self.state.is_some() {
                self.take(Job::sweep()).await;
            }
            tokio::select! {
                biased;
                Some(result) = self.done_rx.recv(), if self.in_flight() => {
                    // What is already queued joins the batch about to be sent.
                    if accepting {
                        self.take_queued(&mut rx).await;
                    }
                    self.settle(result);
                }
                // Before the queue: under a steady rush the queue is never empty, and a
                // sweep polled after it would never run.
                _ = sweep.tick(), if accepting && self.state.is_some() => {
                    self.take(Job::sweep()).await;
                }
                job = rx.recv(), if accepting => match job {
                    Some(job) => {
                        self.take(job).await;
                        self.take_queued(&mut rx).await;
                    }
                    None => self.queue = Queue::Closed,
                },
                _ = shutdown.cancelled(), if self.queue == Queue::Open => {
                    // What is queued is still taken, committed and answered; then `Closed`.
                    self.queue = Queue::Closing;
                    rx.close();
                }
                else => tokio::task::yield_now().await,
            }
        }
    }

    /// Nothing exists under this id: retire rather than keep an empty owner around, after
    /// answering what is already queued (a later command for this id starts a fresh owner:
    /// the registry starts one for a closed queue). The claim goes, so random ids leave no
    /// rows behind.
    fn retire(&mut self, rx: &mut mpsc::Receiver<Job>) {
        self.tenure = Tenure::Retired;
        self.queue = Queue::Closing;
        rx.close();
        if let Some(epoch) = self.epoch {
            let (log, show) = (self.log(), self.show_id);
            self.ctx.tasks.spawn(async move {
                let _ = log.release(show, epoch).await;
            });
        }
    }

    /// This node does not own the show (any more): every job not answered yet (decided here
    /// on a state that is not the show's any more, or queued) goes to the show's owner.
    fn hand_over(mut self, mut rx: mpsc::Receiver<Job>) -> Exit {
        rx.close();
        let mut jobs = std::mem::take(&mut self.adrift);
        jobs.append(&mut self.redo);
        jobs.extend(
            std::mem::take(&mut self.open)
                .decided
                .into_iter()
                .map(|d| d.job),
        );
        while let Ok(job) = rx.try_recv() {
            jobs.push(job);
        }
        let owner = match &mut self.tenure {
            Tenure::Moved(owner) => owner.take(),
            Tenure::Owned | Tenure::Retired => None,
        };
        Exit::Moved { owner, jobs }
    }

    /// Takes whatever is already queued into the open batch, up to the batch limit.
    async fn take_queued(&mut self, rx: &mut mpsc::Receiver<Job>) {
        while self.open.decided.len().saturating_sub(self.open.refused) < self.ctx.config.max_batch
        {
            match rx.try_recv() {
                Ok(job) => self.take(job).await,
                Err(_) => break,
            }
        }
    }

    /// Claims the show if this owner has not yet, then loads it if it is not in memory.
    /// `Ok(false)`: another live node owns the show.
    async fn ensure_loaded(&mut self) -> Result<bool, CommandError> {
        if self.state.is_some() {
            return Ok(true);
        }
        let (shard, log) = match &self.shard {
            Some((shard, log)) => (*shard, log.clone()),
            None => {
                let shards = &self.ctx.shards;
                let shard = shards.locate(self.show_id).await.map_err(store_error)?;
                let log = shards.log(shard).map_err(store_error)?.clone();
                self.shard = Some((shard, log.clone()));
                (shard, log)
            }
        };
        if self.epoch.is_none() {
            let (node, ttl) = (self.ctx.node(), self.ctx.config.cluster.node_ttl);
            let started = Instant::now();
            match log.claim(self.show_id, &node, ttl).await {
                Ok(Claim::Owned { epoch }) => {
                    // The claim renewed this node's registration on the shard too.
                    self.ctx.leases.renewed(shard, started);
                    metrics::counter!(onsale_telemetry::metrics::SHOWS_CLAIMED_TOTAL).increment(1);
                    self.epoch = Some(epoch);
                }
                Ok(Claim::Elsewhere(other)) if other.id == onsale_eventlog::moving::MOVED_NODE => {
                    // The show moved to another shard (or is moving: docs/adr/022). Where it is
                    // now is asked again next time; until the directory says so, callers retry.
                    self.ctx.shards.forget(self.show_id);
                    self.shard = None;
                    return Err(CommandError::Moving);
                }
                Ok(Claim::OtherRegion(region)) => return Err(CommandError::OtherRegion { region }),
                Ok(Claim::Elsewhere(other)) => {
                    self.tenure = Tenure::Moved(Some(other));
                    return Ok(false);
                }
                Err(e) => return Err(store_error(e)),
            }
        }
        let started = Instant::now();
        let loaded = log.load(self.show_id).await.map_err(store_error)?;
        metrics::histogram!(onsale_telemetry::metrics::SHOW_LOAD_SECONDS)
            .record(started.elapsed().as_secs_f64());
        self.known.rebuild(&loaded.show);
        self.state = Some(Loaded {
            show: loaded.show,
            committed: loaded.version,
            snapshot_version: loaded.snapshot_version,
            snapshot_at: None,
        });
        Ok(true)
    }

    /// Decides one job against the live state (everything decided before it, committed or
    /// not), and answers it once all of that is committed: with the batch it joins, or at once
    /// if nothing is uncommitted. A refusal too, except a hold's: decided on events a failed
    /// (fenced, lost) append never wrote, it would be an answer the log contradicts, and
    /// callers act on refusals as final (the payment worker closes a payment whose outcome the
    /// state table refuses). A hold's refusal goes out at once: it writes nothing and is
    /// advisory (the seats were taken by a decision that commits unless its append fails; the
    /// fan tries again), and the rush is made of them.
    async fn take(&mut self, job: Job) {
        if matches!(self.tenure, Tenure::Moved(_)) {
            return self.adrift.push(job);
        }
        match self.ensure_loaded().await {
            Ok(true) => {}
            Ok(false) => return self.adrift.push(job),
            Err(e) => return reply(job, Err(e)),
        }
        if !self.lease_held() {
            // Paused or cut off past the lease: another node may own the show and have
            // changed it, so nothing is answered from this state (appends would be fenced;
            // refusals and reads would not). The caller retries; a heartbeat either proves
            // the lease again or retires this owner.
            metrics::counter!(onsale_telemetry::metrics::LEASE_UNPROVEN_TOTAL).increment(1);
            return reply(job, Err(CommandError::Unavailable));
        }
        let Some(state) = self.state.as_mut() else {
            return reply(job, Err(CommandError::Unavailable));
        };
        let command = match &job.work {
            Work::Ask(query) => {
                let answer = query
                    .ask(&state.show)
                    .map(Reply::Found)
                    .map_err(CommandError::Domain);
                self.open.decided.push(Decided { job, answer });
                return;
            }
            Work::Wake => {
                let answer = Ok(Reply::Answer(Answer::Done));
                self.open.decided.push(Decided { job, answer });
                return;
            }
            Work::Command(command) => command.clone(),
            Work::Sweep => {
                let now = self.services.clock.now();
                if let Some(first) = state.show.first_expiry().filter(|at| *at <= now) {
                    // How late the sweeper takes the hold that lapsed first: the owner's own
                    // measure (the monitor's reads the projection, behind it).
                    let late = (now - first).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
                    metrics::histogram!(onsale_telemetry::metrics::SWEEP_LAG_SECONDS).record(late);
                }
                let hold_ids = state.show.expired_holds(now, SWEEP_CHUNK);
                self.sweep_more = hold_ids.len() == SWEEP_CHUNK;
                if hold_ids.is_empty() {
                    return;
                }
                ShowCommand::ExpireHolds { hold_ids }
            }
        };
        let sink = EventSink::default();
        let traced = trace::sampled(&job.span);
        let decide = traced.then(|| {
            tracing::info_span!(target: trace::TARGET, parent: &job.span, "owner.decide", show = %self.show_id)
        });
        let decided = state.show.handle(command, &self.services, &sink).await;
        drop(decide);
        match decided {
            Ok(()) => {
                let answer = match &job.work {
                    Work::Command(command) => Ok(Reply::Answer(answer(&state.show, command))),
                    _ => Ok(Reply::Answer(Answer::Done)),
                };
                let events = sink.collect().await;
                self.known.note(&events);
                let first = self.open.events.len();
                self.open.events.extend(events);
                if traced {
                    let range = first..self.open.events.len();
                    self.open.traced.push((range, job.span.clone()));
                }
                self.open.decided.push(Decided { job, answer });
            }
            Err(e) => {
                if job.reply.is_some() {
                    metrics::counter!(onsale_telemetry::metrics::REFUSALS_TOTAL).increment(1);
                }
                if matches!(job.work, Work::Sweep) {
                    // Not again at once: the next tick tries.
                    self.sweep_more = false;
                }
                let answer = Err(CommandError::Domain(e));
                let advisory = matches!(
                    job.work,
                    Work::Command(
                        ShowCommand::HoldSeats { .. } | ShowCommand::HoldBestAvailable { .. }
                    )
                );
                if !advisory && (self.in_flight() || !self.open.events.is_empty()) {
                    self.open.refused += 1;
                    self.open.decided.push(Decided { job, answer });
                } else {
                    reply(job, answer);
                }
            }
        }
    }

    /// Sends the open batch when no append is in flight. Its events were decided while the
    /// previous append was in flight; they are serialized and written by the append's task.
    fn dispatch(&mut self) {
        if !matches!(self.append, Append::Idle) || self.open.events.is_empty() {
            return;
        }
        let (Some(state), Some(epoch)) = (self.state.as_ref(), self.epoch) else {
            return;
        };
        let Batch {
            events,
            decided,
            traced,
            ..
        } = std::mem::take(&mut self.open);
        let after = state.committed;
        let types = events.iter().map(DomainEvent::event_type).collect();
        let (log, done) = (self.log(), self.done_tx.clone());
        let (show, at) = (self.show_id, self.services.clock.now());
        // One span per traced job, each the whole append (one statement for the batch); the
        // events carry it on, through their metadata, to the relay.
        let (spans, traces): (Vec<_>, Vec<_>) = traced
            .into_iter()
            .map(|(range, parent)| {
                let span = tracing::info_span!(target: trace::TARGET, parent: &parent, "eventlog.append", show = %show, batch_events = events.len());
                let traceparent = trace::traceparent(&span).unwrap_or_default();
                (span, Traced { events: range, traceparent })
            })
            .unzip();
        self.ctx.tasks.spawn(async move {
            let _ = done.send(log.append(show, epoch, after, at, &events, &traces).await);
            drop(spans);
        });
        self.append = Append::InFlight(InFlight {
            decided,
            types,
            started: Instant::now(),
        });
    }

    /// The append in flight finished. On success the next batch is sent before this one's
    /// callers are answered, so answering overlaps PostgreSQL's work on the next append.
    fn settle(&mut self, result: Result<(), StoreError>) {
        let batch = match std::mem::replace(&mut self.append, Append::Idle) {
            Append::InFlight(batch) => batch,
            other => {
                self.append = other;
                return;
            }
        };
        if let Err(StoreError::Fenced) = result {
            // Another node claimed the show while this one was presumed dead: nothing of the
            // batch was written; it (and all after it) is decided again by the show's owner.
            metrics::counter!(onsale_telemetry::metrics::APPENDS_FENCED_TOTAL).increment(1);
            warn!(show = %self.show_id, "append fenced: another node owns this show now");
            if !matches!(self.tenure, Tenure::Moved(_)) {
                self.tenure = Tenure::Moved(None);
            }
            self.adrift.extend(batch.decided.into_iter().map(|d| d.job));
            return;
        }
        if let Err(e) = result {
            self.append = Append::Failed;
            #[cfg(feature = "planted-bugs")]
            if onsale_domain::plant::planted(onsale_domain::plant::Bug::AckBeforeCommit) {
                for d in batch.decided {
                    reply(d.job, d.answer);
                }
                return;
            }
            return self.failed(batch.decided, e);
        }
        let config = &self.ctx.config;
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
        let max = self.ctx.config.max_conflict_retries;
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
        self.append = Append::Idle;
        self.state = None;
        self.known.unknown();
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
        self.open.refused = 0;
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
        // The data without the derived index: a few times cheaper on the owner's task.
        let show = state.show.snapshot_copy();
        // What the show forgot (finished holds past their keep) leaves the lookup set too.
        self.known.rebuild(&state.show);
        let version = state.committed;
        state.snapshot_version = version;
        state.snapshot_at = Some(Instant::now());
        let log = self.log();
        let show_id = self.show_id;
        self.ctx.tasks.spawn(async move {
            let payload =
                match tokio::task::spawn_blocking(move || show.to_json()).await {
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

/// Lapsed holds expired by one sweep command (one event each, in one batch); a sweep that
/// finds a full chunk is followed by another at once.
const SWEEP_CHUNK: usize = 500;

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
