//! A read-path benchmark driven over HTTP: a fixed-rate hold load (for the commit-to-projection
//! lag). The fan-out to subscribers is `bench-fanout` (fanout.rs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use onsale_edge::auth::{mint, Role};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

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
