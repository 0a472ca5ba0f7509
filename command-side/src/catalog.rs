//! What a show was scheduled with, for the reads that need it (the event page, whether a show
//! has a waiting room, its on-sale window): read once from the log's first event through the
//! read pool and kept in memory, since a schedule never changes (the on-sale policies may: the
//! page reads those from the catalog projection). No read goes through a show's
//! owner or the append pool, so a flood of GETs (of real or random ids) cannot fill an owner's
//! queue or take the connections appends wait for.

use std::sync::Arc;

use onsale_domain::{SalePolicy, ShowError, ShowId, ShowInfo, VenueLayout};
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
    /// The hold TTL and the on-sale policies.
    pub policy: Option<(u32, SalePolicy)>,
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

    /// What the catalog projection has of the show now: seats available, and the policies in
    /// force (`None` in either when it has not folded them yet, or cannot be read: the page
    /// then goes with the schedule's).
    pub async fn live(&self, show: ShowId) -> Live {
        let Some(pool) = self.projection.as_ref() else {
            return Live::default();
        };
        let row: Option<(i32, Option<i32>, Option<sqlx::types::Json<SalePolicy>>)> =
            sqlx::query_as(
                "SELECT available, hold_ttl_seconds, policy FROM catalog_events WHERE event_id = $1",
            )
            .bind(show.to_string())
            .fetch_optional(pool)
            .await
            .inspect_err(|e| tracing::warn!(error = %e, "catalog projection not read"))
            .ok()
            .flatten();
        match row {
            Some((available, ttl, policy)) => Live {
                available: Some(available),
                policy: ttl
                    .zip(policy)
                    .map(|(ttl, p)| (u32::try_from(ttl).unwrap_or(0), p.0)),
            },
            None => Live::default(),
        }
    }

    /// The hold TTL and the on-sale policies in force, from the log (not the projection: a
    /// change is seen as soon as it is committed); `ShowNotFound` for no such show.
    pub async fn policy(&self, show: ShowId) -> Result<(u32, SalePolicy), CommandError> {
        match self.log.policy_in_force(show).await {
            Ok(Some(p)) => Ok(p),
            Ok(None) => Err(CommandError::Domain(ShowError::ShowNotFound)),
            Err(StoreError::Corrupt(m)) => Err(CommandError::Internal(m)),
            Err(_) => Err(CommandError::Unavailable),
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
