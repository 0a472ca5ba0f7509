//! Shows sharded over several write clusters (docs/adr/021). Each shard is a PostgreSQL cluster
//! of its own holding the whole write path of the shows placed on it (their log, snapshots,
//! ownership and fence), so a show's append, claim and fence are one cluster's business and a
//! shard fails alone. The [`Directory`] records where each show lives, once, when it is
//! scheduled; [`ShardedLog`] reads it through a cache and sends each show's statements to its
//! shard, so nothing on the hot path asks more than the show's own shard.
//!
//! A show the directory has no entry for was scheduled before the directory existed (or is no
//! show at all): it lives on shard 1, which is also where a one-shard deployment keeps
//! everything.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use onsale_domain::{ShowEvent, ShowId, VenueEvent, VenueId};
use sqlx::PgPool;

use crate::{Claim, EventLog, LoadedShow, LogRow, Node, Result, ScanKey, StoreError, Traced};

/// How long a show found in no shard's directory entry is taken to be on shard 1 without
/// asking again: a flood of made-up ids costs one directory read each per this, not one per
/// request. Ids are drawn by the server when a show is scheduled, so a stale miss can only be
/// cached for a show by guessing its id before it exists.
pub const MISS_TTL: Duration = Duration::from_secs(10);

/// A write cluster, numbered from 1 in the order the deployment lists them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct ShardId(u16);

impl ShardId {
    /// Where shows the directory has no entry for live.
    pub const FIRST: ShardId = ShardId(1);

    /// Shard `n`, counted from 1.
    pub fn new(n: u16) -> Option<Self> {
        (n >= 1).then_some(Self(n))
    }

    pub fn get(self) -> u16 {
        self.0
    }

    pub(crate) fn index(self) -> usize {
        usize::from(self.0 - 1)
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where each show lives. Written once per show (and by a move), read through
/// [`ShardedLog`]'s cache.
#[async_trait::async_trait]
pub trait Directory: Send + Sync + fmt::Debug {
    /// The shard a show was placed on; `None` if it never was.
    async fn lookup(&self, show: ShowId) -> Result<Option<ShardId>>;

    /// Places a show on `shard` unless it is placed already; answers where it is.
    async fn place(&self, show: ShowId, shard: ShardId) -> Result<ShardId>;

    /// How many shows each shard holds (shards holding none are absent).
    async fn counts(&self) -> Result<HashMap<ShardId, i64>>;
}

/// The directory in the directory database (the deployment's main database).
#[derive(Debug, Clone)]
pub struct PgDirectory {
    pool: PgPool,
    /// The region that schedules shows here: each new show's write region (docs/adr/024).
    region: Option<String>,
}

impl PgDirectory {
    pub fn new(pool: PgPool) -> Self {
        Self { pool, region: None }
    }

    /// Shows placed from now on are written in `region`.
    pub fn in_region(mut self, region: &onsale_domain::region::RegionName) -> Self {
        self.region = Some(region.as_str().to_owned());
        self
    }

    /// The show lives on `shard` from now on (a move, once its copy there is verified).
    pub async fn switch(&self, show: ShowId, shard: ShardId) -> Result<()> {
        sqlx::query(
            "INSERT INTO show_shards (show_id, shard) VALUES ($1, $2)
             ON CONFLICT (show_id) DO UPDATE SET shard = EXCLUDED.shard, placed_at = now()",
        )
        .bind(show.to_string())
        .bind(i16::try_from(shard.0).unwrap_or(i16::MAX))
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

fn shard_of_row(shard: i16) -> Result<ShardId> {
    u16::try_from(shard)
        .ok()
        .filter(|s| *s >= 1)
        .map(ShardId)
        .ok_or_else(|| StoreError::Corrupt(format!("shard directory names shard {shard}")))
}

#[async_trait::async_trait]
impl Directory for PgDirectory {
    async fn lookup(&self, show: ShowId) -> Result<Option<ShardId>> {
        let shard: Option<i16> =
            sqlx::query_scalar("SELECT shard FROM show_shards WHERE show_id = $1")
                .bind(show.to_string())
                .fetch_optional(&self.pool)
                .await?;
        shard.map(shard_of_row).transpose()
    }

    async fn place(&self, show: ShowId, shard: ShardId) -> Result<ShardId> {
        // A show placed already keeps its shard, read once the insert found it (a concurrent
        // placement's insert is waited for by the conflict, then seen). No UPDATE: the
        // processes' role may place a show, never repoint one (a move is the owner's job).
        let inserted: Option<i16> = sqlx::query_scalar(
            "INSERT INTO show_shards (show_id, shard, region) VALUES ($1, $2, $3)
             ON CONFLICT (show_id) DO NOTHING
             RETURNING shard",
        )
        .bind(show.to_string())
        .bind(i16::try_from(shard.0).unwrap_or(i16::MAX))
        .bind(&self.region)
        .fetch_optional(&self.pool)
        .await?;
        match inserted {
            Some(placed) => shard_of_row(placed),
            None => self.lookup(show).await?.ok_or_else(|| {
                StoreError::Unavailable(format!("{show} was placed and is gone from the directory"))
            }),
        }
    }

    async fn counts(&self) -> Result<HashMap<ShardId, i64>> {
        let rows: Vec<(i16, i64)> =
            sqlx::query_as("SELECT shard, count(*) FROM show_shards GROUP BY shard")
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter()
            .map(|(s, n)| Ok((shard_of_row(s)?, n)))
            .collect()
    }
}

/// The directory in memory, for unit tests and the simulator.
#[derive(Debug, Default)]
pub struct MemoryDirectory {
    shows: Mutex<HashMap<ShowId, ShardId>>,
}

#[async_trait::async_trait]
impl Directory for MemoryDirectory {
    async fn lookup(&self, show: ShowId) -> Result<Option<ShardId>> {
        Ok(self.lock().get(&show).copied())
    }

    async fn place(&self, show: ShowId, shard: ShardId) -> Result<ShardId> {
        Ok(*self.lock().entry(show).or_insert(shard))
    }

    async fn counts(&self) -> Result<HashMap<ShardId, i64>> {
        let mut counts = HashMap::new();
        for shard in self.lock().values() {
            *counts.entry(*shard).or_insert(0) += 1;
        }
        Ok(counts)
    }
}

impl MemoryDirectory {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ShowId, ShardId>> {
        self.shows.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The shards' logs behind one [`EventLog`]: a show's statements go to its shard; what is about
/// every show (a node's heartbeat, the orphans, the heads) asks every shard. `L` is each
/// shard's log: any [`EventLog`], or a concrete one when a caller needs more than the trait
/// (the query side's maps of the past read [`crate::PgEventLog::load_until`]).
#[derive(Debug)]
pub struct ShardedLog<L: ?Sized = dyn EventLog> {
    shards: Vec<Arc<L>>,
    directory: Arc<dyn Directory>,
    /// Where shows live, as the directory said. Never evicted: a show already known keeps
    /// selling while the directory is unreachable. An entry changes only by a move, and a
    /// moved show's old shard fences whatever still writes there.
    known: RwLock<HashMap<ShowId, ShardId>>,
    /// Shows the directory had no entry for, for [`MISS_TTL`].
    misses: moka::sync::Cache<ShowId, ()>,
}

impl<L: EventLog + ?Sized> ShardedLog<L> {
    /// Shard 1's log; add the others with [`ShardedLog::and`].
    pub fn new(first: Arc<L>, directory: Arc<dyn Directory>) -> Self {
        Self {
            shards: vec![first],
            directory,
            known: RwLock::default(),
            misses: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(MISS_TTL)
                .build(),
        }
    }

    /// One shard, the directory in memory: a deployment (or test) with one write cluster.
    pub fn single(log: Arc<L>) -> Self {
        Self::new(log, Arc::new(MemoryDirectory::default()))
    }

    /// The next shard's log.
    pub fn and(mut self, log: Arc<L>) -> Self {
        self.shards.push(log);
        self
    }

    /// Every shard and its log, in order.
    pub fn shards(&self) -> impl Iterator<Item = (ShardId, &Arc<L>)> {
        self.shards
            .iter()
            .enumerate()
            .map(|(i, log)| (ShardId(u16::try_from(i + 1).unwrap_or(u16::MAX)), log))
    }

    pub fn count(&self) -> usize {
        self.shards.len()
    }

    /// The shard numbered `n`, if the deployment has it.
    pub fn shard_id(&self, n: u16) -> Option<ShardId> {
        (n >= 1 && usize::from(n) <= self.shards.len()).then_some(ShardId(n))
    }

    /// A shard's own log.
    pub fn log(&self, shard: ShardId) -> Result<&Arc<L>> {
        self.shards
            .get(shard.index())
            .ok_or_else(|| StoreError::Corrupt(format!("shard {shard} is not configured here")))
    }

    /// Where a show lives, if this process knows without asking.
    pub fn cached(&self, show: ShowId) -> Option<ShardId> {
        if self.shards.len() == 1 {
            return Some(ShardId::FIRST);
        }
        self.known
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&show)
            .copied()
    }

    /// Where a show lives: known, or read from the directory (a show it has no entry for is on
    /// shard 1). [`StoreError::Unavailable`] if the directory does not answer about a show
    /// this process has not seen yet.
    pub async fn locate(&self, show: ShowId) -> Result<ShardId> {
        if let Some(shard) = self.cached(show) {
            return Ok(shard);
        }
        if self.misses.contains_key(&show) {
            return Ok(ShardId::FIRST);
        }
        match self.directory.lookup(show).await? {
            Some(shard) => {
                // A shard this process does not list (its configuration is behind the
                // directory's): nothing is written anywhere for the show.
                self.log(shard)?;
                self.learn(show, shard);
                Ok(shard)
            }
            None => {
                self.misses.insert(show, ());
                Ok(ShardId::FIRST)
            }
        }
    }

    /// Forgets where a show lives (it was found moved away): the next [`ShardedLog::locate`]
    /// asks the directory.
    pub fn forget(&self, show: ShowId) {
        self.misses.invalidate(&show);
        self.known
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&show);
    }

    /// A show this process knows found on none of its shard's rows: asks the directory again.
    /// The show's log if it lives on another shard now (it moved), else `None`.
    pub async fn recheck(&self, show: ShowId) -> Result<Option<&Arc<L>>> {
        let Some(was) = self.cached(show).filter(|_| self.shards.len() > 1) else {
            return Ok(None);
        };
        let now = self.directory.lookup(show).await?.unwrap_or(ShardId::FIRST);
        if now == was {
            return Ok(None);
        }
        let log = self.log(now)?;
        self.learn(show, now);
        Ok(Some(log))
    }

    fn learn(&self, show: ShowId, shard: ShardId) {
        self.misses.invalidate(&show);
        self.known
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(show, shard);
    }

    /// Records where a new show lives, before its first event is appended: on `wanted`, or on
    /// the shard holding the fewest shows. Answers the shard it is on.
    pub async fn place(&self, show: ShowId, wanted: Option<ShardId>) -> Result<ShardId> {
        let shard = match wanted {
            Some(shard) => shard,
            None if self.shards.len() == 1 => ShardId::FIRST,
            None => {
                let counts = self.directory.counts().await?;
                self.shards()
                    .map(|(id, _)| id)
                    .min_by_key(|id| (counts.get(id).copied().unwrap_or(0), *id))
                    .unwrap_or(ShardId::FIRST)
            }
        };
        self.log(shard)?;
        let placed = self.directory.place(show, shard).await?;
        self.log(placed)?;
        self.learn(show, placed);
        Ok(placed)
    }

    /// The log of the shard a show lives on.
    pub async fn of(&self, show: ShowId) -> Result<&Arc<L>> {
        let shard = self.locate(show).await?;
        self.log(shard)
    }

    /// The log of the show named `id`; aggregates that are not shows (venues) live on shard 1.
    async fn of_id(&self, id: &str) -> Result<&Arc<L>> {
        match id.parse::<ShowId>() {
            Ok(show) => self.of(show).await,
            Err(_) => self.log(ShardId::FIRST),
        }
    }

    /// Runs `f` on every shard at once; every answer, in shard order.
    async fn each<'a, T, F>(&'a self, f: impl Fn(&'a Arc<L>) -> F) -> Vec<Result<T>>
    where
        F: std::future::Future<Output = Result<T>> + 'a,
    {
        futures::future::join_all(self.shards.iter().map(f)).await
    }
}

/// Each shard's PostgreSQL: what else lives with a show (its payments, refunds, tickets and
/// the card tokens of its orders) is reached through the same directory as its log.
impl ShardedLog<crate::PgEventLog> {
    /// The pool of the shard `show` lives on.
    pub async fn pool_of(&self, show: ShowId) -> Result<&PgPool> {
        Ok(self.of(show).await?.pool())
    }

    /// Every shard and its pool, in order.
    pub fn pools(&self) -> impl Iterator<Item = (ShardId, &PgPool)> {
        self.shards().map(|(shard, log)| (shard, log.pool()))
    }
}

#[async_trait::async_trait]
impl<L: EventLog + ?Sized> EventLog for ShardedLog<L> {
    async fn append(
        &self,
        show: ShowId,
        epoch: i64,
        after: i64,
        at: DateTime<Utc>,
        events: &[ShowEvent],
        traces: &[Traced],
    ) -> Result<()> {
        self.of(show)
            .await?
            .append(show, epoch, after, at, events, traces)
            .await
    }

    async fn claim(&self, show: ShowId, node: &Node, ttl: Duration) -> Result<Claim> {
        self.of(show).await?.claim(show, node, ttl).await
    }

    async fn release(&self, show: ShowId, epoch: i64) -> Result<()> {
        self.of(show).await?.release(show, epoch).await
    }

    /// The node stays registered on every shard; any shard failing fails the heartbeat (the
    /// owners keep a lease per shard, `onsale_command::Shows`, and beat each on its own).
    async fn heartbeat(&self, node: &Node, ttl: Duration) -> Result<Vec<ShowId>> {
        let mut owned = Vec::new();
        for answer in self.each(|log| log.heartbeat(node, ttl)).await {
            owned.extend(answer?);
        }
        Ok(owned)
    }

    async fn leave(&self, node: &Node) -> Result<()> {
        self.each(|log| log.leave(node))
            .await
            .into_iter()
            .collect::<Result<Vec<()>>>()
            .map(|_| ())
    }

    /// The orphans of the shards that answer: a shard that is down has nobody to claim for.
    async fn orphans(&self, limit: i64) -> Result<Vec<ShowId>> {
        let mut orphans = Vec::new();
        let mut failed = None;
        for answer in self.each(|log| log.orphans(limit)).await {
            match answer {
                Ok(shows) => orphans.extend(shows),
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            Some(e) if orphans.is_empty() => Err(e),
            _ => Ok(orphans),
        }
    }

    async fn load(&self, show: ShowId) -> Result<LoadedShow> {
        self.of(show).await?.load(show).await
    }

    async fn replay(&self, show: ShowId) -> Result<LoadedShow> {
        self.of(show).await?.replay(show).await
    }

    /// Like [`read_range`](EventLog::read_range), a load that finds nothing of a known show
    /// asks the directory again: the show may have moved.
    async fn load_upto(&self, show: ShowId, upto: i64) -> Result<LoadedShow> {
        let loaded = self.of(show).await?.load_upto(show, upto).await?;
        if loaded.version == 0 && upto > 0 {
            if let Some(moved) = self.recheck(show).await? {
                return moved.load_upto(show, upto).await;
            }
        }
        Ok(loaded)
    }

    /// A read from the start that finds nothing on a known show's shard asks the directory
    /// again: the show may have moved since this process learned where it was.
    async fn read_range(
        &self,
        show: &str,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> Result<Vec<LogRow>> {
        let rows = self
            .of_id(show)
            .await?
            .read_range(show, after, upto, limit)
            .await?;
        if rows.is_empty() && after == 0 {
            if let Ok(id) = show.parse::<ShowId>() {
                if let Some(moved) = self.recheck(id).await? {
                    return moved.read_range(show, after, upto, limit).await;
                }
            }
        }
        Ok(rows)
    }

    async fn last_policy_change(&self, show: &str) -> Result<Option<LogRow>> {
        self.of_id(show).await?.last_policy_change(show).await
    }

    async fn recent_activity(&self, show: ShowId, events: i64) -> Result<crate::Activity> {
        self.of(show).await?.recent_activity(show, events).await
    }

    /// The heads of every shard that answers: a shard that does not is left out (its shows
    /// are compared again once it answers), so the projections' gap check goes on for the
    /// others. Fails only if no shard answers.
    async fn heads(&self) -> Result<Vec<(String, i64)>> {
        let (mut heads, mut answered, mut failed) = (Vec::new(), false, None);
        for (n, answer) in (1u16..).zip(self.each(|log| log.heads()).await) {
            match answer {
                Ok(h) => {
                    heads.extend(h);
                    answered = true;
                }
                Err(e) => {
                    tracing::warn!(shard = n, error = %e, "a shard's heads not read");
                    failed = Some(e);
                }
            }
        }
        match failed {
            Some(e) if !answered => Err(e),
            _ => Ok(heads),
        }
    }

    /// Every shard's rows after `after`, merged in key order.
    async fn scan(&self, after: &ScanKey, show: Option<&str>, limit: i64) -> Result<Vec<LogRow>> {
        if let Some(id) = show {
            return self.of_id(id).await?.scan(after, show, limit).await;
        }
        let mut rows = Vec::new();
        for answer in self.each(|log| log.scan(after, None, limit)).await {
            rows.extend(answer?);
        }
        rows.sort_by(|a, b| {
            (&a.aggregate_type, &a.aggregate_id, a.sequence).cmp(&(
                &b.aggregate_type,
                &b.aggregate_id,
                b.sequence,
            ))
        });
        rows.truncate(usize::try_from(limit).unwrap_or(0));
        Ok(rows)
    }

    async fn save_snapshot(&self, show: ShowId, version: i64, payload: &str) -> Result<()> {
        self.of(show)
            .await?
            .save_snapshot(show, version, payload)
            .await
    }

    /// Venues live on shard 1 (a show carries its venue's layout in its first event, so a show
    /// on another shard never reads them).
    async fn register_venue(&self, venue: VenueId, event: &VenueEvent) -> Result<()> {
        self.log(ShardId::FIRST)?.register_venue(venue, event).await
    }

    async fn load_venue(&self, venue: VenueId) -> Result<Option<VenueEvent>> {
        self.log(ShardId::FIRST)?.load_venue(venue).await
    }

    /// Answers while any shard does: a shard that is down fails its own shows' commands
    /// (503), not the whole node's readiness.
    async fn ping(&self) -> Result<()> {
        let mut failed = None;
        for answer in self.each(|log| log.ping()).await {
            match answer {
                Ok(()) => return Ok(()),
                Err(e) => failed = Some(e),
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryEventLog;

    fn two() -> (
        ShardedLog<MemoryEventLog>,
        Arc<MemoryEventLog>,
        Arc<MemoryEventLog>,
    ) {
        let (a, b) = (
            Arc::new(MemoryEventLog::default()),
            Arc::new(MemoryEventLog::default()),
        );
        let log = ShardedLog::new(a.clone(), Arc::new(MemoryDirectory::default())).and(b.clone());
        (log, a, b)
    }

    #[tokio::test]
    async fn placement_fills_the_emptiest_shard_and_a_named_one_is_kept() {
        let (log, _, _) = two();
        let (s1, s2, s3) = (ShowId::random(), ShowId::random(), ShowId::random());
        assert_eq!(
            log.place(s1, None).await.expect("the memory log answers"),
            ShardId(1)
        );
        assert_eq!(
            log.place(s2, None).await.expect("the memory log answers"),
            ShardId(2)
        );
        let two = log.shard_id(2);
        assert_eq!(
            log.place(s3, two).await.expect("the memory log answers"),
            ShardId(2)
        );
        // Placed once: placing again (on another shard) answers where it is.
        assert_eq!(
            log.place(s3, log.shard_id(1))
                .await
                .expect("the memory log answers"),
            ShardId(2)
        );
        assert_eq!(log.shard_id(3), None);
        assert_eq!(log.shard_id(0), None);
    }

    #[tokio::test]
    async fn a_shows_statements_go_to_its_shard_only() {
        let (log, a, b) = two();
        let show = ShowId::random();
        log.place(show, log.shard_id(2))
            .await
            .expect("the memory log answers");
        let node = Node {
            id: uuid::Uuid::new_v4(),
            addr: "n".into(),
        };
        let Claim::Owned { epoch } = log
            .claim(show, &node, Duration::from_secs(5))
            .await
            .expect("the memory log answers")
        else {
            panic!("a free show is claimed");
        };
        let released = ShowEvent::HoldReleased {
            hold_id: onsale_domain::HoldId::new(show),
        };
        log.append(show, epoch, 0, Utc::now(), &[released], &[])
            .await
            .expect("the memory log answers");
        assert_eq!((a.appends(), b.appends()), (0, 1));
        assert_eq!(b.epoch(show), Some(epoch));
        assert_eq!(a.owner(show), None);
        assert_eq!(
            log.read_range(&show.to_string(), 0, 9, 9)
                .await
                .expect("the memory log answers")
                .len(),
            1
        );
        // An unplaced show is on shard 1.
        let old = ShowId::random();
        assert_eq!(
            log.locate(old).await.expect("the memory log answers"),
            ShardId::FIRST
        );
    }
}
