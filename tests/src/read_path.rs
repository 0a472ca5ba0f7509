//! The whole read path for a test: the command API with the query side mounted, gRPC on its
//! own port, the CDC relay (its own slot and topic) and the four projections, on the real
//! PostgreSQL and the real broker `make test` started. Each part can be killed and restarted.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use onsale_domain::SystemClock;
use onsale_kafka::{KafkaConfig, RelayConfig};
use onsale_projections::RunnerConfig;
use onsale_query::QueryState;
use onsale_server::{Part, Settings};
use serde_json::Value;

use crate::{settings, TestApp, TestDb};

/// An Apache Kafka cluster of the test's own (for tests that kill brokers), formatted, started
/// and killed by the project's `scripts/stack.sh`: the operator's drill.
#[derive(Debug)]
pub struct KafkaCluster {
    /// Client port of broker 1; broker i listens on `port + i - 1`.
    pub port: u16,
    pub brokers: u16,
    dir: std::path::PathBuf,
}

impl KafkaCluster {
    /// Formats and starts `brokers` brokers (a KRaft quorum of as many voters).
    pub async fn start(brokers: u16) -> anyhow::Result<Self> {
        let port = free_port_range(brokers)?;
        // Under the run's directory, so `make test` reaps what a killed test binary left.
        let dir = std::env::var_os("ONSALE_TEST_DIR")
            .map_or_else(std::env::temp_dir, std::path::PathBuf::from)
            .join(format!("kafka-{}", uuid::Uuid::new_v4().simple()));
        let me = Self { port, brokers, dir };
        me.script(&["broker-up", &port.to_string(), &brokers.to_string()])
            .await?;
        Ok(me)
    }

    /// The bootstrap list of every broker.
    pub fn bootstrap(&self) -> String {
        (0..self.brokers)
            .map(|i| format!("127.0.0.1:{}", self.port + i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// SIGKILL of broker `i` (1-based).
    pub async fn kill(&self, i: u16) -> anyhow::Result<()> {
        self.script(&["broker-kill", &i.to_string()]).await
    }

    /// Starts broker `i` again, its data kept; returns once it serves.
    pub async fn start_broker(&self, i: u16) -> anyhow::Result<()> {
        self.script(&["broker-start", &i.to_string()]).await
    }

    /// Starts every broker that is down (a majority of the quorum must be up before any of
    /// them serves), then waits for all.
    pub async fn start_all(&self) -> anyhow::Result<()> {
        for i in 1..=self.brokers {
            self.script(&["broker-start", &i.to_string(), "nowait"])
                .await?;
        }
        for i in 1..=self.brokers {
            self.script(&["broker-wait", &i.to_string()]).await?;
        }
        Ok(())
    }

    async fn script(&self, args: &[&str]) -> anyhow::Result<()> {
        let dir = self.dir.to_string_lossy();
        let mut all = vec![args[0], &dir];
        all.extend_from_slice(&args[1..]);
        stack_sh_async(&all).await
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        let _ = stack_sh(&["broker-down", &self.dir.to_string_lossy()]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port `p` with `p..p+n` (clients) and `p+50..p+50+n` (controllers) all free.
fn free_port_range(n: u16) -> anyhow::Result<u16> {
    let offsets: Vec<u16> = (0..n).flat_map(|i| [i, 50 + i]).collect();
    Ok(crate::free_ports(&offsets))
}

/// The shared broker of the test run.
pub fn shared_brokers() -> anyhow::Result<String> {
    std::env::var("ONSALE_TEST_KAFKA_BROKERS")
        .context("ONSALE_TEST_KAFKA_BROKERS is unset: run the tests with `make test`")
}

#[derive(Debug)]
pub struct ReadPath {
    /// The process: the API, the relay and the projections (and what a caller adds).
    pub app: TestApp,
    pub grpc: String,
    pub kafka: KafkaConfig,
    pub relay_config: RelayConfig,
    pub runner: RunnerConfig,
    pub pool: sqlx::PgPool,
    pub reads: QueryState,
}

impl ReadPath {
    /// Everything, against `brokers`.
    pub async fn spawn(db: &TestDb, brokers: &str) -> anyhow::Result<Self> {
        Self::spawn_parts(db, brokers, |_| {}, &[]).await
    }

    /// The API, the relay and the projections, plus `more` parts, with `tweak` applied to the
    /// settings first.
    pub async fn spawn_parts(
        db: &TestDb,
        brokers: &str,
        tweak: impl FnOnce(&mut Settings),
        more: &[Part],
    ) -> anyhow::Result<Self> {
        let mut settings = settings(db);
        settings.kafka.brokers = brokers.to_owned();
        tweak(&mut settings);
        let parts: Vec<Part> = [Part::Api, Part::Relay, Part::Projections]
            .into_iter()
            .chain(more.iter().copied())
            .collect();
        let app = TestApp::start(settings.clone(), &parts, Arc::new(SystemClock)).await?;
        let grpc = format!(
            "http://{}",
            app.server.grpc_addr().context("the API serves gRPC")?
        );
        let reads = app
            .server
            .query
            .clone()
            .context("the API runs the query side")?;
        Ok(Self {
            pool: app.server.pool.clone(),
            app,
            grpc,
            kafka: settings.kafka,
            relay_config: settings.relay,
            runner: settings.runner,
            reads,
        })
    }

    pub async fn start_relay(&mut self) -> anyhow::Result<()> {
        self.app.server.start(Part::Relay).await
    }

    /// Kills the relay where it stands (no shutdown path runs).
    pub fn kill_relay(&mut self) {
        self.app.server.kill(Part::Relay);
    }

    pub async fn start_projections(&mut self) -> anyhow::Result<()> {
        self.app.server.start(Part::Projections).await
    }

    pub fn kill_projections(&mut self) {
        self.app.server.kill(Part::Projections);
    }

    /// Kills the projections, deletes every read model and position, and starts them again:
    /// they rebuild from zero.
    pub async fn rebuild_projections(&mut self) -> anyhow::Result<()> {
        self.kill_projections();
        onsale_projections::reset_all(&self.pool).await?;
        self.start_projections().await
    }

    /// A fresh database and the whole read path on the test run's shared broker.
    pub async fn on_shared_broker() -> anyhow::Result<(TestDb, Self)> {
        let db = TestDb::new().await?;
        let rp = Self::spawn(&db, &shared_brokers()?).await?;
        Ok((db, rp))
    }

    /// A show on sale now (as [`TestApp::on_sale_event`]), once its seat map's projection has
    /// folded it (until then the map is read as scheduled).
    pub async fn show_on_map(&self, sections: u32, rows: u32, seats: u32) -> String {
        let event = self.app.on_sale_event(sections, rows, seats, None).await;
        crate::wait_for(
            "the seat map's projection folds the show",
            std::time::Duration::from_secs(20),
            || {
                let (pool, event) = (self.pool.clone(), event.clone());
                async move {
                    sqlx::query_scalar::<_, i64>(
                        "SELECT count(*) FROM seat_map_shows WHERE show_id = $1",
                    )
                    .bind(event)
                    .fetch_one(&pool)
                    .await
                    .is_ok_and(|n| n == 1)
                }
            },
        )
        .await;
        event
    }

    /// Waits until `f` holds on the JSON at `path` (or fails after 20 s).
    pub async fn eventually(
        &self,
        path: &str,
        token: &str,
        f: impl Fn(u16, &Value) -> bool,
    ) -> Value {
        let (app, f) = (&self.app, &f);
        crate::wait_until(
            &format!("{path} never matched"),
            Duration::from_secs(20),
            Duration::from_millis(100),
            || async move {
                let (status, body) = app.get(path, token).await;
                if f(status, &body) {
                    Ok(body)
                } else {
                    Err(format!("answer {status} {body}"))
                }
            },
        )
        .await
    }

    /// Kills the projections and deletes projection `P`'s read model and positions alone.
    pub async fn reset_alone<P: onsale_projections::Projection>(&mut self) -> anyhow::Result<()> {
        self.kill_projections();
        onsale_projections::reset::<P>(&self.pool).await
    }

    /// Waits (30 s at most) until every projection's position on `event` is `head`.
    pub async fn at_head(&self, event: &str, head: i64) {
        crate::wait_for(
            "every projection at the head of the log",
            Duration::from_secs(30),
            || async {
                let done: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM projection_positions WHERE show_id = $1 AND last_sequence = $2",
                )
                .bind(event)
                .bind(head)
                .fetch_one(&self.pool)
                .await
                .expect("positions");
                done == onsale_query::health::PROJECTIONS.len() as i64
            },
        )
        .await;
    }

    /// Every projection applied each of the show's events once: positions at `head`, and as
    /// many applications as events.
    pub async fn applied_once(&self, event: &str, head: i64) {
        let positions: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT projection, last_sequence, applied FROM projection_positions WHERE show_id = $1 ORDER BY 1",
        )
        .bind(event)
        .fetch_all(&self.pool)
        .await
        .expect("positions");
        assert_eq!(positions.len(), onsale_query::health::PROJECTIONS.len());
        for (name, last, applied) in &positions {
            assert_eq!(
                (*last, *applied),
                (head, head),
                "{name} applied each event once"
            );
        }
    }

    /// The seat map says of every seat what a replay of the log says, and the catalog counts
    /// the same available seats.
    pub async fn seat_map_matches_replay(&self, event: &str) {
        let show = self.app.replay(event).await.show;
        let available: i32 =
            sqlx::query_scalar("SELECT available FROM catalog_events WHERE event_id = $1")
                .bind(event)
                .fetch_one(&self.pool)
                .await
                .expect("the show in the catalog");
        assert_eq!(
            available as usize,
            show.seats()
                .filter(|(_, s)| s.status() == onsale_domain::transitions::SeatStatus::Available)
                .count(),
            "the catalog's available seats of {event}"
        );
        let statuses: BTreeMap<String, String> = sqlx::query_as::<_, (String, String)>(
            "SELECT seat_id, status FROM seat_map_seats WHERE show_id = $1",
        )
        .bind(event)
        .fetch_all(&self.pool)
        .await
        .expect("seats")
        .into_iter()
        .collect();
        for (seat_id, seat) in show.seats() {
            assert_eq!(statuses[seat_id], seat.status().public(), "{seat_id}");
        }
    }

    /// Shuts the process down (as SIGTERM would) and drops the relay's slot (a slot left
    /// behind pins WAL).
    pub async fn stop(self) {
        let (pool, slot) = (self.pool.clone(), self.relay_config.slot.clone());
        self.app
            .server
            .shutdown()
            .await
            .expect("the read path shuts down in time");
        // The relay's walsender ends a moment after its session: the slot is dropped once
        // nothing holds it.
        let _ = crate::poll_until(
            "the relay's slot dropped",
            std::time::Duration::from_secs(10),
            std::time::Duration::from_millis(50),
            || async {
                sqlx::query(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
                      WHERE slot_name = $1",
                )
                .bind(&slot)
                .execute(&pool)
                .await
            },
        )
        .await;
    }
}

/// A PostgreSQL cluster of the test's own (for tests that restart it), started and removed by
/// the project's `scripts/stack.sh`.
#[derive(Debug)]
pub struct PrivateCluster {
    pub port: u16,
    dir: std::path::PathBuf,
}

pub(crate) const STACK_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/stack.sh");

pub(crate) fn stack_sh(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("bash").arg(STACK_SH).args(args).output()?;
    anyhow::ensure!(
        out.status.success(),
        "stack.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// [`stack_sh`] without blocking the runtime (a broker takes seconds to start).
pub(crate) async fn stack_sh_async(args: &[&str]) -> anyhow::Result<()> {
    let out = tokio::process::Command::new("bash")
        .arg(STACK_SH)
        .args(args)
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "stack.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

impl PrivateCluster {
    pub fn start() -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = std::env::temp_dir().join(format!("onsale-pg-{}", uuid::Uuid::new_v4().simple()));
        let me = Self { port, dir };
        stack_sh(&["pg-up", &me.dir.to_string_lossy(), &port.to_string()])?;
        Ok(me)
    }

    /// Its `onsale` database, as a [`TestDb`].
    pub fn db(&self) -> TestDb {
        let base = format!("postgres://onsale@127.0.0.1:{}", self.port);
        TestDb {
            url: format!("{base}/onsale"),
            admin_url: format!("{base}/postgres"),
            name: format!("private{}", self.port),
        }
    }

    /// A fast shutdown and a start: every connection is cut. Awaited, not blocking: a fast
    /// shutdown waits for each walsender's client to confirm the WAL it was sent, and an
    /// in-process relay on the test's runtime must run meanwhile to do so.
    pub async fn restart(&self) -> anyhow::Result<()> {
        stack_sh_async(&["pg-restart", &self.dir.to_string_lossy()]).await
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = stack_sh(&["pg-down", &self.dir.to_string_lossy()]);
    }
}

/// What the read models hold, minus what differs by design between two runs (delta numbering).
pub async fn read_models(pool: &sqlx::PgPool) -> Value {
    let q = |sql: &'static str| async move {
        sqlx::query_scalar::<_, Option<Value>>(sql)
            .fetch_one(pool)
            .await
            .expect("reads")
            .unwrap_or(Value::Null)
    };
    serde_json::json!({
        "seats": q("SELECT json_agg(json_build_array(show_id, section, ord, seat_id, status) ORDER BY show_id, section, ord) FROM seat_map_seats").await,
        "sections": q("SELECT json_agg(json_build_array(show_id, section, total, available, held, sold) ORDER BY show_id, section) FROM seat_map_sections").await,
        "orders": q("SELECT json_agg(o ORDER BY order_id) FROM orders_view o").await,
        // Where an entry came from (the relay's commit time and LSN, or none from the table)
        // is provenance, not content: a rebuild may take the other path.
        "history": q("SELECT json_agg(json_build_array(show_id, seat_id, sequence, at, type, hold_id, order_id, account_id, actor, detail) ORDER BY show_id, seat_id, sequence) FROM seat_history").await,
        "catalog": q("SELECT json_agg(json_build_array(event_id, name, performer, city, starts_at, min_price_cents, max_price_cents, seats, available) ORDER BY event_id) FROM catalog_events").await,
    })
}

/// Waits (bounded at 90 s) until the topic read from offset 0 holds every sequence 1..=`head`
/// of `event` (at least once; a read that fails while a cluster settles is retried).
pub async fn topic_holds_every_event(brokers: &str, topic: &str, event: &str, head: i64) {
    crate::wait_until(
        &format!("events missing from the topic (of {head})"),
        Duration::from_secs(90),
        Duration::from_millis(250),
        || async move {
            let missing: Result<Vec<i64>, String> = topic_contents(brokers, topic)
                .await
                .map(|on_topic| {
                    (1..=head)
                        .filter(|s| !on_topic.contains_key(&(event.to_owned(), *s)))
                        .collect()
                })
                .map_err(|e| format!("{e:#}"));
            match missing {
                Ok(m) if m.is_empty() => Ok(()),
                m => Err(format!(
                    "{:?}",
                    m.map(|m| (m.len(), m.into_iter().take(5).collect::<Vec<_>>()))
                )),
            }
        },
    )
    .await
}

/// How often each (show, sequence) is on the topic, read from offset 0 of every partition to
/// its end: what an analyst consuming the whole log sees. Every message must match the
/// topic's documented schema (kafka/schema/onsale.events.schema.json).
pub async fn topic_contents(
    brokers: &str,
    topic: &str,
) -> anyhow::Result<BTreeMap<(String, i64), usize>> {
    let (brokers, topic) = (brokers.to_owned(), topic.to_owned());
    let schema: Value =
        serde_json::from_str(include_str!("../../kafka/schema/onsale.events.schema.json"))?;
    let schema = jsonschema::validator_for(&schema)
        .map_err(|e| anyhow::anyhow!("the topic's schema: {e}"))?;
    tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        use rdkafka::Message;
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", "onsale-test-reader")
            .set("enable.auto.commit", "false")
            .create()?;
        let md = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
        let t = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .context("no such topic")?;
        let mut ends = std::collections::HashMap::new();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in t.partitions() {
            let (_, high) = consumer.fetch_watermarks(&topic, p.id(), Duration::from_secs(10))?;
            if high > 0 {
                ends.insert(p.id(), high);
                tpl.add_partition_offset(&topic, p.id(), rdkafka::Offset::Beginning)?;
            }
        }
        consumer.assign(&tpl)?;
        let mut seen = BTreeMap::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !ends.is_empty() {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the topic was not read to its end in 60 s"
            );
            let Some(m) = consumer.poll(Duration::from_millis(500)) else {
                continue;
            };
            let m = m?;
            if m.offset() + 1 >= ends.get(&m.partition()).copied().unwrap_or(0) {
                ends.remove(&m.partition());
            }
            let body: Value =
                serde_json::from_slice(m.payload().context("a message without a body")?)?;
            if let Some(e) = schema.iter_errors(&body).next() {
                anyhow::bail!(
                    "a message does not match the schema: {e} at {}: {body}",
                    e.instance_path()
                );
            }
            let env: onsale_kafka::Envelope = serde_json::from_value(body)?;
            *seen
                .entry((env.after.aggregate_id, env.after.sequence))
                .or_insert(0) += 1;
        }
        Ok(seen)
    })
    .await?
}

/// Waits (bounded at 90 s) until every projection stands at the head of each show's log.
pub async fn projections_at_head(pool: &sqlx::PgPool) -> anyhow::Result<()> {
    crate::poll_until(
        "every projection position at the head of the log",
        Duration::from_secs(90),
        Duration::from_millis(100),
        || async {
            let behind: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM (SELECT aggregate_id, max(sequence) AS head FROM events WHERE aggregate_type = 'show' GROUP BY 1) e
                   CROSS JOIN (VALUES ('seat_map'), ('orders'), ('seat_history'), ('catalog')) AS p(name)
                   LEFT JOIN projection_positions pp ON pp.projection = p.name AND pp.show_id = e.aggregate_id
                  WHERE COALESCE(pp.last_sequence, 0) < e.head",
            )
            .fetch_one(pool)
            .await
            .map_err(|e| format!("{e}"))?;
            match behind {
                0 => Ok(()),
                n => Err(format!("{n} projection positions still behind the log")),
            }
        },
    )
    .await
    .map_err(anyhow::Error::msg)
}
