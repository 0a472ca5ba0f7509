//! The composition root: [`Server::build`] makes every part of an onsale process from one
//! [`Settings`], and one cancellation token stops them all. `main` and the integration tests
//! build processes through it, so the tests run the production wiring.
//!
//! A process runs some of the [`Part`]s: `onsale serve` the API (REST, SSE, gRPC, with the
//! owners, the query side, payment routes and the waiting room's routes and gate), the payment
//! worker, the scheduled jobs and the admitter; `onsale relay` the relay; `onsale project` the
//! projections and the payment consumers. Shutdown (SIGTERM, Ctrl-C, [`Server::shutdown`]):
//! the listeners stop accepting, SSE and gRPC streams end with a retry hint, owners commit and
//! answer what they took, the worker finishes its calls in flight, loops stop; all within
//! `--shutdown-timeout-secs`.
//!
//! This crate decides nothing itself; it only connects the crates that do.

mod api;
pub mod audit;
pub mod cors;
pub mod http;
mod parts;
mod pools;
mod readiness;
pub mod region;
pub use region::migrate;
mod settings;
pub mod settings_table;
pub mod web;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use onsale_command::Shows;
use onsale_domain::{Clock, ShowId, SystemClock};
use onsale_edge::admission::BookingHealth;
use onsale_eventlog::{Catalog, Directory, EventLog, PgDirectory, PgEventLog, ShardedLog};
use onsale_query::QueryState;
use onsale_telemetry::supervise::{self, Loops};
use onsale_waiting_room::WaitingRoom;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use parts::Part;
use parts::PartCtx;
use pools::{Pools, ShardPools, Workload};
pub use settings::Settings;

/// The largest request body any route accepts (the largest real one, a venue of many sections,
/// is a few KiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A running onsale process (or the parts of one a test asked for).
#[derive(Debug)]
pub struct Server {
    settings: Settings,
    /// Owners of shows, appending to the event log.
    pub shows: Shows,
    /// Shows as scheduled, read through the read pool.
    pub catalog: Catalog,
    /// Every shard's log through its public pool: what the public pages read.
    public_log: Arc<ShardedLog<PgEventLog>>,
    /// Each shard's pool of background work: its relay's, and where its slot is watched.
    shard_pools: Vec<PgPool>,
    /// Every shard's log through those pools: the catalog's and the consumers'.
    catalog_log: Arc<dyn EventLog>,
    /// The pool of background work and private routes (payments, card vault, webhooks, scans,
    /// relay, projections).
    pub pool: PgPool,
    /// The pool of the public reads (query side, catalog).
    pub public_pool: PgPool,
    /// The pool of the waiting room and its admitter.
    pub admission_pool: PgPool,
    /// Every shard's database through its card-vault pool, on every order's path.
    vault: Arc<ShardedLog<PgEventLog>>,
    /// Every shard's database through its pool of background work: where each show's
    /// payments, refunds and tickets live.
    stores: Arc<ShardedLog<PgEventLog>>,
    /// The query side, with the API.
    pub query: Option<QueryState>,
    /// The waiting room, with the API when Redis is configured.
    pub room: Option<WaitingRoom>,
    /// The hold path's health, which the admitter reads.
    health: Arc<BookingHealth>,
    /// The parts whose tasks stopped and are being restarted (`/readyz`, `/healthz`).
    /// The process's background loops, supervised; their health is the parts' health too.
    loops: Loops,
    http: Option<SocketAddr>,
    grpc: Option<SocketAddr>,
    /// Where other nodes forward commands, with the API.
    internal: Option<SocketAddr>,
    /// The operators' listener (`/metrics`, probes), when one is set.
    operator: Option<SocketAddr>,
    /// The API's readiness (refreshed in the background), with the API: the operators'
    /// `/readyz` answers it too.
    readiness: Option<readiness::Readiness>,
    shutdown: CancellationToken,
    /// The listeners and the owners (and their appends): waited for at shutdown.
    tracker: TaskTracker,
    parts: Mutex<HashMap<Part, Vec<supervise::Supervised>>>,
    /// Whether this process writes in its region (docs/adr/024).
    mode: onsale_domain::region::Mode,
    /// Cancelled when the region's role changed under the process (or at shutdown).
    role_changed: CancellationToken,
}

impl Drop for Server {
    fn drop(&mut self) {
        // Nothing outlives its server: loops stop, owners drain, listeners close.
        self.shutdown.cancel();
        for (_, parts) in self.lock().drain() {
            for p in parts {
                p.abort();
            }
        }
    }
}

async fn bind(addr: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("bind {addr}"))
}

/// Before a process starts: its login checked ([`login`]), then whether it writes in its
/// region, once the schema is at this build's version (`region::settle`).
pub async fn settle(settings: &Settings) -> anyhow::Result<onsale_domain::region::Mode> {
    settings.kafka.check()?;
    let db = &settings.database;
    if !login(db, settings.auth.dev_mode).await? {
        // Development only: a local stack logged in as the schema's owner migrates itself,
        // as `onsale migrate` would.
        region::migrate(db, &settings.region, &[]).await?;
    }
    region::settle(db, &settings.region).await
}

/// A process logs in as a member of the app role and nothing more (issue 53, item 6): with
/// the owner's or a superuser's login, `RESET ROLE` would undo its `SET ROLE` and let it
/// switch off the log's triggers, move shows, promote regions. Refused outside development
/// mode; warned about in it. `Ok(true)` for a login with the app role's rights alone.
async fn login(db: &onsale_eventlog::DatabaseSettings, dev_mode: bool) -> anyhow::Result<bool> {
    let pool = db.as_owner().pool(1, true)?;
    let beyond = onsale_eventlog::login_beyond_the_app(&pool).await;
    pool.close().await;
    let beyond = beyond.context("read what the login role may do")?;
    if beyond.is_empty() {
        return Ok(true);
    }
    let why = beyond.join("; ");
    anyhow::ensure!(
        dev_mode,
        "{why}: a process logs in as a role that is a member of onsale_app and nothing more \
         (`onsale migrate --login-role NAME` makes one; docs/security.md)"
    );
    tracing::warn!(%why, "DEVELOPMENT MODE: a process logged in with more than the app role's rights");
    Ok(false)
}

/// `Err` while the node's lease is lapsed on a shard: its owners there cannot prove the shows
/// are still theirs and answer 503, so the node is not ready (issue 53, item 10).
fn lease(shows: &Shows) -> Result<(), String> {
    let lapsed = shows.lapsed_leases();
    if lapsed.is_empty() {
        return Ok(());
    }
    let shards: Vec<String> = lapsed.iter().map(ToString::to_string).collect();
    Err(format!(
        "this node's lease is lapsed on shard {}: its heartbeat has not been renewed",
        shards.join(", ")
    ))
}

impl Server {
    /// Builds and starts `parts` of a process from `settings`, with the system clock.
    pub async fn build(settings: Settings, parts: &[Part]) -> anyhow::Result<Self> {
        Self::build_with_clock(settings, parts, Arc::new(SystemClock)).await
    }

    /// As [`Server::build`], with the domain's "now" from `clock` (tests hold it still).
    pub async fn build_with_clock(
        mut settings: Settings,
        parts: &[Part],
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        settings.secure()?;
        if settings.auth.dev_mode {
            tracing::warn!(
                "DEVELOPMENT MODE: built-in secrets where none is set, a token for any account \
                 (admins too) to callers on this machine; never run a deployment like this"
            );
        }
        // Once `onsale migrate` has run: a standby region's process (its databases replay the
        // writer's) writes nothing and runs only the API, serving reads (docs/adr/024).
        let mode = settle(&settings).await?;
        let standby = matches!(mode, onsale_domain::region::Mode::Standby { .. });
        if standby {
            tracing::warn!(region = %settings.region, ?mode, "a standby region: reads only, writes answered 503 OTHER_REGION");
        }
        let mut server = Self::assemble(settings, clock, mode)?;
        server.watch_region();
        // A standby runs the API alone: every other part writes.
        let parts: Vec<Part> = parts
            .iter()
            .copied()
            .filter(|p| !standby || *p == Part::Api)
            .collect();
        if parts.contains(&Part::Api) {
            server.serve_api().await?;
        }
        // `/metrics` (and the probes) on an operator-only listener when one is set; the API's
        // public listener serves `/metrics` only with `--public-metrics`.
        if let Some(listen) = server.settings.metrics_listen.clone() {
            server.serve_metrics(&listen).await?;
        }
        for part in parts {
            server.start(part).await?;
        }
        Ok(server)
    }

    /// The process's pools, logs, owners and catalog, nothing started yet.
    fn assemble(
        settings: Settings,
        clock: Arc<dyn Clock>,
        mode: onsale_domain::region::Mode,
    ) -> anyhow::Result<Self> {
        let main = Pools::open(&settings.database)?;
        let admission_pool = settings
            .database
            .pool((settings.database.pool_size / 4).max(2), true)?;
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let loops = Loops::new(
            supervise::PartsHealth::default(),
            shutdown.clone(),
            tracker.clone(),
        );
        // Shows sharded over write clusters (docs/adr/021): each shard's log reached through a
        // pool per workload, like the main database's; the directory in the main database.
        let directory: Arc<dyn Directory> =
            Arc::new(PgDirectory::new(main.background.clone()).in_region(&settings.region));
        let shards = ShardPools::open(&settings.database, &main, &settings.region)?;
        let shows = Shows::sharded(
            Arc::new(shards.log(Workload::Append, &directory)),
            clock,
            settings.owners.clone(),
            &loops,
        );
        let catalog_log: Arc<dyn EventLog> = Arc::new(shards.log(Workload::Background, &directory));
        let catalog = Catalog::new(catalog_log.clone());
        Ok(Self {
            settings,
            shows,
            catalog,
            public_log: Arc::new(shards.pg_log(Workload::Public, &directory)),
            catalog_log,
            shard_pools: shards.pools(Workload::Background),
            vault: Arc::new(shards.pg_log(Workload::Vault, &directory)),
            stores: Arc::new(shards.pg_log(Workload::Background, &directory)),
            pool: main.background,
            public_pool: main.public,
            admission_pool,
            query: None,
            room: None,
            health: Arc::new(BookingHealth::default()),
            loops,
            http: None,
            grpc: None,
            internal: None,
            operator: None,
            readiness: None,
            role_changed: shutdown.child_token(),
            shutdown,
            tracker,
            parts: Mutex::default(),
            mode,
        })
    }

    /// Watches the region's role: once it changes under the process, the process starts
    /// again as it now is (until then the watch has nothing left to do, and has not died).
    fn watch_region(&self) {
        let (pool, region, mode) = (
            self.pool.clone(),
            self.settings.region.clone(),
            self.mode.clone(),
        );
        let (changed, stop) = (self.role_changed.clone(), self.shutdown.clone());
        self.loops.spawn("region watch", move || {
            let watched =
                region::watch(pool.clone(), region.clone(), mode.clone(), changed.clone());
            let stop = stop.clone();
            async move {
                watched.await;
                stop.cancelled().await;
            }
        });
    }

    /// Where REST and SSE are served, with the API.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http
    }

    /// Where gRPC and gRPC-web are served, with the API.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc
    }

    /// Where `/metrics` and the probes are served for operators, when `metrics_listen` is set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.operator
    }

    /// Where other nodes forward commands for this node's shows, with the API.
    pub fn internal_addr(&self) -> Option<SocketAddr> {
        self.internal
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether this process writes in its region, as it found at start.
    pub fn mode(&self) -> &onsale_domain::region::Mode {
        &self.mode
    }

    /// Every shard's database, found by show: where each show's payments, refunds and tickets
    /// live (through the pools of background work).
    pub fn stores(&self) -> &Arc<ShardedLog<PgEventLog>> {
        &self.stores
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Part, Vec<supervise::Supervised>>> {
        self.parts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts (another instance of) a part's background tasks, under a supervisor that
    /// starts them again if they stop before shutdown (`supervise`).
    pub async fn start(&self, part: Part) -> anyhow::Result<()> {
        let ctx = PartCtx {
            settings: Arc::new(self.settings.clone()),
            pool: self.pool.clone(),
            shard_pools: self.shard_pools.clone(),
            log: self.catalog_log.clone(),
            stores: self.stores.clone(),
            shows: self.shows.clone(),
            room: self.room.clone(),
            health: self.health.clone(),
            stop: self.shutdown.clone(),
        };
        let first = ctx.spawn(part).await?;
        let handle = supervise::supervise(
            part.name(),
            first,
            self.loops.health().clone(),
            self.shutdown.clone(),
            move || {
                let ctx = ctx.clone();
                async move { ctx.spawn(part).await }
            },
        );
        self.lock().entry(part).or_default().push(handle);
        Ok(())
    }

    /// The background loops running under supervision in this process (a lease's heartbeat,
    /// listeners, polls, refreshes).
    pub fn loops(&self) -> Vec<&'static str> {
        self.loops.names()
    }

    /// The loop `name` dies where it stands, as a panic would end it; its supervisor starts it
    /// again (`/readyz` names it meanwhile). For drills and tests.
    pub fn crash_loop(&self, name: &str) -> bool {
        self.loops.crash(name)
    }

    /// Kills a part's tasks where they stand (no shutdown path runs), and its supervisor: a
    /// crash of the whole process's part, for tests; [`Server::start`] starts it again.
    pub fn kill(&self, part: Part) {
        for p in self.lock().remove(&part).unwrap_or_default() {
            p.abort();
        }
    }

    /// A part's tasks die where they stand, as a panic would end them; its supervisor starts
    /// them again (`/readyz` names the part meanwhile). For drills and tests.
    pub fn crash(&self, part: Part) {
        for p in self.lock().get(&part).into_iter().flatten() {
            p.crash();
        }
    }

    /// Stops everything: listeners stop accepting, streams end with a retry hint, owners
    /// commit and answer what they took, the worker finishes its calls, loops stop. Past the
    /// bound what is left is aborted and the answer is an error.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let bound = Duration::from_secs(self.settings.shutdown_timeout_secs);
        self.shutdown.cancel();
        let handles: Vec<supervise::Supervised> =
            self.lock().drain().flat_map(|(_, h)| h).collect();
        let aborts: Vec<_> = handles
            .iter()
            .map(supervise::Supervised::abort_handle)
            .collect();
        self.tracker.close();
        let tracker = self.tracker.clone();
        let all = async move {
            for h in handles {
                h.join().await;
            }
            tracker.wait().await;
        };
        match tokio::time::timeout(bound, all).await {
            Ok(()) => {
                tracing::info!("onsale stopped");
                Ok(())
            }
            Err(_) => {
                for a in aborts {
                    a.abort();
                }
                anyhow::bail!("work still in flight after {bound:?}; abandoned")
            }
        }
    }

    /// A process's life in its region: built with `parts`, run until SIGTERM or Ctrl-C, and
    /// built again whenever its region's role changes under it (a standby promoted starts its
    /// writer parts; a writer whose databases now follow another region's stands by).
    pub async fn run_in_region(settings: Settings, parts: &[Part]) -> anyhow::Result<()> {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("install the SIGTERM handler")?;
        loop {
            let server = Self::build(settings.clone(), parts).await?;
            let changed = server.role_changed.clone();
            tokio::select! {
                _ = term.recv() => {
                    tracing::info!("SIGTERM: shutting down");
                    return server.shutdown().await;
                }
                _ = tokio::signal::ctrl_c() => {
                    tracing::info!("Ctrl-C: shutting down");
                    return server.shutdown().await;
                }
                _ = changed.cancelled() => {
                    // Whatever did not stop within the bound was aborted: build it again anyway.
                    if let Err(e) = server.shutdown().await {
                        tracing::warn!(error = %e, "stopping for the region's new role");
                    }
                }
            }
        }
    }
}

/// Moves `show` to shard `to` while it sells (`onsale shard move`, docs/adr/022), as the
/// schema's owner: the old rows' removal is refused to the processes' role.
pub async fn move_show(
    settings: &onsale_eventlog::DatabaseSettings,
    show: ShowId,
    to: u16,
) -> anyhow::Result<onsale_eventlog::moving::Moved> {
    let owner = settings.as_owner();
    let shards = owner
        .shards()
        .iter()
        .map(|shard| shard.pool(2, true))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let to = onsale_eventlog::ShardId::new(to)
        .filter(|s| usize::from(s.get()) <= shards.len())
        .with_context(|| format!("--to must be a shard between 1 and {}", shards.len()))?;
    onsale_eventlog::moving::move_show(&owner.pool(2, true)?, &shards, show, to).await
}

/// The event log of every shard of `settings` (the directory in its main database), for the
/// operator's commands.
pub fn event_log(
    settings: &onsale_eventlog::DatabaseSettings,
) -> anyhow::Result<ShardedLog<PgEventLog>> {
    let main = settings.pool(2, true)?;
    let directory: Arc<dyn Directory> = Arc::new(PgDirectory::new(main.clone()));
    if settings.shard_urls.is_empty() {
        return Ok(ShardedLog::new(Arc::new(PgEventLog::new(main)), directory));
    }
    let mut shards = settings
        .shards()
        .into_iter()
        .map(|shard| anyhow::Ok(Arc::new(PgEventLog::new(shard.pool(2, true)?))));
    let first = shards.next().context("no shard listed")??;
    shards.try_fold(ShardedLog::new(first, directory), |log, shard| {
        anyhow::Ok(log.and(shard?))
    })
}

/// The OpenAPI document `/openapi.json` serves (with the waiting room's routes when the
/// process has one): what `onsale openapi` prints for the front end's generated client.
pub fn openapi(waiting_room: bool, dev_mode: bool) -> anyhow::Result<serde_json::Value> {
    use utoipa::OpenApi;
    let mut doc = onsale_command::api::ApiDoc::openapi();
    doc.merge(onsale_query::rest::QueryDoc::openapi());
    doc.merge(onsale_payments::PaymentsDoc::openapi());
    doc.merge(web::WebDoc::openapi());
    if dev_mode {
        doc.merge(web::DevDoc::openapi());
    }
    if waiting_room {
        doc.merge(onsale_waiting_room::api::WaitingRoomDoc::openapi());
    }
    Ok(onsale_edge::openapi::exact(serde_json::to_value(&doc)?))
}
