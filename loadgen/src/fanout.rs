//! `bench-fanout` (issue 30): many subscribers of one show's seat-map deltas on one serving
//! process, over SSE or gRPC `StreamDeltas`, and for every (subscriber, hold) pair the time from
//! sending the hold to the first delta whose `held` count for the section includes it.
//!
//! Tens of thousands of connections from one machine to one port need more than one source
//! address (each address has about 28,000 ephemeral ports): subscribers are spread over
//! `--local-addrs` (127.0.0.1, 127.0.0.2, ... are all loopback). gRPC streams, and SSE streams
//! with `--http2` (as a browser's EventSources to one origin over HTTP/2), share HTTP/2
//! connections, `--streams-per-connection` each; over HTTP/1.1 each SSE subscriber is a
//! connection of its own. With `--server-pid` the serving process's
//! resident memory is read before and after the subscribers connect: memory per subscriber.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hdrhistogram::Histogram;
use onsale_edge::auth::{mint, Role};
use onsale_proto::v1::seat_maps_client::SeatMapsClient;
use onsale_proto::v1::{seat_map_update, StreamDeltasRequest};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Transport {
    Sse,
    Grpc,
}

/// What `bench-fanout` is asked to do.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Fanout {
    /// The service's REST base URL (holds, and SSE).
    #[arg(long)]
    pub base: String,
    /// Its gRPC URL (for `--transport grpc`).
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub grpc: String,
    /// The show; none: a 50,000-seat show is scheduled for the run.
    #[arg(long)]
    pub event: Option<String>,
    #[arg(long, value_enum, default_value_t = Transport::Sse)]
    pub transport: Transport,
    #[arg(long, default_value = "101")]
    pub section: String,
    #[arg(long, default_value_t = 10_000)]
    pub subscribers: usize,
    /// Source addresses the subscribers' connections are spread over.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1")]
    pub local_addrs: Vec<IpAddr>,
    /// Streams per HTTP/2 connection (the server's `ONSALE_HTTP2_MAX_STREAMS` or fewer).
    #[arg(long, default_value_t = 200)]
    pub streams_per_connection: usize,
    /// SSE over HTTP/2 (cleartext, prior knowledge) instead of a connection per subscriber.
    #[arg(long)]
    pub http2: bool,
    #[arg(long, default_value_t = 30)]
    pub holds: usize,
    #[arg(long, default_value_t = 700)]
    pub interval_ms: u64,
    /// The serving process, for its memory per subscriber (Linux's /proc).
    #[arg(long)]
    pub server_pid: Option<u32>,
}

/// A process's resident memory in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What every subscriber shares: when each hold was sent, and the latencies.
struct Shared {
    start: Instant,
    /// Hold k (0-based) was sent `sent[k]` micros after `start`.
    sent: Vec<AtomicU64>,
    base_held: usize,
    latencies: Mutex<Histogram<u64>>,
    connected: AtomicU64,
    failed: AtomicU64,
    /// 503s answered to a subscriber's connect, retried.
    retried: AtomicU64,
    /// Why the first subscriber that could not connect could not.
    first_error: Mutex<Option<String>>,
}

impl Shared {
    fn failed(&self, why: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut first) = self.first_error.lock() {
            first.get_or_insert(why);
        }
    }

    /// A delta said the section holds `held` seats: the holds it newly includes arrived now.
    fn arrived(&self, seen: &mut usize, held: usize) {
        let upto = held.saturating_sub(self.base_held).min(self.sent.len());
        if *seen >= upto {
            return;
        }
        let now = self.start.elapsed().as_micros() as u64;
        if let Ok(mut h) = self.latencies.lock() {
            while *seen < upto {
                let t = self.sent[*seen].load(Ordering::Relaxed);
                let _ = h.record(now.saturating_sub(t).max(1));
                *seen += 1;
            }
        }
    }
}

/// One SSE subscriber until it has seen every hold (or the stream ends).
async fn sse(
    shared: Arc<Shared>,
    http: reqwest::Client,
    url: String,
    section: String,
    gate: Arc<Semaphore>,
) {
    let permit = gate.acquire_owned().await;
    // A 503 is retried after its Retry-After, as a browser's EventSource does (a minute at
    // most); anything else fails the subscriber.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut res = loop {
        match http.get(&url).send().await {
            Ok(r) if r.status().is_success() => break r,
            Ok(r) if r.status() == 503 && Instant::now() < deadline => {
                shared.retried.fetch_add(1, Ordering::Relaxed);
                let wait = r
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                    .unwrap_or(1);
                tokio::time::sleep(Duration::from_secs(wait)).await;
            }
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                return shared.failed(format!("{status}: {body}"));
            }
            Err(e) => return shared.failed(format!("{e:?}")),
        }
    };
    drop(permit);
    shared.connected.fetch_add(1, Ordering::Relaxed);
    let (mut buf, mut seen) = (String::new(), 0usize);
    while seen < shared.sent.len() {
        let Ok(Some(chunk)) = res.chunk().await else {
            break;
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            let Ok(d) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            let held = d["sections"]
                .as_array()
                .and_then(|s| s.iter().find(|s| s["section"] == section.as_str()))
                .and_then(|s| s["held"].as_u64());
            if let Some(held) = held {
                shared.arrived(&mut seen, held as usize);
            }
        }
    }
}

/// One gRPC `StreamDeltas` subscriber on a shared connection.
async fn grpc(
    shared: Arc<Shared>,
    channel: tonic::transport::Channel,
    event: String,
    section: String,
    gate: Arc<Semaphore>,
) {
    let permit = gate.acquire_owned().await;
    let request = StreamDeltasRequest {
        event_id: event,
        section: String::new(),
        all_seats: false,
        after_seq: 0,
    };
    let mut stream = match SeatMapsClient::new(channel).stream_deltas(request).await {
        Ok(s) => s.into_inner(),
        Err(e) => return shared.failed(format!("{e:?}")),
    };
    drop(permit);
    shared.connected.fetch_add(1, Ordering::Relaxed);
    let mut seen = 0usize;
    while seen < shared.sent.len() {
        let Some(Ok(update)) = stream.next().await else {
            break;
        };
        if let Some(seat_map_update::Update::Delta(d)) = update.update {
            if let Some(s) = d.sections.iter().find(|s| s.section == section) {
                shared.arrived(&mut seen, s.held as usize);
            }
        }
    }
}

/// The run: subscribers connected, then the holds, one every `interval_ms`; a JSON summary.
pub(crate) async fn run(f: Fanout, secret: &str) -> anyhow::Result<Value> {
    let setup = reqwest::Client::new();
    let event = match &f.event {
        Some(e) => e.clone(),
        None => {
            let venue = crate::venue::venue_body();
            crate::create_show(&setup, &f.base, secret, &venue, 600, false).await?
        }
    };
    // Holds already in the section: the streams' counts are absolute.
    let map: Value = setup
        .get(format!("{}/v1/events/{event}/seats", f.base))
        .send()
        .await?
        .json()
        .await?;
    let base_held = map["sections"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["section"] == f.section.as_str()))
        .and_then(|s| s["held"].as_u64())
        .unwrap_or(0) as usize;
    let shared = Arc::new(Shared {
        start: Instant::now(),
        sent: (0..f.holds).map(|_| AtomicU64::new(0)).collect(),
        base_held,
        latencies: Mutex::new(Histogram::<u64>::new(3)?),
        connected: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        retried: AtomicU64::new(0),
        first_error: Mutex::new(None),
    });
    let rss_before = f.server_pid.and_then(rss_kib);
    let gate = Arc::new(Semaphore::new(256));
    let mut tasks = Vec::with_capacity(f.subscribers);
    match f.transport {
        Transport::Sse => {
            // Over HTTP/2 a client is one connection, its streams multiplexed on it; over
            // HTTP/1.1 a client per source address, a connection per subscriber.
            let per = f.streams_per_connection.max(1);
            let n = if f.http2 {
                f.subscribers.div_ceil(per)
            } else {
                f.local_addrs.len()
            };
            let clients = (0..n)
                .map(|c| {
                    let b = reqwest::Client::builder()
                        .local_address(f.local_addrs[c % f.local_addrs.len()]);
                    if f.http2 {
                        b.http2_prior_knowledge().build()
                    } else {
                        b.pool_max_idle_per_host(0).build()
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            let url = format!("{}/v1/events/{event}/updates", f.base);
            for i in 0..f.subscribers {
                let c = if f.http2 { i / per } else { i % clients.len() };
                let http = clients[c].clone();
                tasks.push(tokio::spawn(sse(
                    shared.clone(),
                    http,
                    url.clone(),
                    f.section.clone(),
                    gate.clone(),
                )));
            }
        }
        Transport::Grpc => {
            let per = f.streams_per_connection.max(1);
            let mut channels = Vec::new();
            for c in 0..f.subscribers.div_ceil(per) {
                let endpoint = tonic::transport::Endpoint::from_shared(f.grpc.clone())?
                    .local_address(Some(f.local_addrs[c % f.local_addrs.len()]));
                channels.push(endpoint.connect().await?);
            }
            for i in 0..f.subscribers {
                tasks.push(tokio::spawn(grpc(
                    shared.clone(),
                    channels[i / per].clone(),
                    event.clone(),
                    f.section.clone(),
                    gate.clone(),
                )));
            }
        }
    }
    // Everyone connected (or failed) before the first hold.
    let deadline = Instant::now() + Duration::from_secs(300);
    let settled =
        || shared.connected.load(Ordering::Relaxed) + shared.failed.load(Ordering::Relaxed);
    while settled() < f.subscribers as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let connect_secs = shared.start.elapsed().as_secs_f64();
    let rss_after = f.server_pid.and_then(rss_kib);
    let run = uuid::Uuid::new_v4().simple().to_string();
    let mut ok_holds = 0;
    for (k, slot) in shared.sent.iter().enumerate() {
        slot.store(shared.start.elapsed().as_micros() as u64, Ordering::Relaxed);
        // A fan may hold 8 seats: a fresh account per eight holds.
        let who = mint(secret, &format!("fanout-{run}-{}", k / 8), Role::Fan, 3_600)?;
        let res = setup
            .post(format!("{}/v1/events/{event}/holds", f.base))
            .bearer_auth(&who)
            .json(&json!({"quantity": 1, "section": f.section}))
            .send()
            .await?;
        if res.status().as_u16() == 201 {
            ok_holds += 1;
        }
        tokio::time::sleep(Duration::from_millis(f.interval_ms)).await;
    }
    // The last holds' deltas: every subscriber has seen them, or 10 s have passed.
    let expected = shared.connected.load(Ordering::Relaxed) as usize * ok_holds;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline
        && shared.latencies.lock().map_or(0, |h| h.len() as usize) < expected
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for t in &tasks {
        t.abort();
    }
    let h = shared
        .latencies
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    let connected = shared.connected.load(Ordering::Relaxed);
    let per_subscriber_kib = match (rss_before, rss_after) {
        (Some(b), Some(a)) if connected > 0 => Some(a.saturating_sub(b) as f64 / connected as f64),
        _ => None,
    };
    Ok(json!({
        "transport": f.transport,
        "http2": f.http2 || f.transport == Transport::Grpc,
        "subscribers": f.subscribers,
        "connected": connected,
        "failed": shared.failed.load(Ordering::Relaxed),
        "retried_503": shared.retried.load(Ordering::Relaxed),
        "first_error": shared.first_error.lock().ok().and_then(|e| e.clone()),
        "connect_secs": connect_secs,
        "holds": ok_holds,
        "samples": h.len(),
        "missing": (expected as u64).saturating_sub(h.len()),
        "p50_ms": h.value_at_quantile(0.50) as f64 / 1000.0,
        "p99_ms": h.value_at_quantile(0.99) as f64 / 1000.0,
        "max_ms": h.max() as f64 / 1000.0,
        "server_rss_before_kib": rss_before,
        "server_rss_after_kib": rss_after,
        "server_kib_per_subscriber": per_subscriber_kib,
    }))
}
