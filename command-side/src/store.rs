//! The PostgreSQL event store: appends under the version check, loads snapshot plus tail.
//!
//! The schema is postgres-es's (migrations/0001), but the writes are ours: one statement
//! appends the events of a whole group commit with consecutive sequences (postgres-es inserts
//! row by row and has no notion of batching commands), see docs/adr/001.

use chrono::{DateTime, Utc};
use cqrs_es::{Aggregate, DomainEvent};
use onsale_domain::{Show, ShowEvent, ShowId, VenueEvent, VenueId, VENUE_TYPE};
use sqlx::postgres::PgPool;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another writer appended to this aggregate first: reload and retry.
    #[error("version conflict")]
    Conflict,
    /// PostgreSQL could not be reached or did not answer: fail closed.
    #[error("event store unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// The log holds something this build cannot read.
    #[error("corrupt event log: {0}")]
    Corrupt(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") => Self::Conflict,
            _ => Self::Unavailable(e),
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A show rebuilt from the store, with the sequence of its last event.
#[derive(Debug)]
pub struct LoadedShow {
    pub show: Show,
    pub version: i64,
    pub snapshot_version: i64,
}

/// One row of the log.
#[derive(Debug, serde::Serialize)]
pub struct StoredEvent {
    pub sequence: i64,
    pub event_type: String,
    pub event: ShowEvent,
}

/// Applies the migrations (the event store's and the read models').
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    use anyhow::Context;
    sqlx::migrate!("../migrations")
        .run(pool)
        .await
        .context("apply the migrations")
}

#[derive(Debug, Clone)]
pub struct EventStore {
    pool: PgPool,
}

impl EventStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Appends `events` as sequences `after + 1 ..` in one statement. Either all of them commit
    /// or none do; a sequence another writer already used is [`StoreError::Conflict`]. `at`, the
    /// time the events were decided, goes into each row's metadata for auditors.
    pub async fn append(
        &self,
        show: ShowId,
        after: i64,
        at: DateTime<Utc>,
        events: &[ShowEvent],
    ) -> Result<()> {
        let n = events.len() as i64;
        let sequences: Vec<i64> = (after + 1..=after + n).collect();
        let types: Vec<String> = events.iter().map(DomainEvent::event_type).collect();
        let payloads = events
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
             SELECT $1, $2, s, t, '1', p::json, json_build_object('at', $6::text)
               FROM UNNEST($3::bigint[], $4::text[], $5::text[]) AS u(s, t, p)",
        )
        .bind(Show::TYPE)
        .bind(show.to_string())
        .bind(&sequences)
        .bind(&types)
        .bind(&payloads)
        .bind(at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The latest snapshot, then every event after it.
    pub async fn load(&self, show: ShowId) -> Result<LoadedShow> {
        let id = show.to_string();
        let snapshot: Option<(i64, String)> = sqlx::query_as(
            "SELECT last_sequence, payload::text FROM snapshots
              WHERE aggregate_type = $1 AND aggregate_id = $2
              ORDER BY last_sequence DESC LIMIT 1",
        )
        .bind(Show::TYPE)
        .bind(&id)
        .fetch_optional(&self.pool)
        .await?;
        let (mut aggregate, from) = match snapshot {
            Some((seq, payload)) => (
                serde_json::from_str::<Show>(&payload)
                    .map_err(|e| StoreError::Corrupt(format!("snapshot {id}@{seq}: {e}")))?,
                seq,
            ),
            None => (Show::default(), 0),
        };
        let version = self.apply_tail(&mut aggregate, &id, from).await?;
        Ok(LoadedShow {
            show: aggregate,
            version,
            snapshot_version: from,
        })
    }

    /// Every event from zero, ignoring snapshots: the reference a snapshot is checked against.
    pub async fn replay(&self, show: ShowId) -> Result<LoadedShow> {
        let mut aggregate = Show::default();
        let version = self
            .apply_tail(&mut aggregate, &show.to_string(), 0)
            .await?;
        Ok(LoadedShow {
            show: aggregate,
            version,
            snapshot_version: 0,
        })
    }

    /// A show's events in order, as stored: what analysts and auditors replay.
    pub async fn events(&self, show: ShowId) -> Result<Vec<StoredEvent>> {
        let rows: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT sequence, event_type, payload::text FROM events
              WHERE aggregate_type = $1 AND aggregate_id = $2 ORDER BY sequence",
        )
        .bind(Show::TYPE)
        .bind(show.to_string())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(sequence, event_type, payload)| {
                let event = serde_json::from_str(&payload)
                    .map_err(|e| StoreError::Corrupt(format!("{show}@{sequence}: {e}")))?;
                Ok(StoredEvent {
                    sequence,
                    event_type,
                    event,
                })
            })
            .collect()
    }

    async fn apply_tail(&self, aggregate: &mut Show, id: &str, after: i64) -> Result<i64> {
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT sequence, payload::text FROM events
              WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence > $3
              ORDER BY sequence",
        )
        .bind(Show::TYPE)
        .bind(id)
        .bind(after)
        .fetch_all(&self.pool)
        .await?;
        let mut version = after;
        for (seq, payload) in rows {
            if seq != version + 1 {
                return Err(StoreError::Corrupt(format!(
                    "{id}: sequence {seq} follows {version}"
                )));
            }
            let event: ShowEvent = serde_json::from_str(&payload)
                .map_err(|e| StoreError::Corrupt(format!("{id}@{seq}: {e}")))?;
            aggregate.apply(event);
            version = seq;
        }
        Ok(version)
    }

    /// Stores a snapshot taken at `version` and drops all but the two newest.
    pub async fn save_snapshot(&self, show: ShowId, version: i64, payload: &str) -> Result<()> {
        let id = show.to_string();
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO snapshots (aggregate_type, aggregate_id, last_sequence, current_snapshot, payload)
             VALUES ($1, $2, $3, $3, $4::json) ON CONFLICT DO NOTHING",
        )
        .bind(Show::TYPE)
        .bind(&id)
        .bind(version)
        .bind(payload)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM snapshots WHERE aggregate_type = $1 AND aggregate_id = $2 AND last_sequence < (
                SELECT min(last_sequence) FROM (SELECT last_sequence FROM snapshots
                  WHERE aggregate_type = $1 AND aggregate_id = $2 ORDER BY last_sequence DESC LIMIT 2) newest)",
        )
        .bind(Show::TYPE)
        .bind(&id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn register_venue(&self, venue: VenueId, event: &VenueEvent) -> Result<()> {
        let payload =
            serde_json::to_string(event).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
             VALUES ($1, $2, 1, $3, '1', $4::json, '{}'::json)",
        )
        .bind(VENUE_TYPE)
        .bind(venue.to_string())
        .bind(event.event_type())
        .bind(payload)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn load_venue(&self, venue: VenueId) -> Result<Option<VenueEvent>> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT payload::text FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence = 1",
        )
        .bind(VENUE_TYPE)
        .bind(venue.to_string())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|(p,)| serde_json::from_str(&p).map_err(|e| StoreError::Corrupt(e.to_string())))
            .transpose()
    }

    /// Whether PostgreSQL answers: what `/readyz` reports.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
