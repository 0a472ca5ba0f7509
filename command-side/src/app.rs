//! Building the service from configuration, and running it until shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use onsale_domain::Clock;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::net::TcpListener;

use crate::api::{self, auth, AppState};
use crate::owner::{OwnerConfig, Shows};
use crate::store::EventStore;

#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// PostgreSQL holding the event store.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://onsale@127.0.0.1:54329/onsale"
    )]
    pub database_url: String,
    /// HS256 secret for bearer tokens.
    #[arg(long, env = "ONSALE_JWT_SECRET", default_value = "onsale-dev-secret")]
    pub jwt_secret: String,
    /// Connections in the pool.
    #[arg(long, env = "ONSALE_DB_POOL", default_value_t = 16)]
    pub pool_size: u32,
    /// Most commands committed in one group.
    #[arg(long, env = "ONSALE_MAX_BATCH", default_value_t = 512)]
    pub max_batch: usize,
    /// A snapshot after at least this many events (more for a show with a long history)...
    #[arg(long, env = "ONSALE_SNAPSHOT_EVERY", default_value_t = 10_000)]
    pub snapshot_every: i64,
    /// ...and at most one snapshot per this many seconds.
    #[arg(long, env = "ONSALE_SNAPSHOT_MIN_SECS", default_value_t = 10)]
    pub snapshot_min_secs: u64,
    /// Commands waiting for one show beyond this are answered 503 OVERLOADED.
    #[arg(long, env = "ONSALE_MAX_QUEUE", default_value_t = 20_000)]
    pub max_queue: usize,
}

/// The system clock, the production source of "now".
#[derive(Debug)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

#[derive(Debug, Clone)]
pub struct App {
    pub state: AppState,
    extra_routes: Vec<axum::Router>,
}

impl App {
    /// Connects to PostgreSQL, applies the migrations and wires the owners and the API.
    pub async fn build(config: &Config, clock: Arc<dyn Clock>) -> anyhow::Result<Self> {
        let options: PgConnectOptions =
            config.database_url.parse().context("parse DATABASE_URL")?;
        let pool = PgPoolOptions::new()
            .max_connections(config.pool_size)
            .acquire_timeout(Duration::from_secs(2))
            // A dead connection fails the statement and the owner answers 503; a ping before
            // every append would cost a round trip on the hot path.
            .test_before_acquire(false)
            .connect_lazy_with(options);
        crate::store::migrate(&pool).await?;
        let shows = Shows::new(
            EventStore::new(pool),
            clock,
            OwnerConfig {
                max_batch: config.max_batch,
                snapshot_every: config.snapshot_every,
                snapshot_min_interval: Duration::from_secs(config.snapshot_min_secs),
                max_queue: config.max_queue.max(1),
                ..OwnerConfig::default()
            },
        );
        Ok(Self {
            state: AppState {
                shows,
                decoding_key: auth::decoding_key(&config.jwt_secret),
                metrics: crate::telemetry::metrics(),
                ready: None,
                gate: None,
                health: Arc::new(crate::admission::BookingHealth::default()),
                openapi: Arc::new(<api::ApiDoc as utoipa::OpenApi>::openapi()),
            },
            extra_routes: Vec::new(),
        })
    }

    /// Serves more routes from this process (the query side's): one base URL for the whole API.
    pub fn add_routes(&mut self, routes: axum::Router) {
        self.extra_routes.push(routes);
    }

    pub fn router(&self) -> axum::Router {
        self.extra_routes
            .iter()
            .cloned()
            .fold(api::router(self.state.clone()), axum::Router::merge)
            .layer(tower_http::trace::TraceLayer::new_for_http())
    }

    /// Serves until `shutdown` resolves.
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        use axum::serve::ListenerExt;
        // Small answers must leave at once, not wait on Nagle and the peer's delayed ACK.
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::warn!(error = %e, "TCP_NODELAY not set");
            }
        });
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await
            .context("serve")
    }
}
