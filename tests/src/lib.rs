//! Helpers for integration tests: a fresh database per test in the PostgreSQL that
//! `make test` started, and the service on port 0 in front of it.
//!
//! There are no fakes here: every test talks to the real server.

use std::sync::Arc;

use anyhow::Context;
use onsale_command::Shows;
use onsale_domain::{Clock, SystemClock};
use onsale_edge::auth::{mint, mint_scanner, mint_verified, Gates, Role};
use onsale_server::{Part, Server, Settings};
use serde_json::{json, Value};

pub mod gated_log;
pub mod ha;
pub mod oidc;
pub mod payments;
pub mod read_path;
pub mod regions;
pub mod secure;
pub mod waiting_room;

pub const SECRET: &str = "onsale-test-secret";

/// The login every process of the tests uses (issue 53, item 6): a member of `onsale_app` and
/// nothing more, admitted by the harness's `onsale migrate` as an operator would. The tests'
/// own connections (`TestDb::url`) stay the owner's.
pub const NODE_LOGIN: &str = "onsale_node";

/// `url` logging in as `login` instead of its own user (its password dropped: the test
/// clusters trust loopback).
pub fn with_login(url: &str, login: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
            let host = match authority.rfind('@') {
                Some(at) => &rest[at + 1..],
                None => rest,
            };
            format!("{scheme}://{login}@{host}")
        }
        None => url.to_owned(),
    }
}

/// What `onsale migrate` does, with the owner's `settings` (theirs as given), and those
/// settings as the processes then log in: as [`NODE_LOGIN`].
pub async fn migrated(mut settings: Settings) -> anyhow::Result<Settings> {
    onsale_server::migrate(
        &settings.database,
        &settings.region,
        &[NODE_LOGIN.to_owned()],
    )
    .await
    .context("onsale migrate")?;
    let db = &mut settings.database;
    db.database_url = with_login(&db.database_url, NODE_LOGIN);
    for url in &mut db.shard_urls {
        *url = with_login(url, NODE_LOGIN);
    }
    Ok(settings)
}

/// A database of its own for one test.
#[derive(Debug, Clone)]
pub struct TestDb {
    pub url: String,
    pub admin_url: String,
    pub name: String,
}

/// The seats of a seat map (or of a delta) as `seatId -> status`.
pub fn seat_statuses(map: &Value) -> std::collections::BTreeMap<String, String> {
    map["seats"]
        .as_array()
        .expect("seats")
        .iter()
        .map(|s| {
            (
                s["seatId"].as_str().expect("id").to_owned(),
                s["status"].as_str().expect("status").to_owned(),
            )
        })
        .collect()
}

/// The process's logs go to the test's captured output (printed when it fails), at `warn` (and
/// which process took a singleton's lock when) unless `ONSALE_TEST_LOG` says otherwise (an `EnvFilter`, e.g. `onsale_kafka=debug,warn`).
pub fn log_to_the_test() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ONSALE_TEST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,onsale_kafka::leader=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

impl TestDb {
    pub async fn new() -> anyhow::Result<Self> {
        log_to_the_test();
        let admin_url = std::env::var("ONSALE_TEST_DATABASE_URL")
            .context("ONSALE_TEST_DATABASE_URL is unset: run the tests with `make test`, which starts PostgreSQL")?;
        Self::on(&admin_url).await
    }

    /// A fresh database on the cluster whose admin database is at `admin_url`.
    pub async fn on(admin_url: &str) -> anyhow::Result<Self> {
        let admin_url = admin_url.to_owned();
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

/// The service, listening on an ephemeral port: a [`Server`] built by the production
/// composition root with the parts a test asks for.
#[derive(Debug)]
pub struct TestApp {
    pub api: Api,
    pub server: Server,
}

/// A client of onsale's HTTP API at `base`, as fans and admins call it (for an in-process
/// [`TestApp`] or an `onsale` process of the test's own).
#[derive(Debug, Clone)]
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
}

impl TestApp {
    /// The operators' listener (`/metrics`, probes), e.g. `http://127.0.0.1:40123`.
    pub fn operator_base(&self) -> String {
        format!(
            "http://{}",
            self.server
                .metrics_addr()
                .expect("the test settings set an operators' listener")
        )
    }

    /// The process's metrics page, from its operators' listener.
    pub async fn metrics_page(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.operator_base()))
            .send()
            .await
            .expect("the operators' listener answers")
            .text()
            .await
            .expect("text")
    }
}

impl std::ops::Deref for TestApp {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}

/// What a test's processes are set to, by the variable a child process reads: `make test`'s
/// servers, this test's database (and its own slot and topic), ephemeral ports, short timers.
/// A process built in the test's own ([`settings`]) takes the same as flags, a child process
/// ([`onsale_process`]) as its environment.
pub fn test_settings(db: &TestDb) -> Vec<(&'static str, String)> {
    let on = || "1".to_owned();
    let zero = || "0".to_owned();
    let any_port = || "127.0.0.1:0".to_owned();
    vec![
        ("DATABASE_URL", db.url.clone()),
        ("ONSALE_DEV_MODE", on()),
        // Every test client is 127.0.0.1 and some loop one account fast: the limits have
        // tests of their own.
        ("ONSALE_RATE_ADDRESS_PER_SEC", zero()),
        ("ONSALE_RATE_READ_ADDRESS_PER_SEC", zero()),
        ("ONSALE_RATE_READ_ACCOUNT_PER_SEC", zero()),
        ("ONSALE_RATE_MISSES_PER_SEC", zero()),
        ("ONSALE_RATE_ACCOUNT_PER_SEC", zero()),
        ("ONSALE_JWT_SECRET", SECRET.to_owned()),
        ("ONSALE_DB_POOL", "10".to_owned()),
        ("ONSALE_SNAPSHOT_EVERY", "1000".to_owned()),
        ("ONSALE_SNAPSHOT_MIN_SECS", zero()),
        ("ONSALE_LISTEN", any_port()),
        ("ONSALE_GRPC_LISTEN", any_port()),
        // Metrics and probes for operators on a listener of their own, as deployed.
        ("ONSALE_METRICS_LISTEN", any_port()),
        ("ONSALE_READY_MAX_SILENCE_MS", "3000".to_owned()),
        ("ONSALE_RELAY_SLOT", format!("slot_{}", db.name)),
        ("ONSALE_EVENTS_TOPIC", format!("onsale.events.{}", db.name)),
        (
            "ONSALE_KAFKA_BROKERS",
            std::env::var("ONSALE_TEST_KAFKA_BROKERS").unwrap_or_default(),
        ),
        ("ONSALE_EVENTS_PARTITIONS", "3".to_owned()),
        ("ONSALE_PROJECTION_TICK_MS", "250".to_owned()),
        ("ONSALE_PROJECTION_CHECK_MS", "1000".to_owned()),
        ("ONSALE_SHUTDOWN_TIMEOUT_SECS", "10".to_owned()),
    ]
}

/// [`test_settings`] as a process built in the test's own takes them: each variable's flag.
pub fn settings(db: &TestDb) -> Settings {
    let mut args = vec!["onsale".to_owned()];
    for (var, value) in test_settings(db) {
        let (flag, takes_value) =
            Settings::flag_of(var).unwrap_or_else(|| panic!("{var} is no setting of onsale"));
        match (takes_value, value.as_str()) {
            (true, _) => args.extend([flag, value]),
            (false, "1") => args.push(flag),
            (false, _) => {}
        }
    }
    Settings::try_parse_from(args).expect("the test settings parse")
}

impl TestApp {
    /// The API on a fresh database.
    pub async fn spawn(db: &TestDb) -> anyhow::Result<Self> {
        Self::spawn_with(settings(db), Arc::new(SystemClock)).await
    }

    /// The API with these settings and clock.
    pub async fn spawn_with(settings: Settings, clock: Arc<dyn Clock>) -> anyhow::Result<Self> {
        Self::start(settings, &[Part::Api], clock).await
    }

    /// `parts` of a process, built as `onsale` builds them.
    pub async fn start(
        settings: Settings,
        parts: &[Part],
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        let server = Server::build_with_clock(migrated(settings).await?, parts, clock).await?;
        let addr = server.http_addr().context("the API part serves HTTP")?;
        Ok(Self {
            api: Api::new(&format!("http://{addr}")),
            server,
        })
    }

    /// The owners of this process's shows.
    pub fn shows(&self) -> &Shows {
        &self.server.shows
    }

    /// The show rebuilt from its events alone (no snapshot): what the log says happened.
    pub async fn replay(&self, event: &str) -> onsale_eventlog::LoadedShow {
        let show: onsale_domain::ShowId = event.parse().expect("a show id");
        self.shows()
            .log()
            .replay(show)
            .await
            .expect("the log replays")
    }
}

/// A base port `p` for processes a test starts, with `p + o` free for every offset: drawn at
/// random below the ephemeral range (32768 up), so no client's source port takes one before the
/// process binds it, and two tests drawing at once rarely meet (each port is tried too).
pub fn free_ports(offsets: &[u16]) -> u16 {
    for _ in 0..200 {
        let p = 20_000 + (uuid::Uuid::new_v4().as_u128() % 12_000) as u16;
        if offsets
            .iter()
            .all(|o| std::net::TcpListener::bind(("127.0.0.1", p + o)).is_ok())
        {
            return p;
        }
    }
    panic!("no free block of ports for offsets {offsets:?}")
}

/// A port for a process the test starts (see [`free_ports`]).
pub fn free_port() -> u16 {
    free_ports(&[0])
}

/// An `onsale` process (`bin`: the test's `CARGO_BIN_EXE_onsale`) set as the test's own are
/// ([`test_settings`]: its database, slot and topic on the test run's broker), without Redis
/// (shows have no waiting room), with `env` on top; killed when dropped. `onsale migrate` runs
/// first with the owner's login, as an operator's deployment runs it; the process logs in as
/// [`NODE_LOGIN`].
pub fn onsale_process(
    bin: &str,
    db: &TestDb,
    args: &[&str],
    env: &[(&str, String)],
) -> tokio::process::Child {
    let mut migrate = std::process::Command::new(bin);
    migrate
        .args(["migrate", "--login-role", NODE_LOGIN])
        .env("DATABASE_URL", &db.url)
        .env_remove("ONSALE_SHARD_URLS");
    for (k, v) in env {
        migrate.env(k, v);
    }
    let out = migrate.output().expect("onsale migrate runs");
    assert!(
        out.status.success(),
        "onsale migrate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(args)
        .envs(test_settings(db))
        .env("DATABASE_URL", with_login(&db.url, NODE_LOGIN))
        .env_remove("ONSALE_REDIS_URL")
        .env_remove("ONSALE_TRACE_ZIPKIN_URL")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("onsale starts")
}

/// The listeners of an `onsale serve` process a test starts (HTTP on `http`, the internal and
/// gRPC ones on free ports) and a card processor that is not there.
pub fn serve_env(http: u16, grpc: u16) -> Vec<(&'static str, String)> {
    vec![
        ("ONSALE_LISTEN", format!("127.0.0.1:{http}")),
        (
            "ONSALE_INTERNAL_LISTEN",
            format!("127.0.0.1:{}", free_port()),
        ),
        ("ONSALE_GRPC_LISTEN", format!("127.0.0.1:{grpc}")),
        ("ONSALE_PROCESSOR_URL", "http://127.0.0.1:9".to_owned()),
    ]
}

/// What a command the test ran printed, once it exited successfully (else the test fails with
/// what it printed on stderr).
pub fn succeeded(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until `check` holds, failing the test past `within`; answers how long it took.
pub async fn wait_for<F: std::future::Future<Output = bool>>(
    what: &str,
    within: std::time::Duration,
    mut check: impl FnMut() -> F,
) -> std::time::Duration {
    let started = std::time::Instant::now();
    wait_for_value(what, within, || {
        let holds = check();
        async move { holds.await.then_some(()) }
    })
    .await;
    started.elapsed()
}

/// Waits until `check` answers something, failing the test past `within`; answers it.
pub async fn wait_for_value<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    within: std::time::Duration,
    mut check: impl FnMut() -> F,
) -> T {
    wait_until(what, within, std::time::Duration::from_millis(50), || {
        let answer = check();
        async move { answer.await.ok_or("nothing yet") }
    })
    .await
}

/// Waits until `check` answers `Ok`, asking again every `every`; past `within` the test fails
/// with `what` and the last `Err` (what was seen instead). Answers the `Ok`. A check that does
/// not answer at all (a request the other side never replies to) is bounded too: it may run
/// until the bound (and a second past it, so a check started just before the bound can finish),
/// then the test fails saying so, instead of hanging the run.
pub async fn wait_until<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    what: &str,
    within: std::time::Duration,
    every: std::time::Duration,
    check: impl FnMut() -> F,
) -> T {
    poll_until(what, within, every, check)
        .await
        .unwrap_or_else(|failed| panic!("{failed}"))
}

/// [`wait_until`] for a helper that hands the failure to its caller instead of failing the
/// test: the same bounded wait, answering `Err` with the message `wait_until` would fail with.
pub async fn poll_until<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    what: &str,
    within: std::time::Duration,
    every: std::time::Duration,
    mut check: impl FnMut() -> F,
) -> Result<T, String> {
    let started = std::time::Instant::now();
    loop {
        let left = within.saturating_sub(started.elapsed());
        match tokio::time::timeout(left.max(std::time::Duration::from_secs(1)), check()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(last)) if started.elapsed() >= within => {
                return Err(format!("{what}: not within {within:?}; last {last}"))
            }
            Ok(Err(_)) => {}
            Err(_) => {
                return Err(format!(
                    "{what}: not within {within:?}; the last check did not answer"
                ))
            }
        }
        tokio::time::sleep(every).await;
    }
}

impl Api {
    /// Waits (30 s at most) until the process behind `base` answers `/healthz`.
    pub async fn serving(&self) {
        wait_for("onsale serves", std::time::Duration::from_secs(30), || {
            let api = self.clone();
            async move {
                let res = api.http.get(format!("{}/healthz", api.base)).send().await;
                res.is_ok_and(|r| r.status() == 200)
            }
        })
        .await;
    }

    /// A client that gives up on a connection after 10 s and on a response that sends nothing
    /// for 60 s (an SSE stream sends a comment every 15 s), so a server that stops answering
    /// fails the test instead of hanging the run.
    pub fn new(base: &str) -> Self {
        Self {
            base: base.to_owned(),
            http: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .read_timeout(std::time::Duration::from_secs(60))
                .build()
                .expect("an HTTP client builds"),
        }
    }

    pub fn token(&self, sub: &str, role: Role) -> String {
        mint(SECRET, sub, role, 3600).expect("a token signs")
    }

    /// A scanner's token: it admits tickets at `gates` only.
    pub fn scanner(&self, sub: &str, gates: &Gates) -> String {
        mint_scanner(SECRET, sub, gates, 3600).expect("a token signs")
    }

    pub fn fan(&self, sub: &str) -> String {
        self.token(sub, Role::Fan)
    }

    /// A fan whose account the identity provider vouches for (the `verified` claim).
    pub fn verified_fan(&self, sub: &str) -> String {
        mint_verified(SECRET, sub, Role::Fan, 3600).expect("a token signs")
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

    pub async fn put(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        send(
            self.http
                .put(format!("{}{path}", self.base))
                .bearer_auth(token)
                .json(&body),
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
        let more = match ttl {
            Some(ttl) => json!({"holdTtlSeconds": ttl}),
            None => json!({}),
        };
        self.on_sale_event_with(sections, rows, seats, more).await
    }

    /// [`Api::on_sale_event`] with `more` fields in the event's body (`{"waitingRoom": true}`).
    pub async fn on_sale_event_with(
        &self,
        sections: u32,
        rows: u32,
        seats: u32,
        more: Value,
    ) -> String {
        let sections: Vec<Value> = (1..=sections)
            .map(|s| {
                json!({
                    "section": format!("S{s}"),
                    "priceTier": if s == 1 { "A" } else { "B" },
                    "rows": (1..=rows).map(|r| json!({"row": format!("R{r}"), "seats": seats})).collect::<Vec<_>>(),
                })
            })
            .collect();
        self.event_at(json!(sections), more).await
    }

    /// A venue of `sections` (as `POST /v1/venues` takes them) and a show there on sale since a
    /// minute ago, with tiers A and B priced, and `more` fields in the event's body. Returns
    /// the event id.
    pub async fn event_at(&self, sections: Value, more: Value) -> String {
        self.event_in(
            json!({"name": "Arena", "city": "Oslo", "sections": sections}),
            more,
        )
        .await
    }

    /// [`Api::event_at`] in a venue registered with the whole body `venue` (its chart, say).
    pub async fn event_in(&self, venue: Value, more: Value) -> String {
        let admin = self.admin();
        let (status, venue) = self.post("/v1/venues", &admin, venue, None).await;
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
        if let (Some(event), Value::Object(more)) = (event.as_object_mut(), more) {
            event.extend(more);
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

#[cfg(test)]
mod tests {
    use super::with_login;

    #[test]
    fn a_url_logs_in_as_another_role_with_the_rest_kept() {
        for (url, as_node) in [
            (
                "postgres://onsale@127.0.0.1:5432/t_1",
                "postgres://onsale_node@127.0.0.1:5432/t_1",
            ),
            (
                "postgres://onsale:pw@h:1/db?x=@",
                "postgres://onsale_node@h:1/db?x=@",
            ),
            (
                "postgres://127.0.0.1:5432/db",
                "postgres://onsale_node@127.0.0.1:5432/db",
            ),
        ] {
            assert_eq!(with_login(url, "onsale_node"), as_node);
        }
    }
}
