//! The shards drill (`make drill-shards`, issue 31): an on-sale on three shows, two on shard 1
//! and one on shard 2; shard 1's primary killed at a random moment (and brought back, or
//! replaced by its trio's failover with `HA=1`); the second show of shard 1 moved to shard 2
//! mid-sale. Then, per show: every acknowledged hold and order looked up in its shard's log,
//! seats in two live orders, the longest time without an acknowledged write, the answers that
//! were not a success, and the seat map against a replay; every order paid (or failed) once
//! with its payment and tickets on the show's shard and none elsewhere, no order charged twice
//! (the processor's books); the moved show's hash chain verified on its new shard and its rows
//! gone from the old one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use onsale_domain::show::Show;
use onsale_domain::transitions::OrderState;
use onsale_domain::ShowId;
use onsale_edge::auth::{mint, Role};
use onsale_eventlog::shards::{Directory, PgDirectory, ShardId};
use onsale_eventlog::{DatabaseSettings, EventLog, PgEventLog};
use rand::Rng;
use serde_json::{json, Value};

use crate::venue;

#[derive(Debug, clap::Args)]
pub(crate) struct ShardsDrill {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base: String,
    /// The main database (the directory, the read models) and `--shard-url` each shard.
    #[command(flatten)]
    database: DatabaseSettings,
    /// How long the sale runs.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Fans buying at once on each show.
    #[arg(long, default_value_t = 12)]
    concurrency: usize,
    /// Kills shard 1's primary (`scripts/stack.sh kill-shard 1`), once, between 20% and 45% of
    /// the sale.
    #[arg(long)]
    kill: String,
    /// Brings it back (`scripts/stack.sh start-shard 1`), `--restore-after` seconds after the kill.
    #[arg(long)]
    restore: String,
    #[arg(long, default_value_t = 10)]
    restore_after: u64,
    /// Moves a show (`{show}` stands for its id) to shard 2, between 30% and 70% of the sale;
    /// tried again every 2 s until it succeeds (an operator's retry while the source is down).
    #[arg(long)]
    move_command: String,
    /// The card-processor simulator, whose books count the charges per order.
    #[arg(long, default_value = "http://127.0.0.1:8090")]
    processor: String,
}

/// One show of the drill, and what its fans were told.
#[derive(Debug)]
struct Sale {
    id: String,
    shard: u16,
    acks: Mutex<Vec<Instant>>,
    holds: Mutex<Vec<String>>,
    orders: Mutex<Vec<String>>,
    conflicts: AtomicU64,
    unavailable: AtomicU64,
    /// Each 503's code (or no answer), with when it came: seconds into the sale.
    unavailable_seen: Mutex<std::collections::BTreeMap<String, (u64, f64, f64)>>,
    other: AtomicU64,
    other_seen: Mutex<Vec<String>>,
    started: Instant,
}

impl Sale {
    fn new(id: String, shard: u16, started: Instant) -> Self {
        Self {
            id,
            shard,
            acks: Mutex::default(),
            holds: Mutex::default(),
            orders: Mutex::default(),
            conflicts: AtomicU64::new(0),
            unavailable: AtomicU64::new(0),
            unavailable_seen: Mutex::default(),
            other: AtomicU64::new(0),
            other_seen: Mutex::default(),
            started,
        }
    }

    /// A 503 (or no answer at all), by its code.
    fn unavailable(&self, code: &str) {
        self.unavailable.fetch_add(1, Ordering::Relaxed);
        let at = self.started.elapsed().as_secs_f64();
        if let Ok(mut seen) = self.unavailable_seen.lock() {
            let e = seen.entry(code.to_owned()).or_insert((0, at, at));
            e.0 += 1;
            e.2 = at;
        }
    }

    fn acknowledged(&self, list: &Mutex<Vec<String>>, id: &Value) {
        if let Ok(mut a) = self.acks.lock() {
            a.push(Instant::now());
        }
        if let (Some(id), Ok(mut l)) = (id.as_str(), list.lock()) {
            l.push(id.to_owned());
        }
    }

    fn unexpected(&self, what: String) {
        self.other.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut seen) = self.other_seen.lock() {
            if seen.len() < 5 {
                seen.push(what);
            }
        }
    }
}

/// A client's retry loop: a 503 or no answer means "not committed, try again with the same
/// key", for 90 s at most (a trio's failover takes 20-25 s). Each 503 is counted for the show.
async fn send(what: &str, sale: &Sale, req: impl Fn() -> reqwest::RequestBuilder) -> (u16, Value) {
    let until = Instant::now() + Duration::from_secs(90);
    let mut pause = Duration::from_millis(50);
    loop {
        match req().send().await {
            Ok(res) if res.status().as_u16() != 503 => {
                let status = res.status().as_u16();
                return (status, res.json().await.unwrap_or(Value::Null));
            }
            Ok(res) => {
                let body: Value = res.json().await.unwrap_or(Value::Null);
                let code = body["code"].as_str().unwrap_or("503");
                sale.unavailable(&format!("{what}: {code}"));
            }
            Err(_) => sale.unavailable(&format!("{what}: no answer")),
        }
        if Instant::now() > until {
            return (503, Value::Null);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// One fan after another on `sale` until `until`: a hold (best available or picked seats), then
/// most of the time an order, else the hold released.
async fn fans(
    http: reqwest::Client,
    base: String,
    secret: String,
    sale: Arc<Sale>,
    worker: usize,
    until: Instant,
) {
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let fan = format!("shards-{}-{worker}-{n}", &sale.id[..8]);
        let Ok(token) = mint(&secret, &fan, Role::Fan, 3600) else {
            return;
        };
        let (count, pick, order) = {
            let mut rng = rand::rng();
            (
                rng.random_range(1..=2u32),
                rng.random_bool(0.5),
                rng.random_bool(0.7),
            )
        };
        let body = if pick {
            json!({"seatIds": venue::pick(&mut rand::rng(), count, false)})
        } else {
            json!({"quantity": count})
        };
        // A POST under a fresh idempotency key, the same key on every retry.
        let post = |what: &'static str, url: String, body: Value| {
            let (http, token, sale) = (&http, &token, &sale);
            async move {
                let key = uuid::Uuid::new_v4().to_string();
                send(what, sale, || {
                    http.post(&url)
                        .bearer_auth(token)
                        .header("Idempotency-Key", &key)
                        .json(&body)
                })
                .await
            }
        };
        let url = format!("{base}/v1/events/{}/holds", sale.id);
        let (status, hold) = post("hold", url, body).await;
        match status {
            201 => sale.acknowledged(&sale.holds, &hold["holdId"]),
            409 => {
                sale.conflicts.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            s => {
                sale.unexpected(format!("hold: {s} {hold}"));
                continue;
            }
        }
        let hold_id = hold["holdId"].as_str().unwrap_or_default().to_owned();
        if order {
            let body = json!({"holdId": hold_id, "paymentToken": "tok_ok"});
            let (status, placed) = post("order", format!("{base}/v1/orders"), body).await;
            match status {
                202 => sale.acknowledged(&sale.orders, &placed["orderId"]),
                s => sale.unexpected(format!("order: {s} {placed}")),
            }
        } else {
            let url = format!("{base}/v1/holds/{hold_id}");
            let (status, released) =
                send("release", &sale, || http.delete(&url).bearer_auth(&token)).await;
            if !matches!(status, 200 | 204) {
                sale.unexpected(format!("release: {status} {released}"));
            }
        }
    }
}

/// Runs `command` in a shell; its first line of output, or why it failed.
async fn run(command: &str) -> Result<String, String> {
    match tokio::process::Command::new("sh")
        .args(["-c", command])
        .output()
        .await
    {
        Ok(out) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        }
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// When the drill acted, and how the move went.
#[derive(Debug, Default)]
struct Acts {
    killed: OnceLock<Instant>,
    restored: OnceLock<Instant>,
    moved: OnceLock<(Instant, Instant, u32, String)>,
}

pub(crate) async fn drill(d: ShardsDrill, secret: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()?;
    let main = d.database.pool(4, true)?;
    let shards = d
        .database
        .shards()
        .iter()
        .map(|s| s.pool(4, true))
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(
        shards.len() >= 2,
        "the shards drill needs two shards (make up SHARDS=2)"
    );
    // Three shows: A and C on shard 1 (C moves to shard 2 mid-sale), B on shard 2.
    let mut sales = Vec::new();
    let started = Instant::now();
    for (name, shard) in [("A", 1u16), ("B", 2), ("C", 1)] {
        let id = crate::create_show_with(
            &http,
            &d.base,
            secret,
            &venue::venue_body(),
            120,
            false,
            json!({"shard": shard, "name": format!("Shards drill {name}")}),
        )
        .await?;
        println!("show {name}: {id} on shard {shard}");
        sales.push(Arc::new(Sale::new(id, shard, started)));
    }
    let until = started + Duration::from_secs(d.seconds);
    let mut workers = Vec::new();
    for sale in &sales {
        for w in 0..d.concurrency {
            workers.push(tokio::spawn(fans(
                http.clone(),
                d.base.clone(),
                secret.to_owned(),
                sale.clone(),
                w,
                until,
            )));
        }
    }
    let acts = Arc::new(Acts::default());
    let secs = d.seconds as f64;
    let (kill_at, move_at) = {
        let mut rng = rand::rng();
        (
            Duration::from_secs_f64(secs * rng.random_range(0.20..0.45)),
            Duration::from_secs_f64(secs * rng.random_range(0.30..0.70)),
        )
    };
    let killer = {
        let (acts, kill, restore, after) = (
            acts.clone(),
            d.kill.clone(),
            d.restore.clone(),
            d.restore_after,
        );
        tokio::spawn(async move {
            tokio::time::sleep_until((started + kill_at).into()).await;
            let _ = acts.killed.set(Instant::now());
            println!(
                "[drill] {:.1} s: `{kill}`: {:?}",
                kill_at.as_secs_f64(),
                run(&kill).await
            );
            tokio::time::sleep(Duration::from_secs(after)).await;
            let out = run(&restore).await;
            let _ = acts.restored.set(Instant::now());
            println!("[drill] `{restore}`: {out:?}");
        })
    };
    let mover = {
        let (acts, command, show) = (
            acts.clone(),
            d.move_command.replace("{show}", &sales[2].id),
            sales[2].id.clone(),
        );
        tokio::spawn(async move {
            tokio::time::sleep_until((started + move_at).into()).await;
            let begun = Instant::now();
            let mut tries = 0;
            while begun.elapsed() < Duration::from_secs(180) {
                tries += 1;
                match run(&command).await {
                    Ok(out) => {
                        println!(
                            "[drill] {:.1} s: show {show} moved after {tries} tries: {out}",
                            move_at.as_secs_f64()
                        );
                        let _ = acts.moved.set((begun, Instant::now(), tries, out));
                        return;
                    }
                    Err(e) => {
                        let first = e
                            .lines()
                            .find(|l| l.starts_with("Error:"))
                            .or_else(|| e.lines().next())
                            .unwrap_or_default()
                            .to_owned();
                        println!("[drill] move try {tries} failed: {first}");
                    }
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        })
    };
    for w in workers {
        w.await?;
    }
    killer.await?;
    mover.await?;
    report(&main, &shards, &sales, &acts, started).await?;
    payments(&http, &d.processor, &main, &shards, &sales).await
}

/// How long the payments may take to settle after the sale (shard 1's orders wait for it to
/// come back, and for the consumers' gap check).
const PAYMENTS_SETTLE: Duration = Duration::from_secs(120);

/// Once the sale is over: every order of each show's log resolved, with one payment row (closed)
/// on the show's shard, a live ticket for every seat of its paid orders there, and none of
/// either on the other shard; no order captured twice at the processor.
async fn payments(
    http: &reqwest::Client,
    processor: &str,
    main: &sqlx::PgPool,
    shards: &[sqlx::PgPool],
    sales: &[Arc<Sale>],
) -> anyhow::Result<()> {
    let directory = PgDirectory::new(main.clone());
    let begun = Instant::now();
    let mut failures = Vec::new();
    println!(
        "{:<5} {:>5} {:>7} {:>6} {:>7} {:>8} {:>8} {:>9}",
        "show", "shard", "orders", "paid", "failed", "payments", "tickets", "elsewhere"
    );
    for (name, sale) in ["A", "B", "C"].iter().zip(sales) {
        let show: ShowId = sale.id.parse()?;
        let shard = directory.lookup(show).await?.unwrap_or(ShardId::FIRST);
        let pool = &shards[usize::from(shard.get()) - 1];
        // Settled: no order pending, a closed payment per order, a ticket per paid seat.
        let (orders, paid, failed, paid_seats, rows) = loop {
            let replayed = PgEventLog::new(pool.clone()).replay(show).await?;
            let count = |f: fn(&OrderState) -> bool| {
                replayed.show.orders().filter(|(_, o)| f(&o.state)).count()
            };
            let orders = replayed.show.orders().count();
            let pending = count(|s| matches!(s, OrderState::PendingPayment));
            let paid = count(|s| matches!(s, OrderState::Confirmed));
            let paid_seats: usize = replayed
                .show
                .orders()
                .filter(|(_, o)| matches!(o.state, OrderState::Confirmed))
                .map(|(_, o)| o.seats.len())
                .sum();
            let rows = onsale_payments_store::show_rows(pool, &sale.id).await?;
            let settled = pending == 0
                && rows.0 == i64::try_from(orders)?
                && rows.1 == 0
                && rows.2 == i64::try_from(paid_seats)?;
            if settled || begun.elapsed() > PAYMENTS_SETTLE {
                break (orders, paid, orders - paid - pending, paid_seats, rows);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let mut elsewhere = 0;
        for (n, other) in shards.iter().enumerate() {
            if n + 1 != usize::from(shard.get()) {
                let (p, _, t) = onsale_payments_store::show_rows(other, &sale.id).await?;
                elsewhere += p + t;
            }
        }
        println!(
            "{name:<5} {shard:>5} {orders:>7} {paid:>6} {failed:>7} {:>8} {:>8} {elsewhere:>9}",
            format!("{}/{}", rows.0 - rows.1, rows.0),
            format!("{}/{paid_seats}", rows.2),
        );
        if rows.0 != i64::try_from(orders)? || rows.1 > 0 || rows.2 != i64::try_from(paid_seats)? {
            failures.push(format!(
                "show {name}: {orders} orders, {paid_seats} paid seats, but {} payments ({} open) and {} live tickets on shard {shard} after {:.0} s",
                rows.0,
                rows.1,
                rows.2,
                PAYMENTS_SETTLE.as_secs_f64()
            ));
        }
        if elsewhere > 0 {
            failures.push(format!(
                "show {name}: {elsewhere} payment and ticket rows on a shard it does not live on"
            ));
        }
    }
    let twice = crate::drill::captures(http, processor)
        .await?
        .values()
        .filter(|n| **n > 1)
        .count();
    println!("orders captured twice at the processor: {twice}");
    if twice > 0 {
        failures.push(format!("{twice} orders captured twice"));
    }
    println!(
        "(payments: closed/all rows on the show's shard, one per order; tickets: live/paid seats;          elsewhere: rows of the show on the other shard)"
    );
    if failures.is_empty() {
        println!("payments passed: every order paid or failed once, its rows on its show's shard");
        Ok(())
    } else {
        anyhow::bail!("payments failed:\n  {}", failures.join("\n  "))
    }
}

/// The longest stretch without an acknowledged write from the last one before `from`.
fn gap(acks: &[Instant], from: Instant) -> Duration {
    let mut prev = acks
        .iter()
        .rev()
        .find(|t| **t <= from)
        .copied()
        .unwrap_or(from);
    let mut widest = Duration::ZERO;
    for t in acks.iter().filter(|t| **t > from) {
        widest = widest.max(*t - prev);
        prev = *t;
    }
    widest
}

/// Seats held by two live orders (awaiting payment or paid) in a replay.
fn sold_twice(show: &Show) -> usize {
    let mut seen = std::collections::HashSet::new();
    show.orders()
        .filter(|(_, o)| matches!(o.state, OrderState::PendingPayment | OrderState::Confirmed))
        .flat_map(|(_, o)| o.seats.iter().copied())
        .filter(|s| !seen.insert(*s))
        .count()
}

async fn report(
    main: &sqlx::PgPool,
    shards: &[sqlx::PgPool],
    sales: &[Arc<Sale>],
    acts: &Acts,
    started: Instant,
) -> anyhow::Result<()> {
    let directory = PgDirectory::new(main.clone());
    let killed = *acts
        .killed
        .get()
        .context("the drill never killed shard 1")?;
    let mut failures = Vec::new();
    println!(
        "\n== shards drill ({:.0} s) ==",
        started.elapsed().as_secs_f64()
    );
    if let Some(r) = acts.restored.get() {
        println!(
            "shard 1's primary killed {:.1} s in; restored {:.1} s after the kill",
            (killed - started).as_secs_f64(),
            (*r - killed).as_secs_f64()
        );
    }
    match acts.moved.get() {
        Some((begun, done, tries, out)) => println!(
            "show C moved to shard 2: {tries} tries, the last took {:.2} s ({out})",
            (*done - *begun).as_secs_f64()
        ),
        None => failures.push("show C was never moved".to_owned()),
    }
    println!(
        "{:<5} {:>5} {:>6} {:>7} {:>6} {:>7} {:>6} {:>10} {:>5} {:>6} {:>8}",
        "show",
        "shard",
        "holds",
        "orders",
        "lost",
        "twice",
        "409",
        "gap(s)",
        "503",
        "other",
        "map≠log"
    );
    for (name, sale) in ["A", "B", "C"].iter().zip(sales) {
        let show: ShowId = sale.id.parse()?;
        let shard = directory.lookup(show).await?.unwrap_or(ShardId::FIRST);
        let pool = &shards[usize::from(shard.get()) - 1];
        let replayed = PgEventLog::new(pool.clone()).replay(show).await?;
        let holds = sale.holds.lock().map(|h| h.clone()).unwrap_or_default();
        let orders = sale.orders.lock().map(|o| o.clone()).unwrap_or_default();
        let lost = {
            let (holds, orders) = crate::drill::lost(&replayed.show, &holds, &orders);
            holds.len() + orders.len()
        };
        let twice = sold_twice(&replayed.show);
        let mut acks = sale.acks.lock().map(|a| a.clone()).unwrap_or_default();
        acks.sort();
        let widest = gap(&acks, killed);
        let wrong =
            crate::drill::Drill::seat_map_mismatches(main, &sale.id, &replayed.show).await?;
        let (unavailable, other) = (
            sale.unavailable.load(Ordering::Relaxed),
            sale.other.load(Ordering::Relaxed),
        );
        println!(
            "{name:<5} {:>5} {:>6} {:>7} {lost:>6} {twice:>7} {:>6} {:>10.1} {unavailable:>5} {other:>6} {wrong:>8}",
            format!("{}→{shard}", sale.shard),
            holds.len(),
            orders.len(),
            sale.conflicts.load(Ordering::Relaxed),
            widest.as_secs_f64(),
        );
        if let Ok(seen) = sale.other_seen.lock() {
            for s in seen.iter() {
                println!("      {name}: {s}");
            }
        }
        if let Ok(seen) = sale.unavailable_seen.lock() {
            for (code, (n, first, last)) in seen.iter() {
                println!("      {name}: 503 on {code} x{n}, {first:.1}-{last:.1} s into the sale");
            }
        }
        if lost > 0 || twice > 0 || wrong > 0 {
            failures.push(format!(
                "show {name}: {lost} acknowledged writes lost, {twice} seats sold twice, {wrong} seats differ on the map"
            ));
        }
        if holds.is_empty() || acks.last().is_none_or(|t| *t <= killed) {
            failures.push(format!("show {name} sold nothing after the kill"));
        }
        // Shard 2 never failed: its show sells through shard 1's death without an error.
        if sale.shard == 2 && (unavailable > 0 || other > 0) {
            failures.push(format!(
                "show {name} on shard 2 saw {unavailable} 503s and {other} other errors while shard 1 was down"
            ));
        }
        if *name == "C" {
            anyhow::ensure!(shard.get() == 2, "show C is on shard {shard}, not 2");
            let verified = onsale_eventlog::chain::verify(pool, Some(&sale.id), 10_000).await?;
            let left = onsale_eventlog::scan::count(
                &shards[0],
                &onsale_eventlog::scan::Range {
                    show: Some(sale.id.clone()),
                    ..Default::default()
                },
            )
            .await?;
            println!(
                "show C on shard 2: {} events, hash chain {}; rows left on shard 1: {left}",
                verified.events,
                if verified.broken.is_none() {
                    "intact"
                } else {
                    "BROKEN"
                }
            );
            if let Some(b) = verified.broken {
                failures.push(format!("show C's chain on shard 2: {b}"));
            }
            if left > 0 {
                failures.push(format!("show C left {left} rows on shard 1"));
            }
        }
    }
    println!(
        "(lost: acknowledged holds and orders missing from the show's log; twice: seats in two live orders; \
         gap: longest time without an acknowledged write from the kill on; 503: answers a client retried)"
    );
    if failures.is_empty() {
        println!("drill passed: 0 lost, 0 sold twice, shard 2 unaffected, the moved show verified");
        Ok(())
    } else {
        anyhow::bail!("drill failed:\n  {}", failures.join("\n  "))
    }
}
