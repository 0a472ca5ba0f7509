//! The projections: Kafka consumers that fold the event log into read models in PostgreSQL.
//!
//! The four projections ([`seat_map`], [`orders`], [`history`], [`catalog`]) run in one
//! [`runner::Runner`]: one consumer of the topic, one parse of each message and one fold of each
//! show for all four (docs/adr/025). Each keeps its own positions: it applies an event at most
//! once (it skips a (show, sequence) at or below the position it stored in the same
//! transaction as its rows), it stores its topic offsets in that transaction too, and it can be
//! rebuilt from zero on its own ([`runner::reset`]); the runner tells each the events past its
//! own position.
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

/// One runner of the four read models (the seat map, orders, the seat history, the catalog),
/// its batches committed asynchronously ([`Runner::commit_asynchronously`]).
pub fn read_models(
    pool: sqlx::PgPool,
    log: std::sync::Arc<dyn onsale_eventlog::EventLog>,
    kafka: onsale_kafka::KafkaConfig,
    config: RunnerConfig,
) -> Runner {
    Runner::new(pool, log, SeatMap::default(), kafka, config)
        .with(Orders::default())
        .with(SeatHistory::default())
        .with(Catalog::default())
        .commit_asynchronously()
}

/// The four projections, in one runner until `shutdown` is cancelled; abort the handle to kill
/// them where they stand.
pub fn spawn_all(
    pool: sqlx::PgPool,
    log: std::sync::Arc<dyn onsale_eventlog::EventLog>,
    kafka: onsale_kafka::KafkaConfig,
    config: RunnerConfig,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    vec![tokio::spawn(
        read_models(pool, log, kafka, config).run(shutdown.clone().cancelled_owned()),
    )]
}

/// Deletes all four read models and their positions: they rebuild from zero when next run.
pub async fn reset_all(pool: &sqlx::PgPool) -> anyhow::Result<()> {
    reset::<SeatMap>(pool).await?;
    reset::<Orders>(pool).await?;
    reset::<SeatHistory>(pool).await?;
    reset::<Catalog>(pool).await
}
