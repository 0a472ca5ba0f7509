//! Broker settings shared by the relay and the projections; the events topic is created with
//! the configuration of the analysts' log, and an existing one is checked against it.

use std::time::Duration;

use anyhow::Context;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
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
    /// Replication factor when the relay creates it (3 on a cluster; `min.insync.replicas` is
    /// then 2).
    #[arg(
        long = "replication",
        env = "ONSALE_EVENTS_REPLICATION",
        default_value_t = 1
    )]
    pub replication: i32,
    /// How the brokers are reached: `plaintext`, or `sasl_ssl` (TLS, and SASL/SCRAM-SHA-512
    /// with the user below: issue 53 item 7, `make up SECURE=1`).
    #[arg(
        long = "kafka-security-protocol",
        env = "ONSALE_KAFKA_SECURITY_PROTOCOL",
        value_enum,
        default_value_t = SecurityProtocol::Plaintext
    )]
    pub security_protocol: SecurityProtocol,
    /// The SCRAM user this process logs in to the brokers as.
    #[arg(long = "kafka-sasl-username", env = "ONSALE_KAFKA_SASL_USERNAME")]
    pub sasl_username: Option<String>,
    /// Its password.
    #[arg(
        long = "kafka-sasl-password",
        env = "ONSALE_KAFKA_SASL_PASSWORD",
        hide_env_values = true
    )]
    pub sasl_password: Option<secrecy::SecretString>,
    /// The CA (a PEM file) the brokers' certificates must chain to; unset: the system's roots.
    #[arg(long = "kafka-ca-file", env = "ONSALE_KAFKA_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,
}

/// How a client reaches the brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SecurityProtocol {
    /// In the clear, unauthenticated: one machine's loopback, or a network of its own.
    Plaintext,
    /// TLS (the broker's certificate verified, its host name included) and SASL/SCRAM-SHA-512.
    #[value(name = "sasl_ssl")]
    SaslSsl,
}

impl KafkaConfig {
    /// Brokers reached in the clear, and the events topic with `partitions` and
    /// `replication` when onsale creates it.
    pub fn plaintext(brokers: &str, events_topic: &str, partitions: i32, replication: i32) -> Self {
        Self {
            brokers: brokers.into(),
            events_topic: events_topic.into(),
            partitions,
            replication,
            security_protocol: SecurityProtocol::Plaintext,
            sasl_username: None,
            sasl_password: None,
            ca_file: None,
        }
    }

    /// The settings every client of the brokers starts from (the relay's producer, the
    /// projections' consumers, the topic's administration).
    pub fn client(&self) -> ClientConfig {
        use secrecy::ExposeSecret;
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers)
            .set("socket.keepalive.enable", "true")
            .set("reconnect.backoff.max.ms", "1000");
        if self.security_protocol == SecurityProtocol::SaslSsl {
            c.set("security.protocol", "sasl_ssl")
                .set("sasl.mechanisms", "SCRAM-SHA-512")
                .set("ssl.endpoint.identification.algorithm", "https");
            if let Some(user) = &self.sasl_username {
                c.set("sasl.username", user);
            }
            if let Some(password) = &self.sasl_password {
                c.set("sasl.password", password.expose_secret());
            }
            if let Some(ca) = &self.ca_file {
                c.set("ssl.ca.location", ca.to_string_lossy());
            }
        }
        c
    }

    /// Settings that contradict each other: SASL without a user or password, or credentials
    /// or a CA given for a plaintext connection (the operator asked for what they would not
    /// get).
    pub fn check(&self) -> anyhow::Result<()> {
        match self.security_protocol {
            SecurityProtocol::SaslSsl => anyhow::ensure!(
                self.sasl_username.is_some() && self.sasl_password.is_some(),
                "ONSALE_KAFKA_SECURITY_PROTOCOL=sasl_ssl needs ONSALE_KAFKA_SASL_USERNAME and \
                 ONSALE_KAFKA_SASL_PASSWORD"
            ),
            SecurityProtocol::Plaintext => anyhow::ensure!(
                self.sasl_username.is_none()
                    && self.sasl_password.is_none()
                    && self.ca_file.is_none(),
                "Kafka credentials or a CA file are set but ONSALE_KAFKA_SECURITY_PROTOCOL is \
                 plaintext: set it to sasl_ssl"
            ),
        }
        Ok(())
    }

    /// The topic configuration onsale creates the events topic with and requires of an
    /// existing one: the whole history kept (no time or size retention, never compacted), and
    /// no acknowledged message lost to a leader change (`min.insync.replicas` of 2 with three
    /// replicas, unclean leader election off).
    pub fn topic_configs(&self) -> Vec<(&'static str, String)> {
        let min_isr = if self.replication >= 3 { 2 } else { 1 };
        vec![
            ("cleanup.policy", "delete".into()),
            ("retention.ms", "-1".into()),
            ("retention.bytes", "-1".into()),
            ("min.insync.replicas", min_isr.to_string()),
            ("unclean.leader.election.enable", "false".into()),
        ]
    }

    /// Creates the events topic unless it exists, and checks an existing one against
    /// [`KafkaConfig::topic_configs`] and the replication factor; a broker that is starting (or
    /// restarting) is given 30 s to answer. A topic configured otherwise is an error at once
    /// ([`Misconfigured`]), not retried. Returns the topic's partition count.
    pub async fn ensure_topic(&self) -> anyhow::Result<i32> {
        let mut backoff = crate::Backoff::new(Duration::from_millis(200));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match self.create_topic().await {
                Ok(n) => return Ok(n),
                Err(e) if e.is::<Misconfigured>() => return Err(e),
                Err(e) if std::time::Instant::now() < deadline => {
                    tracing::warn!(error = %format!("{e:#}"), "topic not created yet; retrying");
                    backoff.wait().await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// What differs between the existing topic and what onsale requires of it.
    async fn check_topic(
        &self,
        admin: &AdminClient<DefaultClientContext>,
        opts: &AdminOptions,
        replicas: usize,
    ) -> anyhow::Result<()> {
        // A topic another process has just created may be described with no configuration
        // at all by a broker its metadata has not reached yet (a topic that exists always has
        // entries, defaults included): asked again, boundedly, before anything is judged.
        let mut attempts = 0;
        let resource = loop {
            let described = admin
                .describe_configs([&ResourceSpecifier::Topic(&self.events_topic)], opts)
                .await
                .context("describe the events topic")?;
            let resource = described
                .into_iter()
                .next()
                .context("no description of the events topic")?
                .map_err(|e| anyhow::anyhow!("describe the events topic: {e}"))?;
            attempts += 1;
            if !resource.entries.is_empty() || attempts >= 50 {
                break resource;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let mut wrong = Vec::new();
        for (name, want) in self.topic_configs() {
            let have = resource.get(name).and_then(|e| e.value.clone());
            if have.as_deref() != Some(want.as_str()) {
                wrong.push(format!(
                    "{name} is {} (onsale needs {want})",
                    have.as_deref().unwrap_or("unset")
                ));
            }
        }
        if replicas < self.replication as usize {
            wrong.push(format!(
                "replication factor is {replicas} (onsale needs at least {})",
                self.replication
            ));
        }
        if wrong.is_empty() {
            return Ok(());
        }
        Err(Misconfigured {
            topic: self.events_topic.clone(),
            wrong,
        }
        .into())
    }

    async fn create_topic(&self) -> anyhow::Result<i32> {
        let admin: AdminClient<DefaultClientContext> =
            self.client().create().context("kafka admin client")?;
        let configs = self.topic_configs();
        let mut topic = NewTopic::new(
            &self.events_topic,
            self.partitions,
            TopicReplication::Fixed(self.replication),
        );
        for (name, value) in &configs {
            topic = topic.set(name, value);
        }
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
        // Hand the topic out once every partition has a leader: metadata of a topic just
        // created reaches the brokers asynchronously, and the first produce would fail.
        let topic = self.events_topic.clone();
        let partitions = self.partitions.max(1) as usize;
        let (partitions, replicas, admin) =
            tokio::task::spawn_blocking(move || -> anyhow::Result<(i32, usize, _)> {
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
                        let replicas = t
                            .partitions()
                            .iter()
                            .map(|p| p.replicas().len())
                            .min()
                            .unwrap_or(0);
                        return Ok((t.partitions().len() as i32, replicas, admin));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                anyhow::bail!("topic {topic} has no leader for every partition")
            })
            .await??;
        self.check_topic(&admin, &opts, replicas).await?;
        Ok(partitions)
    }
}

/// The events topic exists with a configuration that would lose history or acknowledged
/// messages: onsale refuses to use it (an operator fixes it with `kafka-configs --alter`).
#[derive(Debug)]
pub struct Misconfigured {
    pub topic: String,
    pub wrong: Vec<String>,
}

impl std::fmt::Display for Misconfigured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the topic {} is configured otherwise than onsale requires: {}",
            self.topic,
            self.wrong.join("; ")
        )
    }
}

impl std::error::Error for Misconfigured {}
