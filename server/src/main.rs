//! `onsale`: the service's processes (`serve`: command and query APIs with the payment worker
//! and the admitter; `relay`: CDC into Kafka; `project`: the projections) and the operator's
//! commands (log, verify, reconcile, token, backfill). Each process is built by
//! [`onsale_server::Server::build`].

use clap::{Parser, Subcommand};
use onsale_edge::auth::{Gates, Role};
use onsale_edge::AuthSettings;
use onsale_eventlog::{DatabaseSettings, EventLog};
use onsale_server::settings_table::EnvironmentSetting;
use onsale_server::{Part, Server, Settings};
use secrecy::ExposeSecret;

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
    /// The operator's job, with the schema owner's login (issue 53, item 6): apply the
    /// migrations to the main database and every shard, admit the processes' logins (each a
    /// member of onsale_app and nothing more; created if missing), and on a deployment's first
    /// run record this region as the writer. `serve`, `relay` and `project` never migrate:
    /// they wait for this. Run it before each upgrade's processes start; on a standby region
    /// it does nothing (its databases replay the writer's).
    Migrate {
        #[command(flatten)]
        database: DatabaseSettings,
        #[arg(long, env = "ONSALE_REGION", default_value = "a")]
        region: onsale_domain::region::RegionName,
        /// A role `serve`, `relay` or `project` logs in as (repeat, or comma-separated).
        #[arg(long = "login-role", env = "ONSALE_LOGIN_ROLES", value_delimiter = ',')]
        login_roles: Vec<String>,
    },
    /// Print the OpenAPI document the REST API serves at `/openapi.json` (the front end's
    /// client is generated from it).
    Openapi {
        /// Leave out the waiting room's routes (a process without Redis has none).
        #[arg(long)]
        without_waiting_room: bool,
        /// Leave out the development sign-in (a process outside development mode has none).
        #[arg(long)]
        without_dev: bool,
    },
    /// Print every setting of these commands as a Markdown table: its environment variable,
    /// flag, default, the commands that read it and what it sets (docs/operations.md holds it).
    Settings,
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
    /// Print a show's seat map as it was (rebuilt from the log: the nearest snapshot plus the
    /// events after it), as the API's map of the past (`?at=`, `?atSequence=`) answers it.
    Replay {
        #[command(flatten)]
        database: DatabaseSettings,
        /// The show (event) id.
        #[arg(long)]
        show: String,
        /// An RFC 3339 instant, or a sequence of the show's log; the present if not given.
        #[arg(long)]
        until: Option<String>,
        /// Print this section's seats too.
        #[arg(long)]
        section: Option<String>,
    },
    /// Export the log for analysts: Parquet or NDJSON files in DIR, one typed row per event
    /// (show, sequence, type, commit time, transaction id, actor, the payload's fields), and
    /// `manifest.json`; streamed in bounded memory, one consistent snapshot of each shard's log.
    Export {
        #[command(flatten)]
        database: DatabaseSettings,
        /// The directory to write (created if missing; it must not hold an export already).
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
        /// This show only; every show if not given.
        #[arg(long)]
        show: Option<String>,
        /// The first event exported: a sequence of each show's log (from 1) or an RFC 3339
        /// instant (commit time), inclusive.
        #[arg(long)]
        from: Option<onsale_export::Bound>,
        /// The last event exported, the same way, inclusive.
        #[arg(long)]
        until: Option<onsale_export::Bound>,
        /// parquet or ndjson.
        #[arg(long, default_value = "parquet")]
        format: onsale_export::Format,
        /// The key of the account ids' pseudonyms (HMAC-SHA256), at least 32 bytes; the same
        /// key gives the same pseudonyms in every export. Required unless development mode is
        /// on or `--raw-account-ids` is given.
        #[arg(long, env = "ONSALE_PSEUDONYM_KEY", default_value = "", hide_default_value = true, value_parser = onsale_edge::auth::secret)]
        pseudonym_key: secrecy::SecretString,
        /// Write account ids as they are, not pseudonymized: an admin's decision, recorded in
        /// the manifest.
        #[arg(long)]
        raw_account_ids: bool,
        /// Rows per file before the next file starts.
        #[arg(long, default_value_t = 1_000_000)]
        file_rows: usize,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
        /// Development mode: an unset pseudonym key takes a built-in development value...
        #[arg(long = "dev-mode", env = "ONSALE_DEV_MODE", default_value_t = false, value_parser = clap::builder::BoolishValueParser::new())]
        dev_mode: bool,
        /// ...which is refused unless this says so: its pseudonyms can be recomputed by anyone
        /// (the manifest records it).
        #[arg(long)]
        allow_development_pseudonym_key: bool,
    },
    /// Where shows live (docs/adr/021, 022).
    Shard {
        #[command(subcommand)]
        command: ShardCommand,
    },
    /// Regions (docs/adr/024): which one writes.
    Region {
        #[command(subcommand)]
        command: RegionCommand,
    },
    /// The auditors' checks of the log.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Reconcile a day's settlement file with the orders (both directions) and print the report.
    Reconcile {
        #[command(flatten)]
        settings: Settings,
        /// The day (UTC), YYYY-MM-DD; today by default.
        #[arg(long)]
        day: Option<chrono::NaiveDate>,
    },
    /// Print a development bearer token (HS256; development mode only).
    Token {
        #[command(flatten)]
        auth: AuthSettings,
        #[arg(long)]
        sub: String,
        #[arg(long, value_parser = parse_role, default_value = "fan")]
        role: Role,
        /// Sign the `verified` claim: the account is one the identity provider vouches for.
        #[arg(long)]
        verified: bool,
        /// A scanner's venue (it admits tickets of that venue's shows only).
        #[arg(long)]
        venue: Option<String>,
        /// A scanner's show (repeat): it admits tickets of these shows only.
        #[arg(long = "show")]
        shows: Vec<String>,
        #[arg(long, default_value_t = 3600)]
        ttl_secs: u64,
    },
}

#[derive(Debug, Subcommand)]
enum ShardCommand {
    /// Move a show to another shard while it sells: fenced on its shard, its log copied with
    /// its hash chain and verified there, the directory switched, then its old rows removed.
    /// Commands for the show meanwhile answer 503 with Retry-After. Runs as the schema's owner.
    /// A move that stopped part way (a shard or the main database down) is finished by running
    /// it again: the copy it made is taken as it is, rows it left on the old shard removed.
    Move {
        #[command(flatten)]
        database: DatabaseSettings,
        /// The show (event) id.
        #[arg(long)]
        show: String,
        /// The shard to move it to (1, 2, ... as ONSALE_SHARD_URLS lists them).
        #[arg(long)]
        to: u16,
    },
}

#[derive(Debug, Subcommand)]
enum RegionCommand {
    /// Make this region (its databases: DATABASE_URL and ONSALE_SHARD_URLS, standbys of the
    /// writer region's) the writer under the next epoch. Refused while any old writer's
    /// cluster still answers as a primary, or a standby has not replayed what it received
    /// (waited for up to --wait-secs). Shards are promoted first, the main database last;
    /// every claim and lease of the old region is void. Its processes notice within a second
    /// and start again as writers. Runs as the schema's owner; run it again to finish one that
    /// stopped part way.
    Promote {
        #[command(flatten)]
        database: DatabaseSettings,
        /// The region to promote (this one).
        #[arg(long, env = "ONSALE_REGION")]
        region: onsale_domain::region::RegionName,
        #[arg(long, default_value_t = 30)]
        wait_secs: u64,
    },
    /// Check that this region's databases may be rewound onto the writer at --writer-url and
    /// follow it (a writer of a later epoch than this region records); exits non-zero if not.
    FollowCheck {
        #[command(flatten)]
        database: DatabaseSettings,
        #[arg(long)]
        writer_url: String,
    },
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Recompute the log's hash chains (every aggregate, or one show) and name the first row
    /// that was changed, removed or inserted after the fact; with checkpoints, check each was
    /// signed under --public-key and that every head it signed is still in the log with the
    /// same hash (an owner who rewrote rows and every hash after them is caught there). Exits
    /// non-zero if anything does not hold.
    Verify {
        #[command(flatten)]
        database: DatabaseSettings,
        /// The show (event) id; every aggregate of the log if not given.
        #[arg(long)]
        show: Option<String>,
        /// A checkpoint `onsale audit checkpoint` wrote (repeat for several).
        #[arg(long, value_name = "FILE")]
        checkpoint: Vec<std::path::PathBuf>,
        /// The public key (base64) the checkpoints must be signed under: the auditor's copy,
        /// never the one a checkpoint names.
        #[arg(long, env = "ONSALE_CHECKPOINT_PUBLIC_KEY")]
        public_key: Option<String>,
    },
    /// Make a checkpoint signing key (Ed25519, PKCS#8) in FILE, readable by its owner only, and
    /// print its public key. Keep it where the database's owner cannot reach it.
    Keygen {
        #[arg(long, value_name = "FILE")]
        out: std::path::PathBuf,
    },
    /// Sign every aggregate's chain head (its last sequence and hash) on every shard with the
    /// key in --key, into a checkpoint FILE kept outside the database (run it at intervals).
    Checkpoint {
        #[command(flatten)]
        database: DatabaseSettings,
        #[arg(long, env = "ONSALE_CHECKPOINT_KEY_FILE", value_name = "FILE")]
        key: std::path::PathBuf,
        #[arg(long, value_name = "FILE")]
        out: std::path::PathBuf,
        /// This show's head only.
        #[arg(long)]
        show: Option<String>,
    },
}

fn parse_role(s: &str) -> Result<Role, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| format!("unknown role {s}"))
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
        Command::Serve(settings) => {
            let _tracing = onsale_telemetry::init_tracing("onsale-serve");
            Server::run_in_region(settings, &Part::SERVE).await
        }
        Command::Relay {
            settings,
            backfill: true,
            show,
        } => {
            let _tracing = onsale_telemetry::init_tracing("onsale-relay");
            // Every shard's log (docs/adr/021), each under its own shard's LSNs.
            let mut n = 0;
            for (shard, db) in (1u16..).zip(settings.database.shards()) {
                let config = settings.relay.for_shard(shard);
                let relay =
                    onsale_kafka::Relay::start(db.pool(4, true)?, settings.kafka.clone(), config)
                        .await?;
                n += relay.backfill(show.as_deref()).await?;
            }
            println!("republished {n} events");
            Ok(())
        }
        Command::Migrate {
            database,
            region,
            login_roles,
        } => {
            let _tracing = onsale_telemetry::init_tracing("onsale-migrate");
            if onsale_server::migrate(&database, &region, &login_roles).await? {
                println!("migrated; logins admitted: {}", login_roles.join(", "));
            } else {
                println!(
                    "a standby region: its databases replay the writer region's schema and roles"
                );
            }
            Ok(())
        }
        Command::Relay { settings, .. } => {
            let _tracing = onsale_telemetry::init_tracing("onsale-relay");
            Server::run_in_region(settings, &[Part::Relay]).await
        }
        Command::Project { settings, rebuild } => {
            let _tracing = onsale_telemetry::init_tracing("onsale-project");
            if rebuild {
                onsale_server::settle(&settings).await?;
                let pool = settings.database.pool(2, true)?;
                onsale_projections::reset_all(&pool).await?;
                tracing::info!("read models deleted; rebuilding from zero");
            }
            Server::run_in_region(settings, &Part::PROJECT).await
        }
        Command::Reconcile { settings, day } => {
            let server = Server::build(settings, &[]).await?;
            let day = day.unwrap_or_else(|| chrono::Utc::now().date_naive());
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
        Command::Replay {
            database,
            show,
            until,
            section,
        } => {
            let show: onsale_domain::ShowId = show.parse()?;
            let until = match until.as_deref() {
                None => onsale_eventlog::Until::Sequence(i64::MAX),
                Some(u) => match u.parse::<i64>() {
                    Ok(n) if n >= 1 => onsale_eventlog::Until::Sequence(n),
                    Ok(_) => anyhow::bail!("--until counts the show's events from 1"),
                    Err(_) => onsale_eventlog::Until::Time(
                        chrono::DateTime::parse_from_rfc3339(u)
                            .map_err(|_| {
                                anyhow::anyhow!("--until is a sequence or an RFC 3339 time")
                            })?
                            .with_timezone(&chrono::Utc),
                    ),
                },
            };
            let sharded = onsale_server::event_log(&database)?;
            let log = sharded.of(show).await?;
            let past = match log.load_until(show, until).await? {
                onsale_eventlog::Past::Beyond { head }
                    if until == onsale_eventlog::Until::Sequence(i64::MAX) =>
                {
                    log.load_until(show, onsale_eventlog::Until::Sequence(head))
                        .await?
                }
                other => other,
            };
            match past {
                onsale_eventlog::Past::Found {
                    show: s,
                    sequence,
                    at,
                    ..
                } => {
                    let map = onsale_query::snapshots::map_of(
                        &s,
                        show.to_string(),
                        at,
                        sequence,
                        String::new(),
                        &section.map_or(
                            onsale_query::seats::Seats::None,
                            onsale_query::seats::Seats::Section,
                        ),
                    )
                    .map_err(|_| anyhow::anyhow!("the show has no such section"))?;
                    println!("{}", serde_json::to_string_pretty(&map)?);
                    Ok(())
                }
                onsale_eventlog::Past::NoShow => anyhow::bail!("no such show"),
                onsale_eventlog::Past::Before => {
                    anyhow::bail!("the show was scheduled after that instant")
                }
                onsale_eventlog::Past::Beyond { head } => {
                    anyhow::bail!("the show's log ends at sequence {head}")
                }
            }
        }
        Command::Export {
            database,
            out,
            show,
            from,
            until,
            format,
            mut pseudonym_key,
            raw_account_ids,
            file_rows,
            quiet,
            dev_mode,
            allow_development_pseudonym_key,
        } => {
            if let Some(show) = &show {
                show.parse::<onsale_domain::ShowId>()?;
            }
            const DEV_KEY: &str = "onsale-dev-pseudonym-key";
            let (accounts, development_key) = if raw_account_ids {
                (onsale_export::Accounts::Raw, false)
            } else {
                onsale_edge::auth::require_secret(
                    &mut pseudonym_key,
                    "ONSALE_PSEUDONYM_KEY",
                    DEV_KEY,
                    dev_mode,
                )?;
                let development = pseudonym_key.expose_secret() == DEV_KEY;
                anyhow::ensure!(
                    !development || allow_development_pseudonym_key,
                    "ONSALE_PSEUDONYM_KEY is unset and development mode would use its built-in key, \
                     whose pseudonyms anyone can recompute: set ONSALE_PSEUDONYM_KEY, or pass \
                     --allow-development-pseudonym-key for a development export"
                );
                (
                    onsale_export::Accounts::Pseudonymized(
                        pseudonym_key.expose_secret().as_bytes().to_vec(),
                    ),
                    development,
                )
            };
            let options = onsale_export::Options {
                out,
                show,
                from,
                until,
                format,
                accounts,
                development_key,
                file_rows,
                progress: !quiet,
            };
            // Every shard's log (docs/adr/021), shard by shard: a show lives on one.
            let pools = database
                .shards()
                .iter()
                .map(|shard| shard.pool(2, true))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let m = onsale_export::export(&pools, &options).await?;
            println!(
                "{} events of {} shows in {} files under {} (account ids {})",
                m.events,
                m.shows,
                m.files.len(),
                options.out.display(),
                m.account_ids
            );
            Ok(())
        }
        Command::Shard {
            command: ShardCommand::Move { database, show, to },
        } => {
            let moved = onsale_server::move_show(&database, show.parse()?, to).await?;
            println!("{}", serde_json::to_string(&moved)?);
            Ok(())
        }
        Command::Region {
            command:
                RegionCommand::Promote {
                    database,
                    region,
                    wait_secs,
                },
        } => {
            let promoted = onsale_server::region::promote(
                &database,
                &region,
                std::time::Duration::from_secs(wait_secs),
            )
            .await?;
            println!("{}", serde_json::to_string(&promoted)?);
            Ok(())
        }
        Command::Region {
            command:
                RegionCommand::FollowCheck {
                    database,
                    writer_url,
                },
        } => {
            let writer = onsale_server::region::follow_check(&database, &writer_url).await?;
            println!(
                "ok: may follow region {} (epoch {})",
                writer.region, writer.epoch
            );
            Ok(())
        }
        Command::Audit {
            command:
                AuditCommand::Verify {
                    database,
                    show,
                    checkpoint,
                    public_key,
                },
        } => {
            if let Some(show) = &show {
                show.parse::<onsale_domain::ShowId>()?;
            }
            let v = onsale_server::audit::verify(
                &database,
                show.as_deref(),
                &checkpoint,
                public_key.as_deref(),
            )
            .await?;
            let held = match v.heads {
                0 => String::new(),
                n => format!(
                    "; {n} signed heads of {} checkpoints as signed",
                    checkpoint.len()
                ),
            };
            println!(
                "ok: {} events of {} aggregates, every hash chain intact{held}",
                v.events, v.aggregates
            );
            Ok(())
        }
        Command::Audit {
            command: AuditCommand::Keygen { out },
        } => {
            let public = onsale_server::audit::keygen(&out)?;
            println!("{public}");
            eprintln!(
                "the signing key is in {} (keep it from the database's owner); verify with --public-key {public}",
                out.display()
            );
            Ok(())
        }
        Command::Audit {
            command:
                AuditCommand::Checkpoint {
                    database,
                    key,
                    out,
                    show,
                },
        } => {
            let cp = onsale_server::audit::checkpoint(&database, &key, show.as_deref()).await?;
            onsale_server::audit::write(&cp, &out)?;
            println!(
                "checkpoint of {} heads at {} in {}",
                cp.heads.len(),
                cp.taken_at,
                out.display()
            );
            Ok(())
        }
        Command::Settings => {
            use clap::CommandFactory;
            print!(
                "{}",
                onsale_server::settings_table::markdown(&Cli::command(), ENVIRONMENT)
            );
            Ok(())
        }
        Command::Openapi {
            without_waiting_room,
            without_dev,
        } => {
            let doc = onsale_server::openapi(!without_waiting_room, !without_dev)?;
            println!("{}", serde_json::to_string_pretty(&doc)?);
            Ok(())
        }
        Command::Token {
            auth,
            sub,
            role,
            verified,
            venue,
            shows,
            ttl_secs,
        } => {
            let gates = match (role, venue, shows) {
                (Role::Scanner, _, shows) if !shows.is_empty() => Some(Gates::Shows(shows)),
                (Role::Scanner, Some(venue), _) => Some(Gates::Venue(venue)),
                (Role::Scanner, None, _) => {
                    anyhow::bail!("a scanner's token names its --venue or its --show(s)")
                }
                _ => None,
            };
            println!(
                "{}",
                auth.secured()?
                    .mint(&sub, role, verified, gates.as_ref(), ttl_secs)?
            );
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
