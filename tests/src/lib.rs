//! Helpers for integration tests: a fresh database per test in the PostgreSQL that
//! `make test` started, and the service on port 0 in front of it.
//!
//! There are no fakes here: every test talks to the real server.

use std::sync::Arc;

use anyhow::Context;
use onsale_command::api::auth::{mint, Role};
use onsale_command::app::SystemClock;
use onsale_command::{App, Config};
use onsale_domain::Clock;
use serde_json::{json, Value};

pub mod payments;
pub mod read_path;
pub mod waiting_room;

pub const SECRET: &str = "onsale-test-secret";

/// A database of its own for one test.
#[derive(Debug, Clone)]
pub struct TestDb {
    pub url: String,
    pub admin_url: String,
    pub name: String,
}

impl TestDb {
    pub async fn new() -> anyhow::Result<Self> {
        let admin_url = std::env::var("ONSALE_TEST_DATABASE_URL")
            .context("ONSALE_TEST_DATABASE_URL is unset: run the tests with `make test`, which starts PostgreSQL")?;
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let admin = sqlx::PgPool::connect(&admin_url)
            .await
            .context("connect to the test cluster")?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await?;
        admin.close().await;
        let url = match admin_url.rsplit_once('/') {
            Some((base, _)) => format!("{base}/{name}"),
            None => anyhow::bail!("odd database url {admin_url}"),
        };
        Ok(Self {
            url,
            admin_url,
            name,
        })
    }

    /// Runs SQL against the cluster's admin database (to simulate outages).
    pub async fn admin(&self, sql: &str) -> anyhow::Result<()> {
        let admin = sqlx::PgPool::connect(&self.admin_url).await?;
        sqlx::query(sql).execute(&admin).await?;
        admin.close().await;
        Ok(())
    }

    /// An outage of this database: new connections refused, open ones cut.
    pub async fn close(&self) -> anyhow::Result<()> {
        self.admin(&format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS false",
            self.name
        ))
        .await?;
        self.admin(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
            self.name
        ))
        .await
    }

    /// The end of the outage.
    pub async fn reopen(&self) -> anyhow::Result<()> {
        self.admin(&format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS true",
            self.name
        ))
        .await
    }

    pub async fn pool(&self) -> anyhow::Result<sqlx::PgPool> {
        Ok(sqlx::PgPool::connect(&self.url).await?)
    }
}

/// The service, listening on an ephemeral port.
#[derive(Debug)]
pub struct TestApp {
    pub base: String,
    pub app: App,
    pub http: reqwest::Client,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

pub fn config(db: &TestDb) -> Config {
    Config {
        database_url: db.url.clone(),
        jwt_secret: SECRET.into(),
        pool_size: 10,
        max_batch: 512,
        snapshot_every: 1000,
        snapshot_min_secs: 0,
        max_queue: 20_000,
    }
}

impl TestApp {
    pub async fn spawn(db: &TestDb) -> anyhow::Result<Self> {
        Self::spawn_with(config(db), Arc::new(SystemClock)).await
    }

    pub async fn spawn_with(config: Config, clock: Arc<dyn Clock>) -> anyhow::Result<Self> {
        Self::serve(App::build(&config, clock).await?).await
    }

    /// Serves a built app on an ephemeral port.
    pub async fn serve(app: App) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = app.clone();
        tokio::spawn(async move {
            let _ = server
                .run(listener, async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(Self {
            base,
            app,
            http: reqwest::Client::new(),
            shutdown: Some(tx),
        })
    }

    pub fn token(&self, sub: &str, role: Role) -> String {
        mint(SECRET, sub, role, 3600).expect("a token signs")
    }

    pub fn fan(&self, sub: &str) -> String {
        self.token(sub, Role::Fan)
    }

    pub fn admin(&self) -> String {
        self.token("admin", Role::Admin)
    }

    pub async fn post(
        &self,
        path: &str,
        token: &str,
        body: Value,
        key: Option<&str>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(&body);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        send(req).await
    }

    /// The show rebuilt from its events alone (no snapshot): what the log says happened.
    pub async fn replay(&self, event: &str) -> onsale_command::store::LoadedShow {
        let show: onsale_domain::ShowId = event.parse().expect("a show id");
        self.app
            .state
            .shows
            .store()
            .replay(show)
            .await
            .expect("the log replays")
    }

    /// `POST /v1/events/{event}/holds`.
    pub async fn hold(
        &self,
        event: &str,
        token: &str,
        body: Value,
        key: Option<&str>,
    ) -> (u16, Value) {
        self.post(&format!("/v1/events/{event}/holds"), token, body, key)
            .await
    }

    /// `POST /v1/orders` for a hold, paid with `tok_ok`, under an `Idempotency-Key`.
    pub async fn order(&self, hold_id: &Value, token: &str, key: &str) -> (u16, Value) {
        self.post(
            "/v1/orders",
            token,
            json!({"holdId": hold_id, "paymentToken": "tok_ok"}),
            Some(key),
        )
        .await
    }

    pub async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        send(
            self.http
                .get(format!("{}{path}", self.base))
                .bearer_auth(token),
        )
        .await
    }

    pub async fn delete(&self, path: &str, token: &str) -> (u16, Value) {
        send(
            self.http
                .delete(format!("{}{path}", self.base))
                .bearer_auth(token),
        )
        .await
    }

    /// A venue of `sections` sections (S1, S2, ...) of `rows` rows of `seats` seats, and an
    /// event on sale now. Returns the event id.
    pub async fn on_sale_event(
        &self,
        sections: u32,
        rows: u32,
        seats: u32,
        ttl: Option<u32>,
    ) -> String {
        let admin = self.admin();
        let sections: Vec<Value> = (1..=sections)
            .map(|s| {
                json!({
                    "section": format!("S{s}"),
                    "priceTier": if s == 1 { "A" } else { "B" },
                    "rows": (1..=rows).map(|r| json!({"row": format!("R{r}"), "seats": seats})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let (status, venue) = self
            .post(
                "/v1/venues",
                &admin,
                json!({"name": "Arena", "city": "Oslo", "sections": sections}),
                None,
            )
            .await;
        assert_eq!(status, 201, "{venue}");
        let now = chrono::Utc::now();
        let mut event = json!({
            "name": "Night",
            "performer": "Band",
            "venueId": venue["venueId"],
            "startsAt": now + chrono::Duration::days(30),
            "onSaleAt": now - chrono::Duration::minutes(1),
            "prices": {"A": 12000, "B": 6000},
        });
        if let Some(ttl) = ttl {
            event["holdTtlSeconds"] = json!(ttl);
        }
        let (status, event) = self.post("/v1/events", &admin, event, None).await;
        assert_eq!(status, 201, "{event}");
        event["eventId"].as_str().expect("event id").to_owned()
    }
}

async fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    let res = req.send().await.expect("the server answers");
    let status = res.status().as_u16();
    let text = res.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}
