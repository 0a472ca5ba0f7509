//! The service's processes (`serve`, `relay`, `project`), the operator's `migrate` before them
//! and the daily `reconcile`: each built by [`Server::build`] from the shared [`Settings`].

use onsale_server::{Part, Server, Settings};

pub(crate) async fn serve(settings: Settings) -> anyhow::Result<()> {
    let _tracing = onsale_telemetry::init_tracing("onsale-serve");
    Server::run_in_region(settings, &Part::SERVE).await
}

/// The flags of `onsale relay` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Relay {
    #[command(flatten)]
    settings: Settings,
    /// Republish the events table (this show only, or all) and exit.
    #[arg(long)]
    backfill: bool,
    #[arg(long, requires = "backfill")]
    show: Option<String>,
}

impl Relay {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let _tracing = onsale_telemetry::init_tracing("onsale-relay");
        if !self.backfill {
            return Server::run_in_region(self.settings, &[Part::Relay]).await;
        }
        // Every shard's log (docs/adr/021), each under its own shard's LSNs.
        let mut n = 0;
        for (shard, db) in (1u16..).zip(self.settings.database.shards()) {
            let config = self.settings.relay.for_shard(shard);
            let relay =
                onsale_kafka::Relay::start(db.pool(4, true)?, self.settings.kafka.clone(), config)
                    .await?;
            n += relay.backfill(self.show.as_deref()).await?;
        }
        println!("republished {n} events");
        Ok(())
    }
}

/// The flags of `onsale project` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Project {
    #[command(flatten)]
    settings: Settings,
    /// Delete the read models first: they rebuild from zero.
    #[arg(long)]
    rebuild: bool,
}

impl Project {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let _tracing = onsale_telemetry::init_tracing("onsale-project");
        if self.rebuild {
            onsale_server::settle(&self.settings).await?;
            let pool = self.settings.database.pool(2, true)?;
            onsale_projections::reset_all(&pool).await?;
            tracing::info!("read models deleted; rebuilding from zero");
        }
        Server::run_in_region(self.settings, &Part::PROJECT).await
    }
}

/// The flags of `onsale migrate` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Migrate {
    #[command(flatten)]
    database: onsale_eventlog::DatabaseSettings,
    #[arg(long, env = "ONSALE_REGION", default_value = "a")]
    region: onsale_domain::region::RegionName,
    /// A role `serve`, `relay` or `project` logs in as (repeat, or comma-separated).
    #[arg(long = "login-role", env = "ONSALE_LOGIN_ROLES", value_delimiter = ',')]
    login_roles: Vec<String>,
}

impl Migrate {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let _tracing = onsale_telemetry::init_tracing("onsale-migrate");
        let roles = &self.login_roles;
        if onsale_server::migrate(&self.database, &self.region, roles).await? {
            println!("migrated; logins admitted: {}", roles.join(", "));
        } else {
            println!("a standby region: its databases replay the writer region's schema and roles");
        }
        Ok(())
    }
}

/// The flags of `onsale reconcile` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Reconcile {
    #[command(flatten)]
    settings: Settings,
    /// The day (UTC), YYYY-MM-DD; today by default.
    #[arg(long)]
    day: Option<chrono::NaiveDate>,
}

impl Reconcile {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let server = Server::build(self.settings, &[]).await?;
        let day = self.day.unwrap_or_else(|| chrono::Utc::now().date_naive());
        let processor = server.settings().payments.back_office_processor()?;
        let report = onsale_payments::reconcile::reconcile(
            &server.pool,
            server.stores(),
            &server.shows,
            processor.as_ref(),
            day,
        )
        .await?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        server.shutdown().await
    }
}
