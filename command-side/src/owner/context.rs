//! What every owner of this process shares with the registry, read-only but for the leases the
//! claims renew: where each show's log is, the clock, the tuning, the process's stop and its
//! task tracker, this node's name, and its lease on each shard.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use onsale_domain::Clock;
use onsale_eventlog::{Node, ShardId, ShardedLog};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::OwnerConfig;

#[derive(Debug)]
pub(super) struct Context {
    /// Every shard's log and the directory of where each show lives.
    pub(super) shards: Arc<ShardedLog>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) config: OwnerConfig,
    /// Cancelled: owners take no more commands, commit and answer what they took, and stop.
    pub(super) shutdown: CancellationToken,
    /// Every owner and every append and snapshot they start: the server waits for them.
    pub(super) tasks: TaskTracker,
    /// This process as the other nodes know it (a fresh id per process).
    pub(super) node: RwLock<Node>,
    pub(super) leases: Leases,
}

impl Context {
    /// This node: its id and where the other nodes reach it.
    pub(super) fn node(&self) -> Node {
        self.node.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Until when this node's registration on each shard is known to be alive (nanoseconds after
/// `base`): the start of its last successful heartbeat or claim plus the TTL, less a margin.
/// Past it the node cannot prove it still owns its shows there (it was paused, or cut off from
/// the database: another node may own them by now), and its owners answer nothing from their
/// state, not even a refusal or a read, until a heartbeat proves the lease again. One per
/// shard: a shard that is down leaves the leases on the others standing.
#[derive(Debug)]
pub(super) struct Leases {
    until: Vec<AtomicU64>,
    base: Instant,
    ttl: Duration,
}

impl Leases {
    pub(super) fn new(shards: usize, ttl: Duration) -> Self {
        Self {
            until: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            base: Instant::now(),
            ttl,
        }
    }

    /// The registration on `shard` was renewed by a statement sent at `started`: that shard's
    /// `alive_until` is at least `started` + TTL. A tenth of the TTL is kept as a margin for
    /// the two clocks' rates.
    pub(super) fn renewed(&self, shard: ShardId, started: Instant) {
        let until = started.saturating_duration_since(self.base) + self.ttl - self.ttl / 10;
        let nanos = u64::try_from(until.as_nanos()).unwrap_or(u64::MAX);
        if let Some(lease) = self.until.get(usize::from(shard.get() - 1)) {
            lease.fetch_max(nanos, Ordering::AcqRel);
        }
    }

    /// Whether this node can prove, now, that no other node may have claimed its shows on
    /// `shard`.
    pub(super) fn held_on(&self, shard: ShardId) -> bool {
        let now = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.until
            .get(usize::from(shard.get() - 1))
            .is_some_and(|lease| now < lease.load(Ordering::Acquire))
    }
}
