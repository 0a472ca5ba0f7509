//! The listeners of a process: the API (the command side's routes with the query side's, the
//! payments' and the waiting room's on one base URL, gRPC on its own port, the internal one
//! other nodes forward to) and the operators' (`/metrics`, `/healthz`, `/readyz`).

use std::sync::Arc;
use std::time::Duration;

use onsale_command::api::{AppParts, AppState};
use onsale_domain::region::Mode;
use onsale_edge::auth::Verifier;
use onsale_edge::limits::{self, RateLimits, StreamSlots};
use onsale_eventlog::Catalog;
use onsale_payments::PaymentsState;
use onsale_query::{QueryParts, QueryState};
use onsale_waiting_room::WaitingRoom;
use tokio::net::TcpListener;

use crate::{bind, http, lease, openapi, readiness, region, Server, MAX_BODY_BYTES};

impl Server {
    /// The API: the command side's routes with the query side's, the payments' and the
    /// waiting room's on one base URL; gRPC on its own port; the internal listener.
    pub(crate) async fn serve_api(&mut self) -> anyhow::Result<()> {
        let verifier = self.verifier();
        let public_catalog = self.catalog.reading_from(self.public_log.clone());
        let query = self.query_state(&verifier, public_catalog);
        let s = &self.settings;
        let room = WaitingRoom::connect(
            s.waiting_room.clone(),
            self.admission_pool.clone(),
            self.catalog.clone(),
            self.shutdown.clone(),
        )
        .await?;
        let readiness = self.readiness(&query);
        let http = bind(&s.listen).await?;
        let grpc = bind(&s.grpc_listen).await?;
        let router = self
            .routes(&verifier, &query, room.as_ref(), &readiness)?
            .merge(s.web.routes(&s.auth, &verifier, grpc.local_addr()?)?);
        let rates = self.rates(&verifier)?;
        let region_header = tower_http::set_header::SetResponseHeaderLayer::overriding(
            axum::http::HeaderName::from_static(region::REGION_HEADER),
            axum::http::HeaderValue::from_str(s.region.as_str())?,
        );
        let router = self
            .layered(router, rates.clone())
            .layer(region_header.clone());
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
        self.serve_internal().await?;
        self.serve("HTTP", http, router);
        self.serve("gRPC", grpc, grpc_router);
        tracing::info!(http = ?self.http, grpc = ?self.grpc, "onsale serving");
        self.query = Some(query);
        self.room = room;
        self.readiness = Some(readiness);
        Ok(())
    }

    /// One verifier for the process: the identity provider's keys fetched once and shared,
    /// kept fresh under supervision (a key the provider retired refused from the next fetch).
    fn verifier(&self) -> Verifier {
        let verifier = self.settings.auth.verifier();
        if let Some(provider) = verifier.provider() {
            let (provider, stop) = (provider.clone(), self.shutdown.clone());
            let every = Duration::from_secs(self.settings.auth.jwks_refresh_secs);
            self.loops.spawn("identity provider's keys", move || {
                provider.clone().keep_fresh(every, stop.clone())
            });
        }
        verifier
    }

    /// The query side on the public pool (shows as scheduled read through it too, at the
    /// server's clock), watching each shard's relay slot (a standby region runs no relay: its
    /// read path has no slot to watch).
    fn query_state(&self, verifier: &Verifier, public_catalog: Catalog) -> QueryState {
        let s = &self.settings;
        let relayed = if matches!(self.mode, Mode::Standby { .. }) {
            &[][..]
        } else {
            &self.shard_pools[..]
        };
        let slots = (1u16..)
            .zip(relayed)
            .map(|(shard, pool)| {
                let slot = onsale_kafka::relay::slot_of(&s.relay.slot, shard);
                (pool.clone(), slot)
            })
            .collect();
        QueryParts::start(
            self.public_pool.clone(),
            public_catalog,
            slots,
            &s.query,
            verifier.clone(),
            StreamSlots::for_seat_maps(&s.limits),
            &self.loops,
        )
        .with_log(self.public_log.clone())
        .with_clock(self.shows.clock().clone())
        .into()
    }

    /// `/readyz` answers from what a background refresh found: the log's ping, then the
    /// node's lease (a writer's), the parts and loops, and the read side; a probe never
    /// touches a pool.
    fn readiness(&self, query: &QueryState) -> readiness::Readiness {
        let readiness = readiness::Readiness::starting();
        let (health, parts) = (query.health.clone(), self.loops.health().clone());
        let (log, shows) = (self.shows.log().clone(), self.shows.clone());
        let writes = !matches!(self.mode, Mode::Standby { .. });
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
        readiness
    }

    /// Every route of the public listener: the command side's, the query side's, the
    /// payments', the waiting room's when there is one, and `/writerz`.
    fn routes(
        &self,
        verifier: &Verifier,
        query: &QueryState,
        room: Option<&WaitingRoom>,
        readiness: &readiness::Readiness,
    ) -> anyhow::Result<axum::Router> {
        let s = &self.settings;
        let parts_live = self.loops.health().clone();
        let ready = readiness.clone();
        let state = AppState::new(AppParts {
            shows: self.shows.clone(),
            catalog: self.catalog.clone(),
            verifier: verifier.clone(),
            metrics: onsale_telemetry::metrics().filter(|_| s.public_metrics),
            ready: Some(Arc::new(move || ready.get())),
            live: Some(Arc::new(move || parts_live.live())),
            gate: room
                .cloned()
                .map(|r| Arc::new(r) as Arc<dyn onsale_edge::admission::SessionGate>),
            health: self.health.clone(),
            tokens: onsale_command::TokenVault::new(self.vault.clone()),
            openapi: Arc::new(openapi(room.is_some(), s.auth.dev_mode)?),
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
        if let Some(room) = room {
            // The line's status streams on slots of their own: seat-map streams cannot take
            // the ones fans in a line read their turn through.
            router = router.merge(onsale_waiting_room::api::router(
                room.clone(),
                verifier.clone(),
                StreamSlots::for_lines(&s.limits),
            ));
        }
        // Whether this process's region writes (`writer` or `standby`): what a router in front
        // of the regions checks.
        let role = match self.mode {
            Mode::Writer { .. } => "writer",
            Mode::Standby { .. } => "standby",
        };
        Ok(router.route(
            "/writerz",
            axum::routing::get(move || std::future::ready(role)),
        ))
    }

    /// The rate limits (shared in Redis by every node when there is one, so N nodes allow the
    /// rate, not N times it), pruned in the background.
    fn rates(&self, verifier: &Verifier) -> anyhow::Result<Arc<RateLimits>> {
        let s = &self.settings;
        let mut rates = RateLimits::new(&s.limits, verifier.clone());
        if let Some(url) = &s.waiting_room.redis_url {
            rates = rates.shared(s.waiting_room.redis_client(url)?);
        }
        let rates = Arc::new(rates);
        self.prune_rate_limits(rates.clone());
        Ok(rates)
    }

    /// The public listener's layers, innermost first: every body at most 64 KiB; the rate
    /// limits; the deadline; the framework's own errors as problem+json; the trace; and on a
    /// standby, its writes refused before anything else looks at them.
    fn layered(&self, router: axum::Router, rates: Arc<RateLimits>) -> axum::Router {
        let s = &self.settings;
        let router = router
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(axum::middleware::from_fn_with_state(
                rates,
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
        match &self.mode {
            Mode::Standby { writer } => router.layer(axum::middleware::from_fn_with_state(
                Arc::new(region::Refer::new(&s.region, writer.as_ref())),
                region::standby_gate,
            )),
            Mode::Writer { .. } => router,
        }
    }

    /// Other nodes forward commands for this node's shows to its internal listener, never the
    /// public one (signed requests, checked before their body is read). A standby registers
    /// nowhere (its databases take no write): nothing is forwarded to it.
    async fn serve_internal(&mut self) -> anyhow::Result<()> {
        let s = &self.settings;
        let internal = bind(&s.owners.cluster.internal_listen).await?;
        self.internal = Some(internal.local_addr()?);
        if !matches!(self.mode, Mode::Standby { .. }) {
            self.shows.advertise(&internal.local_addr()?.to_string());
        }
        let router = onsale_command::cluster::router(self.shows.clone())
            .layer(axum::middleware::from_fn_with_state(
                Duration::from_millis(self.settings.limits.request_timeout_ms),
                limits::deadline,
            ))
            .layer(axum::middleware::from_fn_with_state(
                onsale_telemetry::trace::Caller::Node,
                http::traced,
            ))
            .layer(tower_http::trace::TraceLayer::new_for_http());
        self.serve("internal", internal, router);
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
    pub(crate) async fn serve_metrics(&mut self, listen: &str) -> anyhow::Result<()> {
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
}
