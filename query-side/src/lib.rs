//! The query side: every read a fan, an analyst or an auditor makes, served from the
//! projections' read models (never from the command side's memory).
//!
//! - [`snapshots`]: the seat map from a moka cache, one rebuild per (show, section, seq) however
//!   many readers miss at once, with `ETag`/`Cache-Control`; the last good map is served (its
//!   `asOf` says how old) when PostgreSQL is away, else 503.
//! - [`hub`]: one listener per process on the projection's notifications; per show a broadcast
//!   of deltas; a subscriber that resumes, lags or sees a gap is filled from the deltas table.
//! - [`rest`]: the REST and SSE routes of docs/api.md; [`grpc`]: the same over gRPC and gRPC-web.
//! - [`health`]: relay and projection lag, for `/readyz` and `/metrics`.

pub mod catalog;
pub mod grpc;
pub mod health;
pub mod history;
pub mod hub;
pub mod pages;
pub mod rest;
pub mod search;
pub mod seats;
pub mod snapshots;
pub mod summary;
mod unavailable;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRef;
use onsale_edge::auth::Verifier;
use onsale_edge::limits::StreamSlots;
use onsale_telemetry::supervise::Loops;
use sqlx::postgres::PgPool;

#[derive(Debug, Clone, clap::Args)]
pub struct QueryConfig {
    /// How long a cached seat map may be served after it was read (a new delta replaces it sooner).
    #[arg(
        id = "seat_map_ttl_ms",
        long = "seat-map-ttl-ms",
        env = "ONSALE_SEAT_MAP_TTL_MS",
        default_value_t = 1_000
    )]
    pub seat_map_ttl_ms: u64,
    /// `/readyz` fails when a projection's last batch lagged its commits by more than this...
    #[arg(
        id = "ready_max_lag_ms",
        long = "ready-max-lag-ms",
        env = "ONSALE_READY_MAX_LAG_MS",
        default_value_t = 10_000
    )]
    pub ready_max_lag_ms: i64,
    /// ...or has not reported for this long...
    #[arg(
        id = "ready_max_silence_ms",
        long = "ready-max-silence-ms",
        env = "ONSALE_READY_MAX_SILENCE_MS",
        default_value_t = 15_000
    )]
    pub ready_max_silence_ms: i64,
    /// ...or the relay's slot is this many bytes of WAL behind.
    #[arg(id = "ready_max_relay_lag_bytes", long = "ready-max-relay-lag-bytes", env = "ONSALE_READY_MAX_RELAY_LAG_BYTES", default_value_t = 256 << 20)]
    pub ready_max_relay_lag_bytes: i64,
    /// Search the catalog on a search index this process keeps in memory, following the
    /// catalog projection (ADR 033); off, every search is PostgreSQL's (ADR 013).
    #[arg(
        id = "search_index",
        long = "search-index",
        env = "ONSALE_SEARCH_INDEX",
        default_value_t = true,
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub search_index: bool,
    /// How often the search index reads what the catalog projection changed.
    #[arg(
        id = "search_follow_ms",
        long = "search-follow-ms",
        env = "ONSALE_SEARCH_FOLLOW_MS",
        default_value_t = 100
    )]
    pub search_follow_ms: u64,
}

/// What the read routes share (REST and gRPC). axum clones a router's state for every
/// request, so it is one `Arc`: cloning and dropping the parts (the hub's and the snapshots'
/// caches, pools and channels) took ~12% of `onsale serve`'s CPU on seat-map reads
/// (BENCHMARKS.md, issue 30).
#[derive(Clone, Debug)]
pub struct QueryState(Arc<QueryParts>);

// A part added to the handle instead of its parts would be cloned with every request again.
const _: () = assert!(std::mem::size_of::<QueryState>() == std::mem::size_of::<usize>());

impl From<QueryParts> for QueryState {
    fn from(parts: QueryParts) -> Self {
        Self(Arc::new(parts))
    }
}

impl std::ops::Deref for QueryState {
    type Target = QueryParts;

    fn deref(&self) -> &QueryParts {
        &self.0
    }
}

pub struct QueryParts {
    pub pool: PgPool,
    /// The log of every shard (docs/adr/021): how far a show's log goes, and its past.
    pub log: Arc<onsale_eventlog::ShardedLog<onsale_eventlog::PgEventLog>>,
    pub snapshots: snapshots::Snapshots,
    pub hub: hub::Hub,
    pub health: health::Health,
    pub verifier: Verifier,
    /// The process's cap on open streams (SSE and gRPC `StreamDeltas`).
    pub streams: StreamSlots,
    /// Shows as scheduled and venues as registered, read beside the log (the event and venue
    /// pages, and a show the projection has not folded yet).
    pub catalog: onsale_eventlog::Catalog,
    /// The domain's "now" (an event page's status).
    pub clock: Arc<dyn onsale_domain::Clock>,
    /// The catalog's search index (never ready, so never asked, when `ONSALE_SEARCH_INDEX` is
    /// off).
    pub search: search::SearchIndex,
}

impl std::fmt::Debug for QueryParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryParts").finish_non_exhaustive()
    }
}

impl FromRef<QueryState> for Verifier {
    fn from_ref(state: &QueryState) -> Self {
        state.verifier.clone()
    }
}

impl QueryParts {
    /// A seat-map stream's slot for a client at `address` with the `Authorization` header
    /// `authorization` (a stream may be anonymous; a token that does not verify counts as
    /// none).
    pub fn open_stream(
        &self,
        address: Option<std::net::IpAddr>,
        authorization: Option<&str>,
    ) -> Result<onsale_edge::limits::StreamSlot, onsale_edge::ApiError> {
        let account = authorization
            .and_then(|v| v.strip_prefix("Bearer "))
            .and_then(|t| self.verifier.verify(t).ok())
            .map(|c| c.account.as_str().to_owned());
        self.streams.open(address, account.as_deref())
    }

    /// A show's deltas after `after` (SSE and gRPC streams): `Ok(None)` if there is no such
    /// show; a show scheduled but not folded by the projection yet streams from seq 0.
    pub async fn subscribe(
        &self,
        show: onsale_domain::ShowId,
        after: Option<i64>,
    ) -> anyhow::Result<Option<tokio_stream::wrappers::ReceiverStream<hub::Update>>> {
        if let Some(stream) = self.hub.subscribe(show, after).await? {
            return Ok(Some(stream));
        }
        let scheduled = self.snapshots.scheduled(show).await;
        self.hub.subscribe_scheduled(show, after, scheduled).await
    }

    /// Reads the log of every shard through `log`.
    pub fn with_log(
        mut self,
        log: Arc<onsale_eventlog::ShardedLog<onsale_eventlog::PgEventLog>>,
    ) -> Self {
        self.log = log;
        self
    }

    /// Tells the time (an event page's status) by `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn onsale_domain::Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Wires the query side on `pool` (where the projections write) and starts its listener,
    /// poll and health check on `loops`; they stop, and streams end, at the loops' stop.
    /// `shards` are each write cluster's pool and its relay's replication slot, whose lag
    /// `/readyz` and `/metrics` report; shows as scheduled are read through `catalog`. The log
    /// is read on `pool` until [`QueryParts::with_log`], the time is the system's until
    /// [`QueryParts::with_clock`].
    pub fn start(
        pool: PgPool,
        catalog: onsale_eventlog::Catalog,
        shards: Vec<(PgPool, String)>,
        config: &QueryConfig,
        verifier: Verifier,
        streams: StreamSlots,
        loops: &Loops,
    ) -> Self {
        let hub = hub::Hub::start(pool.clone(), loops);
        let snapshots = snapshots::Snapshots::new(
            pool.clone(),
            hub.clone(),
            Duration::from_millis(config.seat_map_ttl_ms),
            catalog.clone(),
        );
        let health = health::Health::start(pool.clone(), shards, config.clone(), loops);
        let search = search::SearchIndex::new().expect("an index in memory");
        if config.search_index {
            search.follow(
                pool.clone(),
                Duration::from_millis(config.search_follow_ms),
                loops,
            );
        }
        Self {
            log: Arc::new(onsale_eventlog::ShardedLog::single(Arc::new(
                onsale_eventlog::PgEventLog::new(pool.clone()),
            ))),
            pool,
            snapshots,
            hub,
            health,
            verifier,
            streams,
            catalog,
            clock: Arc::new(onsale_domain::SystemClock),
            search,
        }
    }
}
