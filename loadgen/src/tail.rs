//! `make bench-tail` (issue 30): the hold path's latency under a constant arrival rate (open
//! loop), which a closed-loop tool under-samples: there a slow answer also slows the client,
//! so the worst moments send fewer requests. Here request `n` is due at `n / rate` seconds
//! and its latency counts from then, whether it was sent on time or waited for a free
//! connection (coordinated omission corrected). The maximum rate is measured first in the same
//! run (closed loop, every connection busy), then each point runs at a share of it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use onsale_edge::auth::{mint, Role};
use serde_json::json;
use tokio::sync::Semaphore;

/// What `bench-tail` is asked to do.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Tail {
    /// The service's base URL.
    #[arg(long)]
    pub base: String,
    /// Connections (the most requests in flight at once).
    #[arg(long, default_value_t = 1_000)]
    pub connections: usize,
    /// Seconds of the closed-loop run that measures the maximum rate.
    #[arg(long, default_value_t = 30)]
    pub max_seconds: u64,
    /// The points, as percentages of the maximum rate (`0`: none, only `--rates`).
    #[arg(long, value_delimiter = ',', default_values_t = [50, 70, 90])]
    pub points: Vec<u32>,
    /// Further points at these rates (holds a second), after the shares: two builds compared
    /// at one load.
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Seconds of each point.
    #[arg(long, default_value_t = 120)]
    pub seconds: u64,
    /// The holds' time to live (seconds): short, so seats keep coming back.
    #[arg(long, default_value_t = 2)]
    pub ttl: u32,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One point: a rate held for a while, and the latencies it gave.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Point {
    pub share_of_max: u32,
    pub target_per_sec: f64,
    pub answered_per_sec: f64,
    pub granted: u64,
    pub refused: u64,
    pub errors: u64,
    /// The errors by what they were: an HTTP status, or `timeout`, `connect`, `request`.
    pub error_kinds: BTreeMap<String, u64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub over_100ms: u64,
    pub over_1s: u64,
}

/// Tokens of many fans (the per-account cap stays out of it) and a client with a connection
/// for each request in flight.
struct Load {
    http: reqwest::Client,
    url: String,
    tokens: Vec<String>,
}

impl Load {
    fn new(base: &str, event: &str, connections: usize, secret: &str) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(connections)
                .tcp_nodelay(true)
                .timeout(Duration::from_secs(30))
                .build()?,
            url: format!("{base}/v1/events/{event}/holds"),
            tokens: (0..20_000)
                .map(|i| mint(secret, &format!("tail-{i}"), Role::Fan, 7_200))
                .collect::<Result<_, _>>()?,
        })
    }

    /// One hold of a uniformly drawn seat: 201, 409 (taken), or an error (5xx, 429, none),
    /// with what it was.
    async fn hold(&self, n: usize) -> (Outcome, Option<String>) {
        let seat = crate::venue::seat_id(rand::random_range(0..crate::venue::SEATS));
        let sent = self
            .http
            .post(&self.url)
            .bearer_auth(&self.tokens[n % self.tokens.len()])
            .json(&json!({ "seatIds": [seat] }))
            .send()
            .await;
        match sent.map(|r| r.status().as_u16()) {
            Ok(201) => (Outcome::Granted, None),
            Ok(409) => (Outcome::Refused, None),
            Ok(status) => (Outcome::Error, Some(status.to_string())),
            Err(e) if e.is_timeout() => (Outcome::Error, Some("timeout".into())),
            Err(e) if e.is_connect() => (Outcome::Error, Some("connect".into())),
            Err(_) => (Outcome::Error, Some("request".into())),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Granted,
    Refused,
    Error,
}

/// Answers a second with every connection busy for `seconds` (closed loop).
async fn max_rate(load: &Arc<Load>, connections: usize, seconds: u64) -> f64 {
    let answered = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let loops: Vec<_> = (0..connections)
        .map(|c| {
            let (load, answered) = (load.clone(), answered.clone());
            tokio::spawn(async move {
                let mut n = c;
                while Instant::now() < until {
                    if load.hold(n).await.0 != Outcome::Error {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    n += connections;
                }
            })
        })
        .collect();
    for l in loops {
        let _ = l.await;
    }
    answered.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// `rate` holds a second for `seconds`, each timed from when it was due.
async fn open_loop(load: &Arc<Load>, connections: usize, rate: f64, seconds: u64) -> Point {
    let histogram = Arc::new(Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds"),
    ));
    let counts = Arc::new([
        AtomicU64::new(0), // granted
        AtomicU64::new(0), // refused
        AtomicU64::new(0), // errors
    ]);
    let kinds: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let free = Arc::new(Semaphore::new(connections));
    let start = tokio::time::Instant::now();
    let total = (rate * seconds as f64) as usize;
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..total {
        let due = start + Duration::from_secs_f64(n as f64 / rate);
        tokio::time::sleep_until(due).await;
        // Waiting for a connection is part of the latency: it counts from `due`.
        let Ok(permit) = free.clone().acquire_owned().await else {
            break;
        };
        let (load, histogram, counts, kinds) = (
            load.clone(),
            histogram.clone(),
            counts.clone(),
            kinds.clone(),
        );
        tasks.spawn(async move {
            let (outcome, kind) = load.hold(n).await;
            let micros = due.elapsed().as_micros() as u64;
            drop(permit);
            counts[outcome as usize].fetch_add(1, Ordering::Relaxed);
            if let Some(kind) = kind {
                *kinds
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(kind)
                    .or_default() += 1;
            }
            let mut h = histogram.lock().unwrap_or_else(|p| p.into_inner());
            let _ = h.record(micros.max(1));
        });
        // Reap what finished, so the set stays as large as what is in flight.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let took = start.elapsed().as_secs_f64();
    let h = histogram.lock().unwrap_or_else(|p| p.into_inner());
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let over = |micros: u64| h.count_between(micros + 1, h.max().max(micros + 1));
    let error_kinds = std::mem::take(&mut *kinds.lock().unwrap_or_else(|p| p.into_inner()));
    let [granted, refused, errors] = counts
        .as_ref()
        .each_ref()
        .map(|c| c.load(Ordering::Relaxed));
    Point {
        share_of_max: 0,
        target_per_sec: rate,
        answered_per_sec: (granted + refused) as f64 / took,
        granted,
        refused,
        errors,
        error_kinds,
        p50_ms: ms(0.50),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: h.max() as f64 / 1000.0,
        over_100ms: over(100_000),
        over_1s: over(1_000_000),
    }
}

/// The run: a show, the maximum rate, then each point; printed as a table (or JSON lines).
pub(crate) async fn run(t: Tail, secret: &str) -> anyhow::Result<()> {
    let setup = reqwest::Client::new();
    let venue = crate::venue::venue_body();
    let event = crate::create_show(&setup, &t.base, secret, &venue, t.ttl, false).await?;
    let load = Arc::new(Load::new(&t.base, &event, t.connections, secret)?);
    let max = max_rate(&load, t.connections, t.max_seconds).await;
    if t.json {
        println!(
            "{}",
            json!({ "max_per_sec": max, "connections": t.connections })
        );
    } else {
        println!(
            "maximum: {max:.0} answers/s ({} connections, closed loop, {} s)\n",
            t.connections, t.max_seconds
        );
        println!("| load | target/s | answered/s | p50 ms | p99 ms | p99.9 ms | max ms | > 100 ms | > 1 s | errors |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    }
    let shares = t
        .points
        .iter()
        .filter(|s| **s > 0)
        .map(|s| max * f64::from(*s) / 100.0);
    for rate in shares.chain(t.rates.iter().copied()) {
        let mut p = open_loop(&load, t.connections, rate, t.seconds).await;
        p.share_of_max = (100.0 * rate / max).round() as u32;
        if t.json {
            println!("{}", serde_json::to_string(&p)?);
        } else {
            println!(
                "| {}% | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} | {} | {} | {}{} |",
                p.share_of_max,
                p.target_per_sec,
                p.answered_per_sec,
                p.p50_ms,
                p.p99_ms,
                p.p999_ms,
                p.max_ms,
                p.over_100ms,
                p.over_1s,
                p.errors,
                if p.error_kinds.is_empty() {
                    String::new()
                } else {
                    let kinds: Vec<String> = p
                        .error_kinds
                        .iter()
                        .map(|(k, n)| format!("{k}: {n}"))
                        .collect();
                    format!(" ({})", kinds.join(", "))
                }
            );
        }
    }
    Ok(())
}
