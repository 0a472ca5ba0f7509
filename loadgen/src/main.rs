//! `onsale-loadgen`: simulated fans for `make demo`, and the hold benchmarks of `make bench-holds`.

/// mimalloc rather than glibc's allocator: folding a show's log allocates and frees a few
/// small strings per event, glibc's `malloc`, `free` and `malloc_consolidate` took a third of
/// a replay's time (perf, `make bench-replay`), and with mimalloc decoding and applying an
/// event took a fifth less (2.8 to 2.3 µs). The load generator folds with the same one.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bots;
mod client;
mod commands;
mod demo;
mod drill;
mod fanout;
mod freshness;
mod join;
mod owner;
mod queue;
mod reads;
mod region;
mod replay;
mod search;
mod shards;
mod tail;
mod venue;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use hdrhistogram::Histogram;
use onsale_command::owner::{OwnerConfig, Shows};
use onsale_command::CommandError;
use onsale_domain::{
    AccountId, HoldId, SectionLayout, ShowCommand, ShowError, ShowId, ShowInfo, SystemClock,
    VenueId, VenueLayout,
};
use onsale_edge::auth::{mint, Role};
use onsale_edge::AuthSettings;
use onsale_eventlog::{DatabaseSettings, EventLog, PgEventLog};
use rand::Rng;
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

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
    Demo(commands::Demo),
    /// The region drill (`make drill-region`): fans buy through the region router, `--cut`
    /// cuts region a off and promotes b at a random moment, `--rejoin` brings a back as b's
    /// standby; every acknowledged hold and order is then looked up in b's log.
    DrillRegion(commands::DrillRegion),
    /// Create the benchmark show over HTTP and write fan tokens for wrk.
    Setup(commands::Setup),
    /// Holds/s at the command layer: the owners and the event store, no HTTP.
    BenchCommand {
        #[command(flatten)]
        database: DatabaseSettings,
        #[command(flatten)]
        load: CommandLoad,
        #[command(flatten)]
        owners: OwnerConfig,
    },
    /// The catalog search on a synthetic catalog: fill, then queries/s and latency in process,
    /// over HTTP on PostgreSQL (--base) and on the search index (--index-base), and type-ahead
    /// (`make bench-search`).
    BenchSearch(commands::BenchSearch),
    /// How soon search says a show was scheduled, sold out or put back on sale, on a running
    /// stack (`make bench-search`).
    SearchFreshness(commands::SearchFreshness),
    /// Replay speed: a log of SHOWS x EVENTS folded from the store and from the topic, and
    /// read raw with COPY (the log is generated and published once per database).
    BenchReplay(commands::BenchReplay),
    /// Fan-out: many SSE or gRPC subscribers on one show, hold-to-delta latency per subscriber
    /// and hold, the server's memory per subscriber.
    BenchFanout {
        #[command(flatten)]
        fanout: fanout::Fanout,
        #[command(flatten)]
        auth: AuthSettings,
    },
    /// The waiting room: tick time against queue length, joins/s, live sessions against N.
    BenchQueue(commands::BenchQueue),
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
    /// The owner's worst command as a show's memory grows, and a snapshot's copy (`make
    /// bench-owner`): keyed 1-seat holds of new fans folded in the domain, each timed.
    BenchOwner {
        /// Holds made in all.
        #[arg(long, default_value_t = 400_000)]
        holds: u32,
        /// A row (and a snapshot's copy) every this many holds.
        #[arg(long, default_value_t = 50_000)]
        report_every: u32,
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
    HoldRate(commands::HoldRate),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Demo(c) => c.run().await,
        Command::DrillRegion(c) => c.run().await,
        Command::Setup(c) => c.run().await,
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
        Command::BenchOwner {
            holds,
            report_every,
        } => owner::bench(holds, report_every),
        Command::BenchTail { tail, auth } => {
            let auth = auth.secured()?;
            tail::run(tail, auth.jwt_secret.expose_secret()).await
        }
        Command::BenchSearch(c) => c.run().await,
        Command::SearchFreshness(c) => c.run().await,
        Command::BenchReplay(c) => c.run().await,
        Command::BenchFanout { fanout, auth } => {
            let auth = auth.secured()?;
            let r = fanout::run(fanout, auth.jwt_secret.expose_secret()).await?;
            println!("{r}");
            Ok(())
        }
        Command::BenchQueue(c) => c.run().await,
        Command::BenchJoin { bits, runs, checks } => join::bench(bits, runs, checks),
        Command::HoldRate(c) => c.run().await,
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
        currency: Default::default(),
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
    let (pools, log) = sharded_log(database)?;
    let shows = Shows::sharded(
        Arc::new(log),
        Arc::new(SystemClock),
        config,
        &onsale_telemetry::supervise::Loops::alone(CancellationToken::new()),
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
    let tally = Arc::new(demo::Tally::default());
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
                    Ok(_) => demo::bump(&tally.holds),
                    Err(CommandError::Domain(ShowError::SeatUnavailable { .. })) => {
                        demo::bump(&tally.conflicts)
                    }
                    Err(CommandError::Domain(ShowError::HoldLimit { .. })) => {
                        demo::bump(&tally.limited)
                    }
                    Err(_) => demo::bump(&tally.other),
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

/// Every shard's pool and log of `database` (one, or each of `--shard-url`), each show found
/// through the directory in the main database, as `onsale serve` reaches them.
pub(crate) fn sharded_log(
    database: &DatabaseSettings,
) -> anyhow::Result<(Vec<sqlx::PgPool>, onsale_eventlog::ShardedLog)> {
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
    Ok((pools, log))
}
