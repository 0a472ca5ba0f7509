//! The real event log with one show's loads held at a gate: what a big show's seconds-long
//! load looks like to the projections, made as long as a test needs.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use onsale_domain::{ShowEvent, ShowId, VenueEvent, VenueId};
use onsale_eventlog::{
    Activity, Claim, EventLog, LoadedShow, LogRow, Node, Result, ScanKey, Traced,
};

/// `inner`, except that loading `gated` (`load`, `load_upto`, `replay`) waits until the gate
/// opens ([`GatedLog::open`]).
#[derive(Debug, Clone)]
pub struct GatedLog {
    inner: Arc<dyn EventLog>,
    gated: ShowId,
    gate: tokio::sync::watch::Sender<bool>,
}

impl GatedLog {
    pub fn new(inner: Arc<dyn EventLog>, gated: ShowId) -> Self {
        Self {
            inner,
            gated,
            gate: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Lets the held loads (and every later one) through.
    pub fn open(&self) {
        self.gate.send_replace(true);
    }

    /// Whether a load of the gated show is waiting at the gate now.
    pub fn holding(&self) -> bool {
        self.gate.receiver_count() > 0
    }

    async fn pass(&self, show: ShowId) {
        if show == self.gated {
            let mut open = self.gate.subscribe();
            let _ = open.wait_for(|o| *o).await;
        }
    }
}

#[async_trait::async_trait]
impl EventLog for GatedLog {
    async fn append(
        &self,
        show: ShowId,
        epoch: i64,
        after: i64,
        at: DateTime<Utc>,
        events: &[ShowEvent],
        traces: &[Traced],
    ) -> Result<()> {
        self.inner
            .append(show, epoch, after, at, events, traces)
            .await
    }

    async fn claim(&self, show: ShowId, node: &Node, ttl: std::time::Duration) -> Result<Claim> {
        self.inner.claim(show, node, ttl).await
    }

    async fn release(&self, show: ShowId, epoch: i64) -> Result<()> {
        self.inner.release(show, epoch).await
    }

    async fn heartbeat(&self, node: &Node, ttl: std::time::Duration) -> Result<Vec<ShowId>> {
        self.inner.heartbeat(node, ttl).await
    }

    async fn leave(&self, node: &Node) -> Result<()> {
        self.inner.leave(node).await
    }

    async fn orphans(&self, limit: i64) -> Result<Vec<ShowId>> {
        self.inner.orphans(limit).await
    }

    async fn load(&self, show: ShowId) -> Result<LoadedShow> {
        self.pass(show).await;
        self.inner.load(show).await
    }

    async fn replay(&self, show: ShowId) -> Result<LoadedShow> {
        self.pass(show).await;
        self.inner.replay(show).await
    }

    async fn load_upto(&self, show: ShowId, upto: i64) -> Result<LoadedShow> {
        self.pass(show).await;
        self.inner.load_upto(show, upto).await
    }

    async fn read_range(
        &self,
        show: &str,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> Result<Vec<LogRow>> {
        self.inner.read_range(show, after, upto, limit).await
    }

    async fn last_policy_change(&self, show: &str) -> Result<Option<LogRow>> {
        self.inner.last_policy_change(show).await
    }

    async fn recent_activity(&self, show: ShowId, events: i64) -> Result<Activity> {
        self.inner.recent_activity(show, events).await
    }

    async fn heads(&self) -> Result<Vec<(String, i64)>> {
        self.inner.heads().await
    }

    async fn scan(&self, after: &ScanKey, show: Option<&str>, limit: i64) -> Result<Vec<LogRow>> {
        self.inner.scan(after, show, limit).await
    }

    async fn save_snapshot(&self, show: ShowId, version: i64, payload: &str) -> Result<()> {
        self.inner.save_snapshot(show, version, payload).await
    }

    async fn register_venue(&self, venue: VenueId, event: &VenueEvent) -> Result<()> {
        self.inner.register_venue(venue, event).await
    }

    async fn load_venue(&self, venue: VenueId) -> Result<Option<VenueEvent>> {
        self.inner.load_venue(venue).await
    }

    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }
}
