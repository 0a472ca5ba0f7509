//! `onsale`: run the service, mint development tokens, check a show's snapshot.

use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use onsale_command::api::auth::{self, Role};
use onsale_command::app::SystemClock;
use onsale_command::store::EventStore;
use onsale_command::{telemetry, App, Config};
use onsale_domain::ShowId;

#[derive(Debug, Parser)]
#[command(name = "onsale", about = "Reserved-seat ticketing backend")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Which show, in which event store.
#[derive(Debug, clap::Args)]
struct ShowArgs {
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://onsale@127.0.0.1:54329/onsale"
    )]
    database_url: String,
    /// The show (event) id.
    #[arg(long)]
    show: String,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the REST API.
    Serve {
        #[command(flatten)]
        config: Config,
        #[arg(long, env = "ONSALE_LISTEN", default_value = "127.0.0.1:8080")]
        listen: String,
    },
    /// Print a show's events, one JSON object a line, from the event store (for analysts).
    Log(ShowArgs),
    /// Check that a show's latest snapshot plus the events after it equals a replay from zero.
    Verify(ShowArgs),
    /// Print a development bearer token.
    Token {
        #[arg(long)]
        sub: String,
        #[arg(long, value_parser = parse_role, default_value = "fan")]
        role: Role,
        #[arg(long, env = "ONSALE_JWT_SECRET", default_value = "onsale-dev-secret")]
        secret: String,
        #[arg(long, default_value_t = 3600)]
        ttl_secs: u64,
    },
}

async fn store(url: &str) -> anyhow::Result<EventStore> {
    let pool = sqlx::PgPool::connect(url)
        .await
        .context("connect to the event store")?;
    Ok(EventStore::new(pool))
}

fn parse_role(s: &str) -> Result<Role, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| format!("unknown role {s}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve { config, listen } => {
            telemetry::init_tracing();
            let app = App::build(&config, Arc::new(SystemClock)).await?;
            let listener = tokio::net::TcpListener::bind(&listen)
                .await
                .with_context(|| format!("bind {listen}"))?;
            tracing::info!(%listen, "onsale serving");
            app.run(listener, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
        }
        Command::Log(ShowArgs { database_url, show }) => {
            let store = store(&database_url).await?;
            for e in store.events(show.parse()?).await? {
                println!("{}", serde_json::to_string(&e)?);
            }
            Ok(())
        }
        Command::Verify(ShowArgs { database_url, show }) => {
            let store = store(&database_url).await?;
            let show: ShowId = show.parse()?;
            let loaded = store.load(show).await?;
            let replayed = store.replay(show).await?;
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
            sub,
            role,
            secret,
            ttl_secs,
        } => {
            println!("{}", auth::mint(&secret, &sub, role, ttl_secs)?);
            Ok(())
        }
    }
}
