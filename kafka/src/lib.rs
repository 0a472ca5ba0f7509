//! The CDC relay: every committed row of the `events` table, read through a PostgreSQL logical
//! replication slot (streamed with pgoutput), published to Kafka in a Debezium-style envelope, keyed by the
//! aggregate id so one show's events stay in one partition, in commit order.
//!
//! At least once: the slot is advanced only past transactions whose every message the broker
//! acknowledged, so a crash of the relay, the broker or PostgreSQL re-sends rather than loses.
//! Consumers deduplicate on (aggregate id, sequence). The broker's data is not the source of
//! truth: [`relay::Relay::backfill`] republishes from the events table.
//!
//! The code is plain rdkafka on the Kafka protocol: Apache Kafka, Redpanda or a managed cluster
//! is a matter of `--brokers`.

pub mod backoff;
pub mod envelope;
pub mod leader;
pub mod pgoutput;
pub mod relay;
pub mod topics;

pub use backoff::Backoff;
pub use envelope::{Envelope, EventRow, Source};
pub use relay::{Relay, RelayConfig};
pub use topics::{KafkaConfig, Misconfigured};
