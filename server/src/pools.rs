//! A process's connections, split by workload (issue 29): each its own bounded share, so reads
//! anyone may send without a token (event pages, seat maps, search, SSE resumes) cannot take
//! the connections the owners' appends wait for, nor the card vault's, the webhooks', the
//! scans' and the workers'; and the card vault, on every order's path, does not wait behind
//! the workers and projections catching up after an outage (the shards drill saw orders
//! answer 503 then).

use std::sync::Arc;

use anyhow::Context;
use onsale_domain::region::RegionName;
use onsale_eventlog::{DatabaseSettings, Directory, EventLog, PgEventLog, ShardedLog};
use sqlx::PgPool;

/// What a connection is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Workload {
    /// The owners' appends.
    Append,
    /// Background work and private routes: payments, webhooks, scans, the relay, the
    /// projections, the catalog.
    Background,
    /// The public reads: the query side and the catalog's pages.
    Public,
    /// The card vault, on every order's path.
    Vault,
}

/// One database's pool of each workload.
#[derive(Clone)]
pub(crate) struct Pools {
    pub(crate) append: PgPool,
    pub(crate) background: PgPool,
    pub(crate) public: PgPool,
    pub(crate) vault: PgPool,
}

impl Pools {
    /// `db`'s pools, each of its pool size. Appends get a pool of their own: a burst of
    /// seat-map misses, SSE resumes or payment rounds must not take the connections the
    /// owners' appends are waiting for.
    pub(crate) fn open(db: &DatabaseSettings) -> anyhow::Result<Self> {
        Ok(Self {
            append: db.pool(db.pool_size, false)?,
            background: db.pool(db.pool_size, true)?,
            public: db.pool(db.pool_size, true)?,
            vault: db.pool(db.pool_size, true)?,
        })
    }

    fn of(&self, w: Workload) -> &PgPool {
        match w {
            Workload::Append => &self.append,
            Workload::Background => &self.background,
            Workload::Public => &self.public,
            Workload::Vault => &self.vault,
        }
    }
}

/// Each shard's pools: the main database's own when it is the only shard.
pub(crate) struct ShardPools {
    first: Pools,
    rest: Vec<Pools>,
    /// The process's region: its claims go through only where it writes.
    region: RegionName,
}

impl ShardPools {
    pub(crate) fn open(
        db: &DatabaseSettings,
        main: &Pools,
        region: &RegionName,
    ) -> anyhow::Result<Self> {
        if db.shard_urls.is_empty() {
            return Ok(Self {
                first: main.clone(),
                rest: Vec::new(),
                region: region.clone(),
            });
        }
        let mut shards = db.shards().into_iter().map(|shard| Pools::open(&shard));
        let first = shards.next().context("no shard listed")??;
        Ok(Self {
            first,
            rest: shards.collect::<anyhow::Result<_>>()?,
            region: region.clone(),
        })
    }

    /// Every shard's pool of workload `w`, in shard order.
    pub(crate) fn pools(&self, w: Workload) -> Vec<PgPool> {
        std::iter::once(&self.first)
            .chain(&self.rest)
            .map(|pools| pools.of(w).clone())
            .collect()
    }

    /// Every shard's log through its pool of workload `w`, placed by `directory`.
    pub(crate) fn log(&self, w: Workload, directory: &Arc<dyn Directory>) -> ShardedLog {
        let log = |pools: &Pools| -> Arc<dyn EventLog> {
            Arc::new(PgEventLog::new(pools.of(w).clone()).in_region(&self.region))
        };
        self.rest.iter().fold(
            ShardedLog::new(log(&self.first), directory.clone()),
            |sharded, pools| sharded.and(log(pools)),
        )
    }

    /// [`ShardPools::log`], each shard's log as PostgreSQL's (for what only it can read).
    pub(crate) fn pg_log(
        &self,
        w: Workload,
        directory: &Arc<dyn Directory>,
    ) -> ShardedLog<PgEventLog> {
        let log =
            |pools: &Pools| Arc::new(PgEventLog::new(pools.of(w).clone()).in_region(&self.region));
        self.rest.iter().fold(
            ShardedLog::new(log(&self.first), directory.clone()),
            |sharded, pools| sharded.and(log(pools)),
        )
    }
}
