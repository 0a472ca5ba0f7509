//! A card-processor simulator: the one part of onsale's world that is simulated (the payment
//! network), built to behave like a real processor so the payment path is tested against the
//! hard parts: charges keyed by idempotency key, a status endpoint, voids, refunds, signed
//! webhooks that arrive twice and out of order, a daily settlement file, and an outage switch.
//!
//! The books are [`ledger::Ledger`] (no I/O, also used by property tests as the witness); this
//! module serves them over HTTP and delivers the webhooks. It must not know anything about
//! onsale beyond the merchant reference it is given.

pub mod ledger;

pub use onsale_processor_api::signature;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{NaiveDate, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::json;

pub use ledger::{
    Behaviour, Charge, ChargeRequest, ChargeStatus, Ledger, LedgerError, Refund, SettlementLine,
    WebhookEvent,
};

/// The switches: faults and where webhooks go. Set at start-up (flags or environment, each
/// declared once here) and changed at run time by `POST /admin/settings`.
#[derive(Debug, Clone, Serialize, Deserialize, clap::Args)]
#[serde(rename_all = "camelCase", default)]
pub struct Settings {
    /// Every API call answers 503 and no webhook leaves.
    #[arg(long, env = "PROCESSOR_OUTAGE")]
    pub outage: bool,
    /// How long a hanging charge call (the `tok_timeout_*` tokens) takes to answer.
    #[arg(long, env = "PROCESSOR_HANG_MS", default_value_t = 3_000)]
    pub hang_ms: u64,
    /// How long a pending or late-settling charge takes to resolve.
    #[arg(long, env = "PROCESSOR_SETTLE_MS", default_value_t = 2_000)]
    pub settle_ms: u64,
    /// A delay after a charge is recorded and before it is answered (a caller that dies in
    /// this window has been charged without knowing it).
    #[arg(long, env = "PROCESSOR_RESPOND_DELAY_MS", default_value_t = 0)]
    pub respond_delay_ms: u64,
    /// Extra deliveries of every webhook event.
    #[arg(long, env = "PROCESSOR_WEBHOOK_DUPLICATES", default_value_t = 1)]
    pub webhook_duplicates: u32,
    /// Each delivery waits a random time up to this, so events overtake each other.
    #[arg(long, env = "PROCESSOR_WEBHOOK_JITTER_MS", default_value_t = 300)]
    pub webhook_jitter_ms: u64,
    /// Where webhooks are delivered (onsale's `/v1/webhooks/processor`).
    #[arg(long, env = "PROCESSOR_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
    /// The secret webhooks are signed with (onsale's `ONSALE_WEBHOOK_SECRET`); several,
    /// comma-separated, during a rollover: each signs every delivery (one `v1=` each).
    #[arg(
        long = "webhook-secret",
        env = "ONSALE_WEBHOOK_SECRET",
        default_value = "onsale-dev-webhook-secret",
        value_delimiter = ','
    )]
    pub webhook_secrets: Vec<String>,
}

#[derive(Debug, clap::Parser)]
struct Defaults {
    #[command(flatten)]
    settings: Settings,
}

impl Default for Settings {
    /// The declared defaults (and the environment), as `processor-sim` with no flags starts.
    fn default() -> Self {
        <Defaults as clap::Parser>::parse_from(["processor-sim"]).settings
    }
}

#[derive(Debug, Default)]
struct Inner {
    ledger: Ledger,
    settings: Settings,
    deliveries: Vec<Delivery>,
    /// Webhook deliveries the receiver answered 2xx.
    delivered: u64,
    /// Calls answered 503 during an outage.
    refused: u64,
}

#[derive(Debug, Clone)]
struct Delivery {
    event: WebhookEvent,
    due: tokio::time::Instant,
    attempts: u32,
}

/// A running simulator's shared state.
#[derive(Debug, Clone, Default)]
pub struct Sim {
    inner: Arc<Mutex<Inner>>,
}

impl Sim {
    pub fn new(settings: Settings) -> Self {
        let sim = Self::default();
        sim.lock().settings = settings;
        sim
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock is a bug in this file; keep serving what is there.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn settings(&self) -> Settings {
        self.lock().settings.clone()
    }

    pub fn update(&self, f: impl FnOnce(&mut Settings)) {
        f(&mut self.lock().settings);
    }

    /// A copy of the books, for tests and the demo.
    /// How many webhook deliveries the receiver has answered 2xx (duplicates count each).
    pub fn delivered(&self) -> u64 {
        self.lock().delivered
    }

    /// How many calls the outage switch has answered 503.
    pub fn refused(&self) -> u64 {
        self.lock().refused
    }

    pub fn ledger(&self) -> Ledger {
        self.lock().ledger.clone()
    }

    pub fn router(&self) -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/v1/charges", post(create_charge))
            .route("/v1/charges/{key}", get(charge_status))
            .route("/v1/charges/{key}/void", post(void_charge))
            .route("/v1/refunds", post(create_refund))
            .route("/v1/settlements/{day}", get(settlement))
            .route("/v1/ledger", get(ledger_view))
            .route("/admin/settings", get(get_settings).post(post_settings))
            .with_state(self.clone())
    }

    /// Serves the API and delivers webhooks until `shutdown`.
    pub async fn run(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let deliverer = tokio::spawn(self.clone().deliver_webhooks());
        let served = axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await;
        deliverer.abort();
        Ok(served?)
    }

    /// Settles what is due, then sends due deliveries; a delivery that is not answered 2xx is
    /// tried again later, up to 30 times.
    async fn deliver_webhooks(self) {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_default();
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tick.tick().await;
            let (due, settings) = {
                let mut inner = self.lock();
                inner.ledger.advance(Utc::now());
                let settings = inner.settings.clone();
                let now = tokio::time::Instant::now();
                let mut rng = rand::rng();
                for event in inner.ledger.take_events() {
                    for _ in 0..=settings.webhook_duplicates {
                        let jitter = rng.random_range(0..=settings.webhook_jitter_ms);
                        inner.deliveries.push(Delivery {
                            event: event.clone(),
                            due: now + Duration::from_millis(jitter),
                            attempts: 0,
                        });
                    }
                }
                if settings.outage || settings.webhook_url.is_none() {
                    continue;
                }
                let (due, later): (Vec<Delivery>, Vec<Delivery>) =
                    inner.deliveries.drain(..).partition(|d| d.due <= now);
                inner.deliveries = later;
                (due, settings)
            };
            let Some(url) = settings.webhook_url.clone() else {
                continue;
            };
            for mut d in due {
                let (http, url, secret, sim) = (
                    http.clone(),
                    url.clone(),
                    settings.webhook_secrets.clone(),
                    self.clone(),
                );
                tokio::spawn(async move {
                    let body = serde_json::to_vec(&d.event).unwrap_or_default();
                    let secrets: Vec<&str> = secret.iter().map(String::as_str).collect();
                    let header = signature::sign(&secrets, Utc::now().timestamp(), &body);
                    let ok = http
                        .post(&url)
                        .header(signature::HEADER, header)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    if ok {
                        sim.lock().delivered += 1;
                    } else if d.attempts < 30 {
                        d.attempts += 1;
                        d.due = tokio::time::Instant::now()
                            + Duration::from_millis(200 * u64::from(d.attempts.min(10)));
                        sim.lock().deliveries.push(d);
                    }
                });
            }
        }
    }
}

fn problem(status: StatusCode, code: &str, detail: impl std::fmt::Display) -> Response {
    (
        status,
        Json(json!({"code": code, "detail": detail.to_string()})),
    )
        .into_response()
}

fn refused(e: &LedgerError) -> Response {
    let status = match e {
        LedgerError::InvalidToken | LedgerError::InvalidAmount => StatusCode::BAD_REQUEST,
        LedgerError::IdempotencyMismatch => StatusCode::UNPROCESSABLE_ENTITY,
        LedgerError::NoSuchCharge => StatusCode::NOT_FOUND,
        LedgerError::NotCaptured | LedgerError::AlreadyCaptured | LedgerError::RefundTooLarge => {
            StatusCode::CONFLICT
        }
    };
    problem(status, e.code(), e)
}

fn outage(sim: &Sim) -> Option<Response> {
    let mut inner = sim.lock();
    if inner.settings.outage {
        inner.refused += 1;
    }
    inner.settings.outage.then(|| {
        let mut r = problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "processor_unavailable",
            "the processor is down",
        );
        r.headers_mut()
            .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        r
    })
}

fn idempotency_key(headers: &HeaderMap) -> Option<String> {
    headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty() && k.len() <= 255)
        .map(str::to_owned)
}

/// The charge as the API answers it: 200 captured, 402 declined, 202 still pending.
fn charge_answer(c: &Charge) -> Response {
    let status = match c.status {
        ChargeStatus::Succeeded | ChargeStatus::Refunded => StatusCode::OK,
        ChargeStatus::Failed | ChargeStatus::Voided => StatusCode::PAYMENT_REQUIRED,
        ChargeStatus::Pending => StatusCode::ACCEPTED,
    };
    (status, Json(c)).into_response()
}

/// The checks every money-moving call starts with: the processor is up, and the call carries
/// its Idempotency-Key.
fn keyed_call(sim: &Sim, headers: &HeaderMap) -> Result<String, Box<Response>> {
    if let Some(r) = outage(sim) {
        return Err(Box::new(r));
    }
    idempotency_key(headers).ok_or_else(|| {
        Box::new(problem(
            StatusCode::BAD_REQUEST,
            "idempotency_key_required",
            "send an Idempotency-Key",
        ))
    })
}

async fn create_charge(
    State(sim): State<Sim>,
    headers: HeaderMap,
    Json(req): Json<ChargeRequest>,
) -> Response {
    let key = match keyed_call(&sim, &headers) {
        Ok(key) => key,
        Err(r) => return *r,
    };
    let (result, first, settings) = {
        let mut inner = sim.lock();
        let first = inner.ledger.status(&key).is_none();
        let settle = chrono::Duration::milliseconds(inner.settings.settle_ms as i64);
        let r = inner.ledger.charge(&key, req, settle, Utc::now());
        (r, first, inner.settings.clone())
    };
    match result {
        Ok(c) => {
            if first && c.behaviour.hangs() {
                tokio::time::sleep(Duration::from_millis(settings.hang_ms)).await;
            }
            if settings.respond_delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(settings.respond_delay_ms)).await;
            }
            // Answer with the charge as it is now (it may have resolved while we hung).
            let now = sim.lock().ledger.status(&key).cloned().unwrap_or(c);
            charge_answer(&now)
        }
        Err(e) => refused(&e),
    }
}

async fn charge_status(State(sim): State<Sim>, Path(key): Path<String>) -> Response {
    if let Some(r) = outage(&sim) {
        return r;
    }
    match sim.lock().ledger.status(&key) {
        Some(c) => (StatusCode::OK, Json(c)).into_response(),
        None => refused(&LedgerError::NoSuchCharge),
    }
}

async fn void_charge(State(sim): State<Sim>, Path(key): Path<String>) -> Response {
    if let Some(r) = outage(&sim) {
        return r;
    }
    let result = sim.lock().ledger.void(&key, Utc::now());
    match result {
        Ok(c) => (StatusCode::OK, Json(c)).into_response(),
        Err(e) => refused(&e),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RefundRequest {
    charge_key: String,
    amount_cents: i64,
}

async fn create_refund(
    State(sim): State<Sim>,
    headers: HeaderMap,
    Json(req): Json<RefundRequest>,
) -> Response {
    let key = match keyed_call(&sim, &headers) {
        Ok(key) => key,
        Err(r) => return *r,
    };
    let result = sim
        .lock()
        .ledger
        .refund(&key, &req.charge_key, req.amount_cents, Utc::now());
    match result {
        Ok(r) => (StatusCode::OK, Json(r)).into_response(),
        Err(e) => refused(&e),
    }
}

/// The settlement file of a day, as CSV with a header line.
async fn settlement(State(sim): State<Sim>, Path(day): Path<String>) -> Response {
    if let Some(r) = outage(&sim) {
        return r;
    }
    let Ok(day) = day.parse::<NaiveDate>() else {
        return problem(
            StatusCode::BAD_REQUEST,
            "invalid_date",
            "dates are YYYY-MM-DD",
        );
    };
    let mut csv = String::from("kind,key,charge_key,reference,amount_cents,settled_at\n");
    for l in sim.lock().ledger.settlement(day) {
        csv.push_str(&format!(
            "{},{},{},{},{},{}\n",
            l.kind,
            l.key,
            l.charge_key,
            l.reference,
            l.amount_cents,
            l.settled_at.to_rfc3339()
        ));
    }
    ([("content-type", "text/csv")], csv).into_response()
}

async fn ledger_view(State(sim): State<Sim>) -> Response {
    let ledger = sim.ledger();
    let captures: BTreeMap<String, u32> = ledger.captures_per_reference();
    Json(json!({
        "charges": ledger.charges().collect::<Vec<_>>(),
        "refunds": ledger.refunds().collect::<Vec<_>>(),
        "capturesPerReference": captures,
    }))
    .into_response()
}

async fn get_settings(State(sim): State<Sim>) -> Json<Settings> {
    Json(sim.settings())
}

/// Changes the named settings, leaves the rest.
async fn post_settings(State(sim): State<Sim>, Json(patch): Json<serde_json::Value>) -> Response {
    let mut current = serde_json::to_value(sim.settings()).unwrap_or_default();
    if let (Some(cur), Some(p)) = (current.as_object_mut(), patch.as_object()) {
        for (k, v) in p {
            cur.insert(k.clone(), v.clone());
        }
    }
    match serde_json::from_value::<Settings>(current) {
        Ok(s) => {
            sim.update(|cur| *cur = s.clone());
            Json(s).into_response()
        }
        Err(e) => problem(StatusCode::BAD_REQUEST, "invalid_settings", e),
    }
}
