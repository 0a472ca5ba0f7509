//! `make drill-bots` (issue 29): honest fans hold and release seats of one show, first alone
//! (calm), then while bot accounts flood every route that reaches the show's owner with made-up
//! ids (unknown holds and orders of the hot show, ids naming shows that do not exist), run
//! hold -> order -> declined-card loops, and flood reads without a token with unknown ids
//! (storm). Half the honest fans share the bots' address (a NAT); the others have addresses of
//! their own (`X-Forwarded-For`, which the service believes from the local proxy). It reports
//! the fans' granted holds/s, p99 and 5xx, calm versus storm, the bots' share of 429, and the
//! lowest admission factor the service reported during the storm; and whether the goals held.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use onsale_edge::auth::{mint, Role};
use rand::Rng;
use serde_json::json;

/// What the drill is asked to do.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BotsDrill {
    /// The service's base URL.
    #[arg(long)]
    pub base: String,
    /// Where the service's `/metrics` are read (its operators' listener, e.g.
    /// `http://127.0.0.1:9100`); the base URL if unset (a service with `--public-metrics`).
    #[arg(long)]
    pub metrics_base: Option<String>,
    /// Honest fans (each a few actions a second, as a person at a seat map).
    #[arg(long, default_value_t = 32)]
    pub fans: u32,
    /// Bot accounts.
    #[arg(long, default_value_t = 6)]
    pub bots: u32,
    /// Concurrent request loops per bot.
    #[arg(long, default_value_t = 4)]
    pub loops: u32,
    /// Seconds of calm, then of storm.
    #[arg(long, default_value_t = 15)]
    pub seconds: u64,
    /// Card-testing loops need the card processor: off when the service has none.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub card_testing: bool,
    /// A pause after each bot request (milliseconds): 0 floods.
    #[arg(long, default_value_t = 0)]
    pub pause_ms: u64,
    /// The bots run in a process of their own at this `nice` level: on one machine their
    /// CPU would otherwise be the service's, which real bots' (on machines of their own)
    /// is not; the service still answers every request they send.
    #[arg(long, default_value_t = 10)]
    pub bots_nice: u8,
    /// Exit non-zero if a goal is missed.
    #[arg(long)]
    pub check: bool,
    /// Print the report as one JSON object (for tests) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The NAT's address (half the fans and every bot) and the fans' own.
const NAT: &str = "198.51.100.7";

fn fan_address(i: u32) -> String {
    if i.is_multiple_of(2) {
        NAT.to_owned()
    } else {
        format!("10.{}.{}.{}", 1 + i / 65_536, (i / 256) % 256, i % 256)
    }
}

/// The honest fans' figures of one phase.
#[derive(Debug)]
struct Phase {
    granted: AtomicU64,
    server_errors: AtomicU64,
    throttled: AtomicU64,
    latency: Mutex<Histogram<u64>>,
}

impl Phase {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            granted: AtomicU64::new(0),
            server_errors: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            latency: Mutex::new(Histogram::new_with_bounds(1, 60_000_000, 3)?),
        })
    }

    fn p99_ms(&self) -> f64 {
        let h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        h.value_at_quantile(0.99) as f64 / 1000.0
    }
}

/// The bots' figures.
#[derive(Debug, Default)]
struct Bots {
    requests: AtomicU64,
    throttled: AtomicU64,
    server_errors: AtomicU64,
}

/// What the drill measured.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Report {
    pub calm_holds_per_sec: f64,
    pub storm_holds_per_sec: f64,
    pub calm_p99_ms: f64,
    pub storm_p99_ms: f64,
    pub fan_5xx: u64,
    pub fan_429: u64,
    pub bot_requests: u64,
    pub bot_429_share: f64,
    pub bot_5xx: u64,
    pub lowest_admission_factor: Option<f64>,
}

impl Report {
    /// The goals, each with whether it held.
    pub(crate) fn goals(&self) -> Vec<(String, bool)> {
        vec![
            (
                format!(
                    "honest throughput in the storm >= 90% of calm ({:.0}%)",
                    100.0 * self.storm_holds_per_sec
                        / self.calm_holds_per_sec.max(f64::MIN_POSITIVE)
                ),
                self.storm_holds_per_sec >= 0.9 * self.calm_holds_per_sec,
            ),
            (
                format!(
                    "honest p99 in the storm <= 2x calm ({:.1} ms vs {:.1} ms)",
                    self.storm_p99_ms, self.calm_p99_ms
                ),
                self.storm_p99_ms <= 2.0 * self.calm_p99_ms,
            ),
            (
                format!("no 5xx to honest fans ({})", self.fan_5xx),
                self.fan_5xx == 0,
            ),
            (
                format!(
                    "no admission pause (lowest factor {})",
                    self.lowest_admission_factor
                        .map_or("not reported".to_owned(), |f| format!("{f:.2}"))
                ),
                self.lowest_admission_factor.is_none_or(|f| f >= 1.0),
            ),
            (
                format!(
                    ">= 90% of bot requests answered 429 ({:.1}%)",
                    100.0 * self.bot_429_share
                ),
                self.bot_429_share >= 0.9,
            ),
        ]
    }

    pub(crate) fn print(&self) {
        println!("| | calm | storm |");
        println!("|---|---|---|");
        println!(
            "| honest fans' granted holds/s | {:.0} | {:.0} |",
            self.calm_holds_per_sec, self.storm_holds_per_sec
        );
        println!(
            "| honest fans' hold p99 | {:.1} ms | {:.1} ms |",
            self.calm_p99_ms, self.storm_p99_ms
        );
        println!(
            "| honest fans' 5xx / 429 | - | {} / {} |",
            self.fan_5xx, self.fan_429
        );
        println!(
            "| bot requests (429 share, 5xx) | - | {} ({:.1}%, {}) |",
            self.bot_requests,
            100.0 * self.bot_429_share,
            self.bot_5xx
        );
        println!();
        for (goal, held) in self.goals() {
            println!("- [{}] {goal}", if held { "x" } else { " " });
        }
    }
}

/// Runs the drill against `base`, signing tokens with `secret`.
pub(crate) async fn run(d: &BotsDrill, secret: &str) -> anyhow::Result<Report> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1_024)
        .build()?;
    let venue = crate::venue::venue_body();
    let event = crate::create_show_with(
        &http,
        &d.base,
        secret,
        &venue,
        30,
        false,
        // Card testers get this many declines a day, then 429.
        json!({"maxFailedPayments": 3}),
    )
    .await?;
    let calm = Arc::new(Phase::new()?);
    let storm = Arc::new(Phase::new()?);
    // Two seconds first that count for nothing: the show's owner loads it, connections open.
    let warm = Arc::new(Phase::new()?);
    let warming = Arc::new(AtomicBool::new(true));
    let storming = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let phase_secs = d.seconds as f64;

    // The honest fans, through both phases.
    let mut fans = Vec::new();
    for i in 0..d.fans {
        let token = mint(secret, &format!("fan-{i}"), Role::Fan, 3_600)?;
        let (http, base, event) = (http.clone(), d.base.clone(), event.clone());
        let (calm, storm, storming, stop) =
            (calm.clone(), storm.clone(), storming.clone(), stop.clone());
        let (warm, warming) = (warm.clone(), warming.clone());
        let (addr, n) = (fan_address(i), d.fans);
        fans.push(tokio::spawn(async move {
            let mut k = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let phase = if warming.load(Ordering::Relaxed) {
                    &warm
                } else if storming.load(Ordering::Relaxed) {
                    &storm
                } else {
                    &calm
                };
                // Each fan its own seats: a grant depends on the service, not on luck.
                let seat = crate::venue::seat_id((i + n * k) % crate::venue::SEATS);
                k += 1;
                let started = Instant::now();
                let held = http
                    .post(format!("{base}/v1/events/{event}/holds"))
                    .bearer_auth(&token)
                    .header("x-forwarded-for", &addr)
                    .json(&json!({"seatIds": [seat]}))
                    .send()
                    .await;
                let micros = started.elapsed().as_micros() as u64;
                let mut hold_id = None;
                match held {
                    Ok(r) => {
                        let s = r.status().as_u16();
                        if s == 201 {
                            phase.granted.fetch_add(1, Ordering::Relaxed);
                            let v: serde_json::Value = r.json().await.unwrap_or_default();
                            hold_id = v["holdId"].as_str().map(str::to_owned);
                        } else if s == 429 {
                            phase.throttled.fetch_add(1, Ordering::Relaxed);
                        } else if s >= 500 {
                            phase.server_errors.fetch_add(1, Ordering::Relaxed);
                        }
                        let mut h = phase.latency.lock().unwrap_or_else(|p| p.into_inner());
                        let _ = h.record(micros.max(1));
                    }
                    Err(_) => {
                        phase.server_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let Some(id) = hold_id {
                    let released = http
                        .delete(format!("{base}/v1/holds/{id}"))
                        .bearer_auth(&token)
                        .header("x-forwarded-for", &addr)
                        .send()
                        .await;
                    match released {
                        Ok(r) if r.status().as_u16() >= 500 => {
                            phase.server_errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) if r.status().as_u16() == 429 => {
                            phase.throttled.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            phase.server_errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    warming.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(d.seconds)).await;
    storming.store(true, Ordering::Relaxed);
    let lowest = Arc::new(Mutex::new(None::<f64>));
    let mut tasks = Vec::new();
    // The admission factor, read from the service's metrics through the storm.
    {
        let base = d.metrics_base.clone().unwrap_or_else(|| d.base.clone());
        let (http, stop, lowest) = (http.clone(), stop.clone(), lowest.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Some(f) = admission_factor(&http, &base).await {
                    let mut l = lowest.lock().unwrap_or_else(|p| p.into_inner());
                    *l = Some(l.map_or(f, |x: f64| x.min(f)));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }));
    }
    // The bots: a process of their own, niced, for the storm's length.
    let flood = tokio::process::Command::new("nice")
        .arg("-n")
        .arg(d.bots_nice.to_string())
        .arg(std::env::current_exe().context("this program's path")?)
        .args(["bot-flood", "--base", &d.base, "--event", &event])
        .args([
            "--bots",
            &d.bots.to_string(),
            "--loops",
            &d.loops.to_string(),
        ])
        .args(["--seconds", &d.seconds.to_string()])
        .args(["--card-testing", &d.card_testing.to_string()])
        .args(["--pause-ms", &d.pause_ms.to_string()])
        .env("ONSALE_JWT_SECRET", secret)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("start the bots")?;
    tokio::time::sleep(Duration::from_secs(d.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for f in fans {
        let _ = f.await;
    }
    for t in tasks {
        let _ = t.await;
    }
    let out = flood.wait_with_output().await.context("the bots")?;
    anyhow::ensure!(out.status.success(), "the bots failed: {}", out.status);
    let bots: Flooded = serde_json::from_slice(&out.stdout).context("the bots' figures")?;
    let requests = bots.requests;
    let lowest_admission_factor = *lowest.lock().unwrap_or_else(|p| p.into_inner());
    Ok(Report {
        calm_holds_per_sec: calm.granted.load(Ordering::Relaxed) as f64 / phase_secs,
        storm_holds_per_sec: storm.granted.load(Ordering::Relaxed) as f64 / phase_secs,
        calm_p99_ms: calm.p99_ms(),
        storm_p99_ms: storm.p99_ms(),
        fan_5xx: calm.server_errors.load(Ordering::Relaxed)
            + storm.server_errors.load(Ordering::Relaxed),
        fan_429: calm.throttled.load(Ordering::Relaxed) + storm.throttled.load(Ordering::Relaxed),
        bot_requests: requests,
        bot_429_share: bots.throttled as f64 / requests.max(1) as f64,
        bot_5xx: bots.server_errors,
        lowest_admission_factor,
    })
}

/// What the bots are asked to do (`bot-flood`, started by the drill).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Flood {
    #[arg(long)]
    pub base: String,
    /// The hot show.
    #[arg(long)]
    pub event: String,
    #[arg(long)]
    pub bots: u32,
    #[arg(long)]
    pub loops: u32,
    #[arg(long)]
    pub seconds: u64,
    #[arg(long, action = clap::ArgAction::Set)]
    pub card_testing: bool,
    #[arg(long)]
    pub pause_ms: u64,
}

/// What the bots sent and how it was answered.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Flooded {
    pub requests: u64,
    pub throttled: u64,
    pub server_errors: u64,
}

/// The bots, for `f.seconds`: each account's loops flood made-up ids, reads of unknown shows
/// and (with `card_testing`) hold -> order -> declined card; printed as one JSON object.
pub(crate) async fn flood(f: Flood, secret: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1_024)
        .build()?;
    let bots = Arc::new(Bots::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for b in 0..f.bots {
        let token = mint(secret, &format!("bot-{b}"), Role::Fan, 3_600)?;
        for l in 0..f.loops {
            let (http, base, event, token) =
                (http.clone(), f.base.clone(), f.event.clone(), token.clone());
            let (bots, stop, card, pause) =
                (bots.clone(), stop.clone(), f.card_testing, f.pause_ms);
            tasks.push(tokio::spawn(async move {
                let show = event.replace('-', "");
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let made_up = uuid::Uuid::now_v7().simple().to_string();
                    let other = uuid::Uuid::now_v7().simple().to_string();
                    let req = match (l + n as u32) % 6 {
                        0 => http.delete(format!("{base}/v1/holds/h_{show}_{made_up}")),
                        1 => http.delete(format!("{base}/v1/holds/h_{other}_{made_up}")),
                        2 => http.post(format!("{base}/v1/orders/o_{show}_{made_up}/cancel")),
                        3 => {
                            // Reads without a token: unknown shows.
                            let r = http
                                .get(format!("{base}/v1/events/{}/seats", uuid::Uuid::now_v7()))
                                .header("x-forwarded-for", NAT);
                            count(&bots, r.send().await);
                            continue;
                        }
                        4 if card => {
                            card_test(&http, &base, &event, &token, &bots).await;
                            continue;
                        }
                        _ => http.get(format!("{base}/v1/events/{}", uuid::Uuid::now_v7())),
                    };
                    let r = req
                        .bearer_auth(&token)
                        .header("x-forwarded-for", NAT)
                        .send()
                        .await;
                    count(&bots, r);
                    if pause > 0 {
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                    }
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(f.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let out = Flooded {
        requests: bots.requests.load(Ordering::Relaxed),
        throttled: bots.throttled.load(Ordering::Relaxed),
        server_errors: bots.server_errors.load(Ordering::Relaxed),
    };
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

fn count(bots: &Bots, r: reqwest::Result<reqwest::Response>) {
    bots.requests.fetch_add(1, Ordering::Relaxed);
    match r.map(|r| r.status().as_u16()) {
        Ok(429) => {
            bots.throttled.fetch_add(1, Ordering::Relaxed);
        }
        Ok(s) if s >= 500 => {
            bots.server_errors.fetch_add(1, Ordering::Relaxed);
        }
        Ok(_) => {}
        Err(_) => {
            bots.server_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One card-testing round: a hold of a random seat, an order paid with a card that declines.
async fn card_test(http: &reqwest::Client, base: &str, event: &str, token: &str, bots: &Bots) {
    let seat = crate::venue::seat_id(rand::rng().random_range(0..crate::venue::SEATS));
    let held = http
        .post(format!("{base}/v1/events/{event}/holds"))
        .bearer_auth(token)
        .header("x-forwarded-for", NAT)
        .json(&json!({"seatIds": [seat]}))
        .send()
        .await;
    let hold = match held {
        Ok(r) if r.status().as_u16() == 201 => {
            bots.requests.fetch_add(1, Ordering::Relaxed);
            r.json::<serde_json::Value>()
                .await
                .ok()
                .and_then(|v| v["holdId"].as_str().map(str::to_owned))
        }
        other => {
            count(bots, other);
            None
        }
    };
    let Some(hold) = hold else { return };
    let ordered = http
        .post(format!("{base}/v1/orders"))
        .bearer_auth(token)
        .header("x-forwarded-for", NAT)
        .header("idempotency-key", uuid::Uuid::new_v4().to_string())
        .json(&json!({"holdId": hold, "paymentToken": "tok_decline"}))
        .send()
        .await;
    count(bots, ordered);
}

/// `onsale_admission_factor` from the service's `/metrics`, if it reports one.
async fn admission_factor(http: &reqwest::Client, base: &str) -> Option<f64> {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with("onsale_admission_factor"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
}

/// The drill, printed; an error if `check` and a goal was missed.
pub(crate) async fn drill(d: BotsDrill, secret: &str) -> anyhow::Result<()> {
    let report = run(&d, secret).await.context("the drill")?;
    if d.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        report.print();
    }
    if d.check {
        let missed: Vec<String> = report
            .goals()
            .into_iter()
            .filter(|(_, held)| !held)
            .map(|(g, _)| g)
            .collect();
        anyhow::ensure!(missed.is_empty(), "goals missed: {}", missed.join("; "));
    }
    Ok(())
}

/// A show of the arena scheduled in the domain alone, on sale since a second before `now`
/// (10-minute holds): what the in-domain benchmarks fold commands into. Answers its id, the
/// show and `now`.
pub(crate) fn arena_show(
    name: &str,
) -> anyhow::Result<(
    onsale_domain::ShowId,
    onsale_domain::show::Show,
    chrono::DateTime<chrono::Utc>,
)> {
    use onsale_domain::{ShowId, ShowInfo, VenueId, VenueLayout};
    let show_id = ShowId::random();
    let layout: VenueLayout =
        serde_json::from_value(crate::venue::venue_body()["sections"].clone())
            .map_err(anyhow::Error::from)
            .and_then(|s| VenueLayout::parse(s).map_err(|e| anyhow::anyhow!("{e}")))?;
    let start = chrono::Utc::now();
    let info = ShowInfo {
        show_id,
        venue_id: VenueId::random(),
        venue_name: "Onsale Arena".into(),
        city: "Oslo".into(),
        name: name.into(),
        performer: "The Crowd".into(),
        starts_at: start + chrono::Duration::days(60),
        on_sale_at: start - chrono::Duration::seconds(1),
        prices: serde_json::from_value(crate::venue::prices())?,
        currency: Default::default(),
        waiting_room: false,
        hold_ttl_seconds: 600,
        policy: Default::default(),
    };
    Ok((
        show_id,
        onsale_domain::show::Show::as_scheduled(info, layout),
        start,
    ))
}

/// Folds `rounds` rounds of each bot loop into one show of the arena (one round a second, a
/// bot at its account's pace) and prints what the show remembers (holds, orders, keys) and its
/// snapshot's size as the rounds go: flat once the loops' allowances are reached.
pub(crate) fn memory(rounds: u32) -> anyhow::Result<()> {
    use cqrs_es::Aggregate;
    use onsale_domain::show::Show;
    use onsale_domain::{
        AccountId, HoldId, Idempotency, IdempotencyKey, OrderId, PaymentFailure, ShowCommand,
    };
    let (show_id, mut show, start) = arena_show("Bots")?;
    let run = |show: &mut Show, c: ShowCommand, now| -> bool {
        match show.decide(c, now) {
            Ok(events) => {
                for e in events {
                    show.apply(e);
                }
                true
            }
            Err(_) => false,
        }
    };
    let acct = |s: &str| AccountId::parse(s).map_err(|e| anyhow::anyhow!("{e}"));
    let key = |s: String| IdempotencyKey::parse(&s).map_err(|e| anyhow::anyhow!("{e}"));
    let (looper, carder, plain) = (acct("looper")?, acct("carder")?, acct("plain")?);
    let seat = |i: u32| crate::venue::seat_id(i);
    println!("| rounds of each loop | holds + orders + keys remembered | snapshot |");
    println!("|---|---|---|");
    let mut next = 1_000u32;
    for n in 1..=rounds {
        let now = start + chrono::Duration::seconds(i64::from(n));
        // Keyed hold -> release.
        let h = HoldId::new(show_id);
        let idem = Some(Idempotency {
            key: key(format!("k-{n}"))?,
            fingerprint: "fp".into(),
        });
        run(
            &mut show,
            ShowCommand::HoldSeats {
                hold_id: h,
                account: looper.clone(),
                seat_ids: vec![seat(0)],
                idempotency: idem,
            },
            now,
        );
        run(
            &mut show,
            ShowCommand::ReleaseHold {
                hold_id: h,
                account: looper.clone(),
            },
            now,
        );
        // Hold -> order -> declined card (refused once the declines of the day are spent).
        let h = HoldId::new(show_id);
        let o = OrderId::new(show_id);
        let idem = Some(Idempotency {
            key: key(format!("h-{n}"))?,
            fingerprint: "fp".into(),
        });
        run(
            &mut show,
            ShowCommand::HoldSeats {
                hold_id: h,
                account: carder.clone(),
                seat_ids: vec![seat(1)],
                idempotency: idem,
            },
            now,
        );
        let placed = run(
            &mut show,
            ShowCommand::PlaceOrder {
                order_id: o,
                hold_id: h,
                account: carder.clone(),
                idempotency: Idempotency {
                    key: key(format!("o-{n}"))?,
                    fingerprint: "fp".into(),
                },
            },
            now,
        );
        if placed {
            run(
                &mut show,
                ShowCommand::RecordPaymentFailed {
                    order_id: o,
                    code: PaymentFailure::CardDeclined,
                    reason: "declined".into(),
                },
                now,
            );
        } else {
            run(
                &mut show,
                ShowCommand::ReleaseHold {
                    hold_id: h,
                    account: carder.clone(),
                },
                now,
            );
        }
        // Plain hold -> release.
        let h = HoldId::new(show_id);
        run(
            &mut show,
            ShowCommand::HoldSeats {
                hold_id: h,
                account: plain.clone(),
                seat_ids: vec![seat(2)],
                idempotency: None,
            },
            now,
        );
        run(
            &mut show,
            ShowCommand::ReleaseHold {
                hold_id: h,
                account: plain.clone(),
            },
            now,
        );
        if n == next || n == rounds {
            let bytes = show.snapshot_copy().to_json()?.len();
            println!(
                "| {n} | {} | {:.1} KiB |",
                show.history_len(),
                bytes as f64 / 1024.0
            );
            next *= 10;
        }
    }
    Ok(())
}
