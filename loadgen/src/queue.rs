//! `make bench-queue`: the waiting room's numbers.
//!   tick      the admitter's tick (one Lua round trip) with 1,000 to 1,000,000 queued positions
//!   joins     joins/s through the REST API into a line that already holds 1,000,000 positions
//!   on-sale   live sessions against N while simulated fans wait, enter and walk away

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use onsale_domain::ShowId;
use onsale_edge::auth::{mint, Role};
use onsale_waiting_room::api::JoinRequest;
use onsale_waiting_room::store::{key, Store};

use crate::client::{Api, Reply};
use tokio_util::sync::CancellationToken;

/// Puts `size` accounts in a show's line (positions 1..size), in chunks so Redis never blocks
/// for long.
async fn fill(
    conn: &mut redis::aio::ConnectionManager,
    show: ShowId,
    size: u64,
) -> anyhow::Result<()> {
    let script = redis::Script::new(
        r"for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do redis.call('HSET', KEYS[1], 'q' .. i, i) end
          return 1",
    );
    let mut from = 1;
    while from <= size {
        let to = (from + 49_999).min(size);
        let _: i64 = script
            .key(key(show, "pos"))
            .arg(from)
            .arg(to)
            .invoke_async(conn)
            .await?;
        from = to + 1;
    }
    redis::pipe()
        .set(key(show, "tail"), size)
        .set(key(show, "next"), size)
        .set(key(show, "open"), 0)
        .query_async::<()>(conn)
        .await?;
    Ok(())
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// Tick time against queue length: the same work per tick (N = 1,000, 500 live sessions, so
/// 500 slots to admit and reserve), only the line behind it grows.
pub(crate) async fn bench_ticks(redis_url: &str) -> anyhow::Result<()> {
    let store = Store::connect(redis::Client::open(redis_url)?, &CancellationToken::new()).await?;
    let mut conn = store.conn()?;
    println!("tick time (one Lua round trip), N = 1,000, 500 live sessions, 200 ticks per size:");
    println!(
        "{:>12} {:>10} {:>10} {:>10}",
        "queued", "p50 ms", "p99 ms", "max ms"
    );
    let mut rows = Vec::new();
    for size in [1_000u64, 10_000, 100_000, 1_000_000] {
        let show = ShowId::random();
        fill(&mut conn, show, size).await?;
        let far = chrono::Utc::now().timestamp_millis() + 3_600_000;
        let mut p = redis::pipe();
        for i in 0..500 {
            p.zadd(key(show, "leases"), format!("s{i}"), far);
        }
        p.query_async::<()>(&mut conn).await?;
        let mut h = Histogram::<u64>::new(3)?;
        for _ in 0..200 {
            // Start each tick from the front of the line with no history, so each does the
            // same work whatever the line's length.
            redis::pipe()
                .set(key(show, "admitted"), 0)
                .del(key(show, "hist"))
                .del(key(show, "reserved"))
                .query_async::<()>(&mut conn)
                .await?;
            let now = chrono::Utc::now().timestamp_millis();
            let t = Instant::now();
            let tick = store.tick(show, now, 0, 1_000, 1, false).await?;
            h.record(t.elapsed().as_micros() as u64)?;
            anyhow::ensure!(
                tick.advanced == 500,
                "a tick admitted {} not 500",
                tick.advanced
            );
        }
        println!(
            "{size:>12} {:>10.3} {:>10.3} {:>10.3}",
            ms(&h, 0.5),
            ms(&h, 0.99),
            h.max() as f64 / 1000.0
        );
        rows.push((size, ms(&h, 0.5)));
        let _: () = redis::cmd("DEL")
            .arg(key(show, "pos"))
            .arg(key(show, "leases"))
            .arg(key(show, "passes"))
            .query_async(&mut conn)
            .await?;
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        println!(
            "tick p50 at {} queued / at {} queued: {:.2}x",
            last.0,
            first.0,
            last.1 / first.1
        );
    }
    Ok(())
}

/// Joins/s through the REST API into a line of 1,000,000.
pub(crate) async fn bench_joins(
    base: &str,
    redis_url: &str,
    secret: &str,
    clients: usize,
    seconds: u64,
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()?;
    let event =
        crate::create_show(&http, base, secret, &crate::venue::venue_body(), 600, true).await?;
    let store = Store::connect(redis::Client::open(redis_url)?, &CancellationToken::new()).await?;
    fill(&mut store.conn()?, event.parse()?, 1_000_000).await?;
    let count = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, base, event, secret, count, errors) = (
            http.clone(),
            base.to_owned(),
            event.clone(),
            secret.to_owned(),
            count.clone(),
            errors.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new(3).expect("histogram");
            let mut n = 0u64;
            while Instant::now() < deadline {
                let token = mint(&secret, &format!("j{c}x{n}"), Role::Fan, 3600).expect("token");
                n += 1;
                let t = Instant::now();
                let ok = http
                    .post(format!("{base}/v1/events/{event}/waiting-room"))
                    .bearer_auth(token)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().as_u16() == 201);
                h.record(t.elapsed().as_micros() as u64).expect("record");
                if ok {
                    count.fetch_add(1, Ordering::Relaxed);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            h
        }));
    }
    let mut all = Histogram::<u64>::new(3)?;
    for t in tasks {
        all.add(t.await?)?;
    }
    let n = count.load(Ordering::Relaxed);
    println!(
        "joins into a line of 1,000,000: {n} in {seconds} s = {:.0}/s at {clients} clients, p50 {:.1} ms, p99 {:.1} ms, {} failed",
        n as f64 / seconds as f64,
        ms(&all, 0.5),
        ms(&all, 0.99),
        errors.load(Ordering::Relaxed)
    );
    Ok(())
}

/// Live sessions against N during an on-sale: fans join, wait, enter, keep their session for
/// its lease and walk away (no heartbeat), so only leases free the slots.
pub(crate) async fn bench_onsale(
    base: &str,
    redis_url: &str,
    secret: &str,
    fans: usize,
    target: i64,
    seconds: u64,
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .build()?;
    let event =
        crate::create_show(&http, base, secret, &crate::venue::venue_body(), 600, true).await?;
    let api = Api::new(http, base);
    let store = Store::connect(redis::Client::open(redis_url)?, &CancellationToken::new()).await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..fans {
        let (api, event, secret) = (api.clone(), event.clone(), secret.to_owned());
        tasks.push(tokio::spawn(async move {
            let token = mint(&secret, &format!("f{i}"), Role::Fan, 3600).expect("token");
            let fan = api.fan(token);
            let Reply::Done(joined) = fan.join(&event, &JoinRequest::default()).await else {
                return None;
            };
            let admission = fan
                .admission_token(&event, &joined.queue_token, Duration::from_millis(500))
                .await?;
            loop {
                if fan.enter(&event, &admission).await.refused() != Some(429) {
                    return Some(());
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }));
    }
    let mut samples = Vec::new();
    let mut conn = store.conn()?;
    while started.elapsed() < Duration::from_secs(seconds) {
        let now = chrono::Utc::now().timestamp_millis();
        let live: i64 = redis::cmd("ZCOUNT")
            .arg(key(event.parse()?, "leases"))
            .arg(now)
            .arg("+inf")
            .query_async(&mut conn)
            .await?;
        samples.push(live);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for t in tasks {
        t.abort();
    }
    // The zone fills in the first seconds; judge the steady state.
    let steady: Vec<i64> = samples.iter().skip(samples.len() / 4).copied().collect();
    let mut sorted = steady.clone();
    sorted.sort_unstable();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
    let max = samples.iter().copied().max().unwrap_or(0);
    let min = sorted.first().copied().unwrap_or(0);
    println!(
        "on-sale: {fans} fans, N = {target}: live sessions in the steady state median {median} ({:.0}% of N), min {min}, max {max} over {} samples; over N: {}",
        median as f64 * 100.0 / target as f64,
        samples.len(),
        samples.iter().filter(|&&s| s > target).count()
    );
    Ok(())
}
