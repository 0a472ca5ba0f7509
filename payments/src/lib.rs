//! Payments after the commit, and what follows from them: the payment worker ([`worker`]), the
//! processor's webhooks and the ticket and cancellation routes ([`api`]), settlement
//! reconciliation ([`reconcile`]), the tickets the log asks for ([`tickets`]) and the invariant
//! monitor ([`monitor`]). What they keep (the work lists, tickets, deliveries, reports) is the
//! payments' store's (`onsale_payments_store`), which the query side reads too.
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

use std::sync::Arc;
use std::time::Duration;

use onsale_command::Shows;
use onsale_kafka::KafkaConfig;
use onsale_projections::{Runner, RunnerConfig};
use secrecy::{ExposeSecret, SecretString};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use api::{router, PaymentsDoc, PaymentsState};
pub use client::{Processor, ProcessorClient};
pub use intake::PaymentIntake;
use onsale_payments_store::Shards;
pub use tickets::TicketIssuer;
pub use worker::Worker;

/// How long a back-office call to the processor may take (no fan waits on one).
pub const BACK_OFFICE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, clap::Args)]
pub struct PaymentsConfig {
    /// The card processor (the local stack's simulator by default).
    #[arg(
        id = "processor_url",
        long = "processor-url",
        env = "ONSALE_PROCESSOR_URL",
        default_value = "http://127.0.0.1:8090"
    )]
    pub processor_url: String,
    /// The secret the processor signs its webhooks with: at least 32 bytes (required unless
    /// development mode is on).
    #[arg(
        id = "webhook_secret",
        long = "webhook-secret",
        env = "ONSALE_WEBHOOK_SECRET",
        default_value = "",
        hide_default_value = true,
        value_parser = onsale_edge::auth::secret
    )]
    pub webhook_secret: SecretString,
    /// The secret the processor signed its webhooks with before the current one: accepted
    /// beside it during a rollover (set it to the old secret, the new one above, until the
    /// processor signs with the new one only; then unset it).
    #[arg(
        id = "webhook_secret_previous",
        long = "webhook-secret-previous",
        env = "ONSALE_WEBHOOK_SECRET_PREVIOUS",
        default_value = "",
        hide_default_value = true,
        value_parser = onsale_edge::auth::secret
    )]
    pub webhook_secret_previous: SecretString,
    /// A processor call not answered in this long is "unknown" (never "failed").
    #[arg(
        id = "charge_timeout_ms",
        long = "charge-timeout-ms",
        env = "ONSALE_CHARGE_TIMEOUT_MS",
        default_value_t = 2_000
    )]
    pub charge_timeout_ms: u64,
    /// The ambiguity bound: an order unresolved this long after it was placed is failed (its
    /// seats go back) and its charge voided.
    #[arg(
        id = "max_pending_secs",
        long = "max-pending-secs",
        env = "ONSALE_MAX_PENDING_SECS",
        default_value_t = 180
    )]
    pub max_pending_secs: u64,
    /// How often the worker looks for due work.
    #[arg(
        id = "payment_poll_ms",
        long = "payment-poll-ms",
        env = "ONSALE_PAYMENT_POLL_MS",
        default_value_t = 200
    )]
    pub poll_ms: u64,
    /// Most payments (and refunds) in flight at once.
    #[arg(
        id = "payment_batch",
        long = "payment-batch",
        env = "ONSALE_PAYMENT_BATCH",
        default_value_t = 256
    )]
    pub batch: usize,
    /// How often today's (and yesterday's) settlement is reconciled.
    #[arg(
        id = "reconcile_every_secs",
        long = "reconcile-every-secs",
        env = "ONSALE_RECONCILE_EVERY_SECS",
        default_value_t = 900
    )]
    pub reconcile_every_secs: u64,
    /// How often the invariant is checked.
    #[arg(
        id = "monitor_every_secs",
        long = "monitor-every-secs",
        env = "ONSALE_MONITOR_EVERY_SECS",
        default_value_t = 10
    )]
    pub monitor_every_secs: u64,
}

impl PaymentsConfig {
    /// The processor at `processor_url` over HTTP, every call bounded by `timeout`.
    pub fn processor(&self, timeout: Duration) -> anyhow::Result<Arc<dyn Processor>> {
        Ok(Arc::new(ProcessorClient::new(
            &self.processor_url,
            timeout,
            [&self.webhook_secret, &self.webhook_secret_previous]
                .into_iter()
                .filter(|s| !s.expose_secret().is_empty())
                .cloned()
                .collect(),
        )?))
    }

    /// The processor as the worker calls it: past `charge_timeout_ms` an answer is unknown.
    pub fn worker_processor(&self) -> anyhow::Result<Arc<dyn Processor>> {
        self.processor(Duration::from_millis(self.charge_timeout_ms))
    }

    /// The processor as the back office calls it (reconciliation, voids and refunds of a
    /// cancellation): bounded by [`BACK_OFFICE_TIMEOUT`].
    pub fn back_office_processor(&self) -> anyhow::Result<Arc<dyn Processor>> {
        self.processor(BACK_OFFICE_TIMEOUT)
    }
}

/// The log consumers that feed payments and tickets (one runner: one consumer, parse and fold
/// for both), until `shutdown` is cancelled; abort the handle to kill them where they stand.
/// Their positions are in the main database's `pool`; what they write goes to each show's shard.
pub fn spawn_consumers(
    pool: PgPool,
    log: Arc<dyn onsale_eventlog::EventLog>,
    shards: &Shards,
    kafka: KafkaConfig,
    runner: RunnerConfig,
    shutdown: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    vec![tokio::spawn(
        Runner::new(pool, log, PaymentIntake::new(shards.clone()), kafka, runner)
            .with(TicketIssuer::new(shards.clone()))
            .run(shutdown.clone().cancelled_owned()),
    )]
}

/// The payment workers, one per shard, as a task that stops after their calls in flight once
/// `shutdown` is cancelled; abort the handle to kill them mid-call.
pub fn spawn_worker(
    shards: &Shards,
    shows: Shows,
    config: PaymentsConfig,
    processor: Arc<dyn Processor>,
    shutdown: &CancellationToken,
) -> JoinHandle<()> {
    let workers: Vec<_> = shards
        .pools()
        .map(|(shard, pool)| {
            Worker::new(
                pool.clone(),
                shard,
                shows.clone(),
                config.clone(),
                processor.clone(),
            )
            .run(shutdown.clone())
        })
        .collect();
    tokio::spawn(async move {
        futures::future::join_all(workers).await;
    })
}

/// The scheduled jobs: settlement reconciliation of yesterday and today, and the invariant
/// monitor. Failures are logged and retried on the next turn.
/// How long a cancellation may stand between its two steps before the jobs finish it.
const CANCELLATION_GRACE: Duration = Duration::from_secs(5);

/// Finishes the cancellations interrupted after their tickets were revoked: `CancelOrder` is
/// recorded again (by whoever cancelled, with the admin's right, as the check passed when
/// they asked); an order that cannot be cancelled any more (it failed meanwhile) has nothing
/// left to finish. A command that fails is tried again on the next round. Answers how many
/// were finished.
pub async fn finish_cancellations(
    pool: &PgPool,
    shows: &Shows,
    grace: Duration,
) -> anyhow::Result<usize> {
    let mut finished = 0;
    for (order, show, by) in
        onsale_payments_store::tickets::unfinished_cancellations(pool, grace).await?
    {
        let (Ok(order_id), Ok(account)) = (
            order.parse::<onsale_domain::OrderId>(),
            onsale_domain::AccountId::parse(&by),
        ) else {
            tracing::error!(%order, %show, "an unfinished cancellation names no order");
            continue;
        };
        let command = onsale_domain::ShowCommand::CancelOrder {
            order_id,
            account,
            admin: true,
        };
        match shows.execute(order_id.show(), command).await {
            Ok(_)
            | Err(onsale_command::CommandError::Domain(
                onsale_domain::ShowError::NotCancellable(_)
                | onsale_domain::ShowError::OrderNotFound,
            )) => {
                onsale_payments_store::tickets::cancellation_recorded(pool, &order).await?;
                tracing::info!(%order, "interrupted cancellation finished");
                finished += 1;
            }
            Err(e) => {
                tracing::warn!(%order, error = %e, "interrupted cancellation not finished yet")
            }
        }
    }
    Ok(finished)
}

pub async fn run_jobs(
    pool: PgPool,
    shards: Shards,
    shows: Shows,
    config: PaymentsConfig,
    processor: Arc<dyn Processor>,
    shutdown: CancellationToken,
) {
    let mut reconcile_tick =
        tokio::time::interval(Duration::from_secs(config.reconcile_every_secs.max(1)));
    let mut monitor_tick =
        tokio::time::interval(Duration::from_secs(config.monitor_every_secs.max(1)));
    let mut cancellations_tick = tokio::time::interval(CANCELLATION_GRACE);
    // Each shard's work on its own: one that is down holds back none of the others'.
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = cancellations_tick.tick() => {
                for (shard, db) in shards.pools() {
                    if let Some(Err(e)) = shutdown
                        .run_until_cancelled(finish_cancellations(db, &shows, CANCELLATION_GRACE))
                        .await
                    {
                        tracing::warn!(%shard, error = %format!("{e:#}"), "unfinished cancellations not read");
                    }
                }
            }
            _ = reconcile_tick.tick() => {
                // A run cut short by shutdown is repeated whole by the next one (refunds are
                // keyed, findings recomputed), so it need not finish.
                let days = async {
                    for (shard, db) in shards.pools() {
                        if let Err(e) = onsale_command::tokens::forget_stale(db, onsale_command::tokens::KEEP).await {
                            tracing::warn!(%shard, error = %format!("{e:#}"), "stale payment tokens not swept");
                        }
                    }
                    let today = chrono::Utc::now().date_naive();
                    for day in [today - chrono::Duration::days(1), today] {
                        if let Err(e) = reconcile::reconcile(&pool, &shards, &shows, processor.as_ref(), day).await {
                            tracing::warn!(error = %format!("{e:#}"), %day, "reconciliation failed");
                        }
                    }
                };
                shutdown.run_until_cancelled(days).await;
            }
            _ = monitor_tick.tick() => {
                if let Some(Err(e)) = shutdown.run_until_cancelled(monitor::check(&pool, &shards)).await {
                    tracing::warn!(error = %format!("{e:#}"), "invariant check failed");
                }
                if let Some(Err(e)) = shutdown.run_until_cancelled(monitor::lags(&pool, &shards)).await {
                    tracing::warn!(error = %format!("{e:#}"), "lags not read");
                }
            }
        }
    }
}
