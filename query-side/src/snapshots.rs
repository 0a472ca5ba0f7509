//! Seat-map snapshots: read from the projection in one statement, serialized once, cached.

use onsale_domain::{SeatId, Show, ShowId};
use onsale_eventlog::{Catalog, CatalogError};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use moka::future::Cache;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPool;

use crate::hub::{Hub, SectionCounts};
pub use crate::seats::{bitmap, Seats};

/// One seat in a section's detail.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeatState {
    pub seat_id: SeatId,
    pub status: String,
}

/// The map as docs/api.md gives it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeatMap {
    pub event_id: String,
    pub as_of: chrono::DateTime<chrono::Utc>,
    pub lsn: String,
    pub seq: i64,
    pub sections: Vec<SectionCounts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seats: Option<Vec<SeatState>>,
    /// With `seats=all`: every reserved seat in the layout's order (sections, rows, numbers;
    /// general-admission places left out), bit `i` of the base64 bytes (least significant
    /// bit first) set when seat `i` is sold.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sold_seats: Option<String>,
}

/// The map of `show` as a fold left it (a map of the past): counts per section, and the
/// seats `wanted` asks. `seq` and `lsn` are the caller's to set.
pub fn map_of(
    show: &onsale_domain::Show,
    event_id: String,
    as_of: chrono::DateTime<chrono::Utc>,
    seq: i64,
    lsn: String,
    wanted: &Seats,
) -> Result<SeatMap, Missing> {
    let section = wanted.section();
    let mut sold = Vec::new();
    use onsale_domain::transitions::SeatStatus;
    let status = |i: u32| {
        show.seat_at(i)
            .map_or(SeatStatus::Available, |(_, s)| s.status())
    };
    let ranges = show.layout().section_ranges();
    let mut seats = None;
    let mut sections = Vec::with_capacity(ranges.len());
    for ((name, range), layout) in ranges.into_iter().zip(show.layout().sections()) {
        let mut c = SectionCounts {
            section: name.to_owned(),
            total: range.len() as i32,
            available: 0,
            held: 0,
            sold: 0,
            general_admission: layout.general_admission,
        };
        for i in range.clone() {
            let now = status(i);
            match now {
                SeatStatus::Available => c.available += 1,
                SeatStatus::Held => c.held += 1,
                SeatStatus::PendingPayment | SeatStatus::Sold => c.sold += 1,
            }
            if *wanted == Seats::All && !layout.general_admission {
                sold.push(now.public() == "SOLD");
            }
        }
        if section == Some(name) {
            let ids: Vec<u32> = range.collect();
            seats = Some(
                show.seat_names(&ids)
                    .into_iter()
                    .zip(&ids)
                    .map(|(seat_id, &i)| SeatState {
                        seat_id,
                        status: status(i).public().to_owned(),
                    })
                    .collect(),
            );
        }
        sections.push(c);
    }
    if section.is_some() && seats.is_none() {
        return Err(Missing::Section);
    }
    Ok(SeatMap {
        event_id,
        as_of,
        lsn,
        seq,
        sections,
        seats,
        sold_seats: (*wanted == Seats::All)
            .then(|| base64::engine::general_purpose::STANDARD.encode(bitmap(&sold))),
    })
}

/// A map ready to send: the value, its JSON and its entity tag.
#[derive(Debug)]
pub struct Snapshot {
    pub map: SeatMap,
    pub body: Bytes,
    pub etag: String,
}

/// Why there is no map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    Show,
    Section,
}

type Key = (ShowId, Seats, i64);

type Entry = Result<Arc<Snapshot>, Missing>;

/// Why a map was not built: the show (or section) does not exist, or the read failed.
#[derive(Debug, Clone)]
enum NotBuilt {
    Missing(Missing),
    Failed,
}

#[derive(Debug, Clone)]
pub struct Snapshots {
    pool: PgPool,
    hub: Hub,
    cache: Cache<Key, Arc<Snapshot>>,
    /// Shows and sections found missing, for a second: kept apart (and small), so requests
    /// for made-up ids never push real maps out of `cache`.
    missing: Cache<(ShowId, Seats), Missing>,
    /// The last good map per (show, section), for when PostgreSQL is away.
    last_good: Cache<(ShowId, Seats), Arc<Snapshot>>,
    rebuilds: Arc<std::sync::atomic::AtomicU64>,
    /// Where a show's schedule is read (the log's first event), so that a show the projection
    /// has not folded yet is read as scheduled (every seat available, `seq` 0, `lsn` 0/0: what
    /// the projection writes first) rather than 404: a show is readable the moment its `201`
    /// is answered.
    catalog: Catalog,
}

/// What a read got.
#[derive(Debug)]
pub enum Read {
    Fresh(Arc<Snapshot>),
    /// The projection's store is away: the last good map, whose `asOf` says how old it is.
    Stale(Arc<Snapshot>),
    Missing(Missing),
    Unavailable,
}

impl Snapshots {
    pub fn new(pool: PgPool, hub: Hub, ttl: Duration, catalog: Catalog) -> Self {
        Self {
            pool,
            hub,
            cache: Cache::builder()
                .max_capacity(10_000)
                .time_to_live(ttl)
                .build(),
            missing: Cache::builder()
                .max_capacity(1_000)
                .time_to_live(Duration::from_secs(1))
                .build(),
            last_good: Cache::builder()
                .max_capacity(10_000)
                .time_to_live(Duration::from_secs(600))
                .build(),
            rebuilds: Arc::default(),
            catalog,
        }
    }

    /// Whether the show was scheduled, by its schedule (not the projection); `false` when it
    /// cannot be read.
    pub async fn scheduled(&self, show: ShowId) -> bool {
        self.catalog.get(show).await.is_ok()
    }

    /// How many maps are cached (made-up ids are never among them).
    pub async fn cached(&self) -> u64 {
        self.cache.run_pending_tasks().await;
        self.cache.entry_count()
    }

    /// How many times a map was read from PostgreSQL (misses that shared a rebuild count once).
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The map of a show (and a section's seats). Concurrent misses of one key wait for one
    /// rebuild (moka's `try_get_with`); a new delta changes the key, the TTL bounds staleness.
    pub async fn get(&self, show: ShowId, seats: &Seats) -> Read {
        let wanted = (show, seats.clone());
        if let Some(m) = self.missing.get(&wanted).await {
            return Read::Missing(m);
        }
        let seq = self.hub.current_seq(show).unwrap_or(-1);
        let key = (show, seats.clone(), seq);
        let built = self
            .cache
            .try_get_with(key, async {
                match self.build(show, seats).await {
                    Ok(Ok(s)) => Ok(s),
                    Ok(Err(m)) => Err(NotBuilt::Missing(m)),
                    Err(e) => {
                        tracing::warn!(%show, error = %e, "seat map not read");
                        Err(NotBuilt::Failed)
                    }
                }
            })
            .await;
        match built {
            Ok(s) => {
                metrics::counter!(onsale_telemetry::metrics::SEAT_MAP_READS_TOTAL).increment(1);
                Read::Fresh(s)
            }
            Err(e) => match &*e {
                NotBuilt::Missing(m) => {
                    self.missing.insert(wanted, m.clone()).await;
                    Read::Missing(m.clone())
                }
                NotBuilt::Failed => match self.last_good.get(&wanted).await {
                    Some(s) => Read::Stale(s),
                    None => Read::Unavailable,
                },
            },
        }
    }

    /// A show the projection has not folded yet, as its schedule made it (seq 0, lsn 0/0:
    /// the deltas after it are all still to come); `Missing::Show` if it was never scheduled.
    async fn as_scheduled(&self, show: ShowId, seats: &Seats) -> anyhow::Result<Entry> {
        let scheduled = match self.catalog.get(show).await {
            Ok(s) => Show::as_scheduled(s.info.clone(), s.layout.clone()),
            Err(CatalogError::NotFound) => return Ok(Err(Missing::Show)),
            Err(e) => anyhow::bail!("the catalog did not answer: {e}"),
        };
        let map = match map_of(
            &scheduled,
            show.to_string(),
            chrono::Utc::now(),
            0,
            "0/0".to_owned(),
            seats,
        ) {
            Ok(m) => m,
            Err(m) => return Ok(Err(m)),
        };
        let body = Bytes::from(serde_json::to_vec(&map)?);
        let etag = format!("\"{show}-{}-0-0/0\"", seats.tag());
        let snap = Arc::new(Snapshot { map, body, etag });
        self.last_good
            .insert((show, seats.clone()), snap.clone())
            .await;
        Ok(Ok(snap))
    }

    async fn build(&self, show: ShowId, wanted: &Seats) -> anyhow::Result<Entry> {
        metrics::counter!(onsale_telemetry::metrics::SEAT_MAP_REBUILDS_TOTAL).increment(1);
        self.rebuilds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // One statement: the counts, the seats and the watermark are one consistent picture.
        use onsale_projections::seat_map::Scope;
        let scope = match wanted {
            Seats::None => Scope::Counts,
            Seats::Section(s) => Scope::Section(s),
            Seats::All => Scope::All,
        };
        let row = onsale_projections::seat_map::read(&self.pool, show, scope).await?;
        let Some(onsale_projections::seat_map::MapRead {
            lsn,
            seq,
            as_of,
            sections,
            seats,
            sold,
            section_known,
        }) = row
        else {
            return self.as_scheduled(show, wanted).await;
        };
        if !section_known {
            return Ok(Err(Missing::Section));
        }
        let map = SeatMap {
            event_id: show.to_string(),
            as_of,
            lsn,
            seq,
            sections: serde_json::from_value(sections)?,
            seats: seats.map(serde_json::from_value).transpose()?,
            sold_seats: sold.map(|s| base64::engine::general_purpose::STANDARD.encode(bitmap(&s))),
        };
        let body = Bytes::from(serde_json::to_vec(&map)?);
        let etag = format!("\"{show}-{}-{seq}-{}\"", wanted.tag(), map.lsn);
        let snap = Arc::new(Snapshot { map, body, etag });
        self.last_good
            .insert((show, wanted.clone()), snap.clone())
            .await;
        Ok(Ok(snap))
    }
}
