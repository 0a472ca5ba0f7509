//! The load generator's commands whose work is more than a call: each its flags and its run.

use super::*;

/// The flags of `onsale-loadgen demo` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Demo {
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
}

impl Demo {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let Self {
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
        } = self;
        let auth = auth.secured()?;
        let drill = kill_primary
            .map(|c| drill::Drill::new(c, drill::Victim::Primary, fans))
            .or_else(|| kill_node.map(|c| drill::Drill::new(c, drill::Victim::Node, fans)))
            .map(Arc::new);
        demo::run(
            &base,
            &database.database_url,
            fans,
            concurrency,
            auth.jwt_secret.expose_secret(),
            &processor,
            drill,
            demo::Sale {
                ga_floor,
                best_available_only,
                join_challenge_bits,
            },
        )
        .await
    }
}

/// The flags of `onsale-loadgen drill-region` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct DrillRegion {
    /// The region router.
    #[arg(long, default_value = "http://127.0.0.1:8070")]
    base: String,
    /// Region a's own address.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    region_a: String,
    /// Region b's databases (DATABASE_URL and ONSALE_SHARD_URLS).
    #[command(flatten)]
    database: DatabaseSettings,
    #[arg(long, default_value = "http://127.0.0.1:8090")]
    processor: String,
    #[arg(long, default_value_t = 64)]
    fans: usize,
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    #[arg(long)]
    cut: String,
    #[arg(long)]
    rejoin: String,
    #[command(flatten)]
    auth: AuthSettings,
}

impl DrillRegion {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let Self {
            base,
            region_a,
            database,
            processor,
            fans,
            seconds,
            cut,
            rejoin,
            auth,
        } = self;
        let auth = auth.secured()?;
        region::run(region::Plan {
            base,
            region_a,
            database,
            processor,
            secret: auth.jwt_secret.expose_secret().to_owned(),
            fans,
            seconds,
            cut,
            rejoin,
        })
        .await
    }
}

/// The flags of `onsale-loadgen setup` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Setup {
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
}

impl Setup {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let Self {
            base,
            ttl,
            tokens,
            tokens_file,
            ga,
            auth,
        } = self;
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
}

/// The flags of `onsale-loadgen search-freshness` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct SearchFreshness {
    /// A running stack's API (serve, with relay and project behind it).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base: String,
    #[arg(long, default_value_t = 50)]
    shows: usize,
    #[command(flatten)]
    auth: AuthSettings,
}

impl SearchFreshness {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let auth = self.auth.secured()?;
        crate::freshness::run(self.base, auth.jwt_secret.expose_secret(), self.shows).await
    }
}

/// The flags of `onsale-loadgen bench-search` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct BenchSearch {
    #[command(flatten)]
    database: DatabaseSettings,
    /// A running `onsale serve` on the same database without the search index
    /// (`ONSALE_SEARCH_INDEX=0`): PostgreSQL over HTTP.
    #[arg(long)]
    base: Option<String>,
    /// A running `onsale serve` on the same database with its search index: the index and
    /// type-ahead over HTTP.
    #[arg(long)]
    index_base: Option<String>,
    #[arg(long, default_value_t = 100_000)]
    shows: usize,
    #[arg(long, default_value_t = 16)]
    clients: usize,
    #[arg(long, default_value_t = 20)]
    seconds: u64,
}

impl BenchSearch {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let Self {
            database,
            base,
            index_base,
            shows,
            clients,
            seconds,
        } = self;
        database.migrate().await?;
        let pool = database.pool(clients as u32 + 2, false)?;
        search::run(pool, base, index_base, shows, clients, seconds).await
    }
}

/// The flags of `onsale-loadgen bench-replay` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct BenchReplay {
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
}

impl BenchReplay {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let Self {
            mut database,
            brokers,
            shows,
            events,
            repeat,
            concurrency,
        } = self;
        database.migrate().await?;
        // The benchmark's database is its own: the login role writes the log directly.
        database.database_role.clear();
        let pool = database.pool(concurrency as u32 + 2, false)?;
        replay::run(pool, brokers, shows, events, repeat, concurrency).await
    }
}

/// The flags of `onsale-loadgen bench-queue` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct BenchQueue {
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
}

impl BenchQueue {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let Self {
            base,
            redis_url,
            clients,
            seconds,
            fans,
            target,
            auth,
        } = self;
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
}

/// The flags of `onsale-loadgen hold-rate` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct HoldRate {
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
}

impl HoldRate {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let Self {
            base,
            event,
            rate,
            seconds,
            auth,
        } = self;
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
