//! `onsale`: the service's processes (`serve`: command and query APIs with the payment worker
//! and the admitter; `relay`: CDC into Kafka; `project`: the projections) and the operator's,
//! analysts' and auditors' commands, one line each below; each command's flags and body are
//! in `cli/`. Each process is built by [`onsale_server::Server::build`].

mod cli;

use clap::{Parser, Subcommand};
use cli::{analysts, audit, dev, placement, processes};
use onsale_server::settings_table::EnvironmentSetting;
use onsale_server::Settings;

/// mimalloc rather than glibc's allocator: folding a show's log allocates and frees a few
/// small strings per event, glibc's `malloc`, `free` and `malloc_consolidate` took a third of
/// a replay's time (perf, `make bench-replay`), and with mimalloc decoding and applying an
/// event took a fifth less (2.8 to 2.3 µs). The load generator folds with the same one.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The variable mimalloc reads its purge delay from (milliseconds; -1: never purge).
const PURGE_DELAY: &str = "MIMALLOC_PURGE_DELAY";

/// The process keeps the memory it has freed instead of giving it back to the kernel a second
/// after (mimalloc's purge delay -1 instead of 1,000 ms), unless `MIMALLOC_PURGE_DELAY` is set.
/// Purged pages come back as page faults, each zeroed by the kernel: at 4,500 holds/s on the
/// `make up` stack `onsale serve` spent ~5% of its CPU in those faults; without the purge a
/// third fewer holds took over 100 ms (docs/adr/027, BENCHMARKS.md). The price: the process
/// stays at its high-water mark.
///
/// mimalloc reads its options from the environment before `main`, and setting one from Rust
/// would take `unsafe` (forbidden here), so the process starts itself again, same pid, same
/// arguments, with the variable set; if it cannot, it goes on with mimalloc's default.
fn keep_freed_memory() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(PURGE_DELAY).is_some() {
        return;
    }
    let mut args = std::env::args_os();
    let (Ok(exe), Some(arg0)) = (std::env::current_exe(), args.next()) else {
        return;
    };
    let err = std::process::Command::new(exe)
        .arg0(arg0)
        .args(args)
        .env(PURGE_DELAY, "-1")
        .exec();
    eprintln!(
        "onsale: could not start again with {PURGE_DELAY}=-1 ({err}); freed memory is purged"
    );
}

/// What every process reads from the environment alone, before its flags: the log and the
/// traces start first, and mimalloc reads its options before `main`.
const ENVIRONMENT: &[EnvironmentSetting] = &[
    EnvironmentSetting {
        name: "RUST_LOG",
        default: onsale_telemetry::trace::DEFAULT_LOG,
        what: "What is logged to stderr (a tracing `EnvFilter`).",
    },
    EnvironmentSetting {
        name: onsale_telemetry::trace::ZIPKIN_URL,
        default: "",
        what: "Zipkin's span endpoint (`http://host:9411/api/v2/spans`); unset, no span is \
               exported (docs/observability.md).",
    },
    EnvironmentSetting {
        name: onsale_telemetry::trace::SAMPLE,
        default: "0",
        what: "The share (0 to 1) of the traces started here that are sampled; a caller's \
               sampled `traceparent` is followed whatever it is.",
    },
    EnvironmentSetting {
        name: PURGE_DELAY,
        default: "-1",
        what: "mimalloc's purge delay (ms): -1 keeps freed memory in the process (ADR 027); set \
               it to give freed memory back to the kernel that long after.",
    },
];

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
    Relay(processes::Relay),
    /// Run the projections (seat map, orders, seat history) and the log consumers that feed
    /// payments and tickets.
    Project(processes::Project),
    /// The operator's job, with the schema owner's login (issue 53, item 6): apply the
    /// migrations to the main database and every shard, admit the processes' logins (each a
    /// member of onsale_app and nothing more; created if missing), and on a deployment's first
    /// run record this region as the writer. `serve`, `relay` and `project` never migrate:
    /// they wait for this. Run it before each upgrade's processes start; on a standby region
    /// it does nothing (its databases replay the writer's).
    Migrate(processes::Migrate),
    /// Print every setting of these commands as a Markdown table: its environment variable,
    /// flag, default, the commands that read it and what it sets (docs/operations.md holds it).
    Settings,
    /// Print the OpenAPI document the REST API serves at `/openapi.json` (the front end's
    /// client is generated from it).
    Openapi(dev::Openapi),
    /// Print a show's events, one JSON object a line, from the event store (for analysts).
    Log(analysts::Log),
    /// Check that a show's latest snapshot plus the events after it equals a replay from zero.
    Verify(analysts::Verify),
    /// Print a show's seat map as it was (rebuilt from the log: the nearest snapshot plus the
    /// events after it), as the API's map of the past (`?at=`, `?atSequence=`) answers it.
    Replay(analysts::Replay),
    /// Export the log for analysts: Parquet or NDJSON files in DIR, one typed row per event
    /// (show, sequence, type, commit time, transaction id, actor, the payload's fields), and
    /// `manifest.json`; streamed in bounded memory, one consistent snapshot of each shard's log.
    Export(analysts::Export),
    /// Where shows live (docs/adr/021, 022).
    #[command(subcommand)]
    Shard(placement::Shard),
    /// Regions (docs/adr/024): which one writes.
    #[command(subcommand)]
    Region(placement::Region),
    /// The auditors' checks of the log.
    #[command(subcommand)]
    Audit(audit::Audit),
    /// Reconcile a day's settlement file with the orders (both directions) and print the report.
    Reconcile(processes::Reconcile),
    /// Print a development bearer token (HS256; development mode only).
    Token(dev::Token),
}

fn main() -> anyhow::Result<()> {
    keep_freed_memory();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(settings) => processes::serve(settings).await,
        Command::Relay(c) => c.run().await,
        Command::Project(c) => c.run().await,
        Command::Migrate(c) => c.run().await,
        Command::Settings => settings(),
        Command::Openapi(c) => c.run(),
        Command::Log(c) => c.run().await,
        Command::Verify(c) => c.run().await,
        Command::Replay(c) => c.run().await,
        Command::Export(c) => c.run().await,
        Command::Shard(c) => c.run().await,
        Command::Region(c) => c.run().await,
        Command::Audit(c) => c.run().await,
        Command::Reconcile(c) => c.run().await,
        Command::Token(c) => c.run(),
    }
}

fn settings() -> anyhow::Result<()> {
    use clap::CommandFactory;
    let table = onsale_server::settings_table::markdown(&Cli::command(), ENVIRONMENT);
    print!("{table}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
