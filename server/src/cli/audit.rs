//! The auditors' checks of the log: its hash chains and the signed checkpoints of their heads.

use onsale_eventlog::DatabaseSettings;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Audit {
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

impl Audit {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        match self {
            Audit::Verify {
                database,
                show,
                checkpoint,
                public_key,
            } => verify(&database, show, &checkpoint, public_key).await,
            Audit::Keygen { out } => {
                let public = onsale_server::audit::keygen(&out)?;
                println!("{public}");
                eprintln!(
                    "the signing key is in {} (keep it from the database's owner); verify with --public-key {public}",
                    out.display()
                );
                Ok(())
            }
            Audit::Checkpoint {
                database,
                key,
                out,
                show,
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
        }
    }
}

async fn verify(
    database: &DatabaseSettings,
    show: Option<String>,
    checkpoints: &[std::path::PathBuf],
    public_key: Option<String>,
) -> anyhow::Result<()> {
    if let Some(show) = &show {
        show.parse::<onsale_domain::ShowId>()?;
    }
    let v = onsale_server::audit::verify(
        database,
        show.as_deref(),
        checkpoints,
        public_key.as_deref(),
    )
    .await?;
    let held = match v.heads {
        0 => String::new(),
        n => format!(
            "; {n} signed heads of {} checkpoints as signed",
            checkpoints.len()
        ),
    };
    println!(
        "ok: {} events of {} aggregates, every hash chain intact{held}",
        v.events, v.aggregates
    );
    Ok(())
}
