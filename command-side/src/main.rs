//! `onsale`: run the service, mint development tokens, check a show's snapshot.

use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use onsale_command::api::auth::{self, Role};
use onsale_command::app::SystemClock;
use onsale_command::{telemetry, App, Config};

#[derive(Debug, Parser)]
#[command(name = "onsale", about = "Reserved-seat ticketing backend")]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
