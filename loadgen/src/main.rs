//! `onsale-loadgen`: simulated fans for `make demo`, and the hold benchmarks of `make bench-holds`.

/// mimalloc rather than glibc's allocator: folding a show's log allocates and frees a few
/// small strings per event, glibc's `malloc`, `free` and `malloc_consolidate` took a third of
/// a replay's time (perf, `make bench-replay`), and with mimalloc decoding and applying an
/// event took a fifth less (2.8 to 2.3 µs). The load generator folds with the same one.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bots;
mod drill;
mod fanout;
mod join;
mod queue;
mod reads;
mod replay;
mod search;
mod shards;
mod tail;
mod venue;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use onsale_command::owner::{OwnerConfig, Shows};
use onsale_command::CommandError;
use onsale_domain::show::Seat;
use onsale_domain::{
    AccountId, HoldId, SectionLayout, ShowCommand, ShowError, ShowId, ShowInfo, SystemClock,
    VenueId, VenueLayout,
};
use onsale_edge::auth::{mint, mint_verified, Role};
use onsale_edge::AuthSettings;
use onsale_eventlog::{DatabaseSettings, EventLog, PgEventLog};
use rand::Rng;
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Debug, Parser)]
#[command(name = "onsale-loadgen")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::enum_variant_names)] // `bench-command` names the layer it measures
enum Command {
    /// A short on-sale of many concurrent fans against the REST API, then the double-sale check.
    Demo {
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        base: String,
        #[command(flatten)]
        database: DatabaseSettings,
        #[arg(long, default_value_t = 20_000)]
        fans: u32,
        #[arg(long, default_value_t = 256)]
        concurrency: usize,
        #[command(flatten)]
        auth: AuthSettings,
        /// The card-processor simulator, whose books count the charges per order.
        #[arg(long, default_value = "http://127.0.0.1:8090")]
        processor: String,
        /// The failover drill: this shell command (`scripts/stack.sh kill-primary`) runs once,
        /// as a fan between 20% and 60% of the crowd starts; afterwards every acknowledged hold
        /// and order is checked in the log and the time without writes reported.
        #[arg(long)]
        kill_primary: Option<String>,
        /// The node drill: this shell command (`scripts/stack.sh kill-owner`) kills a command
        /// node at the same random moment, with the same checks.
        #[arg(long, conflicts_with = "kill_primary")]
        kill_node: Option<String>,
        /// A general-admission floor of this many places beside the arena's seats (0: none);
        /// a fifth of the fans ask for places on it.
        #[arg(long, default_value_t = 0)]
        ga_floor: u32,
        /// The show hands out the best available only (`bestAvailableOnly: ALWAYS`): fans ask
        /// for a quantity, never pick seats.
        #[arg(long)]
        best_available_only: bool,
        /// The show's line is for verified accounts and asks each join a proof of work of this
        /// many bits (0: neither); every simulated fan is verified and solves it.
        #[arg(long, default_value_t = 0)]
        join_challenge_bits: u8,
    },
    /// Create the benchmark show over HTTP and write fan tokens for wrk.
    Setup {
        #[arg(long)]
        base: String,
        #[arg(long, default_value_t = 1)]
        ttl: u32,
        #[arg(long, default_value_t = 20_000)]
        tokens: u32,
        #[arg(long)]
        tokens_file: String,
        /// A venue of one general-admission floor of this many places instead of the arena.
        #[arg(long)]
        ga: Option<u32>,
        #[command(flatten)]
        auth: AuthSettings,
    },
    /// Holds/s at the command layer: the owners and the event store, no HTTP.
    BenchCommand {
        #[command(flatten)]
        database: DatabaseSettings,
        #[command(flatten)]
        load: CommandLoad,
        #[command(flatten)]
        owners: OwnerConfig,
    },
    /// The catalog search on a synthetic catalog: fill, then queries/s and latency in process
    /// and (with --base) over HTTP (`make bench-search`).
    BenchSearch {
        #[command(flatten)]
        database: DatabaseSettings,
        /// A running `onsale serve` on the same database, for the HTTP figures.
        #[arg(long)]
        base: Option<String>,
        #[arg(long, default_value_t = 100_000)]
        shows: usize,
        #[arg(long, default_value_t = 16)]
        clients: usize,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Also write the catalog and the queries as TSV here (for search-compare).
        #[arg(long)]
        export: Option<std::path::PathBuf>,
    },
    /// Replay speed: a log of SHOWS x EVENTS folded from the store and from the topic, and
    /// read raw with COPY (the log is generated and published once per database).
    BenchReplay {
        #[command(flatten)]
        database: DatabaseSettings,
        /// Kafka bootstrap servers.
        #[arg(long)]
        brokers: String,
        #[arg(long, default_value_t = 200)]
        shows: u32,
        /// Events per show.
        #[arg(long, default_value_t = 50_000)]
        events: u32,
        #[arg(long, default_value_t = 3)]
        repeat: u32,
        /// Shows replayed from the store at once.
        #[arg(long, default_value_t = 2)]
        concurrency: usize,
    },
    /// Fan-out: many SSE or gRPC subscribers on one show, hold-to-delta latency per subscriber
    /// and hold, the server's memory per subscriber.
    BenchFanout {
        #[command(flatten)]
        fanout: fanout::Fanout,
        #[command(flatten)]
        auth: AuthSettings,
    },
    /// The waiting room: tick time against queue length, joins/s, live sessions against N.
    BenchQueue {
        #[arg(long)]
        base: String,
        #[arg(long)]
        redis_url: String,
        #[arg(long, default_value_t = 256)]
        clients: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value_t = 3_000)]
        fans: usize,
        /// The N the service runs with (ONSALE_ADMISSION_TARGET).
        #[arg(long, default_value_t = 200)]
        target: i64,
        #[command(flatten)]
        auth: AuthSettings,
    },
    /// What a join challenge costs: `runs` fresh challenges of `bits` solved natively, and the
    /// server's check of a solved one (`make bench-join`).
    BenchJoin {
        #[arg(long, default_value_t = onsale_domain::show::messages::DEFAULT_JOIN_CHALLENGE_BITS)]
        bits: u8,
        #[arg(long, default_value_t = 30)]
        runs: usize,
        #[arg(long, default_value_t = 20_000)]
        checks: usize,
    },
    /// The bots drill (`make drill-bots`): honest fans calm, then beside bots flooding made-up
    /// ids, card testing and anonymous reads; the goals of issue 29 checked.
    DrillBots {
        #[command(flatten)]
        drill: bots::BotsDrill,
        #[command(flatten)]
        auth: AuthSettings,
    },
    /// The shards drill (`make drill-shards`): three shows on two shards, shard 1's primary
    /// killed, a show moved mid-sale; per show, lost, sold twice and the write gap.
    DrillShards {
        #[command(flatten)]
        drill: shards::ShardsDrill,
        #[command(flatten)]
        auth: AuthSettings,
    },
    /// The drill's bots (started by `drill-bots` in a process of their own).
    BotFlood {
        #[command(flatten)]
        flood: bots::Flood,
        #[command(flatten)]
        auth: AuthSettings,
    },
    /// How much one show remembers under each bot loop (keyed hold -> release, hold -> order ->
    /// declined card, plain hold -> release), folded in the domain round after round.
    BotMemory {
        #[arg(long, default_value_t = 100_000)]
        rounds: u32,
    },
    /// The hold path's tail (`make bench-tail`): the maximum rate (closed loop), then holds at
    /// shares of it sent at a constant arrival rate, latency from when each was due.
    BenchTail {
        #[command(flatten)]
        tail: tail::Tail,
        #[command(flatten)]
        auth: AuthSettings,
    },
    /// One-seat holds at a fixed rate (open loop), for the commit-to-projection lag.
    HoldRate {
        #[arg(long)]
        base: String,
        #[arg(long)]
        event: String,
        #[arg(long, default_value_t = 2_000)]
        rate: u32,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        #[command(flatten)]
        auth: AuthSettings,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Demo {
            base,
            database,
            fans,
            concurrency,
            auth,
            processor,
            kill_primary,
            kill_node,
            ga_floor,
            best_available_only,
            join_challenge_bits,
        } => {
            let auth = auth.secured()?;
            let drill = kill_primary
                .map(|c| drill::Drill::new(c, drill::Victim::Primary, fans))
                .or_else(|| kill_node.map(|c| drill::Drill::new(c, drill::Victim::Node, fans)))
                .map(Arc::new);
            demo(
                &base,
                &database.database_url,
                fans,
                concurrency,
                auth.jwt_secret.expose_secret(),
                &processor,
                drill,
                Sale {
                    ga_floor,
                    best_available_only,
                    join_challenge_bits,
                },
            )
            .await
        }
        Command::Setup {
            base,
            ttl,
            tokens,
            tokens_file,
            ga,
            auth,
        } => {
            let auth = auth.secured()?;
            let http = reqwest::Client::new();
            let secret = auth.jwt_secret.expose_secret();
            let venue = match ga {
                Some(capacity) => venue::floor_body(capacity),
                None => venue::venue_body(),
            };
            let event = create_show(&http, &base, secret, &venue, ttl, false).await?;
            let lines: Vec<String> = (0..tokens)
                .map(|i| mint(secret, &format!("bench-{i}"), Role::Fan, 86_400))
                .collect::<Result<_, _>>()?;
            std::fs::write(&tokens_file, lines.join("\n") + "\n")
                .with_context(|| format!("write {tokens_file}"))?;
            println!("{event}");
            Ok(())
        }
        Command::BenchCommand {
            database,
            load,
            owners,
        } => bench_command(&database, owners, load).await,
        Command::DrillBots { drill, auth } => {
            let auth = auth.secured()?;
            bots::drill(drill, auth.jwt_secret.expose_secret()).await
        }
        Command::DrillShards { drill, auth } => {
            let auth = auth.secured()?;
            shards::drill(drill, auth.jwt_secret.expose_secret()).await
        }
        Command::BotFlood { flood, auth } => {
            let auth = auth.secured()?;
            bots::flood(flood, auth.jwt_secret.expose_secret()).await
        }
        Command::BotMemory { rounds } => bots::memory(rounds),
        Command::BenchTail { tail, auth } => {
            let auth = auth.secured()?;
            tail::run(tail, auth.jwt_secret.expose_secret()).await
        }
        Command::BenchSearch {
            database,
            base,
            shows,
            clients,
            seconds,
            export,
        } => {
            database.migrate().await?;
            let pool = database.pool(clients as u32 + 2, false)?;
            search::run(pool, base, shows, clients, seconds, export).await
        }
        Command::BenchReplay {
            mut database,
            brokers,
            shows,
            events,
            repeat,
            concurrency,
        } => {
            database.migrate().await?;
            // The benchmark's database is its own: the login role writes the log directly.
            database.database_role.clear();
            let pool = database.pool(concurrency as u32 + 2, false)?;
            replay::run(pool, brokers, shows, events, repeat, concurrency).await
        }
        Command::BenchFanout { fanout, auth } => {
            let auth = auth.secured()?;
            let r = fanout::run(fanout, auth.jwt_secret.expose_secret()).await?;
            println!("{r}");
            Ok(())
        }
        Command::BenchQueue {
            base,
            redis_url,
            clients,
            seconds,
            fans,
            target,
            auth,
        } => {
            let auth = auth.secured()?;
            queue::bench_ticks(&redis_url).await?;
            queue::bench_joins(
                &base,
                &redis_url,
                auth.jwt_secret.expose_secret(),
                clients,
                seconds,
            )
            .await?;
            queue::bench_onsale(
                &base,
                &redis_url,
                auth.jwt_secret.expose_secret(),
                fans,
                target,
                30,
            )
            .await
        }
        Command::BenchJoin { bits, runs, checks } => join::bench(bits, runs, checks),
        Command::HoldRate {
            base,
            event,
            rate,
            seconds,
            auth,
        } => {
            let auth = auth.secured()?;
            println!(
                "{}",
                reads::hold_rate(
                    &base,
                    &event,
                    rate,
                    seconds,
                    auth.jwt_secret.expose_secret()
                )
                .await?
            );
            Ok(())
        }
    }
}

async fn create_show(
    http: &reqwest::Client,
    base: &str,
    secret: &str,
    venue: &Value,
    ttl: u32,
    waiting_room: bool,
) -> anyhow::Result<String> {
    create_show_with(http, base, secret, venue, ttl, waiting_room, json!({})).await
}

/// [`create_show`] with `more` fields in the event's body (its on-sale policies).
async fn create_show_with(
    http: &reqwest::Client,
    base: &str,
    secret: &str,
    venue: &Value,
    ttl: u32,
    waiting_room: bool,
    more: Value,
) -> anyhow::Result<String> {
    let admin = mint(secret, "admin", Role::Admin, 3600)?;
    let venue: Value = http
        .post(format!("{base}/v1/venues"))
        .bearer_auth(&admin)
        .json(venue)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let now = chrono::Utc::now();
    let event: Value = http
        .post(format!("{base}/v1/events"))
        .bearer_auth(&admin)
        .json(&{
            let mut body = json!({
                "name": "The Worst Minute Tour", "performer": "The Crowd", "venueId": venue["venueId"],
                "startsAt": now + chrono::Duration::days(60), "onSaleAt": now - chrono::Duration::seconds(1),
                "prices": venue::prices(), "holdTtlSeconds": ttl, "waitingRoom": waiting_room,
            });
            if let (Some(b), Value::Object(more)) = (body.as_object_mut(), more) {
                b.extend(more);
            }
            body
        })
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    event["eventId"]
        .as_str()
        .map(str::to_owned)
        .context("no eventId in the answer")
}

#[derive(Debug, Default)]
struct Tally {
    holds: AtomicU64,
    conflicts: AtomicU64,
    limited: AtomicU64,
    unavailable: AtomicU64,
    orders: AtomicU64,
    replays_matched: AtomicU64,
    releases: AtomicU64,
    abandoned: AtomicU64,
    other: AtomicU64,
    /// The first few unexpected answers, to say what they were.
    other_seen: std::sync::Mutex<Vec<String>>,
    /// In the sale now (entered, not yet left), and the most at once.
    in_zone: AtomicU64,
    peak_in_zone: AtomicU64,
    zone_full: AtomicU64,
    /// Join challenges solved, and the time spent solving them.
    challenges: AtomicU64,
    solve_micros: AtomicU64,
}

/// Polls the waiting room (`room`, its URL) with the fan's queue token every `every` until it
/// hands out an admission token.
pub(crate) async fn admission_token(
    http: &reqwest::Client,
    room: &str,
    token: &str,
    queue_token: &str,
    every: Duration,
) -> Option<String> {
    // A browser's poll: a dropped connection (the node it reached died) is polled again, as
    // long as the line answers again within 30 s.
    let mut failing_since: Option<Instant> = None;
    loop {
        let view = match http
            .get(room)
            .bearer_auth(token)
            .header("X-Onsale-Queue-Token", queue_token)
            .send()
            .await
        {
            Ok(res) => res.json::<Value>().await.ok(),
            Err(_) => None,
        };
        match view {
            Some(view) => {
                failing_since = None;
                if let Some(a) = view["admissionToken"].as_str() {
                    return Some(a.to_owned());
                }
            }
            None if failing_since.is_some_and(|t| t.elapsed() > Duration::from_secs(30)) => {
                return None;
            }
            None => {
                failing_since.get_or_insert_with(Instant::now);
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// A fan's way through the waiting room: join, wait for the line to pass, enter. Returns the
/// session and how long the fan waited.
async fn queue_in(
    http: &reqwest::Client,
    base: &str,
    event: &str,
    token: &str,
    tally: &Tally,
) -> Option<(String, Duration)> {
    let started = Instant::now();
    let room = format!("{base}/v1/events/{event}/waiting-room");
    let (mut status, mut joined) = post(http, &room, token, &json!({}), None, None).await;
    if status == 428 {
        // The show asks a proof of work: a challenge, solved off the runtime's threads.
        let c: Value = http
            .get(format!("{room}/challenge"))
            .bearer_auth(token)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let (challenge, bits) = (c["challenge"].as_str()?.to_owned(), c["bits"].as_u64()?);
        let t = Instant::now();
        let (solution, challenge) = tokio::task::spawn_blocking(move || {
            let (solution, _) =
                onsale_waiting_room::challenge::solve(&challenge, u8::try_from(bits).unwrap_or(0));
            (solution, challenge)
        })
        .await
        .ok()?;
        tally
            .solve_micros
            .fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
        bump(&tally.challenges);
        (status, joined) = post(
            http,
            &room,
            token,
            &json!({"challenge": challenge, "solution": solution}),
            None,
            None,
        )
        .await;
    }
    if status != 201 {
        return None;
    }
    let queue_token = joined["queueToken"].as_str()?;
    let admission =
        admission_token(http, &room, token, queue_token, Duration::from_millis(100)).await?;
    let enter = format!("{base}/v1/events/{event}/enter");
    loop {
        let (status, entry) = post(
            http,
            &enter,
            token,
            &json!({"admissionToken": admission}),
            None,
            None,
        )
        .await;
        match status {
            200 => {
                let now = tally.in_zone.fetch_add(1, Ordering::Relaxed) + 1;
                tally.peak_in_zone.fetch_max(now, Ordering::Relaxed);
                return Some((entry["sessionId"].as_str()?.to_owned(), started.elapsed()));
            }
            429 => {
                bump(&tally.zone_full);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            _ => return None,
        }
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// An answer the demo did not expect: counted, and the first five kept for the report.
fn unexpected(tally: &Tally, what: String) {
    bump(&tally.other);
    if let Ok(mut seen) = tally.other_seen.lock() {
        if seen.len() < 5 {
            seen.push(what);
        }
    }
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    body: &Value,
    key: Option<&str>,
    session: Option<&str>,
) -> (u16, Value) {
    // A client's own retry loop: a 503 means "not committed, try again with the same key"; it
    // keeps trying for about 40 s (a primary's failover takes 20-25 s).
    for attempt in 0..50u64 {
        let mut req = http.post(url).bearer_auth(token).json(body);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        if let Some(s) = session {
            req = req.header("X-Onsale-Session", s);
        }
        match req.send().await {
            Ok(res) if res.status().as_u16() == 503 => {}
            Ok(res) => {
                let status = res.status().as_u16();
                return (status, res.json().await.unwrap_or(Value::Null));
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis((50 * (attempt + 1)).min(1_000))).await;
    }
    (503, Value::Null)
}

/// What the demo's show sells and how.
#[derive(Debug, Clone, Copy)]
struct Sale {
    ga_floor: u32,
    best_available_only: bool,
    join_challenge_bits: u8,
}

#[allow(clippy::too_many_arguments)]
async fn demo(
    base: &str,
    database_url: &str,
    fans: u32,
    concurrency: usize,
    secret: &str,
    processor: &str,
    drill: Option<Arc<drill::Drill>>,
    sale: Sale,
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()?;
    let mut venue = venue::venue_body();
    if sale.ga_floor > 0 {
        if let Some(sections) = venue["sections"].as_array_mut() {
            sections.push(json!({"section": "FLOOR", "priceTier": "C", "capacity": sale.ga_floor}));
        }
    }
    let mut policy = if sale.best_available_only {
        json!({"bestAvailableOnly": "ALWAYS"})
    } else {
        json!({})
    };
    if sale.join_challenge_bits > 0 {
        policy["requireVerifiedAccount"] = json!(true);
        policy["joinChallengeBits"] = json!(sale.join_challenge_bits);
    }
    let event = create_show_with(&http, base, secret, &venue, 120, true, policy).await?;
    println!(
        "on sale: event {event}, {} seats and {} places on a general-admission floor, {fans} fans, {concurrency} at a time{}",
        venue::SEATS,
        sale.ga_floor,
        if sale.best_available_only { ", best available only" } else { "" }
    );
    if sale.join_challenge_bits > 0 {
        println!(
            "its line: verified accounts only, a {}-bit proof of work per join",
            sale.join_challenge_bits
        );
    }
    let tally = Arc::new(Tally::default());
    let hold_latency = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let order_latency = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let queue_wait = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let orders: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let bar = ProgressBar::new(u64::from(fans));
    bar.set_style(ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} fans {per_sec}",
    )?);
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    let watcher = drill.clone().map(|d| {
        let (http, base, db) = (http.clone(), base.to_owned(), database_url.to_owned());
        tokio::spawn(async move { d.watch(http, base, db).await })
    });
    for _ in 0..concurrency {
        let (http, tally, bar, next, orders) = (
            http.clone(),
            tally.clone(),
            bar.clone(),
            next.clone(),
            orders.clone(),
        );
        let (hold_latency, order_latency) = (hold_latency.clone(), order_latency.clone());
        let queue_wait = queue_wait.clone();
        let (base, event, secret) = (base.to_owned(), event.clone(), secret.to_owned());
        let drill = drill.clone();
        workers.push(tokio::spawn(async move {
            loop {
                let fan = next.fetch_add(1, Ordering::Relaxed);
                if fan >= u64::from(fans) {
                    break;
                }
                if let Some(d) = &drill {
                    d.fan_starts(fan);
                }
                let token = mint_verified(&secret, &format!("fan-{fan}"), Role::Fan, 3600)
                    .unwrap_or_default();
                let Some((session, waited)) = queue_in(&http, &base, &event, &token, &tally).await
                else {
                    unexpected(&tally, "the waiting room did not let the fan in".into());
                    bar.inc(1);
                    continue;
                };
                let _ = queue_wait.lock().await.record(waited.as_micros() as u64);
                let holds_url = format!("{base}/v1/events/{event}/holds");
                let mut held: Option<Value> = None;
                for attempt in 0..4 {
                    let (n, explicit, floor) = {
                        let mut rng = rand::rng();
                        (
                            rng.random_range(1..=4u32),
                            !sale.best_available_only && attempt < 3 && rng.random_bool(0.6),
                            sale.ga_floor > 0 && rng.random_bool(0.2),
                        )
                    };
                    let body = if floor {
                        json!({"quantity": n, "section": "FLOOR"})
                    } else if explicit {
                        json!({"seatIds": venue::pick(&mut rand::rng(), n, true)})
                    } else {
                        json!({"quantity": n})
                    };
                    let key = uuid::Uuid::new_v4().to_string();
                    let t = Instant::now();
                    let (status, answer) =
                        post(&http, &holds_url, &token, &body, Some(&key), Some(&session)).await;
                    let _ = hold_latency
                        .lock()
                        .await
                        .record(t.elapsed().as_micros() as u64);
                    match status {
                        201 => {
                            bump(&tally.holds);
                            if let Some(d) = &drill {
                                d.acknowledged(answer["holdId"].as_str());
                            }
                            held = Some(answer);
                            break;
                        }
                        409 => bump(&tally.conflicts),
                        429 => bump(&tally.limited),
                        503 => bump(&tally.unavailable),
                        other => unexpected(&tally, format!("hold: {other} {answer}")),
                    }
                }
                if let Some(hold) = held {
                    let roll: f64 = rand::rng().random();
                    let hold_id = hold["holdId"].as_str().unwrap_or_default().to_owned();
                    if roll < 0.75 {
                        let key = uuid::Uuid::new_v4().to_string();
                        // Most cards work; some are declined, some time out and settle later.
                        let token_roll: f64 = rand::rng().random();
                        let payment = match token_roll {
                            r if r < 0.84 => "tok_ok",
                            r if r < 0.92 => "tok_decline",
                            r if r < 0.97 => "tok_timeout_then_ok",
                            _ => "tok_timeout_then_fail",
                        };
                        let body = json!({"holdId": hold_id, "paymentToken": payment});
                        let orders_url = format!("{base}/v1/orders");
                        let place = || {
                            post(
                                &http,
                                &orders_url,
                                &token,
                                &body,
                                Some(&key),
                                Some(&session),
                            )
                        };
                        let t = Instant::now();
                        let (status, answer) = place().await;
                        let _ = order_latency
                            .lock()
                            .await
                            .record(t.elapsed().as_micros() as u64);
                        if status == 202 {
                            bump(&tally.orders);
                            if let Some(d) = &drill {
                                d.acknowledged(None);
                            }
                            let order_id =
                                answer["orderId"].as_str().unwrap_or_default().to_owned();
                            // Some fans never saw the answer and click again with the same key.
                            if roll < 0.05 {
                                let (s, again) = place().await;
                                if s == 202 && again["orderId"] == answer["orderId"] {
                                    bump(&tally.replays_matched);
                                } else {
                                    unexpected(&tally, format!("order replay: {s} {again}"));
                                }
                            }
                            orders.lock().await.push((order_id, token.clone()));
                        } else {
                            unexpected(&tally, format!("order: {status} {answer}"));
                        }
                    } else if roll < 0.85 {
                        let res = http
                            .delete(format!("{base}/v1/holds/{hold_id}"))
                            .bearer_auth(&token)
                            .send()
                            .await;
                        if res.map(|r| r.status().as_u16() == 204).unwrap_or(false) {
                            bump(&tally.releases);
                        }
                    } else {
                        bump(&tally.abandoned);
                    }
                }
                // Done (or given up): leave the sale so the next fan gets the slot now.
                let leave = format!("{base}/v1/events/{event}/leave");
                let (status, _) = post(
                    &http,
                    &leave,
                    &token,
                    &json!({"sessionId": session}),
                    None,
                    None,
                )
                .await;
                if status == 204 {
                    tally.in_zone.fetch_sub(1, Ordering::Relaxed);
                } else {
                    unexpected(&tally, format!("leave: {status}"));
                }
                bar.inc(1);
            }
        }));
    }
    for w in workers {
        w.await?;
    }
    bar.finish();
    let elapsed = started.elapsed().as_secs_f64();

    // Payments: every order resolves (paid through the processor simulator).
    let read_path_started = Instant::now();
    let orders = orders.lock().await.clone();
    let pool = sqlx::PgPool::connect(database_url)
        .await
        .context("connect to the event store")?;
    let payments_started = Instant::now();
    let mut by_status: Vec<(String, i64)> = Vec::new();
    for _ in 0..1_200 {
        by_status = onsale_projections::orders::count_by_status(&pool, &event).await?;
        let total: i64 = by_status.iter().map(|(_, n)| n).sum();
        let pending: i64 = by_status
            .iter()
            .filter(|(s, _)| s == "PENDING_PAYMENT")
            .map(|(_, n)| n)
            .sum();
        if total as usize == orders.len() && pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let count = |status: &str| {
        by_status
            .iter()
            .find(|(s, _)| s == status)
            .map_or(0, |(_, n)| *n)
    };
    let captures = drill::captures(&http, processor).await?;
    let most_charges = captures.values().copied().max().unwrap_or(0);

    // The check: every paid order, as the API reports it (from the orders projection), and as
    // the log replays.
    let mut seat_owner: HashMap<String, String> = HashMap::new();
    let mut sold_twice = 0u64;
    for (order_id, token) in &orders {
        let mut view = Value::Null;
        for _ in 0..300 {
            let res = http
                .get(format!("{base}/v1/orders/{order_id}"))
                .bearer_auth(token)
                .send()
                .await?;
            if res.status().as_u16() == 200 {
                view = res.json().await?;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if view.is_null() {
            bail!("order {order_id} never reached the orders projection");
        }
        if view["status"] != "CONFIRMED" {
            continue;
        }
        for seat in view["seatIds"].as_array().into_iter().flatten() {
            let seat = seat.as_str().unwrap_or_default().to_owned();
            if seat_owner.insert(seat, order_id.clone()).is_some() {
                sold_twice += 1;
            }
        }
    }
    let show: ShowId = event.parse()?;
    let replayed = PgEventLog::new(pool.clone()).replay(show).await?;
    if let Some(w) = watcher {
        w.abort();
    }
    let mut log_mismatch = 0u64;
    let drill_result = match &drill {
        Some(d) => {
            let ids: Vec<String> = orders.iter().map(|(o, _)| o.clone()).collect();
            let report = d.report(&replayed.show, &ids);
            // The projections, fed by the relay across the promotion, equal a replay.
            let wrong = drill::Drill::seat_map_mismatches(&pool, &event, &replayed.show).await?;
            println!("seat map against a replay of the log: {wrong} seats differ");
            if wrong > 0 {
                log_mismatch += 1;
            }
            Some(report)
        }
        None => None,
    };
    let mut log_claimed = 0u64;
    for (seat, state) in replayed.show.seats() {
        if let Seat::PendingPayment(o) | Seat::Sold(o) = state {
            // Every payment resolved above: a pending seat here is a mismatch.
            log_claimed += 1;
            if seat_owner.get(seat) != Some(&o.to_string()) {
                log_mismatch += 1;
            }
        }
    }
    if log_claimed as usize != seat_owner.len() {
        log_mismatch += 1;
    }
    let t = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let hl = hold_latency.lock().await;
    let ol = order_latency.lock().await;
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!("\n== on-sale summary ({elapsed:.1} s) ==");
    println!(
        "holds granted      {:>8}   ({:.0}/s)",
        t(&tally.holds),
        t(&tally.holds) as f64 / elapsed
    );
    println!(
        "seat conflicts 409 {:>8}   ({:.1}% of hold attempts)",
        t(&tally.conflicts),
        100.0 * t(&tally.conflicts) as f64
            / (t(&tally.holds) + t(&tally.conflicts) + t(&tally.limited)).max(1) as f64
    );
    println!("cap refusals 429   {:>8}", t(&tally.limited));
    println!("outages 503        {:>8}", t(&tally.unavailable));
    println!(
        "orders placed      {:>8}   ({} retried with the same key, same orderId)",
        t(&tally.orders),
        t(&tally.replays_matched)
    );
    println!("holds released     {:>8}", t(&tally.releases));
    println!(
        "holds abandoned    {:>8}   (they lapse after the 120 s TTL)",
        t(&tally.abandoned)
    );
    println!("unexpected answers {:>8}", t(&tally.other));
    for seen in tally
        .other_seen
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default()
    {
        println!("  e.g. {seen}");
    }
    let qw = queue_wait.lock().await;
    println!(
        "waiting room: every fan joined, waited (p50 {:.2} s, p99 {:.2} s) and entered; at most {} in the sale at once; {} entries found it full and retried",
        qw.value_at_quantile(0.5) as f64 / 1e6,
        qw.value_at_quantile(0.99) as f64 / 1e6,
        t(&tally.peak_in_zone),
        t(&tally.zone_full),
    );
    if t(&tally.challenges) > 0 {
        println!(
            "join challenges solved {:>8}   ({:.2} ms each on average, natively)",
            t(&tally.challenges),
            t(&tally.solve_micros) as f64 / t(&tally.challenges) as f64 / 1000.0
        );
    }
    println!(
        "hold latency  p50 {:.1} ms  p90 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        ms(&hl, 0.5),
        ms(&hl, 0.9),
        ms(&hl, 0.99),
        hl.max() as f64 / 1000.0
    );
    println!(
        "order latency p50 {:.1} ms  p90 {:.1} ms  p99 {:.1} ms",
        ms(&ol, 0.5),
        ms(&ol, 0.9),
        ms(&ol, 0.99)
    );
    println!(
        "seats in orders {} (log replay: {}), log events {}",
        seat_owner.len(),
        log_claimed,
        replayed.version
    );
    // The seat map, built by the relay and the projection from the log, agrees too.
    let mut map = Value::Null;
    for _ in 0..300 {
        map = http
            .get(format!("{base}/v1/events/{event}/seats"))
            .send()
            .await?
            .json()
            .await?;
        let sold: u64 = map["sections"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["sold"].as_u64())
            .sum();
        if sold == log_claimed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let map_sold: u64 = map["sections"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["sold"].as_u64())
        .sum();
    println!(
        "seat map (read path): {map_sold} sold at lsn {} seq {} (read {:.1} s after the last fan, once every order had been read back)",
        map["lsn"].as_str().unwrap_or("?"),
        map["seq"],
        read_path_started.elapsed().as_secs_f64()
    );
    if map_sold != log_claimed {
        log_mismatch += 1;
    }
    println!(
        "payments ({:.1} s to resolve after the last fan): {} confirmed, {} failed (declined or timed out and failed); charges per order: {} orders charged, at most {most_charges} each; orders still pending: {}",
        payments_started.elapsed().as_secs_f64(),
        count("CONFIRMED"),
        count("FAILED"),
        captures.len(),
        count("PENDING_PAYMENT"),
    );
    if most_charges > 1
        || count("PENDING_PAYMENT") > 0
        || captures.len() as i64 != count("CONFIRMED")
    {
        log_mismatch += 1;
    }
    println!("seats sold twice: {sold_twice}; API vs log mismatches: {log_mismatch}");
    if sold_twice > 0 || log_mismatch > 0 || t(&tally.other) > 0 {
        bail!("the on-sale broke an invariant");
    }
    drill_result.unwrap_or(Ok(()))
}

/// What `bench-command` runs: `clients` racing holds of `seats` seats (or places of a `ga`
/// floor) for `seconds`, each hold lapsing after `ttl`.
#[derive(Debug, clap::Args)]
struct CommandLoad {
    #[arg(long, default_value_t = 64)]
    clients: usize,
    #[arg(long, default_value_t = 1)]
    seats: u32,
    #[arg(long)]
    skewed: bool,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    #[arg(long, default_value_t = 1)]
    ttl: u32,
    /// A show of one general-admission floor of this many places instead of the arena:
    /// each hold asks for `--seats` of it by quantity (`make bench-ga`).
    #[arg(long)]
    ga: Option<u32>,
    /// Holds spread over this many shows (client i holds on show i mod n).
    #[arg(long, default_value_t = 1)]
    shows: usize,
    /// With `--shard-url`: show i placed on shard i mod n + 1 (else every show on shard 1;
    /// `make bench-shards`).
    #[arg(long)]
    spread: bool,
}

/// Every transaction committed on each shard so far (`pg_stat_database`).
async fn commits(pools: &[sqlx::PgPool]) -> anyhow::Result<Vec<i64>> {
    let mut out = Vec::new();
    for pool in pools {
        out.push(
            sqlx::query_scalar(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
            )
            .fetch_one(pool)
            .await?,
        );
    }
    Ok(out)
}

/// Schedules a benchmark show: the arena, or one floor of `ga` places; on sale now.
async fn schedule(shows: &Shows, show: ShowId, ttl: u32, ga: Option<u32>) -> anyhow::Result<()> {
    let layout: VenueLayout = match ga {
        Some(capacity) => VenueLayout::parse(vec![SectionLayout::general_admission(
            "FLOOR".into(),
            "C".into(),
            capacity,
        )])?,
        None => serde_json::from_value(venue::venue_body()["sections"].clone())?,
    };
    let now = chrono::Utc::now();
    let info = ShowInfo {
        show_id: show,
        venue_id: VenueId::random(),
        venue_name: "Onsale Arena".into(),
        city: "Oslo".into(),
        name: "bench".into(),
        performer: "bench".into(),
        starts_at: now + chrono::Duration::days(60),
        on_sale_at: now - chrono::Duration::seconds(1),
        prices: serde_json::from_value(venue::prices())?,
        waiting_room: false,
        hold_ttl_seconds: ttl,
        policy: Default::default(),
    };
    shows
        .execute(show, ShowCommand::Schedule { info, layout })
        .await?;
    Ok(())
}

async fn bench_command(
    database: &DatabaseSettings,
    config: OwnerConfig,
    load: CommandLoad,
) -> anyhow::Result<()> {
    let CommandLoad {
        clients,
        seats,
        skewed,
        seconds,
        ttl,
        ga,
        shows: count,
        spread,
    } = load;
    // The pools and the owners as `onsale serve` builds them: one log, or with `--shard-url`
    // every shard's, each show placed through the directory in the main database.
    database.migrate().await?;
    let pools = database
        .shards()
        .iter()
        .map(|shard| shard.pool(database.pool_size, false))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let directory: Arc<dyn onsale_eventlog::Directory> =
        Arc::new(onsale_eventlog::PgDirectory::new(database.pool(2, true)?));
    let log_of =
        |pool: &sqlx::PgPool| -> Arc<dyn EventLog> { Arc::new(PgEventLog::new(pool.clone())) };
    let log = pools.iter().skip(1).fold(
        onsale_eventlog::ShardedLog::new(log_of(&pools[0]), directory),
        |log, pool| log.and(log_of(pool)),
    );
    let shows = Shows::sharded(
        Arc::new(log),
        Arc::new(SystemClock),
        config,
        CancellationToken::new(),
        TaskTracker::new(),
    );
    let mut placed = Vec::new();
    for i in 0..count.max(1) {
        let show = ShowId::random();
        let shard = if spread { i % pools.len() + 1 } else { 1 };
        shows.place(show, Some(u16::try_from(shard)?)).await?;
        schedule(&shows, show, ttl, ga).await?;
        placed.push(show);
    }
    let before = commits(&pools).await?;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (shows, tally, show) = (shows.clone(), tally.clone(), placed[c % placed.len()]);
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).expect("histogram");
            while Instant::now() < deadline {
                let (seat_ids, account) = {
                    let mut rng = rand::rng();
                    (
                        venue::pick(&mut rng, seats, skewed),
                        rng.random_range(0..1_000_000u32),
                    )
                };
                let account = AccountId::parse(&format!("bench-{account}")).expect("account");
                let cmd = match ga {
                    Some(_) => ShowCommand::HoldBestAvailable {
                        hold_id: HoldId::new(show),
                        account,
                        quantity: seats,
                        section: Some("FLOOR".into()),
                        idempotency: None,
                    },
                    None => ShowCommand::HoldSeats {
                        hold_id: HoldId::new(show),
                        account,
                        seat_ids,
                        idempotency: None,
                    },
                };
                let t = Instant::now();
                let r = shows.execute(show, cmd).await;
                let _ = hist.record(t.elapsed().as_micros() as u64);
                match r {
                    Ok(_) => bump(&tally.holds),
                    Err(CommandError::Domain(ShowError::SeatUnavailable { .. })) => {
                        bump(&tally.conflicts)
                    }
                    Err(CommandError::Domain(ShowError::HoldLimit { .. })) => bump(&tally.limited),
                    Err(_) => bump(&tally.other),
                }
            }
            hist
        }));
    }
    let mut hist = Histogram::<u64>::new(3)?;
    for t in tasks {
        hist.add(t.await?)?;
    }
    let after = commits(&pools).await?;
    let commits_per_s: Vec<f64> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a - b) as f64 / seconds as f64)
        .collect();
    let t = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
    let attempts = t(&tally.holds) + t(&tally.conflicts) + t(&tally.limited) + t(&tally.other);
    println!(
        "{}",
        json!({
            "layer": "command", "clients": clients, "seats": seats, "dist": if skewed { "skewed" } else { "uniform" },
            "ga": ga,
            "attempts_per_s": attempts / seconds as f64, "holds_per_s": t(&tally.holds) / seconds as f64,
            "p50_ms": hist.value_at_quantile(0.5) as f64 / 1000.0, "p99_ms": hist.value_at_quantile(0.99) as f64 / 1000.0,
            "errors": t(&tally.other), "conflicts_per_s": t(&tally.conflicts) / seconds as f64,
            "limited_per_s": t(&tally.limited) / seconds as f64,
            "shows": placed.len(), "commits_per_s": commits_per_s,
        })
    );
    Ok(())
}
