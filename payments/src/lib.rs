//! Payments after the commit, and what follows from them: the payment worker ([`worker`]), the
//! processor's webhooks and the ticket and cancellation routes ([`api`]), settlement
//! reconciliation ([`reconcile`]), tickets with rotating barcodes ([`tickets`]) and the
//! invariant monitor ([`monitor`]).
//!
//! The worker runs in the process that owns the shows (it records outcomes as commands on
//! them; with shows sharded across nodes, each node pays for the shows it owns). Its work comes
//! off the log ([`intake`]): the `OrderPlaced` event is the outbox. This crate never decides a
//! seat's or an order's state itself: every outcome goes through the show's state table.

pub mod api;
pub mod client;
pub mod intake;
pub mod monitor;
pub mod reconcile;
pub mod tickets;
pub mod worker;

use std::time::Duration;

use onsale_command::Shows;
use onsale_kafka::KafkaConfig;
use onsale_projections::{Runner, RunnerConfig};
use sqlx::PgPool;
use tokio::task::JoinHandle;

pub use api::{router, PaymentsDoc, PaymentsState};
pub use client::ProcessorClient;
pub use intake::PaymentIntake;
pub use tickets::TicketIssuer;
pub use worker::Worker;

#[derive(Debug, Clone, clap::Args)]
pub struct PaymentsConfig {
    /// The card processor (the local stack's simulator by default).
    #[arg(
        long,
        env = "ONSALE_PROCESSOR_URL",
        default_value = "http://127.0.0.1:8090"
    )]
    pub processor_url: String,
    /// The secret the processor signs its webhooks with.
    #[arg(
        long,
        env = "ONSALE_WEBHOOK_SECRET",
        default_value = "onsale-dev-webhook-secret"
    )]
    pub webhook_secret: String,
    /// A processor call not answered in this long is "unknown" (never "failed").
    #[arg(long, env = "ONSALE_CHARGE_TIMEOUT_MS", default_value_t = 2_000)]
    pub charge_timeout_ms: u64,
    /// The ambiguity bound: an order unresolved this long after it was placed is failed (its
    /// seats go back) and its charge voided.
    #[arg(long, env = "ONSALE_MAX_PENDING_SECS", default_value_t = 180)]
    pub max_pending_secs: u64,
    /// How often the worker looks for due work.
    #[arg(long, env = "ONSALE_PAYMENT_POLL_MS", default_value_t = 200)]
    pub poll_ms: u64,
    /// Most payments (and refunds) in flight at once.
    #[arg(long, env = "ONSALE_PAYMENT_BATCH", default_value_t = 256)]
    pub batch: usize,
    /// How often today's (and yesterday's) settlement is reconciled.
    #[arg(long, env = "ONSALE_RECONCILE_EVERY_SECS", default_value_t = 900)]
    pub reconcile_every_secs: u64,
    /// How often the invariant is checked.
    #[arg(long, env = "ONSALE_MONITOR_EVERY_SECS", default_value_t = 10)]
    pub monitor_every_secs: u64,
}

impl Default for PaymentsConfig {
    fn default() -> Self {
        Self {
            processor_url: "http://127.0.0.1:8090".into(),
            webhook_secret: "onsale-dev-webhook-secret".into(),
            charge_timeout_ms: 2_000,
            max_pending_secs: 180,
            poll_ms: 200,
            batch: 256,
            reconcile_every_secs: 900,
            monitor_every_secs: 10,
        }
    }
}

/// Serves this crate's routes from `app` (one base URL) and adds them to its OpenAPI document.
pub fn mount(app: &mut onsale_command::App, pool: PgPool, config: &PaymentsConfig) {
    use utoipa::OpenApi;
    app.add_routes(router(PaymentsState {
        shows: app.state.shows.clone(),
        pool,
        decoding_key: app.state.decoding_key.clone(),
        webhook_secret: config.webhook_secret.clone(),
    }));
    let mut doc = app.state.openapi.as_ref().clone();
    doc.merge(PaymentsDoc::openapi());
    app.state.openapi = std::sync::Arc::new(doc);
}

/// The log consumers that feed payments and tickets; abort a handle to kill one.
pub fn spawn_consumers(
    pool: PgPool,
    kafka: KafkaConfig,
    runner: RunnerConfig,
) -> Vec<JoinHandle<()>> {
    let forever = std::future::pending::<()>;
    vec![
        tokio::spawn(
            Runner::new(
                pool.clone(),
                PaymentIntake::default(),
                kafka.clone(),
                runner.clone(),
            )
            .run(forever()),
        ),
        tokio::spawn(Runner::new(pool, TicketIssuer::default(), kafka, runner).run(forever())),
    ]
}

/// The payment worker, as a task; abort the handle to kill it mid-call.
pub fn spawn_worker(
    pool: PgPool,
    shows: Shows,
    config: PaymentsConfig,
) -> anyhow::Result<JoinHandle<()>> {
    let worker = Worker::new(pool, shows, config)?;
    Ok(tokio::spawn(worker.run()))
}

/// The scheduled jobs: settlement reconciliation of yesterday and today, and the invariant
/// monitor. Failures are logged and retried on the next turn.
pub fn spawn_jobs(
    pool: PgPool,
    shows: Shows,
    config: PaymentsConfig,
) -> anyhow::Result<JoinHandle<()>> {
    let client = ProcessorClient::new(&config.processor_url, Duration::from_secs(10))?;
    Ok(tokio::spawn(async move {
        let mut reconcile_tick =
            tokio::time::interval(Duration::from_secs(config.reconcile_every_secs.max(1)));
        let mut monitor_tick =
            tokio::time::interval(Duration::from_secs(config.monitor_every_secs.max(1)));
        loop {
            tokio::select! {
                _ = reconcile_tick.tick() => {
                    let today = chrono::Utc::now().date_naive();
                    for day in [today - chrono::Duration::days(1), today] {
                        if let Err(e) = reconcile::reconcile(&pool, &shows, &client, day).await {
                            tracing::warn!(error = %format!("{e:#}"), %day, "reconciliation failed");
                        }
                    }
                }
                _ = monitor_tick.tick() => {
                    if let Err(e) = monitor::check(&pool).await {
                        tracing::warn!(error = %format!("{e:#}"), "invariant check failed");
                    }
                }
            }
        }
    }))
}
