//! `onsale`: the service's processes (`serve`: command and query APIs with the payment worker
//! and the admitter; `relay`: CDC into Kafka; `project`: the projections) and the operator's
//! commands (log, verify, reconcile, token, backfill). Each process is built by
//! [`onsale_server::Server::build`].

use clap::{Parser, Subcommand};
use onsale_edge::auth::Role;
use onsale_edge::AuthSettings;
use onsale_eventlog::{DatabaseSettings, EventLog};
use onsale_server::{Part, Server, Settings};

#[derive(Debug, Parser)]
#[command(name = "onsale", about = "Reserved-seat ticketing backend")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the REST API (commands and queries, SSE) and gRPC (with gRPC-web), with the
    /// payment worker, the scheduled jobs and the waiting room's admitter.
    Serve(Settings),
    /// Relay the events table into Kafka through a logical replication slot.
    Relay {
        #[command(flatten)]
        settings: Settings,
        /// Republish the events table (this show only, or all) and exit.
        #[arg(long)]
        backfill: bool,
        #[arg(long, requires = "backfill")]
        show: Option<String>,
    },
    /// Run the projections (seat map, orders, seat history) and the log consumers that feed
    /// payments and tickets.
    Project {
        #[command(flatten)]
        settings: Settings,
        /// Delete the read models first: they rebuild from zero.
        #[arg(long)]
        rebuild: bool,
    },
    /// Print a show's events, one JSON object a line, from the event store (for analysts).
    Log {
        #[command(flatten)]
        database: DatabaseSettings,
        /// The show (event) id.
        #[arg(long)]
        show: String,
    },
    /// Check that a show's latest snapshot plus the events after it equals a replay from zero.
    Verify {
        #[command(flatten)]
        database: DatabaseSettings,
        /// The show (event) id.
        #[arg(long)]
        show: String,
    },
    /// Reconcile a day's settlement file with the orders (both directions) and print the report.
    Reconcile {
        #[command(flatten)]
        settings: Settings,
        /// The day (UTC), YYYY-MM-DD; today by default.
        #[arg(long)]
        day: Option<chrono::NaiveDate>,
    },
    /// Print a development bearer token.
    Token {
        #[command(flatten)]
        auth: AuthSettings,
        #[arg(long)]
        sub: String,
        #[arg(long, value_parser = parse_role, default_value = "fan")]
        role: Role,
        #[arg(long, default_value_t = 3600)]
        ttl_secs: u64,
    },
}

fn parse_role(s: &str) -> Result<Role, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| format!("unknown role {s}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(settings) => {
            onsale_telemetry::init_tracing();
            Server::build(settings, &Part::SERVE)
                .await?
                .run_until_signal()
                .await
        }
        Command::Relay {
            settings,
            backfill: true,
            show,
        } => {
            onsale_telemetry::init_tracing();
            let pool = settings.database.pool(4, true)?;
            onsale_eventlog::migrate(&pool).await?;
            let relay = onsale_kafka::Relay::start(pool, settings.kafka, settings.relay).await?;
            let n = relay.backfill(show.as_deref()).await?;
            println!("republished {n} events");
            Ok(())
        }
        Command::Relay { settings, .. } => {
            onsale_telemetry::init_tracing();
            Server::build(settings, &[Part::Relay])
                .await?
                .run_until_signal()
                .await
        }
        Command::Project { settings, rebuild } => {
            onsale_telemetry::init_tracing();
            if rebuild {
                let pool = settings.database.pool(2, true)?;
                onsale_eventlog::migrate(&pool).await?;
                onsale_projections::reset_all(&pool).await?;
                tracing::info!("read models deleted; rebuilding from zero");
            }
            Server::build(settings, &Part::PROJECT)
                .await?
                .run_until_signal()
                .await
        }
        Command::Reconcile { settings, day } => {
            let server = Server::build(settings, &[]).await?;
            let day = day.unwrap_or_else(|| chrono::Utc::now().date_naive());
            let processor = server
                .settings()
                .payments
                .processor(std::time::Duration::from_secs(10))?;
            let report = onsale_payments::reconcile::reconcile(
                &server.pool,
                &server.shows,
                processor.as_ref(),
                day,
            )
            .await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            server.shutdown().await
        }
        Command::Log { database, show } => {
            let log = onsale_server::event_log(&database)?;
            for e in log.events(show.parse()?).await? {
                println!("{}", serde_json::to_string(&e)?);
            }
            Ok(())
        }
        Command::Verify { database, show } => {
            let log = onsale_server::event_log(&database)?;
            let show = show.parse()?;
            let loaded = log.load(show).await?;
            let replayed = log.replay(show).await?;
            if loaded.version != replayed.version
                || serde_json::to_value(&loaded.show)? != serde_json::to_value(&replayed.show)?
            {
                anyhow::bail!(
                    "snapshot at {} plus tail to {} differs from a replay to {}",
                    loaded.snapshot_version,
                    loaded.version,
                    replayed.version
                );
            }
            println!(
                "ok: snapshot at {} plus {} events equals a replay of {} events",
                loaded.snapshot_version,
                loaded.version - loaded.snapshot_version,
                replayed.version
            );
            Ok(())
        }
        Command::Token {
            auth,
            sub,
            role,
            ttl_secs,
        } => {
            println!("{}", auth.secured()?.mint(&sub, role, ttl_secs)?);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
