//! The region drill (`make drill-region`, docs/adr/024): fans buy through the region router
//! while region a writes; at a random moment a shell command cuts region a off and promotes
//! region b; the fans go on (retrying what was refused or not answered, under the same
//! idempotency keys) until the sale ends; then region a comes back as b's standby and is sent
//! writes directly. The report: every acknowledged hold and order looked up in b's log (the
//! RPO), seats in two confirmed orders, charges per order at the processor, the write gap (the
//! RTO as fans saw it), and what a answered after it came back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use onsale_domain::transitions::OrderState;
use onsale_domain::ShowId;
use onsale_eventlog::EventLog;
use rand::Rng;
use serde_json::{json, Value};

use crate::drill;

/// The drill's settings.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The region router: where fans send everything.
    pub base: String,
    /// Region a's own address, written to directly once it came back.
    pub region_a: String,
    /// Region b's databases (standbys of a's until the promotion): where the log is checked
    /// afterwards, each show on its shard.
    pub database: onsale_eventlog::DatabaseSettings,
    pub processor: String,
    pub secret: String,
    pub fans: usize,
    pub seconds: u64,
    /// Cuts region a off and promotes b.
    pub cut: String,
    /// Brings region a back as b's standby.
    pub rejoin: String,
}

#[derive(Default)]
struct Acks {
    /// When each write was acknowledged.
    at: Vec<Instant>,
    holds: Vec<String>,
    orders: Vec<String>,
    /// Answers other than the acknowledgement and a refusal of the seats, by status.
    unavailable: u64,
}

/// One write sent until it is answered for good: a 503 or no answer is retried after
/// `Retry-After` (at most a second) under the same idempotency key, for up to a minute.
async fn send(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    body: &Value,
    acks: &Mutex<Acks>,
) -> Option<(u16, Value)> {
    let key = uuid::Uuid::new_v4().to_string();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        let res = http
            .post(url)
            .bearer_auth(token)
            .header("Idempotency-Key", &key)
            .json(body)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        let wait = match res {
            Ok(r) if r.status().as_u16() != 503 => {
                let status = r.status().as_u16();
                return Some((status, r.json().await.unwrap_or(Value::Null)));
            }
            Ok(r) => r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .unwrap_or(1)
                .min(1),
            Err(_) => 1,
        };
        if let Ok(mut a) = acks.lock() {
            a.unavailable += 1;
        }
        tokio::time::sleep(Duration::from_millis(200 * wait)).await;
    }
    None
}

/// One fan until the sale ends: a hold of two seats (the best available), then three times in
/// four an order paid with a card that captures.
async fn fan(
    plan: &Plan,
    http: &reqwest::Client,
    show: &str,
    n: usize,
    until: Instant,
    acks: &Mutex<Acks>,
) {
    let mut bought = 0;
    while Instant::now() < until {
        // An account per purchase: one account's seat cap would stop a fan after a few.
        bought += 1;
        let token = onsale_edge::auth::mint(
            &plan.secret,
            &format!("fan-{n}-{bought}"),
            onsale_edge::auth::Role::Fan,
            7200,
        )
        .unwrap_or_default();
        let url = format!("{}/v1/events/{show}/holds", plan.base);
        let Some((201, hold)) = send(http, &url, &token, &json!({"quantity": 2}), acks).await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Some(hold_id) = hold["holdId"].as_str().map(str::to_owned) else {
            continue;
        };
        if let Ok(mut a) = acks.lock() {
            a.at.push(Instant::now());
            a.holds.push(hold_id.clone());
        }
        if rand::rng().random_bool(0.75) {
            let body = json!({"holdId": hold_id, "paymentToken": "tok_ok"});
            let url = format!("{}/v1/orders", plan.base);
            if let Some((202, order)) = send(http, &url, &token, &body, acks).await {
                if let (Some(id), Ok(mut a)) = (order["orderId"].as_str(), acks.lock()) {
                    a.at.push(Instant::now());
                    a.orders.push(id.to_owned());
                }
            }
        }
    }
}

pub(crate) async fn run(plan: Plan) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let show = crate::create_show(
        &http,
        &plan.base,
        &plan.secret,
        &crate::venue::venue_body(),
        120,
        false,
    )
    .await
    .context("open the show in region a")?;
    println!(
        "region drill: show {show}, {} fans for {} s through {}",
        plan.fans, plan.seconds, plan.base
    );
    let started = Instant::now();
    let until = started + Duration::from_secs(plan.seconds);
    let cut_after =
        Duration::from_secs_f64(plan.seconds as f64 * rand::rng().random_range(0.2..0.6));
    let acks = Mutex::new(Acks::default());
    let cut = async {
        tokio::time::sleep(cut_after).await;
        let at = Instant::now();
        let out = tokio::process::Command::new("sh")
            .args(["-c", &plan.cut])
            .output()
            .await;
        let done = Instant::now();
        match out {
            Ok(o) => println!(
                "[drill] {:.1} s into the sale: `{}` ({:.1} s): {}{}",
                (at - started).as_secs_f64(),
                plan.cut,
                (done - at).as_secs_f64(),
                String::from_utf8_lossy(&o.stdout).trim(),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => println!("[drill] `{}` failed: {e}", plan.cut),
        }
        (at, done)
    };
    let fans = futures::future::join_all(
        (0..plan.fans).map(|n| fan(&plan, &http, &show, n, until, &acks)),
    );
    let ((cut_at, promoted_at), _) = tokio::join!(cut, fans);
    let acks = acks.into_inner().unwrap_or_default();

    // Region a comes back as b's standby; its own address is sent writes.
    let out = tokio::process::Command::new("sh")
        .args(["-c", &plan.rejoin])
        .output()
        .await?;
    println!(
        "[drill] `{}`: {}",
        plan.rejoin,
        String::from_utf8_lossy(&out.stdout).trim()
    );
    let mut from_a: HashMap<u16, u64> = HashMap::new();
    let token =
        onsale_edge::auth::mint(&plan.secret, "late-fan", onsale_edge::auth::Role::Fan, 600)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while from_a.values().sum::<u64>() < 20 && Instant::now() < deadline {
        let r = http
            .post(format!("{}/v1/events/{show}/holds", plan.region_a))
            .bearer_auth(&token)
            .json(&json!({"quantity": 1}))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match r {
            Ok(r) => *from_a.entry(r.status().as_u16()).or_default() += 1,
            // Its processes are starting again: not an attempt yet.
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }

    // The checks, in b: every payment resolved, the log against what was acknowledged.
    let (_, log) = crate::sharded_log(&plan.database).context("region b's databases")?;
    let show_id: ShowId = show.parse()?;
    let resolve_by = Instant::now() + Duration::from_secs(180);
    let replayed = loop {
        let r = log.replay(show_id).await?;
        let pending = r
            .show
            .orders()
            .filter(|(_, o)| o.state == OrderState::PendingPayment)
            .count();
        if pending == 0 || Instant::now() > resolve_by {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let (lost_holds, lost_orders) = drill::lost(&replayed.show, &acks.holds, &acks.orders);
    let mut owners: HashMap<u32, u32> = HashMap::new();
    let mut pending = 0;
    for (_, o) in replayed.show.orders() {
        match o.state {
            OrderState::Confirmed => {
                for s in &o.seats {
                    *owners.entry(*s).or_default() += 1;
                }
            }
            OrderState::PendingPayment => pending += 1,
            _ => {}
        }
    }
    let sold_twice = owners.values().filter(|n| **n > 1).count();
    let captures = drill::captures(&http, &plan.processor).await?;
    let charged_twice = captures.values().filter(|n| **n > 1).count();
    let mut at = acks.at.clone();
    at.sort();
    // The longest stretch without an acknowledged write from the cut on (writes in flight in
    // a may still be acknowledged just after the cut began).
    let mut gap = Duration::ZERO;
    let mut prev = at
        .iter()
        .rev()
        .find(|t| **t <= cut_at)
        .copied()
        .unwrap_or(cut_at);
    for t in at.iter().filter(|t| **t > cut_at) {
        gap = gap.max(*t - prev);
        prev = *t;
    }
    let first_after = at.iter().find(|t| **t > promoted_at).copied();
    let a_acknowledged: u64 = from_a
        .iter()
        .filter(|(s, _)| (200..300).contains(*s))
        .map(|(_, n)| n)
        .sum();

    println!("\n== region drill ==");
    println!(
        "region a cut off {:.1} s into the sale; b promoted {:.1} s later",
        (cut_at - started).as_secs_f64(),
        (promoted_at - cut_at).as_secs_f64()
    );
    println!(
        "acknowledged: {} holds, {} orders ({} answers of 503 or none, retried)",
        acks.holds.len(),
        acks.orders.len(),
        acks.unavailable
    );
    match first_after {
        Some(t) => println!(
            "write gap (the longest stretch without an acknowledged write from the cut on): {:.1} s; the first write in b {:.1} s after the promotion",
            gap.as_secs_f64(),
            (t - promoted_at).as_secs_f64()
        ),
        None => println!("write gap: no write was acknowledged after the promotion"),
    }
    println!(
        "lost (acknowledged, missing from b's log): {} holds, {} orders",
        lost_holds.len(),
        lost_orders.len()
    );
    println!("seats in two confirmed orders: {sold_twice}");
    println!(
        "orders charged: {}, charged twice: {charged_twice}; orders still pending: {pending}",
        captures.len()
    );
    let mut answers: Vec<_> = from_a.iter().collect();
    answers.sort();
    println!("region a after it came back: {answers:?} (status: attempts), acknowledged: {a_acknowledged}");
    anyhow::ensure!(
        lost_holds.is_empty() && lost_orders.is_empty(),
        "acknowledged writes lost: {lost_holds:?} {lost_orders:?}"
    );
    anyhow::ensure!(
        sold_twice == 0 && charged_twice == 0,
        "sold or charged twice"
    );
    anyhow::ensure!(
        a_acknowledged == 0,
        "the old region acknowledged writes after it came back"
    );
    // Its refusal is what is checked: a region that answered nothing proved nothing.
    anyhow::ensure!(
        from_a.values().sum::<u64>() >= 20,
        "region a answered {} of 20 writes within a minute of coming back",
        from_a.values().sum::<u64>()
    );
    anyhow::ensure!(
        first_after.is_some(),
        "no write was acknowledged after the promotion"
    );
    Ok(())
}
