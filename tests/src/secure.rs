//! The test run's secure pair (issue 53 item 7): a Kafka broker that takes only TLS with a
//! SCRAM user and authorizes every request by its ACLs, and a Redis that takes only TLS with a
//! password, both started by `make test` (`scripts/stack.sh secure-up`, which writes what a
//! client needs into `$ONSALE_TEST_SECURE_DIR/client.env`).

use std::collections::HashMap;
use std::path::PathBuf;

use onsale_kafka::topics::SecurityProtocol;
use onsale_kafka::KafkaConfig;

/// The Kafka users of the secure broker: the relay's may write the events topics and not read
/// them, the node's may read them and not write; the admin is a super user.
pub const RELAY_USER: &str = "onsale-relay";
pub const NODE_USER: &str = "onsale-node";
pub const ADMIN_USER: &str = "admin";

/// What a client of the secure pair needs.
#[derive(Debug, Clone)]
pub struct Secure {
    pub brokers: String,
    pub ca_file: PathBuf,
    passwords: HashMap<&'static str, String>,
    redis_url: String,
}

impl Secure {
    /// The pair `make test` started.
    pub fn of_the_run() -> Self {
        let dir = std::env::var("ONSALE_TEST_SECURE_DIR")
            .expect("ONSALE_TEST_SECURE_DIR is not set: run the tests with `make test`");
        let text = std::fs::read_to_string(format!("{dir}/client.env"))
            .expect("the secure pair's client.env");
        let vars: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        let var = |k: &str| -> String { vars.get(k).expect(k).to_string() };
        Self {
            brokers: var("KAFKA_BROKERS"),
            ca_file: var("KAFKA_CA_FILE").into(),
            passwords: HashMap::from([
                (RELAY_USER, var("KAFKA_RELAY_PASSWORD")),
                (NODE_USER, var("KAFKA_NODE_PASSWORD")),
                (ADMIN_USER, var("KAFKA_ADMIN_PASSWORD")),
            ]),
            redis_url: var("REDIS_URL"),
        }
    }

    /// The password of Kafka user `user`.
    pub fn password(&self, user: &str) -> &str {
        &self.passwords[user]
    }

    /// `kafka` (a test's topic) on the secure broker as `user`.
    pub fn kafka(&self, mut kafka: KafkaConfig, user: &str) -> KafkaConfig {
        kafka.brokers = self.brokers.clone();
        kafka.security_protocol = SecurityProtocol::SaslSsl;
        kafka.sasl_username = Some(user.to_owned());
        kafka.sasl_password = Some(self.password(user).to_owned().into());
        kafka.ca_file = Some(self.ca_file.clone());
        kafka
    }

    /// The `ONSALE_KAFKA_*` variables of a process logging in to the secure broker as `user`.
    pub fn kafka_env(&self, user: &str) -> Vec<(&'static str, String)> {
        vec![
            ("ONSALE_KAFKA_BROKERS", self.brokers.clone()),
            ("ONSALE_KAFKA_SECURITY_PROTOCOL", "sasl_ssl".into()),
            ("ONSALE_KAFKA_SASL_USERNAME", user.into()),
            ("ONSALE_KAFKA_SASL_PASSWORD", self.password(user).into()),
            ("ONSALE_KAFKA_CA_FILE", self.ca_file.display().to_string()),
        ]
    }

    /// A database of the secure Redis of the test's own (1-15 in turn, emptied), as
    /// `rediss://` with its user and password.
    pub async fn redis_url(&self) -> anyhow::Result<String> {
        crate::waiting_room::redis_db(&self.redis_url, Some(&self.ca_file)).await
    }
}
