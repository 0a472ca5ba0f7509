//! The owners' tuning, from flags or the environment.

use std::time::Duration;

use crate::protocol::ClusterConfig;

/// Tuning of the owners.
#[derive(Debug, Clone, clap::Args)]
pub struct OwnerConfig {
    /// The most commands decided and committed together.
    #[arg(
        id = "max_batch",
        long = "max-batch",
        env = "ONSALE_MAX_BATCH",
        default_value_t = 512
    )]
    pub max_batch: usize,
    /// A snapshot is written after this many events since the last one, or as many as the show
    /// has holds and orders if that is more...
    #[arg(
        id = "snapshot_every",
        long = "snapshot-every",
        env = "ONSALE_SNAPSHOT_EVERY",
        default_value_t = 10_000
    )]
    pub snapshot_every: i64,
    /// ...but not more often than this (seconds): a snapshot copies the whole show, so during a
    /// rush it must not run on every few thousand events (BENCHMARKS.md shows what that costs).
    #[arg(long = "snapshot-min-secs", env = "ONSALE_SNAPSHOT_MIN_SECS", default_value = "10", value_parser = secs)]
    pub snapshot_min_interval: Duration,
    /// How often (milliseconds) the sweeper looks for lapsed holds.
    #[arg(long = "sweep-every-ms", env = "ONSALE_SWEEP_EVERY_MS", default_value = "1000", value_parser = millis)]
    pub sweep_every: Duration,
    /// How many reloads a batch may take on version conflicts before giving up.
    #[arg(
        id = "max_conflict_retries",
        long = "max-conflict-retries",
        env = "ONSALE_MAX_CONFLICT_RETRIES",
        default_value_t = 5
    )]
    pub max_conflict_retries: u32,
    /// How long (milliseconds) a caller waits for its command to be decided and committed. Past
    /// it the answer is 503 UNAVAILABLE with Retry-After and nothing is acknowledged: a primary
    /// whose synchronous standbys are all gone holds every commit (it fails closed), and a
    /// commit that lands later is found by the retry's Idempotency-Key.
    #[arg(long = "commit-timeout-ms", env = "ONSALE_COMMIT_TIMEOUT_MS", default_value = "5000", value_parser = millis)]
    pub commit_timeout: Duration,
    /// Commands waiting for one show beyond this are answered 503 OVERLOADED instead of queued.
    #[arg(id = "max_queue", long = "max-queue", env = "ONSALE_MAX_QUEUE", default_value_t = 20_000, value_parser = at_least_one)]
    pub max_queue: usize,
    #[command(flatten)]
    pub cluster: ClusterConfig,
}

fn secs(s: &str) -> Result<Duration, std::num::ParseIntError> {
    s.parse().map(Duration::from_secs)
}

fn millis(s: &str) -> Result<Duration, std::num::ParseIntError> {
    s.parse().map(Duration::from_millis)
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s} is not a whole number of at least 1")),
    }
}
