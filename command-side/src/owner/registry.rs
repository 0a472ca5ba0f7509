//! The registry of this process's show owners: it starts an owner for a show on its first
//! job, forwards a show's work to the node that owns it, keeps this node registered (its lease
//! on each shard) and retires owners of shows another node claimed.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use onsale_domain::{Clock, ShowCommand, ShowError, ShowId};
use onsale_eventlog::{EventLog, Node, ShardId, ShardedLog};
use onsale_telemetry::supervise::Loops;
use onsale_telemetry::trace;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::{warn, Instrument};

use super::actor::{Exit, Owner};
use super::config::OwnerConfig;
use super::context::{Context, Leases};
use super::job::{store_error, Job, Reply, Work};
use crate::known::KnownIds;
use crate::protocol::{Answer, ClusterConfig, CommandError, Forwarded, Found, Returned, ShowQuery};

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
    /// What the owners share with the registry: the shards, the clock, the tuning, the stop,
    /// the tasks, this node and its leases.
    ctx: Arc<Context>,
    owners: Mutex<HashMap<ShowId, Handle>>,
    /// Shows another live node owns, as last seen, and since when: their commands are
    /// forwarded there without asking the database each time.
    elsewhere: Mutex<HashMap<ShowId, (Node, Instant)>>,
    client: reqwest::Client,
    /// The owner tasks: the node leaves (frees its shows) once they are done.
    owner_tasks: TaskTracker,
    owners_started: AtomicU64,
}

impl Shows {
    /// Owners of shows on one write cluster.
    pub fn new(
        log: Arc<dyn EventLog>,
        clock: Arc<dyn Clock>,
        config: OwnerConfig,
        loops: &Loops,
    ) -> Self {
        let shards = Arc::new(ShardedLog::single(log));
        Self::sharded(shards, clock, config, loops)
    }

    /// Owners of shows on several write clusters (docs/adr/021): each show's claim, load,
    /// appends and snapshots go to its shard, and the node keeps a lease on each shard (its
    /// heartbeat supervised on `loops`; owners and their appends tracked there, ended at their
    /// stop).
    pub fn sharded(
        shards: Arc<ShardedLog>,
        clock: Arc<dyn Clock>,
        config: OwnerConfig,
        loops: &Loops,
    ) -> Self {
        let (shutdown, tasks) = (loops.stop().clone(), loops.tracker().clone());
        let addr = config.cluster.advertise_addr.clone().unwrap_or_default();
        let leases = Leases::new(shards.shards().count(), config.cluster.node_ttl);
        let shows = Self {
            inner: Arc::new(Inner {
                log: shards.clone(),
                client: reqwest::Client::builder()
                    .timeout(config.commit_timeout + Duration::from_secs(1))
                    .build()
                    .unwrap_or_default(),
                ctx: Arc::new(Context {
                    shards,
                    clock,
                    config,
                    shutdown,
                    tasks,
                    node: RwLock::new(Node {
                        id: uuid::Uuid::new_v4(),
                        addr,
                    }),
                    leases,
                }),
                elsewhere: Mutex::new(HashMap::new()),
                owners: Mutex::new(HashMap::new()),
                owner_tasks: TaskTracker::new(),
                owners_started: AtomicU64::new(0),
            }),
        };
        let beating = shows.clone();
        loops.spawn("node lease", move || beating.clone().keep_alive());
        shows
    }

    pub fn cluster(&self) -> &ClusterConfig {
        &self.inner.ctx.config.cluster
    }

    /// This node: its id and where the other nodes reach it.
    pub fn node(&self) -> Node {
        self.inner.ctx.node()
    }

    /// Where other nodes reach this one (set once the API listens), unless configured.
    pub fn advertise(&self, addr: &str) {
        let mut node = self
            .inner
            .ctx
            .node
            .write()
            .unwrap_or_else(|p| p.into_inner());
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
            .ctx
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
        let ttl = self.inner.ctx.config.cluster.node_ttl;
        let mut beat = tokio::time::interval(ttl / 5);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shutdown = self.inner.ctx.shutdown.clone();
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
                        self.inner.ctx.tasks.spawn(async move {
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
            let keep = self.inner.ctx.shards.cached(*show) != Some(shard)
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
        &self.inner.ctx.shards
    }

    /// Records where a new show lives before it is scheduled: on shard `wanted` (an admin's
    /// choice; it must be one this deployment has), or on the shard holding the fewest shows.
    pub async fn place(&self, show: ShowId, wanted: Option<u16>) -> Result<ShardId, CommandError> {
        let wanted = match wanted {
            None => None,
            Some(n) => Some(self.inner.ctx.shards.shard_id(n).ok_or_else(|| {
                CommandError::Domain(ShowError::Invalid(format!(
                    "shard must be between 1 and {}",
                    self.inner.ctx.shards.count()
                )))
            })?),
        };
        self.inner
            .ctx
            .shards
            .place(show, wanted)
            .await
            .map_err(store_error)
    }

    /// The registration on `shard` was renewed by a statement sent at `started`.
    fn renewed(&self, shard: ShardId, started: Instant) {
        self.inner.ctx.leases.renewed(shard, started);
    }

    /// Whether this node can prove, now, that no other node may have claimed its shows on
    /// `shard`.
    pub fn lease_held_on(&self, shard: ShardId) -> bool {
        self.inner.ctx.leases.held_on(shard)
    }

    /// The shards on which this node cannot prove, now, that no other node may have claimed
    /// its shows: its lease there lapsed (or was never taken), so its owners there answer 503.
    pub fn lapsed_leases(&self) -> Vec<ShardId> {
        self.inner
            .ctx
            .shards
            .shards()
            .map(|(shard, _)| shard)
            .filter(|shard| !self.lease_held_on(*shard))
            .collect()
    }

    /// Whether this node can prove, now, that no other node may have claimed any of its shows.
    pub fn lease_held(&self) -> bool {
        self.inner
            .ctx
            .shards
            .shards()
            .all(|(shard, _)| self.lease_held_on(shard))
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.ctx.clock
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

    fn set_elsewhere(&self, show: ShowId, node: Option<Node>) {
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
            Ok(r) if r.status().is_success() => {
                let signature = r
                    .headers()
                    .get(crate::protocol::SIGNATURE_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let answer = r.bytes().await.map_err(|e| {
                    warn!(%show, node = %to.addr, error = %e, "forwarded answer unreadable");
                    CommandError::Unavailable
                })?;
                // Only the owner's own answer to this request is taken.
                if let Err(why) = crate::protocol::verify_answer(
                    secrecy::ExposeSecret::expose_secret(&self.cluster().node_secret),
                    &path,
                    &nonce,
                    signature.as_deref(),
                    &answer,
                    chrono::Utc::now().timestamp_millis(),
                ) {
                    metrics::counter!(onsale_telemetry::metrics::FORWARDS_REFUSED_TOTAL)
                        .increment(1);
                    warn!(%show, node = %to.addr, %why, "a forwarded answer was refused");
                    return Err(CommandError::Unavailable);
                }
                serde_json::from_slice::<Result<Returned, CommandError>>(&answer).map_err(|e| {
                    warn!(%show, node = %to.addr, error = %e, "forwarded answer unreadable");
                    CommandError::Unavailable
                })?
            }
            Ok(r) => {
                warn!(%show, node = %to.addr, status = %r.status(), "forward refused");
                self.set_elsewhere(show, None);
                return Err(CommandError::Unavailable);
            }
            Err(e) => {
                // The owner is unreachable (it died; its registration lapses within the TTL,
                // then a node claims the show): the caller retries.
                warn!(%show, node = %to.addr, error = %e, "owner unreachable");
                self.set_elsewhere(show, None);
                return Err(CommandError::Unavailable);
            }
        };
        match returned {
            Ok(Returned::Answer(a)) => Ok(Reply::Answer(a)),
            Ok(Returned::Found(f)) => Ok(Reply::Found(f)),
            Err(e) => {
                if matches!(e, CommandError::Unavailable) {
                    self.set_elsewhere(show, None);
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
        if self.inner.ctx.shutdown.is_cancelled() {
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
                    let bound = self.inner.ctx.config.commit_timeout;
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
        let shard = self.inner.ctx.shards.cached(show)?;
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
        let (tx, rx) = mpsc::channel(self.inner.ctx.config.max_queue);
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
        let owner = Owner::new(show, self.inner.ctx.clone(), known.clone()).run(rx);
        let registry = self.clone();
        let ended = async move {
            match owner.await {
                Exit::Done => registry.forget(show, id),
                Exit::Moved { owner, jobs } => {
                    registry.forget(show, id);
                    if let Some(node) = owner {
                        registry.set_elsewhere(show, Some(node));
                    }
                    for job in jobs {
                        registry.reroute(show, job);
                    }
                }
            }
        };
        self.inner
            .ctx
            .tasks
            .spawn(self.inner.owner_tasks.track_future(ended));
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

impl Shows {
    /// Routes a job anew that reached an owner which no longer owns its show (it was fenced, or
    /// found the show claimed by another node) and answers its caller with what the show's owner
    /// answers. A job another node forwarded here is refused instead (503): that node's caller
    /// retries, and nothing is forwarded twice.
    fn reroute(&self, show: ShowId, job: Job) {
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
        let task = self.clone();
        self.inner.ctx.tasks.spawn(
            async move {
                let _ = reply.send(task.submit(show, work, false).await);
            }
            .instrument(span),
        );
    }
}
