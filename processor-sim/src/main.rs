//! `processor-sim`: the card-processor simulator as a process of the local stack.

use clap::Parser;
use onsale_processor_sim::{Settings, Sim};

#[derive(Debug, Parser)]
#[command(
    name = "processor-sim",
    about = "Card-processor simulator for onsale's local stack"
)]
struct Cli {
    #[arg(long, env = "PROCESSOR_LISTEN", default_value = "127.0.0.1:8090")]
    listen: String,
    /// Where webhooks are delivered (onsale's `/v1/webhooks/processor`).
    #[arg(long, env = "PROCESSOR_WEBHOOK_URL")]
    webhook_url: Option<String>,
    #[arg(
        long,
        env = "ONSALE_WEBHOOK_SECRET",
        default_value = "onsale-dev-webhook-secret"
    )]
    webhook_secret: String,
    /// How long a `tok_timeout_*` charge call hangs.
    #[arg(long, env = "PROCESSOR_HANG_MS", default_value_t = 3_000)]
    hang_ms: u64,
    /// How long pending and late-settling charges take to resolve.
    #[arg(long, env = "PROCESSOR_SETTLE_MS", default_value_t = 2_000)]
    settle_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_target(false).init();
    let cli = Cli::parse();
    let sim = Sim::new(Settings {
        webhook_url: cli.webhook_url,
        webhook_secret: cli.webhook_secret,
        hang_ms: cli.hang_ms,
        settle_ms: cli.settle_ms,
        ..Settings::default()
    });
    let listener = tokio::net::TcpListener::bind(&cli.listen).await?;
    tracing::info!(listen = %cli.listen, "processor simulator serving");
    sim.run(listener, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}
