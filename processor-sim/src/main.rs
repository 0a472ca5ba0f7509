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
    #[command(flatten)]
    settings: Settings,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_target(false).init();
    let cli = Cli::parse();
    let sim = Sim::new(cli.settings);
    let listener = tokio::net::TcpListener::bind(&cli.listen).await?;
    tracing::info!(listen = %cli.listen, "processor simulator serving");
    sim.run(listener, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed_and_the_defaults_are_the_declared_ones() {
        super::Cli::command().debug_assert();
        let s = onsale_processor_sim::Settings::default();
        assert_eq!(
            (s.hang_ms, s.settle_ms, s.webhook_duplicates),
            (3_000, 2_000, 1)
        );
    }
}
