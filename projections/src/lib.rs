//! The projections: Kafka consumers that fold the event log into read models in PostgreSQL.
//!
//! Each projection ([`seat_map`], [`orders`], [`history`], [`catalog`]) runs in its own [`runner::Runner`]
//! with its own consumer and its own positions: it applies an event at most once (it skips a
//! (show, sequence) at or below the position it stored in the same transaction as its rows), it
//! stores its topic offsets in that transaction too (no consumer group: it reads every
//! partition itself), and it can be rebuilt from zero ([`runner::reset`]).
//!
//! Kafka is the low-latency path, not the truth: a gap in a show's sequences (a broker that lost
//! its data, a relay that re-sent out of order) is filled from the `events` table, as is a show
//! that stops advancing while the table has more, and a fresh or rebuilt projection catches up
//! from the table before it consumes (docs/adr/005).

pub mod catalog;
pub mod checks;
pub mod fold;
pub mod history;
pub mod orders;
pub mod runner;
pub mod seat_map;

pub use catalog::Catalog;
pub use fold::{EventCtx, LogEvent};
pub use history::SeatHistory;
pub use orders::Orders;
pub use runner::{reset, Projection, Runner, RunnerConfig};
pub use seat_map::SeatMap;

/// The four projections, each running until `shutdown` is cancelled; abort a handle to kill
/// its projection where it stands.
pub fn spawn_all(
    pool: sqlx::PgPool,
    log: std::sync::Arc<dyn onsale_eventlog::EventLog>,
    kafka: onsale_kafka::KafkaConfig,
    config: RunnerConfig,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    vec![
        tokio::spawn(
            Runner::new(
                pool.clone(),
                log.clone(),
                SeatMap::default(),
                kafka.clone(),
                config.clone(),
            )
            .run(shutdown.clone().cancelled_owned()),
        ),
        tokio::spawn(
            Runner::new(
                pool.clone(),
                log.clone(),
                Orders::default(),
                kafka.clone(),
                config.clone(),
            )
            .run(shutdown.clone().cancelled_owned()),
        ),
        tokio::spawn(
            Runner::new(
                pool.clone(),
                log.clone(),
                SeatHistory::default(),
                kafka.clone(),
                config.clone(),
            )
            .run(shutdown.clone().cancelled_owned()),
        ),
        tokio::spawn(
            Runner::new(pool, log, Catalog::default(), kafka, config)
                .run(shutdown.clone().cancelled_owned()),
        ),
    ]
}

/// Deletes all four read models and their positions: they rebuild from zero when next run.
pub async fn reset_all(pool: &sqlx::PgPool) -> anyhow::Result<()> {
    reset::<SeatMap>(pool).await?;
    reset::<Orders>(pool).await?;
    reset::<SeatHistory>(pool).await?;
    reset::<Catalog>(pool).await
}
