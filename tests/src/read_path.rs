//! The whole read path for a test: the command API with the query side mounted, gRPC on its
//! own port, the CDC relay (its own slot and topic) and the three projections, on the real
//! PostgreSQL and the real broker `make test` started. Each part can be killed and restarted.

use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use onsale_command::app::SystemClock;
use onsale_command::App;
use onsale_kafka::{KafkaConfig, Relay, RelayConfig};
use onsale_projections::RunnerConfig;
use onsale_query::{QueryConfig, QueryState};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::{config, TestApp, TestDb};

/// A broker of the test's own (for tests that restart it), from the binary `make test` found.
#[derive(Debug)]
pub struct Broker {
    pub port: u16,
    child: Option<Child>,
}

impl Broker {
    pub fn start() -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut b = Self { port, child: None };
        b.restart()?;
        Ok(b)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops the broker (losing what its memory engine held) and starts a new one on the port.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        let bin = std::env::var("ONSALE_TANSU_BIN")
            .context("ONSALE_TANSU_BIN is unset: run the tests with `make test`")?;
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let child = Command::new(bin)
            .args([
                "broker",
                // A tag test.sh uses to reap brokers a killed test binary left behind.
                "--cluster-id",
                "onsale-test-private",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                "memory://tansu/",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        self.child = Some(child);
        for _ in 0..100 {
            if std::net::TcpStream::connect(self.addr()).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        anyhow::bail!("the broker did not listen on {}", self.addr())
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The shared broker of the test run.
pub fn shared_brokers() -> anyhow::Result<String> {
    std::env::var("ONSALE_TEST_KAFKA_BROKERS")
        .context("ONSALE_TEST_KAFKA_BROKERS is unset: run the tests with `make test`")
}

#[derive(Debug)]
pub struct ReadPath {
    pub app: TestApp,
    pub grpc: String,
    pub kafka: KafkaConfig,
    pub relay_config: RelayConfig,
    pub runner: RunnerConfig,
    pub pool: sqlx::PgPool,
    pub reads: QueryState,
    relay: Option<JoinHandle<()>>,
    projections: Vec<JoinHandle<()>>,
    grpc_task: JoinHandle<()>,
}

impl ReadPath {
    /// Everything, against `brokers`.
    pub async fn spawn(db: &TestDb, brokers: &str) -> anyhow::Result<Self> {
        Self::spawn_with(db, brokers, |_| {}).await
    }

    /// Everything, with `mount` adding to the app before it serves.
    pub async fn spawn_with(
        db: &TestDb,
        brokers: &str,
        mount: impl FnOnce(&mut App),
    ) -> anyhow::Result<Self> {
        let cfg = config(db);
        let mut app = App::build(&cfg, Arc::new(SystemClock)).await?;
        mount(&mut app);
        let pool = db.pool().await?;
        let query = QueryConfig {
            relay_slot: format!("slot_{}", db.name),
            ready_max_silence_ms: 3_000,
            ..QueryConfig::default()
        };
        let reads = QueryState::start(pool.clone(), &query, &cfg.jwt_secret);
        reads.mount(&mut app);
        let grpc_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let grpc = format!("http://{}", grpc_listener.local_addr()?);
        let router = onsale_query::grpc::router(reads.clone());
        let grpc_task = tokio::spawn(async move {
            let _ = axum::serve(grpc_listener, router).await;
        });
        let app = TestApp::serve(app).await?;
        let mut me = Self {
            app,
            grpc,
            kafka: KafkaConfig {
                brokers: brokers.to_owned(),
                events_topic: format!("onsale.events.{}", db.name),
                partitions: 3,
                replication: 1,
            },
            relay_config: RelayConfig {
                slot: query.relay_slot.clone(),
                batch: 5_000,
                idle_ms: 10,
                mark_ms: 1_000,
            },
            runner: RunnerConfig {
                batch: 2_000,
                linger_ms: 5,
                tick_ms: 250,
                check_ms: 1_000,
            },
            pool,
            reads,
            relay: None,
            projections: Vec::new(),
            grpc_task,
        };
        me.start_relay().await?;
        me.start_projections();
        Ok(me)
    }

    pub async fn start_relay(&mut self) -> anyhow::Result<()> {
        let relay = Relay::start(
            self.pool.clone(),
            self.kafka.clone(),
            self.relay_config.clone(),
        )
        .await?;
        self.relay = Some(tokio::spawn(async move {
            relay.run(std::future::pending()).await
        }));
        Ok(())
    }

    /// Kills the relay where it stands (no shutdown path runs).
    pub fn kill_relay(&mut self) {
        if let Some(r) = self.relay.take() {
            r.abort();
        }
    }

    pub fn start_projections(&mut self) {
        self.projections = onsale_projections::spawn_all(
            self.pool.clone(),
            self.kafka.clone(),
            self.runner.clone(),
        );
    }

    pub fn kill_projections(&mut self) {
        for p in self.projections.drain(..) {
            p.abort();
        }
    }

    /// A fresh database and the whole read path on the test run's shared broker.
    pub async fn on_shared_broker() -> anyhow::Result<(TestDb, Self)> {
        let db = TestDb::new().await?;
        let rp = Self::spawn(&db, &shared_brokers()?).await?;
        Ok((db, rp))
    }

    /// A show on sale now (as [`TestApp::on_sale_event`]), once its seat map exists.
    pub async fn show_on_map(&self, sections: u32, rows: u32, seats: u32) -> String {
        let event = self.app.on_sale_event(sections, rows, seats, None).await;
        self.eventually(&format!("/v1/events/{event}/seats"), "", |s, _| s == 200)
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
        let mut last = (0, Value::Null);
        for _ in 0..200 {
            last = self.app.get(path, token).await;
            if f(last.0, &last.1) {
                return last.1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{path} never matched; last answer {} {}", last.0, last.1);
    }

    /// Stops every task and drops the relay's slot (a slot left behind pins WAL).
    pub async fn stop(mut self) {
        self.kill_relay();
        self.kill_projections();
        self.grpc_task.abort();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = sqlx::query("SELECT pg_drop_replication_slot($1)")
            .bind(&self.relay_config.slot)
            .execute(&self.pool)
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

fn stack_sh(args: &[&str]) -> anyhow::Result<()> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/stack.sh");
    let out = Command::new("bash").arg(script).args(args).output()?;
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

    /// A fast shutdown and a start: every connection is cut.
    pub fn restart(&self) -> anyhow::Result<()> {
        stack_sh(&["pg-restart", &self.dir.to_string_lossy()])
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = stack_sh(&["pg-down", &self.dir.to_string_lossy()]);
    }
}
