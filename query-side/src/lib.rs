//! The query side: every read a fan, an analyst or an auditor makes, served from the
//! projections' read models (never from the command side's memory).
//!
//! - [`snapshots`]: the seat map from a moka cache, one rebuild per (show, section, seq) however
//!   many readers miss at once, with `ETag`/`Cache-Control`; the last good map is served (its
//!   `asOf` says how old) when PostgreSQL is away, else 503.
//! - [`hub`]: one listener per process on the projection's notifications; per show a broadcast
//!   of deltas and a short backlog, filled from the deltas table on a gap.
//! - [`rest`]: the REST and SSE routes of API.md; [`grpc`]: the same over gRPC and gRPC-web.
//! - [`health`]: relay and projection lag, for `/readyz` and `/metrics`.

pub mod grpc;
pub mod health;
pub mod hub;
pub mod rest;
pub mod snapshots;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRef;
use jsonwebtoken::DecodingKey;
use sqlx::postgres::PgPool;

#[derive(Debug, Clone, clap::Args)]
pub struct QueryConfig {
    /// How long a cached seat map may be served after it was read (a new delta replaces it sooner).
    #[arg(long, env = "ONSALE_SEAT_MAP_TTL_MS", default_value_t = 1_000)]
    pub seat_map_ttl_ms: u64,
    /// `/readyz` fails when a projection's last batch lagged its commits by more than this...
    #[arg(long, env = "ONSALE_READY_MAX_LAG_MS", default_value_t = 10_000)]
    pub ready_max_lag_ms: i64,
    /// ...or has not reported for this long...
    #[arg(long, env = "ONSALE_READY_MAX_SILENCE_MS", default_value_t = 15_000)]
    pub ready_max_silence_ms: i64,
    /// ...or the relay's slot is this many bytes of WAL behind.
    #[arg(long, env = "ONSALE_READY_MAX_RELAY_LAG_BYTES", default_value_t = 256 << 20)]
    pub ready_max_relay_lag_bytes: i64,
    /// The relay's slot, whose lag `/readyz` and `/metrics` report.
    #[arg(long, env = "ONSALE_RELAY_SLOT", default_value = "onsale_relay")]
    pub relay_slot: String,
}

impl Default for QueryConfig {
    fn default() -> Self {
        Self {
            seat_map_ttl_ms: 1_000,
            ready_max_lag_ms: 10_000,
            ready_max_silence_ms: 15_000,
            ready_max_relay_lag_bytes: 256 << 20,
            relay_slot: "onsale_relay".into(),
        }
    }
}

#[derive(Clone)]
pub struct QueryState {
    pub pool: PgPool,
    pub snapshots: snapshots::Snapshots,
    pub hub: hub::Hub,
    pub health: health::Health,
    pub decoding_key: DecodingKey,
}

impl std::fmt::Debug for QueryState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryState").finish_non_exhaustive()
    }
}

impl FromRef<QueryState> for DecodingKey {
    fn from_ref(state: &QueryState) -> Self {
        state.decoding_key.clone()
    }
}

impl QueryState {
    /// Wires the query side on `pool` (where the projections write) and starts its listener and
    /// health tasks.
    pub fn start(pool: PgPool, config: &QueryConfig, jwt_secret: &str) -> Self {
        let hub = hub::Hub::start(pool.clone());
        let snapshots = snapshots::Snapshots::new(
            pool.clone(),
            hub.clone(),
            Duration::from_millis(config.seat_map_ttl_ms),
        );
        let health = health::Health::start(pool.clone(), config.clone());
        Self {
            pool,
            snapshots,
            hub,
            health,
            decoding_key: DecodingKey::from_secret(jwt_secret.as_bytes()),
        }
    }

    /// Serves the query side's REST routes from the command side's process, adds the read
    /// path's health to its `/readyz` and the query paths to its `/openapi.json`.
    pub fn mount(&self, app: &mut onsale_command::App) {
        use utoipa::OpenApi;
        app.add_routes(rest::router(self.clone()));
        let health = self.health.clone();
        app.state.ready = Some(Arc::new(move || health.ready()));
        let mut doc = app.state.openapi.as_ref().clone();
        doc.merge(rest::QueryDoc::openapi());
        app.state.openapi = Arc::new(doc);
    }
}
