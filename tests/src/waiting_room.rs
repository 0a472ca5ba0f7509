//! The waiting room for integration tests: the app with a waiting room on the test run's real
//! Redis (a logical database of its own per test, flushed first), admitter replicas that can be
//! started and killed, and the fan's steps.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use onsale_domain::SystemClock;
use onsale_server::Part;
use onsale_waiting_room::{WaitingRoom, WaitingRoomConfig};
use serde_json::{json, Value};

use crate::{settings, TestApp, TestDb};

static NEXT_DB: AtomicU32 = AtomicU32::new(1);

/// A Redis URL on a logical database of this test's own, emptied.
pub async fn redis_url() -> anyhow::Result<String> {
    let base = std::env::var("ONSALE_TEST_REDIS_URL").map_err(|_| {
        anyhow::anyhow!("ONSALE_TEST_REDIS_URL is not set: run the tests with `make test`")
    })?;
    redis_db(&base, None).await
}

/// A database (1-15 in turn) of the Redis at `base`, emptied, as a URL; over TLS checked
/// against `ca` for a `rediss://` base.
pub async fn redis_db(base: &str, ca: Option<&std::path::Path>) -> anyhow::Result<String> {
    let n = NEXT_DB.fetch_add(1, Ordering::Relaxed) % 15 + 1;
    let url = format!("{}{n}", base.trim_end_matches('/').to_owned() + "/");
    let client = onsale_edge::redis_tls::client(&url, ca)?;
    let mut c = client.get_multiplexed_async_connection().await?;
    let _: () = redis::cmd("FLUSHDB").query_async(&mut c).await?;
    Ok(url)
}

#[derive(Debug)]
pub struct Room {
    pub app: TestApp,
    pub room: WaitingRoom,
    pub redis: redis::aio::MultiplexedConnection,
}

impl Room {
    pub async fn start(
        db: &TestDb,
        tweak: impl FnOnce(&mut WaitingRoomConfig),
    ) -> anyhow::Result<Self> {
        Self::start_with(db, |s| tweak(&mut s.waiting_room)).await
    }

    /// As [`Room::start`], with any of the app's settings changed.
    pub async fn start_with(
        db: &TestDb,
        tweak: impl FnOnce(&mut onsale_server::Settings),
    ) -> anyhow::Result<Self> {
        let url = redis_url().await?;
        let mut settings = settings(db);
        let cfg = &mut settings.waiting_room;
        cfg.redis_url = Some(url.clone());
        cfg.tick_ms = 100;
        tweak(&mut settings);
        // The room's own connection: to the app's Redis when that is over TLS (the secure
        // pair), else to the test run's (a test may point the app at a Redis that is away).
        let cfg = &settings.waiting_room;
        let client = match (&cfg.redis_ca_file, &cfg.redis_url) {
            (Some(_), Some(tls)) => cfg.redis_client(tls)?,
            _ => redis::Client::open(url.as_str())?,
        };
        let app = TestApp::spawn_with(settings, Arc::new(SystemClock)).await?;
        let room = app
            .server
            .room
            .clone()
            .ok_or_else(|| anyhow::anyhow!("no waiting room"))?;
        let redis = client.get_multiplexed_async_connection().await?;
        Ok(Self { app, room, redis })
    }

    /// One more admitter replica (and its watchdog).
    pub async fn start_admitter(&mut self) {
        self.app
            .server
            .start(Part::Admitter)
            .await
            .expect("an admitter starts");
    }

    pub fn kill_admitters(&mut self) {
        self.app.server.kill(Part::Admitter);
    }

    /// A show with a waiting room of `sections` x `rows` x `seats`, on sale `opens_in` from now.
    pub async fn show(
        &self,
        sections: u32,
        rows: u32,
        seats: u32,
        opens_in: chrono::Duration,
    ) -> String {
        self.show_with(sections, rows, seats, opens_in, json!({}))
            .await
    }

    /// As [`Room::show`], with more fields of the event (its on-sale policies).
    pub async fn show_with(
        &self,
        sections: u32,
        rows: u32,
        seats: u32,
        opens_in: chrono::Duration,
        more: Value,
    ) -> String {
        let admin = self.app.admin();
        let sections: Vec<Value> = (1..=sections)
            .map(|s| json!({"section": format!("S{s}"), "priceTier": "A",
                "rows": (1..=rows).map(|r| json!({"row": format!("R{r}"), "seats": seats})).collect::<Vec<_>>()}))
            .collect();
        let (status, venue) = self
            .app
            .post(
                "/v1/venues",
                &admin,
                json!({"name": "Arena", "city": "Oslo", "sections": sections}),
                None,
            )
            .await;
        assert_eq!(status, 201, "{venue}");
        let now = chrono::Utc::now();
        let mut body = json!({"name": "Night", "performer": "Band", "venueId": venue["venueId"],
            "startsAt": now + chrono::Duration::days(30), "onSaleAt": now + opens_in,
            "prices": {"A": 5000}, "waitingRoom": true});
        for (k, v) in more.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        let (status, event) = self.app.post("/v1/events", &admin, body, None).await;
        assert_eq!(status, 201, "{event}");
        event["eventId"].as_str().expect("event id").to_owned()
    }

    pub async fn join(&self, event: &str, fan: &str) -> Value {
        let (status, body) = self
            .app
            .post(
                &format!("/v1/events/{event}/waiting-room"),
                &self.app.fan(fan),
                json!({}),
                None,
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body
    }

    pub async fn view(&self, event: &str, fan: &str, queue_token: &str) -> (u16, Value) {
        let r = self
            .app
            .http
            .get(format!("{}/v1/events/{event}/waiting-room", self.app.base))
            .bearer_auth(self.app.fan(fan))
            .header("x-onsale-queue-token", queue_token)
            .send()
            .await
            .expect("answer");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Polls (every 250 ms, as a browser would) until the fan is admitted; returns the
    /// admission token.
    pub async fn admitted(&self, event: &str, fan: &str, queue_token: &str, secs: u64) -> String {
        crate::wait_until(
            &format!("{fan} never admitted"),
            Duration::from_secs(secs),
            Duration::from_millis(250),
            || async move {
                let (_, v) = self.view(event, fan, queue_token).await;
                match v["admissionToken"].as_str() {
                    Some(t) => Ok(t.to_owned()),
                    None => Err(v),
                }
            },
        )
        .await
    }

    pub async fn enter(&self, event: &str, fan: &str, admission: &str) -> (u16, Value) {
        self.app
            .post(
                &format!("/v1/events/{event}/enter"),
                &self.app.fan(fan),
                json!({"admissionToken": admission}),
                None,
            )
            .await
    }

    /// Holds `body` with the session header.
    pub async fn hold(
        &self,
        event: &str,
        fan: &str,
        session: Option<&str>,
        body: Value,
    ) -> (u16, Value) {
        let mut req = self
            .app
            .http
            .post(format!("{}/v1/events/{event}/holds", self.app.base))
            .bearer_auth(self.app.fan(fan))
            .json(&body);
        if let Some(s) = session {
            req = req.header("x-onsale-session", s);
        }
        let r = req.send().await.expect("answer");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Places an order on `hold_id` with the session header, paying with `tok_ok`.
    pub async fn order(
        &self,
        fan: &str,
        session: &str,
        hold_id: &Value,
        key: &str,
    ) -> (u16, Value) {
        let r = self
            .app
            .http
            .post(format!("{}/v1/orders", self.app.base))
            .bearer_auth(self.app.fan(fan))
            .header("idempotency-key", key)
            .header("x-onsale-session", session)
            .json(&json!({"holdId": hold_id, "paymentToken": "tok_ok"}))
            .send()
            .await
            .expect("answer");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// `POST /v1/events/{event}/heartbeat` for `fan`'s session.
    pub async fn heartbeat(&self, event: &str, fan: &str, session: &str) -> (u16, Value) {
        self.app
            .post(
                &format!("/v1/events/{event}/heartbeat"),
                &self.app.fan(fan),
                json!({"sessionId": session}),
                None,
            )
            .await
    }

    /// `fan` joins the line, waits (20 s at most) for it to pass, and enters: the session id.
    pub async fn enter_sale(&self, event: &str, fan: &str) -> String {
        let joined = self.join(event, fan).await;
        let queue_token = joined["queueToken"].as_str().expect("queue token");
        let admission = self.admitted(event, fan, queue_token, 20).await;
        let (status, entry) = self.enter(event, fan, &admission).await;
        assert_eq!(status, 200, "{entry}");
        entry["sessionId"].as_str().expect("session").to_owned()
    }

    /// Live sessions of a show, straight from Redis.
    pub async fn live(&self, event: &str) -> i64 {
        let now = chrono::Utc::now().timestamp_millis();
        let mut c = self.redis.clone();
        redis::cmd("ZCOUNT")
            .arg(onsale_waiting_room::store::key(
                event.parse().expect("show id"),
                "leases",
            ))
            .arg(now)
            .arg("+inf")
            .query_async(&mut c)
            .await
            .expect("zcount")
    }

    pub async fn get_int(&self, event: &str, part: &str) -> i64 {
        let mut c = self.redis.clone();
        let v: Option<i64> = redis::cmd("GET")
            .arg(onsale_waiting_room::store::key(
                event.parse().expect("show id"),
                part,
            ))
            .query_async(&mut c)
            .await
            .expect("get");
        v.unwrap_or(0)
    }
}
