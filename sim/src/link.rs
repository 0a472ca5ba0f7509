//! One simulated node's connection to the shared log: the in-memory log (the same contract as
//! PostgreSQL's, fenced by epoch at the commit), with this node's faults. A node cut off waits
//! on every call until it is reconnected (its heartbeats stop, so its lease lapses and its
//! in-flight appends land late, where the fence must refuse them); a slow node's appends take
//! their time before they commit. Liveness is the database's: a node whose registration was
//! last renewed more than a TTL ago (in the simulation's time) is dead to the next claim. Each
//! append that commits is checked against the show's epoch at that moment (the fence).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use onsale_domain::{ShowEvent, ShowId, VenueEvent, VenueId};
use onsale_eventlog::{
    Claim, EventLog, LoadedShow, LogRow, MemoryEventLog, Node, Result, ScanKey, Traced,
};
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;

/// When each node last renewed its registration, as the database would know it.
#[derive(Debug)]
pub struct Registrations {
    ttl: Duration,
    renewed: Mutex<BTreeMap<uuid::Uuid, Instant>>,
}

impl Registrations {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            renewed: Mutex::default(),
        }
    }

    fn renew(&self, node: uuid::Uuid, at: Instant) {
        let mut renewed = self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        let last = renewed.entry(node).or_insert(at);
        *last = (*last).max(at);
    }

    /// Marks every node whose registration lapsed as dead in `store`.
    fn lapse(&self, store: &MemoryEventLog) {
        let now = Instant::now();
        let renewed = self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        for (node, at) in renewed.iter() {
            if now.duration_since(*at) > self.ttl {
                store.presume_dead(*node);
            }
        }
    }
}

/// Whether the node reaches the database, and the calls waiting for it to. A `Notify`, not a
/// `watch` channel: tokio's watch wakes its waiters from shards picked at random, and the
/// simulation must wake them in the same order every run.
#[derive(Debug)]
struct Connection {
    up: AtomicBool,
    back: Notify,
}

/// The first rule a link saw broken at the log itself (shared by every node's link).
pub type Broken = Arc<Mutex<Option<String>>>;

#[derive(Debug, Clone)]
pub struct Link {
    store: MemoryEventLog,
    registrations: Arc<Registrations>,
    broken: Broken,
    connected: Arc<Connection>,
    slow: Arc<Mutex<Duration>>,
}

impl Link {
    pub fn new(store: MemoryEventLog, registrations: Arc<Registrations>, broken: Broken) -> Self {
        Self {
            store,
            registrations,
            broken,
            connected: Arc::new(Connection {
                up: AtomicBool::new(true),
                back: Notify::new(),
            }),
            slow: Arc::default(),
        }
    }

    /// The node is cut off from the database (or paused): every call waits.
    pub fn cut(&self) {
        self.connected.up.store(false, Ordering::Relaxed);
    }

    pub fn reconnect(&self) {
        self.connected.up.store(true, Ordering::Relaxed);
        self.connected.back.notify_waiters();
    }

    pub fn is_cut(&self) -> bool {
        !self.connected.up.load(Ordering::Relaxed)
    }

    /// Appends take `by` before they commit (`Duration::ZERO`: no delay).
    pub fn slow_down(&self, by: Duration) {
        *self.slow.lock().unwrap_or_else(|p| p.into_inner()) = by;
    }

    async fn reachable(&self) {
        loop {
            let back = self.connected.back.notified();
            if !self.is_cut() {
                return;
            }
            back.await;
        }
    }
}

#[async_trait::async_trait]
impl EventLog for Link {
    async fn append(
        &self,
        show: ShowId,
        epoch: i64,
        after: i64,
        at: DateTime<Utc>,
        events: &[ShowEvent],
        traces: &[Traced],
    ) -> Result<()> {
        self.reachable().await;
        let slow = *self.slow.lock().unwrap_or_else(|p| p.into_inner());
        if !slow.is_zero() {
            tokio::time::sleep(slow).await;
            // Cut off meanwhile: the statement reaches the database when the node is back.
            self.reachable().await;
        }
        self.store
            .append(show, epoch, after, at, events, traces)
            .await?;
        // The fence: an append commits only under the epoch the show is claimed with now.
        let now = self.store.epoch(show);
        if now != Some(epoch) {
            let mut broken = self.broken.lock().unwrap_or_else(|p| p.into_inner());
            broken.get_or_insert(format!(
                "an append under epoch {epoch} committed while the show's epoch is {now:?}"
            ));
        }
        Ok(())
    }

    async fn claim(&self, show: ShowId, node: &Node, ttl: Duration) -> Result<Claim> {
        self.reachable().await;
        let started = Instant::now();
        self.registrations.lapse(&self.store);
        let claim = self.store.claim(show, node, ttl).await?;
        self.registrations.renew(node.id, started);
        Ok(claim)
    }

    async fn release(&self, show: ShowId, epoch: i64) -> Result<()> {
        self.reachable().await;
        self.store.release(show, epoch).await
    }

    async fn heartbeat(&self, node: &Node, ttl: Duration) -> Result<Vec<ShowId>> {
        self.reachable().await;
        let started = Instant::now();
        self.registrations.lapse(&self.store);
        let owned = self.store.heartbeat(node, ttl).await?;
        self.registrations.renew(node.id, started);
        Ok(owned)
    }

    async fn leave(&self, node: &Node) -> Result<()> {
        self.reachable().await;
        self.store.leave(node).await
    }

    async fn orphans(&self, limit: i64) -> Result<Vec<ShowId>> {
        self.reachable().await;
        self.registrations.lapse(&self.store);
        self.store.orphans(limit).await
    }

    async fn load(&self, show: ShowId) -> Result<LoadedShow> {
        self.reachable().await;
        self.store.load(show).await
    }

    async fn replay(&self, show: ShowId) -> Result<LoadedShow> {
        self.reachable().await;
        self.store.replay(show).await
    }

    async fn load_upto(&self, show: ShowId, upto: i64) -> Result<LoadedShow> {
        self.reachable().await;
        self.store.load_upto(show, upto).await
    }

    async fn read_range(
        &self,
        show: &str,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> Result<Vec<LogRow>> {
        self.reachable().await;
        self.store.read_range(show, after, upto, limit).await
    }

    async fn last_policy_change(&self, show: &str) -> Result<Option<LogRow>> {
        self.reachable().await;
        self.store.last_policy_change(show).await
    }

    async fn recent_activity(
        &self,
        show: ShowId,
        events: i64,
    ) -> Result<onsale_eventlog::Activity> {
        self.reachable().await;
        self.store.recent_activity(show, events).await
    }

    async fn heads(&self) -> Result<Vec<(String, i64)>> {
        self.reachable().await;
        self.store.heads().await
    }

    async fn scan(&self, after: &ScanKey, show: Option<&str>, limit: i64) -> Result<Vec<LogRow>> {
        self.reachable().await;
        self.store.scan(after, show, limit).await
    }

    async fn save_snapshot(&self, show: ShowId, version: i64, payload: &str) -> Result<()> {
        self.reachable().await;
        self.store.save_snapshot(show, version, payload).await
    }

    async fn register_venue(&self, venue: VenueId, event: &VenueEvent) -> Result<()> {
        self.reachable().await;
        self.store.register_venue(venue, event).await
    }

    async fn load_venue(&self, venue: VenueId) -> Result<Option<VenueEvent>> {
        self.reachable().await;
        self.store.load_venue(venue).await
    }

    async fn ping(&self) -> Result<()> {
        self.reachable().await;
        self.store.ping().await
    }
}
