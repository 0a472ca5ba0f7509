//! Broker settings shared by the relay and the projections, and topic creation.

use std::time::Duration;

use anyhow::Context;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;

#[derive(Debug, Clone, clap::Args)]
pub struct KafkaConfig {
    /// Kafka bootstrap servers.
    #[arg(
        long = "brokers",
        env = "ONSALE_KAFKA_BROKERS",
        default_value = "127.0.0.1:19092"
    )]
    pub brokers: String,
    /// The topic the relay publishes the event log to.
    #[arg(
        long = "events-topic",
        env = "ONSALE_EVENTS_TOPIC",
        default_value = "onsale.events"
    )]
    pub events_topic: String,
    /// Partitions of the events topic when the relay creates it.
    #[arg(
        long = "partitions",
        env = "ONSALE_EVENTS_PARTITIONS",
        default_value_t = 6
    )]
    pub partitions: i32,
    /// Replication factor when the relay creates it (3 on a real cluster).
    #[arg(
        long = "replication",
        env = "ONSALE_EVENTS_REPLICATION",
        default_value_t = 1
    )]
    pub replication: i32,
}

impl KafkaConfig {
    pub fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers)
            .set("socket.keepalive.enable", "true")
            .set("reconnect.backoff.max.ms", "1000");
        c
    }

    /// Creates the events topic unless it exists; a broker that is starting (or restarting) is
    /// given 30 s to answer. Returns the topic's partition count.
    pub async fn ensure_topic(&self) -> anyhow::Result<i32> {
        let mut backoff = crate::Backoff::new(Duration::from_millis(200));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match self.create_topic().await {
                Ok(n) => return Ok(n),
                Err(e) if std::time::Instant::now() < deadline => {
                    tracing::warn!(error = %format!("{e:#}"), "topic not created yet; retrying");
                    backoff.wait().await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn create_topic(&self) -> anyhow::Result<i32> {
        let admin: AdminClient<DefaultClientContext> =
            self.client().create().context("kafka admin client")?;
        let topic = NewTopic::new(
            &self.events_topic,
            self.partitions,
            TopicReplication::Fixed(self.replication),
        );
        let opts = AdminOptions::new()
            .operation_timeout(Some(Duration::from_secs(5)))
            .request_timeout(Some(Duration::from_secs(5)));
        let results = admin
            .create_topics([&topic], &opts)
            .await
            .context("create topic")?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, e)) => anyhow::bail!("create topic {t}: {e}"),
            }
        }
        // Only hand the topic to producers and consumers once every partition has a leader:
        // fetching from a topic the broker is still creating is where librdkafka 2.12 met
        // tansu's zero topic ids and crashed (ADR 005).
        let topic = self.events_topic.clone();
        let partitions = self.partitions.max(1) as usize;
        tokio::task::spawn_blocking(move || -> anyhow::Result<i32> {
            for _ in 0..50 {
                let md = admin
                    .inner()
                    .fetch_metadata(Some(&topic), Duration::from_secs(2))?;
                let ready = md.topics().iter().find(|t| {
                    t.name() == topic
                        && t.error().is_none()
                        && t.partitions().len() >= partitions
                        && t.partitions()
                            .iter()
                            .all(|p| p.leader() >= 0 && p.error().is_none())
                });
                if let Some(t) = ready {
                    return Ok(t.partitions().len() as i32);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            anyhow::bail!("topic {topic} has no leader for every partition")
        })
        .await?
    }
}
