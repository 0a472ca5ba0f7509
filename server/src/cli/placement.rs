//! Where shows live and which region writes: the operator's moves and promotions.

use onsale_eventlog::DatabaseSettings;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Shard {
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

impl Shard {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let Shard::Move { database, show, to } = self;
        let moved = onsale_server::move_show(&database, show.parse()?, to).await?;
        println!("{}", serde_json::to_string(&moved)?);
        Ok(())
    }
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Region {
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

impl Region {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        match self {
            Region::Promote {
                database,
                region,
                wait_secs,
            } => {
                let wait = std::time::Duration::from_secs(wait_secs);
                let promoted = onsale_server::region::promote(&database, &region, wait).await?;
                println!("{}", serde_json::to_string(&promoted)?);
            }
            Region::FollowCheck {
                database,
                writer_url,
            } => {
                let writer = onsale_server::region::follow_check(&database, &writer_url).await?;
                println!(
                    "ok: may follow region {} (epoch {})",
                    writer.region, writer.epoch
                );
            }
        }
        Ok(())
    }
}
