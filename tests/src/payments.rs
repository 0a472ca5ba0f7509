//! The payment path for integration tests: the read path (real PostgreSQL and broker), the
//! processor simulator in-process on an ephemeral port, the payment worker, the intake and
//! ticket consumers and the payment routes. The worker and the consumers can be killed and
//! started again.

use std::collections::BTreeMap;
use std::time::Duration;

use onsale_payments::PaymentsConfig;
use onsale_processor_sim::{Settings, Sim};
use onsale_server::Part;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::read_path::{shared_brokers, ReadPath};
use crate::TestDb;

/// The card-processor simulator with `settings`, serving on a port of its own until the
/// returned task is aborted: the simulator, its base URL and the task.
pub async fn serve_sim(settings: Settings) -> anyhow::Result<(Sim, String, JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let sim = Sim::new(settings);
    let server = sim.clone();
    let task = tokio::spawn(async move {
        let _ = server.run(listener, std::future::pending()).await;
    });
    Ok((sim, url, task))
}

#[derive(Debug)]
pub struct PaymentPath {
    /// The read path with the payment worker and the payment consumers.
    pub rp: ReadPath,
    pub sim: Sim,
    /// Where the processor simulator listens.
    pub sim_url: String,
    pub config: PaymentsConfig,
    sim_task: JoinHandle<()>,
}

impl PaymentPath {
    /// A fresh database, the read path on the shared broker, and payments; `tweak` adjusts the
    /// worker's configuration (timeouts, the ambiguity bound) before it starts.
    pub async fn start(tweak: impl FnOnce(&mut PaymentsConfig)) -> anyhow::Result<(TestDb, Self)> {
        Self::start_with(|_| {}, tweak).await
    }

    /// [`PaymentPath::start`] with `settings` adjusting the process's settings too (what it
    /// serves, say).
    pub async fn start_with(
        settings: impl FnOnce(&mut onsale_server::Settings),
        tweak: impl FnOnce(&mut PaymentsConfig),
    ) -> anyhow::Result<(TestDb, Self)> {
        let db = TestDb::new().await?;
        let (sim, sim_url, sim_task) = serve_sim(Settings {
            hang_ms: 1_500,
            settle_ms: 1_000,
            webhook_jitter_ms: 200,
            ..Settings::default()
        })
        .await?;
        let rp = ReadPath::spawn_parts(
            &db,
            &shared_brokers()?,
            |s| {
                let p = &mut s.payments;
                p.processor_url = sim_url.clone();
                p.charge_timeout_ms = 500;
                p.max_pending_secs = 60;
                p.poll_ms = 100;
                p.reconcile_every_secs = 3_600;
                p.monitor_every_secs = 3_600;
                tweak(p);
                settings(s);
            },
            &[Part::Worker, Part::PaymentConsumers],
        )
        .await?;
        let config = rp.app.server.settings().payments.clone();
        let hook = format!("{}/v1/webhooks/processor", rp.app.base);
        sim.update(|s| s.webhook_url = Some(hook));
        Ok((
            db,
            Self {
                rp,
                sim,
                sim_url,
                config,
                sim_task,
            },
        ))
    }

    pub async fn start_worker(&mut self) -> anyhow::Result<()> {
        self.rp.app.server.start(Part::Worker).await
    }

    /// Kills the worker where it stands, mid-call if it is in one.
    pub fn kill_worker(&mut self) {
        self.rp.app.server.kill(Part::Worker);
    }

    /// Places an order for `seats` of `event` by `fan`, paying with `token`; returns its id.
    pub async fn buy(&self, event: &str, fan: &str, seats: &[&str], token: &str) -> String {
        self.buy_with(event, fan, json!({"seatIds": seats}), token)
            .await
    }

    /// Holds what `hold` asks for (`{"quantity": 2, "section": "FLOOR"}`), then orders it
    /// paying with `token`; returns the order id.
    pub async fn buy_with(&self, event: &str, fan: &str, hold: Value, token: &str) -> String {
        let app = &self.rp.app;
        let t = app.fan(fan);
        let (status, hold) = app
            .post(&format!("/v1/events/{event}/holds"), &t, hold, None)
            .await;
        assert_eq!(status, 201, "{hold}");
        let (status, order) = app
            .post(
                "/v1/orders",
                &t,
                json!({"holdId": hold["holdId"], "paymentToken": token}),
                Some(&format!("buy-{}", uuid::Uuid::new_v4())),
            )
            .await;
        assert_eq!(status, 202, "{order}");
        order["orderId"].as_str().expect("order id").to_owned()
    }

    /// Waits (up to `secs`) until the order's status is `want`; returns the order.
    pub async fn order_becomes(&self, order: &str, fan: &str, want: &str, secs: u64) -> Value {
        self.order_until(order, fan, secs, want, |o| o["status"] == want)
            .await
    }

    /// Waits (up to `secs`) until the order is `want` with `n` tickets (tickets are issued by
    /// their own log consumer, after the order is confirmed); returns the order.
    pub async fn order_with_tickets(
        &self,
        order: &str,
        fan: &str,
        want: &str,
        n: usize,
        secs: u64,
    ) -> Value {
        let what = format!("{want} with {n} tickets");
        self.order_until(order, fan, secs, &what, |o| {
            o["status"] == want && o["tickets"].as_array().map(Vec::len) == Some(n)
        })
        .await
    }

    async fn order_until(
        &self,
        order: &str,
        fan: &str,
        secs: u64,
        what: &str,
        f: impl Fn(&Value) -> bool,
    ) -> Value {
        let t = self.rp.app.fan(fan);
        let (app, path, t, f) = (&self.rp.app, format!("/v1/orders/{order}"), &t, &f);
        crate::wait_until(
            &format!("order {order} never became {what}"),
            Duration::from_secs(secs),
            Duration::from_millis(100),
            || {
                let path = &path;
                async move {
                    let (status, body) = app.get(path, t).await;
                    if status == 200 && f(&body) {
                        Ok(body)
                    } else {
                        Err(body)
                    }
                }
            },
        )
        .await
    }

    /// Captured charges per order, from the simulator's books (the witness).
    pub fn captures(&self) -> BTreeMap<String, u32> {
        self.sim.ledger().captures_per_reference()
    }

    /// Payments the worker has not finished.
    pub async fn open_payments(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM payments WHERE state <> 'done'")
            .fetch_one(&self.rp.pool)
            .await
            .expect("count payments")
    }

    pub async fn stop(self) {
        self.sim_task.abort();
        self.rp.stop().await;
    }
}
