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

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cqrs_es::event_sink::EventSink;
use cqrs_es::{Aggregate, DomainEvent};
use onsale_domain::{Clock, Show, ShowCommand, ShowError, ShowEvent, ShowId, ShowServices};
use onsale_telemetry::trace;
use tokio::sync::{mpsc, oneshot};
// Tokio's clock, not std's: the same in a deployment, and a paused runtime (the simulator,
// `sim/`) moves the leases and the snapshot intervals with its time.
use tokio::time::Instant;
use tracing::{info, warn, Instrument};

use onsale_eventlog::{Claim, EventLog, Node, ShardId, ShardedLog, StoreError, Traced};

use crate::known::KnownIds;
use crate::protocol::{Answer, ClusterConfig, CommandError, Forwarded, Found, Returned, ShowQuery};
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
    #[command(flatten)]
    pub cluster: ClusterConfig,
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

/// What a job is answered with.
enum Reply {
    Answer(Answer),
    Found(Found),
}

#[derive(Clone)]
enum Work {
    Command(ShowCommand),
    Ask(ShowQuery),
    Sweep,
    /// Claim and load the show (a dead node's show: its sweeper must run), answered `Done`.
    Wake,
}

struct Job {
    work: Work,
    reply: Option<oneshot::Sender<Result<Reply, CommandError>>>,
    /// How many times the job was decided again after a version conflict.
    attempts: u32,
    /// Forwarded by another node: never forwarded again.
    forwarded: bool,
    /// The caller's span: the owner's spans for this job are its children (docs/adr/019).
    span: tracing::Span,
}

impl Job {
    /// The owner's own sweep of lapsed holds: nobody waits for it.
    fn sweep() -> Self {
        Self {
            work: Work::Sweep,
            reply: None,
            attempts: 0,
            forwarded: false,
            span: tracing::Span::none(),
        }
    }
}

/// A show's owner task in this process.
#[derive(Debug)]
struct Handle {
    tx: mpsc::Sender<Job>,
    known: Arc<KnownIds>,
    started: Instant,
    id: u64,
}

static OWNER_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The registry of show owners in this process.
#[derive(Clone, Debug)]
pub struct Shows {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Every shard's log behind one: a show's statements go to its shard.
    log: Arc<dyn EventLog>,
    shards: Arc<ShardedLog>,
    clock: Arc<dyn Clock>,
    /// Cancelled: owners take no more commands, commit and answer what they took, and stop.
    shutdown: CancellationToken,
    /// Every owner and every append and snapshot they start: the server waits for them.
    tasks: TaskTracker,
    config: OwnerConfig,
    owners: Mutex<HashMap<ShowId, Handle>>,
    /// This process as the other nodes know it (a fresh id per process).
    node: RwLock<Node>,
    /// Shows another live node owns, as last seen, and since when: their commands are
    /// forwarded there without asking the database each time.
    elsewhere: Mutex<HashMap<ShowId, (Node, Instant)>>,
    client: reqwest::Client,
    /// The owner tasks: the node leaves (frees its shows) once they are done.
    owner_tasks: TaskTracker,
    /// Until when this node's registration is known to be alive (nanoseconds after `base`):
    /// the start of its last successful heartbeat or claim plus the TTL, less a margin. Past
    /// it the node cannot prove it still owns its shows (it was paused, or cut off from the
    /// database: another node may own them by now), and its owners answer nothing from their
    /// state, not even a refusal or a read, until a heartbeat proves the lease again. One per
    /// shard: the node is registered on each, and a shard that is down leaves the leases on
    /// the others standing.
    lease_until: Vec<AtomicU64>,
    base: Instant,
    owners_started: AtomicU64,
}

impl Shows {
    /// Owners of shows on one write cluster.
    pub fn new(
        log: Arc<dyn EventLog>,
        clock: Arc<dyn Clock>,
        config: OwnerConfig,
        shutdown: CancellationToken,
        tasks: TaskTracker,
    ) -> Self {
        let shards = Arc::new(ShardedLog::single(log));
        Self::sharded(shards, clock, config, shutdown, tasks)
    }

    /// Owners of shows on several write clusters (docs/adr/021): each show's claim, load,
    /// appends and snapshots go to its shard, and the node keeps a lease on each shard.
    pub fn sharded(
        shards: Arc<ShardedLog>,
        clock: Arc<dyn Clock>,
        config: OwnerConfig,
        shutdown: CancellationToken,
        tasks: TaskTracker,
    ) -> Self {
        let addr = config.cluster.advertise_addr.clone().unwrap_or_default();
        let leases = shards.shards().map(|_| AtomicU64::new(0)).collect();
        let shows = Self {
            inner: Arc::new(Inner {
                log: shards.clone(),
                shards,
                clock,
                shutdown,
                tasks: tasks.clone(),
                node: RwLock::new(Node {
                    id: uuid::Uuid::new_v4(),
                    addr,
                }),
                elsewhere: Mutex::new(HashMap::new()),
                client: reqwest::Client::builder()
                    .timeout(config.commit_timeout + Duration::from_secs(1))
                    .build()
                    .unwrap_or_default(),
                config,
                owners: Mutex::new(HashMap::new()),
                owner_tasks: TaskTracker::new(),
                lease_until: leases,
                base: Instant::now(),
                owners_started: AtomicU64::new(0),
            }),
        };
        tasks.spawn(shows.clone().keep_alive());
        shows
    }

    pub fn cluster(&self) -> &ClusterConfig {
        &self.inner.config.cluster
    }

    /// This node: its id and where the other nodes reach it.
    pub fn node(&self) -> Node {
        self.inner
            .node
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Where other nodes reach this one (set once the API listens), unless configured.
    pub fn advertise(&self, addr: &str) {
        let mut node = self.inner.node.write().unwrap_or_else(|p| p.into_inner());
        if node.addr.is_empty() {
            node.addr = addr.to_owned();
        }
    }

    /// Keeps this node registered while it runs; retires owners of shows another node claimed
    /// meanwhile (this one was presumed dead: paused, cut off); claims shows whose node died so
    /// their lapsed holds are swept; and frees this node's shows when it stops. Each shard on
    /// a beat of its own: a shard that hangs or is down lets no other shard's lease lapse.
    async fn keep_alive(self) {
        let beats = self
            .inner
            .shards
            .shards()
            .map(|(shard, log)| self.clone().keep_alive_on(shard, log.clone()))
            .collect::<Vec<_>>();
        futures::future::join_all(beats).await;
        // Owners commit and answer what they took (each append bounded by `commit_timeout`);
        // then the shows are free for other nodes. No bound of its own here: the process's
        // shutdown bound (`ONSALE_SHUTDOWN_TIMEOUT_SECS`) is the one, and past it the node's
        // shows free up when its registration lapses.
        self.inner.owner_tasks.close();
        self.inner.owner_tasks.wait().await;
        if let Err(e) = self.log().leave(&self.node()).await {
            warn!(error = %e, "node did not leave cleanly; its shows free up when its registration lapses");
        }
    }

    /// One shard's beat, until shutdown: the node's registration there renewed, owners of its
    /// shows claimed elsewhere retired, its orphaned shows woken.
    async fn keep_alive_on(self, shard: ShardId, log: Arc<dyn EventLog>) {
        let ttl = self.inner.config.cluster.node_ttl;
        let mut beat = tokio::time::interval(ttl / 5);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shutdown = self.inner.shutdown.clone();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = beat.tick() => {}
            }
            let node = self.node();
            // A process that serves no API (the relay, the projections) owns nothing and
            // registers nothing; one that owns shows without an API (the command benchmark)
            // keeps them alive but takes no dead node's shows: nobody could forward to it.
            if node.addr.is_empty() && self.lock().is_empty() {
                continue;
            }
            let started = Instant::now();
            let owned = tokio::select! {
                _ = shutdown.cancelled() => return,
                beat = log.heartbeat(&node, ttl) => match beat {
                    Ok(owned) => owned,
                    Err(e) => {
                        warn!(%shard, error = %e, "node heartbeat failed");
                        continue;
                    }
                },
            };
            // Retired first: an owner of a show claimed elsewhere meanwhile must not answer
            // on the renewed lease.
            self.retire_lost(shard, &owned.into_iter().collect(), started);
            self.renewed(shard, started);
            if node.addr.is_empty() {
                continue;
            }
            match log.orphans(50).await {
                Ok(orphans) => {
                    for show in orphans {
                        let shows = self.clone();
                        self.inner.tasks.spawn(async move {
                            let _ = shows.submit(show, Work::Wake, false).await;
                        });
                    }
                }
                Err(e) => warn!(%shard, error = %e, "orphaned shows not read"),
            }
        }
    }

    /// Owners of `shard`'s shows started before `since` whose show this node no longer owns
    /// stop taking work: what reaches them from now on is routed anew (their appends would be
    /// fenced anyway).
    fn retire_lost(&self, shard: ShardId, owned: &HashSet<ShowId>, since: Instant) {
        let mut owners = self.lock();
        owners.retain(|show, h| {
            let keep = self.inner.shards.cached(*show) != Some(shard)
                || owned.contains(show)
                || h.started >= since
                || h.tx.is_closed();
            if !keep {
                warn!(%show, "another node claimed this show; its owner here retires");
            }
            keep
        });
    }

    /// The log: a show's statements go to its shard.
    pub fn log(&self) -> &Arc<dyn EventLog> {
        &self.inner.log
    }

    /// The shards and the directory of where each show lives.
    pub fn shards(&self) -> &Arc<ShardedLog> {
        &self.inner.shards
    }

    /// Records where a new show lives before it is scheduled: on shard `wanted` (an admin's
    /// choice; it must be one this deployment has), or on the shard holding the fewest shows.
    pub async fn place(&self, show: ShowId, wanted: Option<u16>) -> Result<ShardId, CommandError> {
        let wanted = match wanted {
            None => None,
            Some(n) => Some(self.inner.shards.shard_id(n).ok_or_else(|| {
                CommandError::Domain(ShowError::Invalid(format!(
                    "shard must be between 1 and {}",
                    self.inner.shards.count()
                )))
            })?),
        };
        self.inner
            .shards
            .place(show, wanted)
            .await
            .map_err(store_error)
    }

    /// The registration on `shard` was renewed by a statement sent at `started`: that shard's
    /// `alive_until` is at least `started` + TTL. A tenth of the TTL is kept as a margin for
    /// the two clocks' rates.
    fn renewed(&self, shard: ShardId, started: Instant) {
        let ttl = self.inner.config.cluster.node_ttl;
        let until = started.saturating_duration_since(self.inner.base) + ttl - ttl / 10;
        let nanos = u64::try_from(until.as_nanos()).unwrap_or(u64::MAX);
        if let Some(lease) = self.inner.lease_until.get(usize::from(shard.get() - 1)) {
            lease.fetch_max(nanos, Ordering::AcqRel);
        }
    }

    /// Whether this node can prove, now, that no other node may have claimed its shows on
    /// `shard`.
    pub fn lease_held_on(&self, shard: ShardId) -> bool {
        let now = u64::try_from(self.inner.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.inner
            .lease_until
            .get(usize::from(shard.get() - 1))
            .is_some_and(|lease| now < lease.load(Ordering::Acquire))
    }

    /// Whether this node can prove, now, that no other node may have claimed any of its shows.
    pub fn lease_held(&self) -> bool {
        self.inner
            .shards
            .shards()
            .all(|(shard, _)| self.lease_held_on(shard))
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Runs a command on its show and answers once its events are committed (on the node
    /// that owns the show: forwarded there when it is another).
    pub async fn execute(
        &self,
        show: ShowId,
        command: ShowCommand,
    ) -> Result<Answer, CommandError> {
        match self.submit(show, Work::Command(command), false).await? {
            Reply::Answer(a) => Ok(a),
            Reply::Found(_) => Err(CommandError::Internal("a command answered a query".into())),
        }
    }

    /// Asks the committed state of a show with the domain's own rules, once everything decided
    /// before it is committed. For what a command needs next (the payment jobs); the API's
    /// reads never come here.
    pub async fn ask(&self, show: ShowId, query: ShowQuery) -> Result<Found, CommandError> {
        match self.submit(show, Work::Ask(query), false).await? {
            Reply::Found(f) => Ok(f),
            Reply::Answer(_) => Err(CommandError::Internal("a query answered a command".into())),
        }
    }

    /// Work another node forwarded here: decided here, or refused (503) if this node does not
    /// own the show either.
    pub(crate) async fn run_forwarded(
        &self,
        show: ShowId,
        work: Forwarded,
    ) -> Result<Returned, CommandError> {
        let work = match work {
            Forwarded::Command(c) => Work::Command(c),
            Forwarded::Ask(q) => Work::Ask(q),
        };
        Ok(match self.submit(show, work, true).await? {
            Reply::Answer(a) => Returned::Answer(a),
            Reply::Found(f) => Returned::Found(f),
        })
    }

    fn remote_owner(&self, show: ShowId) -> Option<Node> {
        let mut elsewhere = self
            .inner
            .elsewhere
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match elsewhere.get(&show) {
            Some((node, at)) if at.elapsed() < Duration::from_secs(1) => Some(node.clone()),
            Some(_) => {
                elsewhere.remove(&show);
                None
            }
            None => None,
        }
    }

    fn owned_elsewhere(&self, show: ShowId, node: Option<Node>) {
        let mut elsewhere = self
            .inner
            .elsewhere
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match node {
            Some(n) => elsewhere.insert(show, (n, Instant::now())),
            None => elsewhere.remove(&show),
        };
    }

    /// Sends work to the node that owns its show and answers what that node answered.
    async fn forward(&self, show: ShowId, to: &Node, work: Work) -> Result<Reply, CommandError> {
        let body = match work {
            Work::Command(c) => Forwarded::Command(c),
            Work::Ask(q) => Forwarded::Ask(q),
            // The owner sweeps and is awake already.
            Work::Sweep | Work::Wake => return Ok(Reply::Answer(Answer::Done)),
        };
        metrics::counter!(onsale_telemetry::metrics::COMMANDS_FORWARDED_TOTAL).increment(1);
        let path = crate::protocol::WORK_PATH.replace("{id}", &show.to_string());
        let url = format!("http://{}{path}", to.addr);
        let body = match serde_json::to_vec(&body) {
            Ok(b) => b,
            Err(e) => return Err(CommandError::Internal(format!("forwarded work: {e}"))),
        };
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let signature = crate::protocol::sign(
            secrecy::ExposeSecret::expose_secret(&self.cluster().node_secret),
            &path,
            chrono::Utc::now().timestamp_millis(),
            &nonce,
            &body,
        );
        let mut request = self
            .inner
            .client
            .post(&url)
            .header(crate::protocol::SIGNATURE_HEADER, signature)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        if let Some(parent) = trace::traceparent(&tracing::Span::current()) {
            // The owner's spans continue the caller's trace on the other node.
            request = request.header(trace::TRACEPARENT, parent);
        }
        let sent = request.body(body).send().await;
        let returned = match sent {
            Ok(r) if r.status().is_success() => r
                .json::<Result<Returned, CommandError>>()
                .await
                .map_err(|e| {
                    warn!(%show, node = %to.addr, error = %e, "forwarded answer unreadable");
                    CommandError::Unavailable
                })?,
            Ok(r) => {
                warn!(%show, node = %to.addr, status = %r.status(), "forward refused");
                self.owned_elsewhere(show, None);
                return Err(CommandError::Unavailable);
            }
            Err(e) => {
                // The owner is unreachable (it died; its registration lapses within the TTL,
                // then a node claims the show): the caller retries.
                warn!(%show, node = %to.addr, error = %e, "owner unreachable");
                self.owned_elsewhere(show, None);
                return Err(CommandError::Unavailable);
            }
        };
        match returned {
            Ok(Returned::Answer(a)) => Ok(Reply::Answer(a)),
            Ok(Returned::Found(f)) => Ok(Reply::Found(f)),
            Err(e) => {
                if matches!(e, CommandError::Unavailable) {
                    self.owned_elsewhere(show, None);
                }
                Err(e)
            }
        }
    }

    async fn submit(
        &self,
        show: ShowId,
        work: Work,
        forwarded: bool,
    ) -> Result<Reply, CommandError> {
        if self.inner.shutdown.is_cancelled() {
            // Shutting down: nothing new is taken (503 with Retry-After; another node or this
            // one once restarted answers the retry).
            return Err(CommandError::ShuttingDown);
        }
        if !forwarded {
            if let Some(node) = self.remote_owner(show) {
                return self.forward(show, &node, work).await;
            }
        }
        let (tx, rx) = oneshot::channel();
        let mut job = Job {
            work,
            reply: Some(tx),
            attempts: 0,
            forwarded,
            span: tracing::Span::current(),
        };
        for _ in 0..2 {
            let (sender, known) = self.owner(show);
            if let Some(answer) = self.unknown_id(show, &job.work, &known) {
                metrics::counter!(onsale_telemetry::metrics::UNKNOWN_IDS_TOTAL).increment(1);
                return answer;
            }
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
                    // The owner retired (an unknown show, or the show moved); route anew.
                    job = back;
                    let _ = self.lock().remove(&show);
                    if !forwarded {
                        if let Some(node) = self.remote_owner(show) {
                            return self.forward(show, &node, job.work).await;
                        }
                    }
                }
            }
        }
        Err(CommandError::Internal(
            "could not reach the show owner".into(),
        ))
    }

    /// The answer to work naming a hold or order the show's owner here certainly does not
    /// have, without the owner's queue, a batch slot or a write; `None`: the owner decides.
    /// Only on a proven lease (else another node may have made the id since).
    fn unknown_id(
        &self,
        show: ShowId,
        work: &Work,
        known: &KnownIds,
    ) -> Option<Result<Reply, CommandError>> {
        let answer = match work {
            Work::Command(ShowCommand::ReleaseHold { hold_id, .. }) if known.hold(hold_id)? => {
                return None
            }
            Work::Command(ShowCommand::ReleaseHold { .. }) => Err(ShowError::HoldNotFound),
            Work::Command(ShowCommand::CancelOrder { order_id, .. })
            | Work::Ask(ShowQuery::Cancellable {
                order: order_id, ..
            }) => {
                if known.order(order_id)? {
                    return None;
                }
                Err(ShowError::OrderNotFound)
            }
            Work::Ask(ShowQuery::OrderState(order)) => {
                if known.order(order)? {
                    return None;
                }
                Ok(Reply::Found(Found::OrderState(None)))
            }
            _ => return None,
        };
        let shard = self.inner.shards.cached(show)?;
        if !self.lease_held_on(shard) {
            return None;
        }
        Some(answer.map_err(CommandError::Domain))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ShowId, Handle>> {
        self.inner.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn owner(&self, show: ShowId) -> (mpsc::Sender<Job>, Arc<KnownIds>) {
        let mut owners = self.lock();
        if let Some(h) = owners.get(&show).filter(|h| !h.tx.is_closed()) {
            return (h.tx.clone(), h.known.clone());
        }
        let (tx, rx) = mpsc::channel(self.inner.config.max_queue);
        let id = OWNER_IDS.fetch_add(1, Ordering::Relaxed);
        let known = Arc::new(KnownIds::default());
        owners.insert(
            show,
            Handle {
                tx: tx.clone(),
                known: known.clone(),
                started: Instant::now(),
                id,
            },
        );
        self.inner.owners_started.fetch_add(1, Ordering::Relaxed);
        let owner = Owner::new(show, id, self.clone(), known.clone()).run(rx);
        self.inner
            .tasks
            .spawn(self.inner.owner_tasks.track_future(owner));
        (tx, known)
    }

    /// How many owner tasks this process started (each claims and loads its show).
    pub fn owners_started(&self) -> u64 {
        self.inner.owners_started.load(Ordering::Relaxed)
    }

    /// Removes this show's entry if it is still owner `id`'s.
    fn forget(&self, show: ShowId, id: u64) {
        let mut owners = self.lock();
        if owners.get(&show).is_some_and(|h| h.id == id) {
            owners.remove(&show);
        }
    }
}

/// Routes a job anew that reached an owner which no longer owns its show (it was fenced, or
/// found the show claimed by another node) and answers its caller with what the show's owner
/// answers. A job another node forwarded here is refused instead (503): that node's caller
/// retries, and nothing is forwarded twice.
fn reroute(shows: &Shows, show: ShowId, job: Job) {
    let Job {
        work,
        reply,
        forwarded,
        span,
        ..
    } = job;
    let Some(reply) = reply else {
        return;
    };
    if forwarded {
        let _ = reply.send(Err(CommandError::Unavailable));
        return;
    }
    let task = shows.clone();
    shows.inner.tasks.spawn(
        async move {
            let _ = reply.send(task.submit(show, work, false).await);
        }
        .instrument(span),
    );
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

struct Owner {
    show_id: ShowId,
    /// Which of this process's owners of the show this is (its entry in the registry).
    id: u64,
    shows: Shows,
    /// The shard the show lives on and its log, found before the claim: the claim, the load,
    /// every append and snapshot go there (a show moved away since is fenced there).
    shard: Option<(ShardId, Arc<dyn EventLog>)>,
    /// The epoch the show was claimed with: every append carries it (the fence).
    epoch: Option<i64>,
    /// The show is not (or no longer) this node's: what reaches this owner is routed anew.
    moved: bool,
    adrift: Vec<Job>,
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
    /// The last sweep found a full chunk of lapsed holds: sweep again now, not at the next
    /// tick (a burst of short holds lapses faster than one chunk a tick).
    sweep_more: bool,
    /// The ids of the show, for lookups that skip the queue.
    known: Arc<KnownIds>,
}

impl Owner {
    fn new(show_id: ShowId, id: u64, shows: Shows, known: Arc<KnownIds>) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let services = ShowServices {
            clock: shows.inner.clock.clone(),
        };
        Self {
            show_id,
            id,
            shows,
            shard: None,
            epoch: None,
            moved: false,
            adrift: Vec::new(),
            state: None,
            services,
            open: Batch::default(),
            in_flight: None,
            done_tx,
            done_rx,
            broken: false,
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
            None => self.shows.log().clone(),
        }
    }

    /// Whether this node's lease on the show's shard is proven.
    fn lease_held(&self) -> bool {
        self.shard
            .as_ref()
            .is_some_and(|(shard, _)| self.shows.lease_held_on(*shard))
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        let config = self.shows.inner.config.clone();
        let mut sweep = tokio::time::interval(config.sweep_every);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut retiring, mut closed, mut stopping) = (false, false, false);
        let shutdown = self.shows.inner.shutdown.clone();
        loop {
            if self.moved && self.in_flight.is_none() {
                return self.hand_over(rx);
            }
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
                    self.shows.forget(self.show_id, self.id);
                    rx.close();
                    if let Some(epoch) = self.epoch {
                        // Nothing to own: the claim goes, so random ids leave no rows behind.
                        let (log, show) = (self.log(), self.show_id);
                        self.shows.inner.tasks.spawn(async move {
                            let _ = log.release(show, epoch).await;
                        });
                    }
                }
            }
            let accepting = !closed
                && !self.broken
                && !self.snapshot_due
                && self.open.decided.len().saturating_sub(self.open.refused) < config.max_batch;
            if accepting && self.sweep_more && self.state.is_some() {
                self.take(Job::sweep()).await;
            }
            tokio::select! {
                biased;
                Some(result) = self.done_rx.recv(), if self.in_flight.is_some() => {
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
                    None => closed = true,
                },
                _ = shutdown.cancelled(), if !stopping => {
                    // What is queued is still taken, committed and answered; then `closed`.
                    stopping = true;
                    rx.close();
                }
                else => tokio::task::yield_now().await,
            }
        }
    }

    /// This node does not own the show (any more): leave the registry, and route every job
    /// not answered yet (decided here on a state that is not the show's any more, or queued)
    /// to the show's owner.
    fn hand_over(mut self, mut rx: mpsc::Receiver<Job>) {
        self.shows.forget(self.show_id, self.id);
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
        for job in jobs {
            reroute(&self.shows, self.show_id, job);
        }
    }

    /// Takes whatever is already queued into the open batch, up to the batch limit.
    async fn take_queued(&mut self, rx: &mut mpsc::Receiver<Job>) {
        while self.open.decided.len().saturating_sub(self.open.refused)
            < self.shows.inner.config.max_batch
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
                let shards = self.shows.shards();
                let shard = shards.locate(self.show_id).await.map_err(store_error)?;
                let log = shards.log(shard).map_err(store_error)?.clone();
                self.shard = Some((shard, log.clone()));
                (shard, log)
            }
        };
        if self.epoch.is_none() {
            let (node, ttl) = (self.shows.node(), self.shows.cluster().node_ttl);
            let started = Instant::now();
            match log.claim(self.show_id, &node, ttl).await {
                Ok(Claim::Owned { epoch }) => {
                    // The claim renewed this node's registration on the shard too.
                    self.shows.renewed(shard, started);
                    metrics::counter!(onsale_telemetry::metrics::SHOWS_CLAIMED_TOTAL).increment(1);
                    self.epoch = Some(epoch);
                }
                Ok(Claim::Elsewhere(other)) if other.id == onsale_eventlog::moving::MOVED_NODE => {
                    // The show moved to another shard (or is moving: docs/adr/022). Where it is
                    // now is asked again next time; until the directory says so, callers retry.
                    self.shows.shards().forget(self.show_id);
                    self.shard = None;
                    return Err(CommandError::Moving);
                }
                Ok(Claim::Elsewhere(other)) => {
                    self.shows.owned_elsewhere(self.show_id, Some(other));
                    self.moved = true;
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
        if self.moved {
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
                if !advisory && (self.in_flight.is_some() || !self.open.events.is_empty()) {
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
        if self.broken || self.in_flight.is_some() || self.open.events.is_empty() {
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
        self.shows.inner.tasks.spawn(async move {
            let _ = done.send(log.append(show, epoch, after, at, &events, &traces).await);
            drop(spans);
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
        if let Err(StoreError::Fenced) = result {
            // Another node claimed the show while this one was presumed dead: nothing of the
            // batch was written; it (and all after it) is decided again by the show's owner.
            metrics::counter!(onsale_telemetry::metrics::APPENDS_FENCED_TOTAL).increment(1);
            warn!(show = %self.show_id, "append fenced: another node owns this show now");
            self.moved = true;
            self.adrift.extend(batch.decided.into_iter().map(|d| d.job));
            return;
        }
        if let Err(e) = result {
            self.broken = true;
            #[cfg(feature = "planted-bugs")]
            if onsale_domain::plant::planted(onsale_domain::plant::Bug::AckBeforeCommit) {
                for d in batch.decided {
                    reply(d.job, d.answer);
                }
                return;
            }
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
        self.shows.inner.tasks.spawn(async move {
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
        StoreError::Unavailable(_) | StoreError::Conflict | StoreError::Fenced => {
            CommandError::Unavailable
        }
        StoreError::Corrupt(m) => CommandError::Internal(m),
    }
}
