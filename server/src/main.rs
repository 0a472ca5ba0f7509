//! `onsale`: the service's processes (`serve`: command and query APIs; `relay`: CDC into Kafka;
//! `project`: the projections) and the operator's commands (log, verify, token, backfill).

use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use onsale_command::api::auth::{self, Role};
use onsale_command::app::SystemClock;
use onsale_command::store::EventStore;
use onsale_command::{telemetry, App, Config};
use onsale_domain::ShowId;
use onsale_kafka::{KafkaConfig, Relay, RelayConfig};
use onsale_payments::PaymentsConfig;
use onsale_projections::RunnerConfig;
use onsale_query::QueryConfig;
use onsale_waiting_room::{WaitingRoom, WaitingRoomConfig};
use sqlx::postgres::PgPoolOptions;

#[derive(Debug, Parser)]
#[command(name = "onsale", about = "Reserved-seat ticketing backend")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The PostgreSQL database holding the event store (and the read models).
#[derive(Debug, clap::Args)]
struct DbArgs {
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://onsale@127.0.0.1:54329/onsale"
    )]
    database_url: String,
}

/// Which show, in which event store.
#[derive(Debug, clap::Args)]
struct ShowArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The show (event) id.
    #[arg(long)]
    show: String,
}

/// A PostgreSQL database and a Kafka cluster, for the read path's processes.
#[derive(Debug, clap::Args)]
struct ReadPathArgs {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    kafka: KafkaConfig,
    /// Where `/metrics` and `/healthz` of this process are served.
    #[arg(long, env = "ONSALE_METRICS_LISTEN")]
    metrics_listen: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the REST API (commands and queries, SSE) and gRPC (with gRPC-web).
    Serve {
        #[command(flatten)]
        config: Config,
        #[command(flatten)]
        query: QueryConfig,
        #[arg(long, env = "ONSALE_LISTEN", default_value = "127.0.0.1:8080")]
        listen: String,
        #[arg(long, env = "ONSALE_GRPC_LISTEN", default_value = "127.0.0.1:50051")]
        grpc_listen: String,
        #[command(flatten)]
        payments: PaymentsConfig,
        #[command(flatten)]
        waiting_room: WaitingRoomConfig,
    },
    /// Relay the events table into Kafka through a logical replication slot.
    Relay {
        #[command(flatten)]
        args: ReadPathArgs,
        #[command(flatten)]
        relay: RelayConfig,
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
        args: ReadPathArgs,
        #[command(flatten)]
        runner: RunnerConfig,
        /// Delete the read models first: they rebuild from zero.
        #[arg(long)]
        rebuild: bool,
    },
    /// Print a show's events, one JSON object a line, from the event store (for analysts).
    Log(ShowArgs),
    /// Check that a show's latest snapshot plus the events after it equals a replay from zero.
    Verify(ShowArgs),
    /// Reconcile a day's settlement file with the orders (both directions) and print the report.
    Reconcile {
        #[command(flatten)]
        config: Config,
        #[command(flatten)]
        payments: PaymentsConfig,
        /// The day (UTC), YYYY-MM-DD; today by default.
        #[arg(long)]
        day: Option<chrono::NaiveDate>,
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

/// A pool on the event store, migrated (the read models live in the same database).
async fn read_path_pool(args: &ReadPathArgs, size: u32) -> anyhow::Result<sqlx::PgPool> {
    let pool = PgPoolOptions::new()
        .max_connections(size)
        .connect_lazy(&args.db.database_url)?;
    onsale_command::store::migrate(&pool).await?;
    Ok(pool)
}

/// `/metrics` and `/healthz` of a relay or projector process.
async fn serve_metrics(listen: Option<&str>) -> anyhow::Result<()> {
    let Some(listen) = listen else { return Ok(()) };
    let handle = telemetry::metrics();
    let router = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route(
            "/metrics",
            axum::routing::get(move || {
                let h = handle.clone();
                async move { h.map(|h| h.render()).unwrap_or_default() }
            }),
        );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("bind {listen}"))?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(())
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
        Command::Serve {
            config,
            query,
            listen,
            grpc_listen,
            payments,
            waiting_room,
        } => {
            telemetry::init_tracing();
            let mut app = App::build(&config, Arc::new(SystemClock)).await?;
            if let Some(room) = WaitingRoom::connect(waiting_room, app.state.shows.clone()).await? {
                room.mount(&mut app);
                room.spawn_admitter(app.state.health.clone());
            }
            // Payments run where the shows are owned: outcomes are commands on them.
            let payments_pool = PgPoolOptions::new()
                .max_connections(16)
                .acquire_timeout(std::time::Duration::from_secs(2))
                .connect_lazy(&config.database_url)?;
            onsale_payments::mount(&mut app, payments_pool.clone(), &payments);
            onsale_payments::spawn_worker(
                payments_pool.clone(),
                app.state.shows.clone(),
                payments.clone(),
            )?;
            onsale_payments::spawn_jobs(payments_pool, app.state.shows.clone(), payments)?;
            // The query side gets a pool of its own on purpose: a burst of seat-map misses or
            // SSE resumes must not take the connections the owners' appends are waiting for.
            let pool = PgPoolOptions::new()
                .max_connections(config.pool_size)
                .acquire_timeout(std::time::Duration::from_secs(2))
                .connect_lazy(&config.database_url)?;
            let reads = onsale_query::QueryState::start(pool, &query, &config.jwt_secret);
            reads.mount(&mut app);
            let grpc = tokio::net::TcpListener::bind(&grpc_listen)
                .await
                .with_context(|| format!("bind {grpc_listen}"))?;
            let grpc_router = onsale_query::grpc::router(reads);
            tokio::spawn(async move {
                if let Err(e) = axum::serve(grpc, grpc_router).await {
                    tracing::error!(error = %e, "gRPC server stopped");
                }
            });
            let listener = tokio::net::TcpListener::bind(&listen)
                .await
                .with_context(|| format!("bind {listen}"))?;
            tracing::info!(%listen, %grpc_listen, "onsale serving");
            app.run(listener, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
        }
        Command::Relay {
            args,
            relay,
            backfill,
            show,
        } => {
            telemetry::init_tracing();
            let pool = read_path_pool(&args, 4).await?;
            let relay = Relay::start(pool, args.kafka.clone(), relay).await?;
            if backfill {
                let n = relay.backfill(show.as_deref()).await?;
                println!("republished {n} events");
                return Ok(());
            }
            serve_metrics(args.metrics_listen.as_deref()).await?;
            tracing::info!("relay running");
            relay
                .run(async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await;
            Ok(())
        }
        Command::Project {
            args,
            runner,
            rebuild,
        } => {
            telemetry::init_tracing();
            let pool = read_path_pool(&args, 8).await?;
            if rebuild {
                onsale_projections::reset_all(&pool).await?;
                tracing::info!("read models deleted; rebuilding from zero");
            }
            serve_metrics(args.metrics_listen.as_deref()).await?;
            let mut tasks =
                onsale_projections::spawn_all(pool.clone(), args.kafka.clone(), runner.clone());
            tasks.extend(onsale_payments::spawn_consumers(pool, args.kafka, runner));
            tracing::info!("projections running");
            let _ = tokio::signal::ctrl_c().await;
            for t in tasks {
                t.abort();
            }
            Ok(())
        }
        Command::Reconcile {
            config,
            payments,
            day,
        } => {
            let app = App::build(&config, Arc::new(SystemClock)).await?;
            let client = onsale_payments::ProcessorClient::new(
                &payments.processor_url,
                std::time::Duration::from_secs(10),
            )?;
            let day = day.unwrap_or_else(|| chrono::Utc::now().date_naive());
            let pool = app.state.shows.store().pool().clone();
            let report =
                onsale_payments::reconcile::reconcile(&pool, &app.state.shows, &client, day)
                    .await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
        Command::Log(ShowArgs { db, show }) => {
            let store = store(&db.database_url).await?;
            for e in store.events(show.parse()?).await? {
                println!("{}", serde_json::to_string(&e)?);
            }
            Ok(())
        }
        Command::Verify(ShowArgs { db, show }) => {
            let store = store(&db.database_url).await?;
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
