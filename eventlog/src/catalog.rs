//! The catalog: what a show was scheduled with, for the reads that need it (the event page,
//! whether a show has a waiting room or exists at all, its on-sale window), beside the log it
//! reads. Read once from the log's first event through the caller's pool and kept in memory,
//! since a schedule never changes (the on-sale policies may: they are read from the show's last
//! change in the log, one probe of a partial index). No read goes through a show's owner or the
//! append pool, so a flood of GETs (of real or random ids) cannot fill an owner's queue or take
//! the connections appends wait for.

use std::sync::Arc;

use onsale_domain::{SalePolicy, ShowEvent, ShowId, ShowInfo, VenueLayout};

use crate::{EventLog, StoreError};

/// How long an id found to name no show is answered 404 without reading again.
pub const MISS_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// A show as scheduled.
#[derive(Debug)]
pub struct Scheduled {
    pub info: ShowInfo,
    pub layout: VenueLayout,
}

/// Why the catalog has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// No show has this id (404 `SHOW_NOT_FOUND`).
    #[error("no such show")]
    NotFound,
    /// The log could not be read: fail closed (503).
    #[error("the catalog's log cannot be read now")]
    Unavailable,
    /// The log holds something this build cannot read.
    #[error("corrupt event log: {0}")]
    Corrupt(String),
}

impl From<StoreError> for CatalogError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Corrupt(m) => Self::Corrupt(m),
            _ => Self::Unavailable,
        }
    }
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
        }
    }

    /// The log the catalog reads (every shard's, through the read pools).
    pub fn log(&self) -> &Arc<dyn EventLog> {
        &self.log
    }

    /// The same catalog (its caches shared) reading through `log` instead: the pages anyone
    /// may ask for read through the public pool, so a flood of them never takes the
    /// connections holds, orders and the waiting room read through.
    pub fn reading_from(&self, log: Arc<dyn EventLog>) -> Self {
        Self {
            log,
            ..self.clone()
        }
    }

    /// The hold TTL and the on-sale policies in force: the show's last `SalePolicyChanged` in
    /// the log (one probe of a partial index), else as scheduled. Read from the log, not the
    /// projection, so an admin who changes them reads the change back at once, and the
    /// waiting room admits by it within its 2 s cache.
    pub async fn policy(&self, show: ShowId) -> Result<(u32, SalePolicy), CatalogError> {
        let row = self.log.last_policy_change(&show.to_string()).await?;
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
            Ok(_) => Err(CatalogError::Corrupt(format!(
                "{show}@{} is not SalePolicyChanged",
                row.sequence
            ))),
            Err(e) => Err(CatalogError::Corrupt(format!(
                "{show}@{}: {e}",
                row.sequence
            ))),
        }
    }

    /// A venue as registered, read through the read pool; `None` if there is none.
    pub async fn venue(
        &self,
        venue: onsale_domain::VenueId,
    ) -> Result<Option<onsale_domain::VenueEvent>, CatalogError> {
        Ok(self.log.load_venue(venue).await?)
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
    pub async fn exists(&self, show: ShowId) -> Result<(), CatalogError> {
        self.get(show).await.map(|_| ())
    }

    /// The show as scheduled; `ShowNotFound` if no such show exists (the miss kept for
    /// [`MISS_TTL`], bounded).
    pub async fn get(&self, show: ShowId) -> Result<Arc<Scheduled>, CatalogError> {
        if let Some(s) = self.shows.get(&show).await {
            return Ok(s);
        }
        if self.misses.contains_key(&show) {
            return Err(CatalogError::NotFound);
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
            None => CatalogError::NotFound,
            Some(e) => e.clone().into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, Utc};
    use onsale_domain::{RowLayout, SectionLayout, VenueId};

    use super::*;
    use crate::MemoryEventLog;

    fn schedule(show: ShowId) -> ShowEvent {
        ShowEvent::ShowScheduled {
            info: ShowInfo {
                show_id: show,
                venue_id: VenueId::random(),
                venue_name: "Hall".into(),
                city: "Oslo".into(),
                name: "Night".into(),
                performer: "Band".into(),
                starts_at: Utc::now() + Duration::days(30),
                on_sale_at: Utc::now(),
                prices: [("P".to_owned(), 5_000)].into(),
                currency: Default::default(),
                waiting_room: true,
                hold_ttl_seconds: 600,
                policy: SalePolicy::default(),
            },
            layout: VenueLayout::parse(vec![SectionLayout {
                section: "A".into(),
                price_tier: "P".into(),
                rows: vec![RowLayout {
                    row: "1".into(),
                    seats: 4,
                }],
                general_admission: false,
            }])
            .expect("a valid layout"),
        }
    }

    #[tokio::test]
    async fn a_show_is_read_once_and_a_miss_is_remembered_until_it_is_scheduled_here() {
        let log = Arc::new(MemoryEventLog::default());
        let catalog = Catalog::new(log.clone());
        let show = ShowId::random();
        assert_eq!(catalog.get(show).await.err(), Some(CatalogError::NotFound));
        assert_eq!(catalog.exists(show).await, Err(CatalogError::NotFound));
        assert_eq!(catalog.lookups(), 1, "the miss is remembered");

        let epoch = log.claimed_by_a_new_node(show).await;
        log.append(show, epoch, 0, Utc::now(), &[schedule(show)], &[])
            .await
            .expect("scheduled");
        assert_eq!(
            catalog.get(show).await.err(),
            Some(CatalogError::NotFound),
            "until this process schedules it, or the miss expires"
        );
        catalog.scheduled(show).await;
        let found = catalog.get(show).await.expect("scheduled");
        assert_eq!(
            (found.info.name.as_str(), found.layout.seat_count()),
            ("Night", 4)
        );
        catalog.get(show).await.expect("kept");
        assert_eq!(catalog.lookups(), 2, "a schedule is read once");

        // Reading through another pool shares what was learnt.
        let elsewhere = catalog.reading_from(Arc::new(MemoryEventLog::default()));
        assert!(elsewhere.get(show).await.expect("shared").info.waiting_room);
        assert_eq!(elsewhere.lookups(), 2);
    }

    #[tokio::test]
    async fn the_policies_in_force_are_the_last_change_else_the_schedule() {
        let log = Arc::new(MemoryEventLog::default());
        let catalog = Catalog::new(log.clone());
        let show = ShowId::random();
        assert_eq!(catalog.policy(show).await, Err(CatalogError::NotFound));
        let epoch = log.claimed_by_a_new_node(show).await;
        log.append(show, epoch, 0, Utc::now(), &[schedule(show)], &[])
            .await
            .expect("scheduled");
        catalog.scheduled(show).await;
        assert_eq!(catalog.policy(show).await, Ok((600, SalePolicy::default())));
        let changed = SalePolicy {
            join_challenge_bits: 20,
            require_verified_account: true,
            ..SalePolicy::default()
        };
        let change = |ttl| ShowEvent::SalePolicyChanged {
            hold_ttl_seconds: ttl,
            policy: changed,
            at: Utc::now(),
        };
        log.append(show, epoch, 1, Utc::now(), &[change(300), change(120)], &[])
            .await
            .expect("changed");
        assert_eq!(
            catalog.policy(show).await,
            Ok((120, changed)),
            "read back at once, the last change"
        );
    }
}
