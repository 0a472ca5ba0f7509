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

pub mod audit;
pub mod cors;
pub mod http;
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
use onsale_command::api::{AppParts, AppState};
use onsale_command::{Catalog, Shows};
use onsale_domain::{Clock, ShowId, SystemClock};
use onsale_edge::admission::BookingHealth;
use onsale_edge::limits::{self, RateLimits, StreamSlots};
use onsale_eventlog::{Directory, EventLog, PgDirectory, PgEventLog, ShardedLog};
use onsale_kafka::{leader, Relay};
use onsale_payments::PaymentsState;
use onsale_query::{QueryParts, QueryState};
use onsale_telemetry::supervise::{self, Loops};
use onsale_waiting_room::{
    FactsFuture, JoinRules, RulesFuture, ShowFacts, ShowSchedule, WaitingRoom,
};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use settings::Settings;

/// The largest request body any route accepts (the largest real one, a venue of many sections,
/// is a few KiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What a process can run. The owners of shows exist in every process that needs them (the
/// API and the payment worker record outcomes through them); each part's background tasks can
/// be stopped, killed and started again on their own (tests do, to play crashes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// REST + SSE on `listen`, gRPC + gRPC-web on `grpc_listen`: commands, queries, payment
    /// and ticket routes, the waiting room's routes and session gate.
    Api,
    /// The payment worker: charges, status checks, voids and refunds.
    Worker,
    /// Settlement reconciliation and the invariant monitor, on their schedules.
    Jobs,
    /// One admitter replica of the waiting room (and its stall watchdog).
    Admitter,
    /// The CDC relay: the events table into Kafka.
    Relay,
    /// The seat map, orders and seat history projections.
    Projections,
    /// The payment intake and the ticket issuer (log consumers).
    PaymentConsumers,
}

impl Part {
    /// The part's name in logs, metrics and `/readyz`.
    pub fn name(self) -> &'static str {
        match self {
            Part::Api => "api",
            Part::Worker => "payment worker",
            Part::Jobs => "jobs",
            Part::Admitter => "admitter",
            Part::Relay => "relay",
            Part::Projections => "projections",
            Part::PaymentConsumers => "payment intake and ticket issuer",
        }
    }

    /// `onsale serve`.
    pub const SERVE: [Part; 4] = [Part::Api, Part::Worker, Part::Jobs, Part::Admitter];
    /// `onsale project`.
    pub const PROJECT: [Part; 2] = [Part::Projections, Part::PaymentConsumers];
}

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

/// What a part's tasks are built from: everything it needs, cloneable, so that its
/// supervisor can build them again.
#[derive(Clone)]
struct PartCtx {
    settings: Arc<Settings>,
    pool: PgPool,
    /// Each shard's pool of background work (its relay's).
    shard_pools: Vec<PgPool>,
    /// Every shard's log through those pools: where the consumers fill gaps from.
    log: Arc<dyn EventLog>,
    /// Every shard's database through those pools: payments, refunds and tickets.
    stores: Arc<ShardedLog<PgEventLog>>,
    shows: Shows,
    room: Option<WaitingRoom>,
    health: Arc<BookingHealth>,
    stop: CancellationToken,
}

impl PartCtx {
    async fn spawn(&self, part: Part) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let s = &self.settings;
        let stop = &self.stop;
        Ok(match part {
            Part::Api => Vec::new(),
            Part::Worker => vec![onsale_payments::spawn_worker(
                &self.stores,
                self.shows.clone(),
                s.payments.clone(),
                s.payments.worker_processor()?,
                stop,
            )],
            Part::Jobs => {
                // Reconciliation and the invariant monitor: one active process among all.
                let (pool, stores, shows, config) = (
                    self.pool.clone(),
                    self.stores.clone(),
                    self.shows.clone(),
                    s.payments.clone(),
                );
                let processor = s.payments.back_office_processor()?;
                let mut jobs = vec![tokio::spawn(leader::lead(
                    self.pool.clone(),
                    leader::keys::JOBS,
                    "jobs",
                    stop.clone(),
                    move |term| {
                        onsale_payments::run_jobs(
                            pool.clone(),
                            stores.clone(),
                            shows.clone(),
                            config.clone(),
                            processor.clone(),
                            term,
                        )
                    },
                ))];
                // The log's heads signed at intervals (issue 53, item 6), by one process too.
                if let Some((dir, key)) = s.checkpoints.configured() {
                    let (database, every) = (
                        s.database.clone(),
                        Duration::from_secs(s.checkpoints.every_secs),
                    );
                    jobs.push(tokio::spawn(leader::lead(
                        self.pool.clone(),
                        leader::keys::CHECKPOINTS,
                        "checkpoints",
                        stop.clone(),
                        move |term| {
                            audit::keep_checkpointing(
                                database.clone(),
                                dir.clone(),
                                key.clone(),
                                every,
                                term,
                            )
                        },
                    )));
                }
                jobs
            }
            Part::Admitter => match &self.room {
                Some(room) => {
                    // The controller's store signal is the write path's own pool.
                    let log = self.shows.log().clone();
                    let probe: onsale_edge::admission::WriteProbe = Arc::new(move || {
                        let log = log.clone();
                        Box::pin(async move { log.ping().await.is_ok() })
                    });
                    let stores = self.stores.clone();
                    let processor: onsale_edge::admission::ProcessorProbe = Arc::new(move || {
                        let stores = stores.clone();
                        Box::pin(async move { !onsale_payments::processor_failing(&stores).await })
                    });
                    room.spawn_admitter(self.health.clone(), probe, processor)
                }
                None => Vec::new(),
            },
            Part::Relay => {
                // One relay per shard, each with its shard's slot (docs/adr/021).
                let mut relays = Vec::new();
                for (shard, pool) in (1u16..).zip(&self.shard_pools) {
                    let config = s.relay.for_shard(shard);
                    let relay =
                        Arc::new(Relay::start(pool.clone(), s.kafka.clone(), config).await?);
                    // Exactly one relay of each shard publishes; the others are hot standbys.
                    relays.push(tokio::spawn(leader::lead(
                        pool.clone(),
                        leader::keys::RELAY,
                        "relay",
                        stop.clone(),
                        move |term| {
                            let relay = relay.clone();
                            async move { relay.run(term.cancelled_owned()).await }
                        },
                    )));
                }
                relays
            }
            Part::Projections => onsale_projections::spawn_all(
                self.pool.clone(),
                self.log.clone(),
                s.kafka.clone(),
                s.runner.clone(),
                stop,
            ),
            Part::PaymentConsumers => onsale_payments::spawn_consumers(
                self.pool.clone(),
                self.log.clone(),
                &self.stores,
                s.kafka.clone(),
                s.runner.clone(),
                stop,
            ),
        })
    }
}

/// The waiting room learns a show's schedule from the catalog (the log's first event), never
/// from the show's owner.
#[derive(Debug)]
struct CatalogSchedule(Catalog);

impl ShowSchedule for CatalogSchedule {
    fn facts(&self, show: ShowId) -> FactsFuture<'_> {
        Box::pin(async move {
            let s = self.0.get(show).await?;
            Ok(ShowFacts {
                waiting_room: s.info.waiting_room,
                on_sale_at: s.info.on_sale_at,
                starts_at: s.info.starts_at,
            })
        })
    }

    fn activity(&self, show: ShowId, events: i64) -> onsale_waiting_room::ActivityFuture<'_> {
        Box::pin(async move {
            let a = self.0.log().recent_activity(show, events).await?;
            Ok((a.holds, a.seats_held, a.orders))
        })
    }

    /// The policies in force, read from the log.
    fn rules(&self, show: ShowId) -> RulesFuture<'_> {
        Box::pin(async move {
            let (_, policy) = self.0.policy(show).await?;
            Ok(JoinRules {
                verified_only: policy.require_verified_account,
                challenge_bits: policy.join_challenge_bits,
            })
        })
    }
}

/// The query side's ticket reads: the payments' own (`onsale_payments::tickets`).
struct PaymentTickets;

impl onsale_query::Tickets for PaymentTickets {
    fn of_order<'a>(
        &'a self,
        shard: &'a PgPool,
        order: &'a str,
    ) -> onsale_query::TicketsFuture<'a, onsale_query::rest::TicketRef> {
        Box::pin(onsale_payments::tickets::of_order(shard, order))
    }

    fn seat_page<'a>(
        &'a self,
        shard: &'a PgPool,
        show: ShowId,
        seat: &'a str,
        after: &'a onsale_projections::history::After,
        limit: i64,
    ) -> onsale_query::TicketsFuture<'a, onsale_query::rest::HistoryEntry> {
        Box::pin(onsale_payments::tickets::seat_page(
            shard, show, seat, after, limit,
        ))
    }
}

/// The query side reads a show its projection has not folded yet as the catalog has it
/// scheduled (through the public pool).
#[derive(Debug)]
struct PublicSchedules(Catalog);

impl onsale_query::snapshots::Schedules for PublicSchedules {
    fn scheduled(&self, show: ShowId) -> onsale_query::snapshots::ScheduleFuture<'_> {
        Box::pin(async move {
            match self.0.get(show).await {
                Ok(s) => Ok(Some(onsale_domain::Show::as_scheduled(
                    s.info.clone(),
                    s.layout.clone(),
                ))),
                Err(onsale_command::CommandError::Domain(
                    onsale_domain::ShowError::ShowNotFound,
                )) => Ok(None),
                Err(e) => Err(anyhow::anyhow!("the catalog did not answer: {e}")),
            }
        })
    }
}

/// Each shard's pools, one per workload (appends, background work, public reads, the card
/// vault): the main database's own pools when it is the only shard.
struct ShardPools {
    first: [PgPool; 4],
    rest: Vec<[PgPool; 4]>,
    /// The process's region: its claims go through only where it writes.
    region: onsale_domain::region::RegionName,
}

impl ShardPools {
    fn open(
        db: &onsale_eventlog::DatabaseSettings,
        main: [&PgPool; 4],
        region: &onsale_domain::region::RegionName,
    ) -> anyhow::Result<Self> {
        if db.shard_urls.is_empty() {
            return Ok(Self {
                first: main.map(PgPool::clone),
                rest: Vec::new(),
                region: region.clone(),
            });
        }
        let mut shards = db.shards().into_iter().map(|shard| {
            anyhow::Ok([
                shard.pool(db.pool_size, false)?,
                shard.pool(db.pool_size, true)?,
                shard.pool(db.pool_size, true)?,
                shard.pool(db.pool_size, true)?,
            ])
        });
        let first = shards.next().context("no shard listed")??;
        Ok(Self {
            first,
            rest: shards.collect::<anyhow::Result<_>>()?,
            region: region.clone(),
        })
    }

    /// Every shard's pool of workload `w`, in shard order.
    fn pools(&self, w: usize) -> Vec<PgPool> {
        std::iter::once(&self.first)
            .chain(&self.rest)
            .map(|pools| pools[w].clone())
            .collect()
    }

    /// Every shard's log through its pool of workload `w`, placed by `directory`.
    fn log(&self, w: usize, directory: &Arc<dyn Directory>) -> ShardedLog {
        let log = |pools: &[PgPool; 4]| -> Arc<dyn EventLog> {
            Arc::new(PgEventLog::new(pools[w].clone()).in_region(&self.region))
        };
        self.rest.iter().fold(
            ShardedLog::new(log(&self.first), directory.clone()),
            |sharded, pools| sharded.and(log(pools)),
        )
    }

    /// [`ShardPools::log`], each shard's log as PostgreSQL's (for what only it can read).
    fn pg_log(&self, w: usize, directory: &Arc<dyn Directory>) -> ShardedLog<PgEventLog> {
        let log = |pools: &[PgPool; 4]| {
            Arc::new(PgEventLog::new(pools[w].clone()).in_region(&self.region))
        };
        self.rest.iter().fold(
            ShardedLog::new(log(&self.first), directory.clone()),
            |sharded, pools| sharded.and(log(pools)),
        )
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
        let db = &settings.database;
        // Once `onsale migrate` has run: a standby region's process (its databases replay the
        // writer's) writes nothing and runs only the API, serving reads (docs/adr/024).
        let mode = settle(&settings).await?;
        let standby = matches!(mode, onsale_domain::region::Mode::Standby { .. });
        if standby {
            tracing::warn!(region = %settings.region, ?mode, "a standby region: reads only, writes answered 503 OTHER_REGION");
        }
        // Appends get a pool of their own: a burst of seat-map misses, SSE resumes or payment
        // rounds must not take the connections the owners' appends are waiting for.
        let append_pool = db.pool(db.pool_size, false)?;
        let pool = db.pool(db.pool_size, true)?;
        // Each workload its own bounded share (issue 29): reads anyone may send without a token
        // (event pages, seat maps, search, SSE resumes) cannot take the connections of the
        // card vault, webhooks, scans and the workers (`pool`), nor the waiting room's. The card
        // vault is on every order's path: it does not wait behind the workers and projections
        // catching up after an outage either (the shards drill saw orders answer 503 then).
        let public_pool = db.pool(db.pool_size, true)?;
        let admission_pool = db.pool((db.pool_size / 4).max(2), true)?;
        let vault_pool = db.pool(db.pool_size, true)?;
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
            Arc::new(PgDirectory::new(pool.clone()).in_region(&settings.region));
        let shards = ShardPools::open(
            db,
            [&append_pool, &pool, &public_pool, &vault_pool],
            &settings.region,
        )?;
        let shows = Shows::sharded(
            Arc::new(shards.log(0, &directory)),
            clock,
            settings.owners.clone(),
            &loops,
        );
        let catalog_log: Arc<dyn EventLog> = Arc::new(shards.log(1, &directory));
        let catalog = Catalog::new(catalog_log.clone()).with_projection(pool.clone());
        let public_log = Arc::new(shards.pg_log(2, &directory));
        let mut server = Self {
            settings,
            shows,
            catalog,
            public_log,
            catalog_log,
            shard_pools: shards.pools(1),
            vault: Arc::new(shards.pg_log(3, &directory)),
            stores: Arc::new(shards.pg_log(1, &directory)),
            pool,
            public_pool,
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
        };
        let (pool, region, mode) = (
            server.pool.clone(),
            server.settings.region.clone(),
            server.mode.clone(),
        );
        let (changed, stop) = (server.role_changed.clone(), server.shutdown.clone());
        server.loops.spawn("region watch", move || {
            let watched =
                region::watch(pool.clone(), region.clone(), mode.clone(), changed.clone());
            let stop = stop.clone();
            // Once the role changed the process starts again as it is: until then the watch
            // has nothing left to do, and has not died.
            async move {
                watched.await;
                stop.cancelled().await;
            }
        });
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

    /// The API: the command side's routes with the query side's, the payments' and the
    /// waiting room's on one base URL; gRPC on its own port.
    async fn serve_api(&mut self) -> anyhow::Result<()> {
        let s = &self.settings;
        // One verifier for the process: the identity provider's keys fetched once and shared,
        // kept fresh under supervision (a key the provider retired refused from the next fetch).
        let verifier = s.auth.verifier();
        if let Some(provider) = verifier.provider() {
            let (provider, stop) = (provider.clone(), self.shutdown.clone());
            let every = Duration::from_secs(s.auth.jwks_refresh_secs);
            self.loops.spawn("identity provider's keys", move || {
                provider.clone().keep_fresh(every, stop.clone())
            });
        }
        let streams = StreamSlots::for_seat_maps(&s.limits);
        let public_catalog = self
            .catalog
            .reading_from(self.public_log.clone(), self.public_pool.clone());
        // A standby region runs no relay: its read path has no slot to watch.
        let relayed = if matches!(self.mode, onsale_domain::region::Mode::Standby { .. }) {
            &[][..]
        } else {
            &self.shard_pools[..]
        };
        let query: QueryState = QueryParts::start(
            self.public_pool.clone(),
            (1u16..)
                .zip(relayed)
                .map(|(shard, pool)| {
                    (
                        pool.clone(),
                        onsale_kafka::relay::slot_of(&s.relay.slot, shard),
                    )
                })
                .collect(),
            &s.query,
            verifier.clone(),
            streams.clone(),
            &self.loops,
        )
        .with_log(self.public_log.clone())
        .with_schedules(Arc::new(PublicSchedules(public_catalog.clone())))
        .with_tickets(Arc::new(PaymentTickets))
        .into();
        let room = WaitingRoom::connect(
            s.waiting_room.clone(),
            self.admission_pool.clone(),
            Arc::new(CatalogSchedule(self.catalog.clone())),
            self.shutdown.clone(),
        )
        .await?;
        let doc = openapi(room.is_some(), s.auth.dev_mode)?;
        let health = query.health.clone();
        let (parts, parts_live) = (self.loops.health().clone(), self.loops.health().clone());
        // `/readyz` answers from what a background refresh found: the log's ping, then the
        // node's lease (a writer's), the parts and loops, and the read side; a probe never
        // touches a pool.
        let readiness = readiness::Readiness::starting();
        let (log, shows) = (self.shows.log().clone(), self.shows.clone());
        let writes = !matches!(self.mode, onsale_domain::region::Mode::Standby { .. });
        let check: readiness::Check = Arc::new(move || {
            if writes {
                lease(&shows)?;
            }
            parts.ready()?;
            health.ready()
        });
        let (refreshing, stop) = (readiness.clone(), self.shutdown.clone());
        self.loops.spawn("readiness", move || {
            refreshing
                .clone()
                .refresh(log.clone(), check.clone(), stop.clone())
        });
        let state = AppState::new(AppParts {
            shows: self.shows.clone(),
            catalog: self.catalog.clone(),
            public_catalog,
            verifier: verifier.clone(),
            metrics: onsale_telemetry::metrics().filter(|_| s.public_metrics),
            ready: Some(Arc::new({
                let readiness = readiness.clone();
                move || readiness.get()
            })),
            live: Some(Arc::new(move || parts_live.live())),
            gate: room
                .clone()
                .map(|r| Arc::new(r) as Arc<dyn onsale_edge::admission::SessionGate>),
            health: self.health.clone(),
            tokens: onsale_command::TokenVault::new(self.vault.clone()),
            openapi: Arc::new(doc),
        });
        let mut router = onsale_command::api::router(state)
            .merge(onsale_query::rest::router(query.clone()))
            .merge(onsale_payments::router(PaymentsState {
                shows: self.shows.clone(),
                catalog: self.catalog.clone(),
                pool: self.pool.clone(),
                shards: self.stores.clone(),
                verifier: verifier.clone(),
                processor: s.payments.back_office_processor()?,
                webhook_slots: Arc::new(tokio::sync::Semaphore::new(
                    onsale_payments::api::WEBHOOKS_IN_FLIGHT,
                )),
            }));
        if let Some(room) = &room {
            // The line's status streams on slots of their own: seat-map streams cannot take
            // the ones fans in a line read their turn through.
            router = router.merge(onsale_waiting_room::api::router(
                room.clone(),
                verifier.clone(),
                StreamSlots::for_lines(&s.limits),
            ));
        }
        let http = bind(&s.listen).await?;
        let grpc = bind(&s.grpc_listen).await?;
        router = router.merge(s.web.routes(&s.auth, &verifier, grpc.local_addr()?)?);
        // Whether this process's region writes (`writer` or `standby`): what a router in front
        // of the regions checks.
        let role = match self.mode {
            onsale_domain::region::Mode::Writer { .. } => "writer",
            onsale_domain::region::Mode::Standby { .. } => "standby",
        };
        router = router.route(
            "/writerz",
            axum::routing::get(move || std::future::ready(role)),
        );
        let mut rates = RateLimits::new(&s.limits, verifier);
        if let Some(url) = &s.waiting_room.redis_url {
            // Budgets shared by every node: N nodes allow the rate, not N times it.
            rates = rates.shared(s.waiting_room.redis_client(url)?);
        }
        let rates = Arc::new(rates);
        self.prune_rate_limits(rates.clone());
        // Innermost first: every body at most 64 KiB; the rate limits; the deadline; the
        // framework's own errors as problem+json; the trace.
        let router = router
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(axum::middleware::from_fn_with_state(
                rates.clone(),
                limits::rate_limit,
            ))
            .layer(axum::middleware::from_fn_with_state(
                Duration::from_millis(s.limits.request_timeout_ms),
                limits::deadline,
            ))
            .layer(axum::middleware::from_fn(
                onsale_edge::problem::problem_json,
            ))
            .layer(axum::middleware::from_fn_with_state(
                onsale_telemetry::trace::Caller::Public,
                http::traced,
            ))
            .layer(tower_http::trace::TraceLayer::new_for_http());
        // A standby's writes are refused before anything else looks at them; every answer
        // names the region that served it.
        let router = match &self.mode {
            onsale_domain::region::Mode::Standby { writer } => {
                router.layer(axum::middleware::from_fn_with_state(
                    Arc::new(region::Refer::new(&s.region, writer.as_ref())),
                    region::standby_gate,
                ))
            }
            onsale_domain::region::Mode::Writer { .. } => router,
        };
        let region_header = tower_http::set_header::SetResponseHeaderLayer::overriding(
            axum::http::HeaderName::from_static(region::REGION_HEADER),
            axum::http::HeaderValue::from_str(s.region.as_str())?,
        );
        let router = router.layer(region_header.clone());
        // Outermost: a browser's preflight is answered before anything else looks at it. In
        // development mode the fan app this listener serves may call gRPC-web on the other.
        let cors = s.cors.layer(s.auth.dev_mode, http.local_addr()?)?;
        // gRPC gets the same limits and deadline as REST (refusals as gRPC statuses); its
        // streams share the seat-map streams' caps.
        let grpc_router = onsale_query::grpc::router(query.clone())
            .layer(axum::middleware::from_fn_with_state(
                rates,
                limits::rate_limit,
            ))
            .layer(axum::middleware::from_fn_with_state(
                Duration::from_millis(s.limits.request_timeout_ms),
                limits::deadline,
            ))
            .layer(region_header);
        let (router, grpc_router) = match cors {
            Some(cors) => (router.layer(cors.clone()), grpc_router.layer(cors)),
            None => (router, grpc_router),
        };
        self.http = Some(http.local_addr()?);
        self.grpc = Some(grpc.local_addr()?);
        // Other nodes forward commands for this node's shows to its internal listener, never
        // the public one (signed requests, checked before their body is read).
        let internal = bind(&s.owners.cluster.internal_listen).await?;
        self.internal = Some(internal.local_addr()?);
        // A standby registers nowhere (its databases take no write): nothing is forwarded to it.
        if !matches!(self.mode, onsale_domain::region::Mode::Standby { .. }) {
            self.shows.advertise(&internal.local_addr()?.to_string());
        }
        let internal_router = onsale_command::cluster::router(self.shows.clone())
            .layer(axum::middleware::from_fn_with_state(
                Duration::from_millis(s.limits.request_timeout_ms),
                limits::deadline,
            ))
            .layer(axum::middleware::from_fn_with_state(
                onsale_telemetry::trace::Caller::Node,
                http::traced,
            ))
            .layer(tower_http::trace::TraceLayer::new_for_http());
        self.serve("internal", internal, internal_router);
        self.serve("HTTP", http, router);
        self.serve("gRPC", grpc, grpc_router);
        tracing::info!(http = ?self.http, grpc = ?self.grpc, "onsale serving");
        self.query = Some(query);
        self.room = room;
        self.readiness = Some(readiness);
        Ok(())
    }

    /// Forgets, every 10 s, the callers whose rate allowance is full again.
    fn prune_rate_limits(&self, rates: Arc<RateLimits>) {
        let stop = self.shutdown.clone();
        self.loops.spawn("rate-limit pruning", move || {
            let (rates, stop) = (rates.clone(), stop.clone());
            async move {
                let mut every = tokio::time::interval(Duration::from_secs(10));
                while stop.run_until_cancelled(every.tick()).await.is_some() {
                    rates.prune();
                }
            }
        });
    }

    /// `/metrics`, `/healthz` and `/readyz` of a process without the API.
    async fn serve_metrics(&mut self, listen: &str) -> anyhow::Result<()> {
        let handle = onsale_telemetry::metrics();
        let (ready, live) = (self.loops.health().clone(), self.loops.health().clone());
        let api = self.readiness.clone();
        let ready = move || match &api {
            Some(api) => api.get(),
            None => ready.ready(),
        };
        let probe = |r: Result<(), String>| match r {
            Ok(()) => (axum::http::StatusCode::OK, "ok".to_owned()),
            Err(why) => (axum::http::StatusCode::SERVICE_UNAVAILABLE, why),
        };
        let router = axum::Router::new()
            .route(
                "/healthz",
                axum::routing::get(move || std::future::ready(probe(live.live()))),
            )
            .route(
                "/readyz",
                axum::routing::get(move || std::future::ready(probe(ready()))),
            )
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let h = handle.clone();
                    async move { h.map(|h| h.render()).unwrap_or_default() }
                }),
            );
        let listener = bind(listen).await?;
        self.operator = Some(listener.local_addr()?);
        tracing::info!(metrics = ?listener.local_addr(), "metrics serving");
        self.serve("metrics", listener, router);
        Ok(())
    }

    /// Serves `router` until shutdown: then it stops accepting and lets the requests in
    /// flight finish (streams end by themselves on the same token).
    fn serve(&self, what: &'static str, listener: TcpListener, router: axum::Router) {
        self.tracker.spawn(http::serve(
            what,
            listener,
            router,
            self.settings.http.clone(),
            self.shutdown.clone(),
        ));
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
