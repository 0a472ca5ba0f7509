//! What a show was scheduled with, for the reads that need it (the event page, whether a show
//! has a waiting room, its on-sale window): read once from the log's first event through the
//! read pool and kept in memory, since a schedule never changes (the on-sale policies may: they
//! are read from the show's last change in the log, one probe of a partial index). No read goes through a show's
//! owner or the append pool, so a flood of GETs (of real or random ids) cannot fill an owner's
//! queue or take the connections appends wait for.

use std::sync::Arc;

use onsale_domain::{SalePolicy, ShowError, ShowEvent, ShowId, ShowInfo, VenueLayout};
use onsale_eventlog::{EventLog, StoreError};

use crate::protocol::CommandError;

/// How long an id found to name no show is answered 404 without reading again.
pub const MISS_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// A show as scheduled.
#[derive(Debug)]
pub struct Scheduled {
    pub info: ShowInfo,
    pub layout: VenueLayout,
}

/// A show as the catalog projection has it now.
#[derive(Debug, Default)]
pub struct Live {
    pub available: Option<i32>,
}

#[derive(Clone, Debug)]
pub struct Catalog {
    log: Arc<dyn EventLog>,
    shows: moka::future::Cache<ShowId, Arc<Scheduled>>,
    /// Ids found to name no show, for a few seconds: a flood of made-up ids costs one read
    /// each per [`MISS_TTL`], not one per request. A show id is drawn by the server when the
    /// show is scheduled, so a miss can only be cached for it before that by guessing a fresh
    /// UUIDv7; this process forgets the miss when it schedules the show all the same.
    misses: moka::future::Cache<ShowId, ()>,
    /// Reads of the log this catalog made (misses of `shows` and `misses`).
    lookups: Arc<std::sync::atomic::AtomicU64>,
    /// The catalog projection (`catalog_events`): how many seats are available, for the event
    /// page's status (`SOLD_OUT`).
    projection: Option<sqlx::PgPool>,
}

impl Catalog {
    /// `log` reads through the read pool.
    pub fn new(log: Arc<dyn EventLog>) -> Self {
        Self {
            log,
            // A show's schedule is a few kilobytes: 100,000 of them fit in a few hundred MB at
            // worst; the least used go first.
            shows: moka::future::Cache::builder().max_capacity(100_000).build(),
            misses: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(MISS_TTL)
                .build(),
            lookups: Arc::default(),
            projection: None,
        }
    }

    /// The log the catalog reads (every shard's, through the read pools).
    pub fn log(&self) -> &Arc<dyn EventLog> {
        &self.log
    }

    /// Reads availability from the catalog projection on `pool` too.
    pub fn with_projection(mut self, pool: sqlx::PgPool) -> Self {
        self.projection = Some(pool);
        self
    }

    /// The same catalog (its caches shared) reading through `log` and `projection` instead:
    /// the pages anyone may ask for read through the public pool, so a flood of them never
    /// takes the connections holds, orders and the waiting room read through.
    pub fn reading_from(&self, log: Arc<dyn EventLog>, projection: sqlx::PgPool) -> Self {
        Self {
            log,
            projection: Some(projection),
            ..self.clone()
        }
    }

    /// How many seats the catalog projection has available now (`None` when it has not folded
    /// the show yet, or cannot be read: the page then goes with the schedule's).
    pub async fn live(&self, show: ShowId) -> Live {
        let Some(pool) = self.projection.as_ref() else {
            return Live::default();
        };
        let available = onsale_projections::catalog::available(pool, show)
            .await
            .inspect_err(|e| tracing::warn!(error = %e, "catalog projection not read"))
            .ok()
            .flatten();
        Live { available }
    }

    /// The hold TTL and the on-sale policies in force: the show's last `SalePolicyChanged` in
    /// the log (one probe of a partial index), else as scheduled. Read from the log, not the
    /// projection, so an admin who changes them reads the change back at once, and the
    /// waiting room admits by it within its 2 s cache.
    pub async fn policy(&self, show: ShowId) -> Result<(u32, SalePolicy), CommandError> {
        let row = self
            .log
            .last_policy_change(&show.to_string())
            .await
            .map_err(|e| match e {
                StoreError::Corrupt(m) => CommandError::Internal(m),
                _ => CommandError::Unavailable,
            })?;
        let Some(row) = row else {
            let scheduled = self.get(show).await?;
            return Ok((scheduled.info.hold_ttl_seconds, scheduled.info.policy));
        };
        match serde_json::from_str::<ShowEvent>(&row.payload) {
            Ok(ShowEvent::SalePolicyChanged {
                hold_ttl_seconds,
                policy,
                ..
            }) => Ok((hold_ttl_seconds, policy)),
            Ok(_) => Err(CommandError::Internal(format!(
                "{show}@{} is not SalePolicyChanged",
                row.sequence
            ))),
            Err(e) => Err(CommandError::Internal(format!(
                "{show}@{}: {e}",
                row.sequence
            ))),
        }
    }

    /// A venue as registered, read through the read pool; `None` if there is none.
    pub async fn venue(
        &self,
        venue: onsale_domain::VenueId,
    ) -> Result<Option<onsale_domain::VenueEvent>, CommandError> {
        self.log.load_venue(venue).await.map_err(|e| match e {
            StoreError::Corrupt(m) => CommandError::Internal(m),
            _ => CommandError::Unavailable,
        })
    }

    /// How many times this catalog read the log for a show (cached answers read nothing).
    pub fn lookups(&self) -> u64 {
        self.lookups.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// This process scheduled `show`: a miss cached for its id goes.
    pub async fn scheduled(&self, show: ShowId) {
        self.misses.invalidate(&show).await;
    }

    /// Whether `show` exists: `ShowNotFound` (404) before anything reaches an owner, which
    /// would otherwise claim and load a show that is not there.
    pub async fn exists(&self, show: ShowId) -> Result<(), CommandError> {
        self.get(show).await.map(|_| ())
    }

    /// The show as scheduled; `ShowNotFound` if no such show exists (the miss kept for
    /// [`MISS_TTL`], bounded).
    pub async fn get(&self, show: ShowId) -> Result<Arc<Scheduled>, CommandError> {
        if let Some(s) = self.shows.get(&show).await {
            return Ok(s);
        }
        if self.misses.contains_key(&show) {
            return Err(CommandError::Domain(ShowError::ShowNotFound));
        }
        let log = self.log.clone();
        let lookups = self.lookups.clone();
        let found = self
            .shows
            .try_get_with(show, async move {
                lookups.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match log.scheduled(show).await {
                    Ok(Some((info, layout))) => Ok(Arc::new(Scheduled { info, layout })),
                    Ok(None) => Err(None),
                    Err(e) => Err(Some(e)),
                }
            })
            .await;
        if matches!(&found, Err(e) if e.is_none()) {
            self.misses.insert(show, ()).await;
        }
        found.map_err(|e: Arc<Option<StoreError>>| match e.as_ref() {
            None => CommandError::Domain(ShowError::ShowNotFound),
            Some(StoreError::Corrupt(m)) => CommandError::Internal(m.clone()),
            Some(_) => CommandError::Unavailable,
        })
    }
}
