//! Read-path benchmarks driven over HTTP: SSE fan-out (hold-to-delta latency across many
//! subscribers) and a fixed-rate hold load (for the commit-to-projection lag).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use onsale_edge::auth::{mint, Role};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

/// Opens `subscribers` SSE streams on a show, makes `holds` one-seat holds in `section`, one
/// every `interval`, and measures for every (subscriber, hold) pair the time from sending the
/// hold to the first delta whose `held` count for the section includes it.
pub(crate) async fn bench_sse(
    base: &str,
    event: &str,
    section: &str,
    subscribers: usize,
    holds: usize,
    interval: Duration,
    secret: &str,
) -> anyhow::Result<Value> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    // Holds already in the section: the stream's counts are absolute.
    let map: Value = http
        .get(format!("{base}/v1/events/{event}/seats"))
        .send()
        .await?
        .json()
        .await?;
    let base_held = map["sections"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["section"] == section))
        .and_then(|s| s["held"].as_u64())
        .unwrap_or(0) as usize;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let start = Instant::now();
    // Hold k (1-based) was sent at sent[k - 1] micros after `start`; 0 = not yet.
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..holds).map(|_| AtomicU64::new(0)).collect());
    let latencies = Arc::new(std::sync::Mutex::new(Histogram::<u64>::new(3)?));
    let connected = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let connecting = Arc::new(Semaphore::new(256));
    let mut tasks = Vec::with_capacity(subscribers);
    for _ in 0..subscribers {
        let (http, url) = (http.clone(), format!("{base}/v1/events/{event}/updates"));
        let (sent, latencies, connected, failed, connecting) = (
            sent.clone(),
            latencies.clone(),
            connected.clone(),
            failed.clone(),
            connecting.clone(),
        );
        let section = section.to_owned();
        tasks.push(tokio::spawn(async move {
            let permit = connecting.acquire_owned().await;
            let mut res = match http.get(&url).send().await {
                Ok(r) if r.status().is_success() => r,
                _ => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            drop(permit);
            connected.fetch_add(1, Ordering::Relaxed);
            let (mut buf, mut seen) = (String::new(), 0usize);
            while seen < sent.len() {
                let Ok(Some(chunk)) = res.chunk().await else {
                    break;
                };
                let now = start.elapsed().as_micros() as u64;
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
                        .and_then(|s| s["held"].as_u64())
                        .unwrap_or(0) as usize;
                    let held = held.saturating_sub(base_held);
                    if seen < held.min(sent.len()) {
                        if let Ok(mut h) = latencies.lock() {
                            while seen < held.min(sent.len()) {
                                let t = sent[seen].load(Ordering::Relaxed);
                                let _ = h.record(now.saturating_sub(t).max(1));
                                seen += 1;
                            }
                        }
                    }
                }
            }
        }));
    }
    // Everyone connected (or failed) before the first hold.
    let deadline = Instant::now() + Duration::from_secs(120);
    while connected.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed) < subscribers as u64
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let connect_secs = start.elapsed().as_secs_f64();
    let token = mint(secret, "sse-bench", Role::Fan, 3_600)?;
    let mut ok_holds = 0;
    for (k, slot) in sent.iter().enumerate() {
        slot.store(start.elapsed().as_micros() as u64, Ordering::Relaxed);
        // A fan may hold 8 seats: a fresh account per eight holds.
        let who = mint(secret, &format!("sse-{run}-{}", k / 8), Role::Fan, 3_600)
            .unwrap_or_else(|_| token.clone());
        let res = http
            .post(format!("{base}/v1/events/{event}/holds"))
            .bearer_auth(&who)
            .json(&json!({"quantity": 1, "section": section}))
            .send()
            .await?;
        if res.status().as_u16() == 201 {
            ok_holds += 1;
        }
        tokio::time::sleep(interval).await;
    }
    // Give the last deltas time to arrive, then stop listening.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for t in &tasks {
        t.abort();
    }
    let h = latencies
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    let expected = connected.load(Ordering::Relaxed) * ok_holds;
    Ok(json!({
        "subscribers": subscribers,
        "connected": connected.load(Ordering::Relaxed),
        "failed": failed.load(Ordering::Relaxed),
        "connect_secs": connect_secs,
        "holds": ok_holds,
        "samples": h.len(),
        "missing": expected.saturating_sub(h.len()),
        "p50_ms": h.value_at_quantile(0.50) as f64 / 1000.0,
        "p99_ms": h.value_at_quantile(0.99) as f64 / 1000.0,
        "max_ms": h.max() as f64 / 1000.0,
    }))
}

/// Sends holds of one uniformly drawn seat at a fixed rate (open loop) for `seconds`; a seat
/// already held is a 409 (`refused`), as at a real on-sale.
pub(crate) async fn hold_rate(
    base: &str,
    event: &str,
    rate: u32,
    seconds: u64,
    secret: &str,
) -> anyhow::Result<Value> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(2_000)
        .tcp_nodelay(true)
        .build()?;
    let tokens: Arc<Vec<String>> = Arc::new(
        (0..10_000)
            .map(|i| mint(secret, &format!("rate-{i}"), Role::Fan, 3_600))
            .collect::<Result<_, _>>()?,
    );
    let (ok, refused, failed) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let inflight = Arc::new(Semaphore::new(2_000));
    let start = Instant::now();
    let mut n = 0usize;
    // Open loop: every millisecond, send what the rate says is due by now.
    while start.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let due = (start.elapsed().as_secs_f64() * f64::from(rate)) as usize;
        while n < due {
            let Ok(permit) = inflight.clone().acquire_owned().await else {
                break;
            };
            let (http, tokens, ok, refused, failed) = (
                http.clone(),
                tokens.clone(),
                ok.clone(),
                refused.clone(),
                failed.clone(),
            );
            let url = format!("{base}/v1/events/{event}/holds");
            n += 1;
            let token = tokens[n % tokens.len()].clone();
            let seat = crate::venue::seat_id(rand::random_range(0..crate::venue::SEATS));
            tokio::spawn(async move {
                let _permit = permit;
                match http
                    .post(url)
                    .bearer_auth(token)
                    .json(&json!({"seatIds": [seat]}))
                    .send()
                    .await
                {
                    Ok(r) if r.status().as_u16() == 201 => ok.fetch_add(1, Ordering::Relaxed),
                    Ok(_) => refused.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            });
        }
    }
    let sending = start.elapsed().as_secs_f64();
    let _ = inflight.acquire_many(2_000).await;
    let secs = start.elapsed().as_secs_f64();
    Ok(json!({
        "target_per_sec": rate,
        "sent": n,
        "holds": ok.load(Ordering::Relaxed),
        "holds_per_sec": ok.load(Ordering::Relaxed) as f64 / sending,
        "drain_secs": secs - sending,
        "refused": refused.load(Ordering::Relaxed),
        "failed": failed.load(Ordering::Relaxed),
    }))
}
