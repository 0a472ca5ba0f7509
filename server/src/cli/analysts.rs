//! The analysts' and auditors' reads of the log: a show's events, its snapshot checked against
//! a replay, its seat map as it was, and the export.

use onsale_eventlog::{DatabaseSettings, EventLog, Past, Until};
use secrecy::ExposeSecret;

/// The flags of `onsale log` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Log {
    #[command(flatten)]
    database: DatabaseSettings,
    /// The show (event) id.
    #[arg(long)]
    show: String,
}

impl Log {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let log = onsale_server::event_log(&self.database)?;
        for e in log.events(self.show.parse()?).await? {
            println!("{}", serde_json::to_string(&e)?);
        }
        Ok(())
    }
}

/// The flags of `onsale verify` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Verify {
    #[command(flatten)]
    database: DatabaseSettings,
    /// The show (event) id.
    #[arg(long)]
    show: String,
}

impl Verify {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let log = onsale_server::event_log(&self.database)?;
        let show = self.show.parse()?;
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
}

/// The flags of `onsale replay` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Replay {
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
}

/// `--until` as the log reads it: a sequence from 1, or an instant.
fn until(given: Option<&str>) -> anyhow::Result<Until> {
    let Some(u) = given else {
        return Ok(Until::Sequence(i64::MAX));
    };
    Ok(match u.parse::<i64>() {
        Ok(n) if n >= 1 => Until::Sequence(n),
        Ok(_) => anyhow::bail!("--until counts the show's events from 1"),
        Err(_) => Until::Time(
            chrono::DateTime::parse_from_rfc3339(u)
                .map_err(|_| anyhow::anyhow!("--until is a sequence or an RFC 3339 time"))?
                .with_timezone(&chrono::Utc),
        ),
    })
}

impl Replay {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let show: onsale_domain::ShowId = self.show.parse()?;
        let until = until(self.until.as_deref())?;
        let sharded = onsale_server::event_log(&self.database)?;
        let log = sharded.of(show).await?;
        let past = match log.load_until(show, until).await? {
            Past::Beyond { head } if until == Until::Sequence(i64::MAX) => {
                log.load_until(show, Until::Sequence(head)).await?
            }
            other => other,
        };
        let (s, sequence, at) = match past {
            Past::Found {
                show: s,
                sequence,
                at,
                ..
            } => (s, sequence, at),
            Past::NoShow => anyhow::bail!("no such show"),
            Past::Before => anyhow::bail!("the show was scheduled after that instant"),
            Past::Beyond { head } => anyhow::bail!("the show's log ends at sequence {head}"),
        };
        let seats = self.section.map_or(
            onsale_query::seats::Seats::None,
            onsale_query::seats::Seats::Section,
        );
        let map = onsale_query::snapshots::map_of(
            &s,
            show.to_string(),
            at,
            sequence,
            String::new(),
            &seats,
        )
        .map_err(|_| anyhow::anyhow!("the show has no such section"))?;
        println!("{}", serde_json::to_string_pretty(&map)?);
        Ok(())
    }
}

/// The flags of `onsale export` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Export {
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
}

/// The development pseudonym key: anyone can recompute its pseudonyms.
const DEV_KEY: &str = "onsale-dev-pseudonym-key";

impl Export {
    /// How account ids are written, and whether with the development key.
    fn accounts(&mut self) -> anyhow::Result<(onsale_export::Accounts, bool)> {
        if self.raw_account_ids {
            return Ok((onsale_export::Accounts::Raw, false));
        }
        let key = &mut self.pseudonym_key;
        onsale_edge::auth::require_secret(key, "ONSALE_PSEUDONYM_KEY", DEV_KEY, self.dev_mode)?;
        let development = key.expose_secret() == DEV_KEY;
        anyhow::ensure!(
            !development || self.allow_development_pseudonym_key,
            "ONSALE_PSEUDONYM_KEY is unset and development mode would use its built-in key, \
             whose pseudonyms anyone can recompute: set ONSALE_PSEUDONYM_KEY, or pass \
             --allow-development-pseudonym-key for a development export"
        );
        let bytes = key.expose_secret().as_bytes().to_vec();
        Ok((onsale_export::Accounts::Pseudonymized(bytes), development))
    }

    pub(crate) async fn run(mut self) -> anyhow::Result<()> {
        if let Some(show) = &self.show {
            show.parse::<onsale_domain::ShowId>()?;
        }
        let (accounts, development_key) = self.accounts()?;
        let options = onsale_export::Options {
            out: self.out,
            show: self.show,
            from: self.from,
            until: self.until,
            format: self.format,
            accounts,
            development_key,
            file_rows: self.file_rows,
            progress: !self.quiet,
        };
        // Every shard's log (docs/adr/021), shard by shard: a show lives on one.
        let pools = self
            .database
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
}
