//! The parts a process can run, and what each one's tasks are built from.

use std::sync::Arc;
use std::time::Duration;

use onsale_command::Shows;
use onsale_edge::admission::BookingHealth;
use onsale_eventlog::{EventLog, PgEventLog, ShardedLog};
use onsale_kafka::{leader, Relay};
use onsale_waiting_room::WaitingRoom;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{audit, Settings};

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

/// What a part's tasks are built from: everything it needs, cloneable, so that its
/// supervisor can build them again.
#[derive(Clone)]
pub(crate) struct PartCtx {
    pub(crate) settings: Arc<Settings>,
    pub(crate) pool: PgPool,
    /// Each shard's pool of background work (its relay's).
    pub(crate) shard_pools: Vec<PgPool>,
    /// Every shard's log through those pools: where the consumers fill gaps from.
    pub(crate) log: Arc<dyn EventLog>,
    /// Every shard's database through those pools: payments, refunds and tickets.
    pub(crate) stores: Arc<ShardedLog<PgEventLog>>,
    pub(crate) shows: Shows,
    pub(crate) room: Option<WaitingRoom>,
    pub(crate) health: Arc<BookingHealth>,
    pub(crate) stop: CancellationToken,
}

impl PartCtx {
    pub(crate) async fn spawn(&self, part: Part) -> anyhow::Result<Vec<JoinHandle<()>>> {
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
            Part::Jobs => self.jobs()?,
            Part::Admitter => self.admitter(),
            Part::Relay => self.relays().await?,
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

    /// Reconciliation and the invariant monitor, and the log's heads signed at intervals
    /// (issue 53, item 6) when checkpoints are configured: each by one process among all.
    fn jobs(&self) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let s = &self.settings;
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
            self.stop.clone(),
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
        if let Some((dir, key)) = s.checkpoints.configured() {
            let (database, every) = (
                s.database.clone(),
                Duration::from_secs(s.checkpoints.every_secs),
            );
            jobs.push(tokio::spawn(leader::lead(
                self.pool.clone(),
                leader::keys::CHECKPOINTS,
                "checkpoints",
                self.stop.clone(),
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
        Ok(jobs)
    }

    /// The waiting room's admitter, when there is a waiting room: its controller's store
    /// signal is the write path's own pool, its processor signal the payments' books.
    fn admitter(&self) -> Vec<JoinHandle<()>> {
        let Some(room) = &self.room else {
            return Vec::new();
        };
        let log = self.shows.log().clone();
        let probe: onsale_edge::admission::WriteProbe = Arc::new(move || {
            let log = log.clone();
            Box::pin(async move { log.ping().await.is_ok() })
        });
        let stores = self.stores.clone();
        let processor: onsale_edge::admission::ProcessorProbe = Arc::new(move || {
            let stores = stores.clone();
            Box::pin(async move { !onsale_payments_store::work::processor_failing(&stores).await })
        });
        room.spawn_admitter(self.health.clone(), probe, processor)
    }

    /// One relay per shard, each with its shard's slot (docs/adr/021); exactly one relay of
    /// each shard publishes, the others are hot standbys.
    async fn relays(&self) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let s = &self.settings;
        let mut relays = Vec::new();
        for (shard, pool) in (1u16..).zip(&self.shard_pools) {
            let config = s.relay.for_shard(shard);
            let relay = Arc::new(Relay::start(pool.clone(), s.kafka.clone(), config).await?);
            relays.push(tokio::spawn(leader::lead(
                pool.clone(),
                leader::keys::RELAY,
                "relay",
                self.stop.clone(),
                move |term| {
                    let relay = relay.clone();
                    async move { relay.run(term.cancelled_owned()).await }
                },
            )));
        }
        Ok(relays)
    }
}
