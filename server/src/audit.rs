//! The auditors' commands (`onsale audit ...`): the log's hash chains verified on every shard,
//! and signed checkpoints of its heads (`onsale_eventlog::checkpoint`) taken and checked, so
//! that an owner who rewrites the log and its chain is caught (issue 53, item 6).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use onsale_eventlog::checkpoint::{self, Checkpoint};
use onsale_eventlog::DatabaseSettings;

/// Writes a new signing key's PKCS#8 document to `out` (readable by its owner only; never
/// overwritten) and answers its public key (base64), which the auditor keeps to verify with.
pub fn keygen(out: &Path) -> anyhow::Result<String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let (pkcs8, public) = checkpoint::new_key()?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .with_context(|| {
            format!(
                "create {} (an existing key is never overwritten)",
                out.display()
            )
        })?;
    file.write_all(&pkcs8)?;
    file.sync_all()?;
    Ok(public)
}

/// Every shard's heads (or show `show`'s), signed with the key in `key_file`.
pub async fn checkpoint(
    database: &DatabaseSettings,
    key_file: &Path,
    show: Option<&str>,
) -> anyhow::Result<Checkpoint> {
    let pkcs8 = std::fs::read(key_file)
        .with_context(|| format!("read the signing key {}", key_file.display()))?;
    let key = checkpoint::signing_key(&pkcs8)?;
    let taken_at = chrono::Utc::now();
    let mut heads = Vec::new();
    for shard in database.shards() {
        let pool = shard.pool(2, true)?;
        let read = checkpoint::heads(&pool, show).await;
        pool.close().await;
        heads.extend(read?);
    }
    // A show caught mid-move has its rows on two shards: its head is the longer chain.
    heads.sort_by(|a, b| {
        (&a.aggregate_type, &a.aggregate_id, b.sequence).cmp(&(
            &b.aggregate_type,
            &b.aggregate_id,
            a.sequence,
        ))
    });
    heads.dedup_by(|later, first| {
        later.aggregate_type == first.aggregate_type && later.aggregate_id == first.aggregate_id
    });
    Ok(Checkpoint::sign(heads, taken_at, &key))
}

/// Checkpoints taken at intervals by the jobs' active process (one among all), each a file
/// of its own in a directory kept outside the database (an auditor's mount, a bucket's
/// sync): what `onsale audit verify --checkpoint` is given later.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckpointSettings {
    /// Where the checkpoints are written; none are taken unless set (with the key).
    #[arg(
        long = "checkpoint-dir",
        env = "ONSALE_CHECKPOINT_DIR",
        requires = "key_file"
    )]
    pub dir: Option<PathBuf>,
    /// The signing key (`onsale audit keygen`), which the database's owner must not reach.
    #[arg(
        long = "checkpoint-key-file",
        env = "ONSALE_CHECKPOINT_KEY_FILE",
        requires = "dir"
    )]
    pub key_file: Option<PathBuf>,
    /// How often (seconds) a checkpoint of every chain head is signed and written.
    #[arg(long = "checkpoint-every-secs", env = "ONSALE_CHECKPOINT_EVERY_SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub every_secs: u64,
}

impl CheckpointSettings {
    /// Where and with which key, if checkpoints are to be taken.
    pub fn configured(&self) -> Option<(PathBuf, PathBuf)> {
        self.dir.clone().zip(self.key_file.clone())
    }
}

/// Takes a checkpoint of every shard's heads into `dir` every `every` until `stop` (the first
/// at once), each as `checkpoint-<its instant>.json`. A failed one is logged and counted and
/// the next taken on time; the last success's instant is a gauge to alert on.
pub async fn keep_checkpointing(
    database: DatabaseSettings,
    dir: PathBuf,
    key_file: PathBuf,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while stop.run_until_cancelled(tick.tick()).await.is_some() {
        let taken = async {
            std::fs::create_dir_all(&dir)?;
            let cp = checkpoint(&database, &key_file, None).await?;
            let name = format!(
                "checkpoint-{}.json",
                cp.taken_at.format("%Y%m%dT%H%M%S%.6fZ")
            );
            write(&cp, &dir.join(name))?;
            anyhow::Ok(cp)
        };
        match taken.await {
            Ok(cp) => {
                metrics::gauge!(onsale_telemetry::metrics::CHECKPOINT_TAKEN_SECONDS)
                    .set(cp.taken_at.timestamp() as f64);
                tracing::info!(heads = cp.heads.len(), "checkpoint taken");
            }
            Err(e) => {
                metrics::counter!(onsale_telemetry::metrics::CHECKPOINT_FAILURES_TOTAL)
                    .increment(1);
                tracing::error!(error = %e, "no checkpoint taken");
            }
        }
    }
}

/// Writes `checkpoint` to `out` as JSON (never over an existing file).
pub fn write(checkpoint: &Checkpoint, out: &Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .with_context(|| format!("create {}", out.display()))?;
    file.write_all(serde_json::to_string_pretty(checkpoint)?.as_bytes())?;
    file.sync_all()?;
    Ok(())
}

/// What [`verify`] found: the chains' extent and the checkpoints it held the log to.
#[derive(Debug, Clone, Default)]
pub struct Verified {
    pub events: u64,
    pub aggregates: u64,
    pub heads: usize,
}

/// The hash chains on every shard (or show `show`'s), then each checkpoint in `checkpoints`:
/// signed under `public_key` (the auditor's, base64), and every head it signed still in the
/// log with the same hash. `Err` names the first thing that does not hold.
pub async fn verify(
    database: &DatabaseSettings,
    show: Option<&str>,
    checkpoints: &[std::path::PathBuf],
    public_key: Option<&str>,
) -> anyhow::Result<Verified> {
    let mut out = Verified::default();
    let shards = database.shards();
    let pools = shards
        .iter()
        .map(|shard| shard.pool(2, true))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (n, pool) in (1..).zip(&pools) {
        let verified = onsale_eventlog::chain::verify(pool, show, 10_000).await?;
        out.events += verified.events;
        out.aggregates += verified.aggregates;
        if let Some(b) = verified.broken {
            let on = if pools.len() > 1 {
                format!(" on shard {n}")
            } else {
                String::new()
            };
            anyhow::bail!(
                "the log was altered{on}: {b} ({} events of {} aggregates verified before it)",
                out.events,
                out.aggregates
            );
        }
    }
    if !checkpoints.is_empty() {
        let public_key = public_key
            .context("--public-key is needed to check a checkpoint (the key the auditor trusts)")?;
        for path in checkpoints {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read {}", path.display()))?;
            let mut cp: Checkpoint = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a checkpoint", path.display()))?;
            cp.check_signature(public_key)
                .with_context(|| format!("checkpoint {}", path.display()))?;
            if let Some(show) = show {
                cp.heads
                    .retain(|h| h.aggregate_type == "show" && h.aggregate_id == show);
            }
            let mismatches = checkpoint::compare(&pools, &cp).await?;
            if let Some(first) = mismatches.first() {
                anyhow::bail!(
                    "the log was rewritten since checkpoint {} (signed at {}): {first}; {} of its \
                     {} heads differ",
                    path.display(),
                    cp.taken_at,
                    mismatches.len(),
                    cp.heads.len()
                );
            }
            out.heads += cp.heads.len();
        }
    }
    for pool in pools {
        pool.close().await;
    }
    Ok(out)
}
