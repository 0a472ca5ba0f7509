//! What a show was scheduled with, for the reads that need it (the event page, whether a show
//! has a waiting room, its on-sale window): read once from the log's first event through the
//! read pool and kept in memory, since a schedule never changes (the on-sale policies may: they
//! are read from the show's last change in the log, one probe of a partial index). No read goes through a show's
//! owner or the append pool, so a flood of GETs (of real or random ids) cannot fill an owner's
//! queue or take the connections appends wait for.

use std::sync::Arc;

use onsale_domain::{SalePolicy, ShowError, ShowEvent, ShowId, ShowInfo, VenueLayout};
use onsale_eventlog::{EventLog, StoreError};

use crate::owner::CommandError;

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
            projection: None,
        }
    }

    /// Reads availability from the catalog projection on `pool` too.
    pub fn with_projection(mut self, pool: sqlx::PgPool) -> Self {
        self.projection = Some(pool);
        self
    }

    /// How many seats the catalog projection has available now (`None` when it has not folded
    /// the show yet, or cannot be read: the page then goes with the schedule's).
    pub async fn live(&self, show: ShowId) -> Live {
        let Some(pool) = self.projection.as_ref() else {
            return Live::default();
        };
        let available: Option<i32> =
            sqlx::query_scalar("SELECT available FROM catalog_events WHERE event_id = $1")
                .bind(show.to_string())
                .fetch_optional(pool)
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

    /// The show as scheduled; `ShowNotFound` if no such show exists (not cached: it may be
    /// scheduled a moment later).
    pub async fn get(&self, show: ShowId) -> Result<Arc<Scheduled>, CommandError> {
        if let Some(s) = self.shows.get(&show).await {
            return Ok(s);
        }
        let log = self.log.clone();
        let found = self
            .shows
            .try_get_with(show, async move {
                match log.scheduled(show).await {
                    Ok(Some((info, layout))) => Ok(Arc::new(Scheduled { info, layout })),
                    Ok(None) => Err(None),
                    Err(e) => Err(Some(e)),
                }
            })
            .await;
        found.map_err(|e: Arc<Option<StoreError>>| match e.as_ref() {
            None => CommandError::Domain(ShowError::ShowNotFound),
            Some(StoreError::Corrupt(m)) => CommandError::Internal(m.clone()),
            Some(_) => CommandError::Unavailable,
        })
    }
}
