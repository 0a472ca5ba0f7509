//! The event log on PostgreSQL. The schema is postgres-es's (migrations/0001), but the writes
//! are ours: one statement appends the events of a whole group commit with consecutive
//! sequences (postgres-es inserts row by row and has no notion of batching commands), see
//! docs/adr/001. The primary key (aggregate, sequence) is the version check.

use chrono::{DateTime, Utc};
use cqrs_es::{Aggregate, DomainEvent};
use onsale_domain::{Show, ShowEvent, ShowId, VenueEvent, VenueId, VENUE_TYPE};
use sqlx::postgres::PgPool;
use sqlx::Row;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::copy::CopyRows;
use crate::{
    start_from, Claim, EventLog, Fold, LoadedShow, LogRow, Node, Result, ScanKey, StoreError,
};

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") => Self::Conflict,
            _ => Self::Unavailable(e.to_string()),
        }
    }
}

/// Applies the migrations (the event store's and the read models').
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    use anyhow::Context;
    sqlx::migrate!("../migrations")
        .run(pool)
        .await
        .context("apply the migrations")
}

/// The version of the last migration this build carries: what a standby's schema (the writer
/// region's, replicated) must have reached for this build to read it.
pub fn latest_migration() -> i64 {
    sqlx::migrate!("../migrations")
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or(0)
}

/// The hash of each show's last appended event, as this process appended it: the next
/// append chains from it without reading it back.
type ChainHeads = Arc<Mutex<HashMap<ShowId, (i64, [u8; 32])>>>;

#[derive(Debug, Clone)]
pub struct PgEventLog {
    pool: PgPool,
    heads: ChainHeads,
    /// The region this process writes in: a claim is refused on a cluster that records
    /// another region as the writer (docs/adr/024).
    region: Option<String>,
}

impl PgEventLog {
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            heads: Arc::default(),
            region: None,
        }
    }

    /// Claims go through only where `region` writes (or no region is recorded yet).
    pub fn in_region(mut self, region: &onsale_domain::region::RegionName) -> Self {
        self.region = Some(region.as_str().to_owned());
        self
    }

    /// The pool this log's statements go through: its shard's, for the rest of a show's
    /// write path (payments, tickets, the card vault) to reach the same cluster.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The hash event `after` of `show` carries: remembered from this process's last append,
    /// else read. `None` if the row has none (the trigger then chains the new rows).
    async fn chain_head(&self, show: ShowId, after: i64) -> Result<Option<[u8; 32]>> {
        if after == 0 {
            return Ok(Some(crate::chain::GENESIS));
        }
        if let Some((seq, hash)) = self.heads.lock().ok().and_then(|h| h.get(&show).copied()) {
            if seq == after {
                return Ok(Some(hash));
            }
        }
        let stored: Option<Option<Vec<u8>>> = sqlx::query_scalar(
            "SELECT hash FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence = $3",
        )
        .bind(Show::TYPE)
        .bind(show.to_string())
        .bind(after)
        .fetch_optional(&self.pool)
        .await?;
        Ok(stored.flatten().and_then(|h| <[u8; 32]>::try_from(h).ok()))
    }

    fn remember_head(&self, show: ShowId, head: Option<(i64, [u8; 32])>) {
        if let Ok(mut heads) = self.heads.lock() {
            match head {
                Some(h) => {
                    // A node owns a bounded number of shows at a time; past that, start over
                    // (a head forgotten is read back once).
                    if heads.len() >= 100_000 {
                        heads.clear();
                    }
                    heads.insert(show, h);
                }
                None => {
                    heads.remove(&show);
                }
            }
        }
    }

    /// `start` with the show's events after it (up to `upto`) applied, each decoded as its
    /// row arrives: PostgreSQL sends the next rows while this task folds the last ones, and
    /// the rows are never all in memory at once. Read with a binary `COPY` (module `copy`):
    /// no escapes, and none of the driver's per-row work.
    ///
    /// The rows are read in the primary key's order, with the planner's sequential and bitmap
    /// scans off for the statement: its cost model prices the whole result, and when a show
    /// is a good part of the table (a young store, a hot show) it picks a scan and a sort,
    /// which holds the first row back until the last is read (and may spill to disk); the
    /// index streams them in order at once, about twice as fast (ADR 014).
    async fn fold(&self, show: ShowId, start: (Show, i64), upto: i64) -> Result<LoadedShow> {
        use futures::TryStreamExt;
        let id = show.to_string();
        let after = start.1;
        // COPY takes no parameters: the statement carries a show id (a UUID's text) and two
        // integers, nothing a caller wrote.
        let statement = format!(
            "COPY (SELECT sequence, payload FROM events
                    WHERE aggregate_type = '{}' AND aggregate_id = '{id}'
                      AND sequence > {after} AND sequence <= {upto}
                    ORDER BY sequence) TO STDOUT (FORMAT binary)",
            Show::TYPE
        );
        let mut copy = Copying {
            conn: self.pool.acquire().await?,
            done: false,
        };
        sqlx::query(
            "SELECT set_config(name, 'off', false) FROM pg_settings
              WHERE name IN ('enable_seqscan', 'enable_bitmapscan')",
        )
        .execute(&mut *copy.conn)
        .await?;
        // Folding is CPU (a million events: seconds): it runs on a blocking thread, fed the
        // copy's chunks as they arrive, so a show's load never holds the caller's worker and
        // the other shows it serves.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(FOLD_YIELD_EVERY);
        let folder = tokio::task::spawn_blocking(move || {
            let mut fold = Fold::new(&id, start);
            let mut rows = CopyRows::default();
            while let Some(chunk) = rx.blocking_recv() {
                rows.feed(&chunk, |seq, payload| fold.push(seq, payload))?;
            }
            rows.finish()?;
            Ok(fold.done())
        });
        let mut chunks = copy.conn.copy_out_raw(&statement).await?;
        let mut read_whole = true;
        let mut since_yield = 0;
        while let Some(chunk) = chunks.try_next().await? {
            if tx.send(chunk).await.is_err() {
                // The fold stopped (a corrupt row): its error says why.
                read_whole = false;
                break;
            }
            // A copy that streams as fast as it is read never makes this task wait: a turn
            // given back now and then keeps even the forwarding from holding the worker.
            since_yield += 1;
            if since_yield >= FOLD_YIELD_EVERY {
                since_yield = 0;
                tokio::task::yield_now().await;
            }
        }
        drop(tx);
        drop(chunks);
        if read_whole {
            sqlx::query(
                "SELECT set_config(name, reset_val, false) FROM pg_settings
                  WHERE name IN ('enable_seqscan', 'enable_bitmapscan')",
            )
            .execute(&mut *copy.conn)
            .await?;
            copy.done = true;
        }
        folder
            .await
            .map_err(|e| StoreError::Corrupt(format!("the fold of {show} did not finish: {e}")))?
    }
}

/// Chunks of a show's copy forwarded to its fold between two turns given back to the runtime,
/// and how many may wait for the fold (see [`PgEventLog::fold`]).
pub const FOLD_YIELD_EVERY: usize = 256;

/// A connection lent to a fold: unless the fold read its copy to the end and put the planner
/// back as it was, it is closed rather than handed back to the pool with the rest of a copy
/// still coming or the scans still off (a fold stopped at a corrupt row, or its caller gave
/// up on it).
struct Copying {
    conn: sqlx::pool::PoolConnection<sqlx::Postgres>,
    done: bool,
}

impl Drop for Copying {
    fn drop(&mut self) {
        if !self.done {
            self.conn.close_on_drop();
        }
    }
}

/// Up to where a show of the past is rebuilt: after event N, or after the last event decided
/// at or before an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    Sequence(i64),
    Time(DateTime<Utc>),
}

/// A show as it was.
#[derive(Debug)]
pub enum Past {
    Found {
        show: Box<Show>,
        /// The last event folded in.
        sequence: i64,
        /// When that event was decided.
        at: DateTime<Utc>,
        /// The snapshot the fold started from (0: from the first event).
        snapshot_version: i64,
    },
    /// No such show.
    NoShow,
    /// The instant is before the show was scheduled.
    Before,
    /// The sequence is past the end of the show's log.
    Beyond { head: i64 },
}

impl PgEventLog {
    /// The sequence of a show's last event; `None` if it has none.
    pub async fn head(&self, show: ShowId) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT sequence FROM events WHERE aggregate_type = $1 AND aggregate_id = $2
              ORDER BY sequence DESC LIMIT 1",
        )
        .bind(Show::TYPE)
        .bind(show.to_string())
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The show as it was at `until`: the nearest kept snapshot at or before it, plus the
    /// events after the snapshot up to it (what auditors and `onsale replay` ask for). "The
    /// events up to an instant" is the longest prefix of the log decided at or before it.
    pub async fn load_until(&self, show: ShowId, until: Until) -> Result<Past> {
        let id = show.to_string();
        let (head, first_after): (Option<i64>, Option<i64>) = sqlx::query_as(
            "SELECT (SELECT max(sequence) FROM events WHERE aggregate_type = $1 AND aggregate_id = $2),
                    (SELECT min(sequence) FROM events WHERE aggregate_type = $1 AND aggregate_id = $2
                        AND $3::timestamptz IS NOT NULL AND (metadata->>'at')::timestamptz > $3)",
        )
        .bind(Show::TYPE)
        .bind(&id)
        .bind(match until {
            Until::Time(t) => Some(t),
            Until::Sequence(_) => None,
        })
        .fetch_one(&self.pool)
        .await?;
        let Some(head) = head else {
            return Ok(Past::NoShow);
        };
        let target = match until {
            Until::Sequence(n) if n > head => return Ok(Past::Beyond { head }),
            Until::Sequence(n) => n,
            Until::Time(_) => first_after.map_or(head, |f| f - 1),
        };
        if target < 1 {
            return Ok(Past::Before);
        }
        let loaded = self.load_upto(show, target).await?;
        let snapshot_version = loaded.snapshot_version;
        if loaded.version != target {
            return Err(StoreError::Corrupt(format!(
                "{id}: rebuilt to {} of {target}",
                loaded.version
            )));
        }
        let at: Option<String> = sqlx::query_scalar(
            "SELECT metadata->>'at' FROM events
              WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence = $3",
        )
        .bind(Show::TYPE)
        .bind(&id)
        .bind(target)
        .fetch_one(&self.pool)
        .await?;
        let at = at
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| StoreError::Corrupt(format!("{id}@{target}: no time")))?;
        Ok(Past::Found {
            show: Box::new(loaded.show),
            sequence: target,
            at,
            snapshot_version,
        })
    }
}

/// A row of `events` selected with its columns named as in the table (payload and metadata as
/// text, and its hash): what a scan and the relay's gap fill read.
pub fn log_row(r: &sqlx::postgres::PgRow) -> Result<LogRow, sqlx::Error> {
    Ok(LogRow {
        aggregate_type: r.try_get("aggregate_type")?,
        aggregate_id: r.try_get("aggregate_id")?,
        sequence: r.try_get("sequence")?,
        event_type: r.try_get("event_type")?,
        event_version: r.try_get("event_version")?,
        payload: r.try_get("payload")?,
        metadata: r.try_get("metadata")?,
        hash: {
            let h: Vec<u8> = r.try_get("hash")?;
            h.try_into()
                .map_err(|h: Vec<u8>| sqlx::Error::ColumnDecode {
                    index: "hash".into(),
                    source: format!("a hash of {} bytes", h.len()).into(),
                })?
        },
    })
}

fn show_ids(ids: &[String]) -> Result<Vec<ShowId>> {
    ids.iter()
        .map(|i| {
            i.parse()
                .map_err(|_| StoreError::Corrupt(format!("show id {i}")))
        })
        .collect()
}

#[async_trait::async_trait]
impl EventLog for PgEventLog {
    async fn append(
        &self,
        show: ShowId,
        epoch: i64,
        after: i64,
        at: DateTime<Utc>,
        events: &[ShowEvent],
        traces: &[crate::Traced],
    ) -> Result<()> {
        let n = events.len() as i64;
        let id = show.to_string();
        let sequences: Vec<i64> = (after + 1..=after + n).collect();
        let types: Vec<String> = events.iter().map(DomainEvent::event_type).collect();
        let payloads = events
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let metadata = crate::row_metadata(at, events.len(), traces);
        // Each row's link of the show's hash chain (migration 0009), computed here so the
        // append statement does no per-row lookup; rows without one are chained by the trigger.
        let mut head = self.chain_head(show, after).await?;
        let hashes: Vec<Option<Vec<u8>>> = sequences
            .iter()
            .zip(types.iter().zip(payloads.iter().zip(&metadata)))
            .map(|(&seq, (t, (p, m)))| {
                head = head
                    .map(|prev| crate::chain::row_hash(&prev, Show::TYPE, &id, seq, t, "1", p, m));
                head.map(|h| h.to_vec())
            })
            .collect();
        // The fence: the owner row is locked FOR SHARE by the same statement, so a claim (an
        // UPDATE of the epoch) either committed before it, and the epoch no longer matches, or
        // waits for this append to commit, and the new owner's load then sees it.
        let written = sqlx::query(
            "WITH fence AS (SELECT 1 FROM show_owners WHERE show_id = $2 AND epoch = $7 FOR SHARE)
             INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata, hash)
             SELECT $1, $2, s, t, '1', p::json, m::json, h
               FROM UNNEST($3::bigint[], $4::text[], $5::text[], $6::text[], $8::bytea[]) AS u(s, t, p, m, h)
              WHERE EXISTS (SELECT 1 FROM fence)",
        )
        .bind(Show::TYPE)
        .bind(&id)
        .bind(&sequences)
        .bind(&types)
        .bind(&payloads)
        .bind(&metadata)
        .bind(epoch)
        .bind(&hashes)
        .execute(&self.pool)
        .await;
        let written = match written {
            Ok(w) => w,
            Err(e) => {
                // Whether it landed is unknown: the next append reads the head back.
                self.remember_head(show, None);
                return Err(e.into());
            }
        };
        if written.rows_affected() == 0 && n > 0 {
            self.remember_head(show, None);
            return Err(StoreError::Fenced);
        }
        self.remember_head(show, head.map(|h| (after + n, h)));
        Ok(())
    }

    async fn load(&self, show: ShowId) -> Result<LoadedShow> {
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
        let start = start_from(&id, snapshot)?;
        self.fold(show, start, i64::MAX).await
    }

    async fn replay(&self, show: ShowId) -> Result<LoadedShow> {
        self.fold(show, (Show::default(), 0), i64::MAX).await
    }

    async fn load_upto(&self, show: ShowId, upto: i64) -> Result<LoadedShow> {
        let id = show.to_string();
        let snapshot: Option<(i64, String)> = sqlx::query_as(
            "SELECT last_sequence, payload::text FROM snapshots
              WHERE aggregate_type = $1 AND aggregate_id = $2 AND last_sequence <= $3
              ORDER BY last_sequence DESC LIMIT 1",
        )
        .bind(Show::TYPE)
        .bind(&id)
        .bind(upto)
        .fetch_optional(&self.pool)
        .await?;
        let start = start_from(&id, snapshot)?;
        self.fold(show, start, upto).await
    }

    async fn read_range(
        &self,
        show: &str,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> Result<Vec<LogRow>> {
        let rows = sqlx::query(
            "SELECT aggregate_type, aggregate_id, sequence, event_type, event_version,
                    payload::text AS payload, metadata::text AS metadata, hash FROM events
              WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence > $3 AND sequence <= $4
              ORDER BY sequence LIMIT $5",
        )
        .bind(Show::TYPE)
        .bind(show)
        .bind(after)
        .bind(upto)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for (expect, r) in (after + 1..).zip(&rows) {
            let row = log_row(r)?;
            if row.sequence != expect {
                return Err(StoreError::Corrupt(format!(
                    "events table has a hole at {show}@{expect}"
                )));
            }
            out.push(row);
        }
        Ok(out)
    }

    async fn last_policy_change(&self, show: &str) -> Result<Option<LogRow>> {
        // The event type is written out, not bound: the planner then sees the partial index's
        // predicate (migration 0019) in the query.
        let row = sqlx::query(
            "SELECT aggregate_type, aggregate_id, sequence, event_type, event_version,
                    payload::text AS payload, metadata::text AS metadata, hash FROM events
              WHERE aggregate_type = $1 AND aggregate_id = $2 AND event_type = 'SalePolicyChanged'
              ORDER BY sequence DESC LIMIT 1",
        )
        .bind(Show::TYPE)
        .bind(show)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(log_row).transpose()?)
    }

    async fn recent_activity(&self, show: ShowId, events: i64) -> Result<crate::Activity> {
        let (holds, seats_held, orders): (i64, i64, i64) = sqlx::query_as(
            "WITH recent AS (
               SELECT event_type, payload FROM events
                WHERE aggregate_type = $1 AND aggregate_id = $2
                  AND sequence > (SELECT COALESCE(max(sequence), 0) FROM events
                                   WHERE aggregate_type = $1 AND aggregate_id = $2) - $3)
             SELECT count(*) FILTER (WHERE event_type = 'SeatsHeld'),
                    COALESCE(sum(json_array_length(payload->'SeatsHeld'->'seat_ids'))
                               FILTER (WHERE event_type = 'SeatsHeld'), 0)::bigint,
                    count(*) FILTER (WHERE event_type = 'OrderPlaced')
               FROM recent",
        )
        .bind(Show::TYPE)
        .bind(show.to_string())
        .bind(events)
        .fetch_one(&self.pool)
        .await?;
        Ok(crate::Activity {
            holds,
            seats_held,
            orders,
        })
    }

    async fn heads(&self) -> Result<Vec<(String, i64)>> {
        // A loose index scan: one probe per show, however long its history.
        Ok(sqlx::query_as(
            "WITH RECURSIVE s(id) AS (
               (SELECT aggregate_id FROM events WHERE aggregate_type = $1 ORDER BY aggregate_id LIMIT 1)
               UNION ALL
               SELECT (SELECT aggregate_id FROM events WHERE aggregate_type = $1 AND aggregate_id > s.id
                        ORDER BY aggregate_id LIMIT 1) FROM s WHERE s.id IS NOT NULL)
             SELECT id, (SELECT max(sequence) FROM events WHERE aggregate_type = $1 AND aggregate_id = s.id)
               FROM s WHERE id IS NOT NULL",
        )
        .bind(Show::TYPE)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn scan(&self, after: &ScanKey, show: Option<&str>, limit: i64) -> Result<Vec<LogRow>> {
        let rows = sqlx::query(
            "SELECT aggregate_type, aggregate_id, sequence, event_type, event_version,
                    payload::text AS payload, metadata::text AS metadata, hash
               FROM events
              WHERE (aggregate_type, aggregate_id, sequence) > ($1, $2, $3)
                AND ($4::text IS NULL OR aggregate_id = $4)
              ORDER BY aggregate_type, aggregate_id, sequence
              LIMIT $5",
        )
        .bind(&after.0)
        .bind(&after.1)
        .bind(after.2)
        .bind(show)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(log_row).collect::<Result<_, _>>()?)
    }

    async fn save_snapshot(&self, show: ShowId, version: i64, payload: &str) -> Result<()> {
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

    async fn register_venue(&self, venue: VenueId, event: &VenueEvent) -> Result<()> {
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

    async fn load_venue(&self, venue: VenueId) -> Result<Option<VenueEvent>> {
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

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn claim(&self, show: ShowId, node: &Node, ttl: std::time::Duration) -> Result<Claim> {
        let id = show.to_string();
        for _ in 0..3 {
            // Look first: asking about a show a live node owns locks nothing.
            let (owner, writer): (Option<(uuid::Uuid, Option<String>, bool)>, Option<String>) = {
                let row: (Option<uuid::Uuid>, Option<String>, bool, Option<String>) =
                    sqlx::query_as(
                        "SELECT o.node_id, n.addr, COALESCE(n.alive_until > now(), false),
                            (SELECT region FROM regions WHERE writer)
                       FROM (SELECT 1) one
                       LEFT JOIN show_owners o ON o.show_id = $1
                       LEFT JOIN nodes n ON n.node_id = o.node_id",
                    )
                    .bind(&id)
                    .fetch_one(&self.pool)
                    .await?;
                (row.0.map(|o| (o, row.1, row.2)), row.3)
            };
            if let (Some(me), Some(writer)) = (&self.region, writer) {
                if *me != writer {
                    return Ok(Claim::OtherRegion(writer));
                }
            }
            if let Some((owner, addr, true)) = &owner {
                if *owner != node.id {
                    return Ok(Claim::Elsewhere(Node {
                        id: *owner,
                        addr: addr.clone().unwrap_or_default(),
                    }));
                }
            }
            let epoch: Option<i64> = sqlx::query_scalar(
                "WITH me AS (
                   INSERT INTO nodes (node_id, addr, alive_until)
                   VALUES ($2, $3, now() + make_interval(secs => $4::double precision))
                   ON CONFLICT (node_id) DO UPDATE SET addr = EXCLUDED.addr, alive_until = EXCLUDED.alive_until)
                 INSERT INTO show_owners (show_id, node_id, epoch)
                 SELECT $1, $2, nextval('show_owner_epochs')
                  WHERE $5::text IS NULL
                     OR NOT EXISTS (SELECT 1 FROM regions WHERE writer AND region <> $5)
                 ON CONFLICT (show_id) DO UPDATE
                   SET node_id = EXCLUDED.node_id, epoch = EXCLUDED.epoch, claimed_at = now()
                 WHERE show_owners.node_id = EXCLUDED.node_id
                    OR NOT EXISTS (SELECT 1 FROM nodes n
                                    WHERE n.node_id = show_owners.node_id AND n.alive_until > now())
                 RETURNING epoch",
            )
            .bind(&id)
            .bind(node.id)
            .bind(&node.addr)
            .bind(ttl.as_secs_f64())
            .bind(&self.region)
            .fetch_optional(&self.pool)
            .await?;
            if let Some(epoch) = epoch {
                return Ok(Claim::Owned { epoch });
            }
        }
        Err(StoreError::Unavailable(format!(
            "show {show} changed hands three times during one claim"
        )))
    }

    async fn release(&self, show: ShowId, epoch: i64) -> Result<()> {
        sqlx::query("DELETE FROM show_owners WHERE show_id = $1 AND epoch = $2")
            .bind(show.to_string())
            .bind(epoch)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn heartbeat(&self, node: &Node, ttl: std::time::Duration) -> Result<Vec<ShowId>> {
        let ids: Vec<String> = sqlx::query_scalar(
            "WITH me AS (
               INSERT INTO nodes (node_id, addr, alive_until)
               VALUES ($1, $2, now() + make_interval(secs => $3::double precision))
               ON CONFLICT (node_id) DO UPDATE SET addr = EXCLUDED.addr, alive_until = EXCLUDED.alive_until)
             SELECT show_id FROM show_owners WHERE node_id = $1",
        )
        .bind(node.id)
        .bind(&node.addr)
        .bind(ttl.as_secs_f64())
        .fetch_all(&self.pool)
        .await?;
        show_ids(&ids)
    }

    async fn leave(&self, node: &Node) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM show_owners WHERE node_id = $1")
            .bind(node.id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM nodes WHERE node_id = $1")
            .bind(node.id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn orphans(&self, limit: i64) -> Result<Vec<ShowId>> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT o.show_id FROM show_owners o
              WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = o.node_id AND n.alive_until > now())
              ORDER BY o.claimed_at LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        show_ids(&ids)
    }
}
