//! The analysts' export (`onsale export`): the event log (every show, or one; a range of time
//! or sequence) streamed from PostgreSQL in one statement, so the files are one consistent
//! snapshot of the log, and written as it arrives, so memory stays bounded whatever the log's
//! size: rows are typed a chunk at a time, Parquet row groups are capped, files roll over at a
//! row count. Files are written under a `.partial` name and renamed when complete; the
//! manifest (`manifest.json`) is written last and lists them.

pub mod row;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use onsale_eventlog::scan::{self, Range};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde::Serialize;
use sqlx::PgPool;

pub use row::{Accounts, Row, Stored, Typer};

/// The file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Parquet,
    Ndjson,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "parquet" => Ok(Self::Parquet),
            "ndjson" => Ok(Self::Ndjson),
            _ => Err(format!("unknown format {s} (parquet or ndjson)")),
        }
    }
}

impl Format {
    fn extension(self) -> &'static str {
        match self {
            Self::Parquet => "parquet",
            Self::Ndjson => "ndjson",
        }
    }
}

/// One end of the range exported: a sequence of each show's log (from 1), or an instant
/// (the events' commit time). Both ends are inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Bound {
    Sequence(i64),
    Time(DateTime<Utc>),
}

impl std::str::FromStr for Bound {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(n) = s.parse::<i64>() {
            return if n >= 1 {
                Ok(Self::Sequence(n))
            } else {
                Err("a sequence counts a show's events from 1".into())
            };
        }
        DateTime::parse_from_rfc3339(s)
            .map(|t| Self::Time(t.with_timezone(&Utc)))
            .map_err(|_| format!("{s} is neither a sequence nor an RFC 3339 instant"))
    }
}

/// What to export, where and how.
#[derive(Debug, Clone)]
pub struct Options {
    pub out: PathBuf,
    pub show: Option<String>,
    pub from: Option<Bound>,
    pub until: Option<Bound>,
    pub format: Format,
    pub accounts: Accounts,
    /// The pseudonym key is the built-in development one (allowed only when asked for).
    pub development_key: bool,
    /// Rows per file before the next one starts.
    pub file_rows: usize,
    /// Show a progress bar (on standard error).
    pub progress: bool,
}

/// Rows typed and written together; and the most a Parquet row group holds (so the writer's
/// buffers stay small).
const CHUNK: usize = 8_192;
const ROW_GROUP: usize = 65_536;

/// One file of an export.
#[derive(Debug, Clone, Serialize)]
pub struct FileEntry {
    pub name: String,
    pub rows: u64,
    pub bytes: u64,
}

/// What an export wrote: `manifest.json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: Format,
    pub schema_version: u32,
    pub exported_at: DateTime<Utc>,
    pub show: Option<String>,
    pub from: Option<Bound>,
    pub until: Option<Bound>,
    pub account_ids: &'static str,
    /// Which key made the pseudonyms (see [`Accounts::key_id`]); absent for raw ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pseudonym_key_id: Option<String>,
    /// The pseudonyms were made with the built-in development key: anyone can recompute them,
    /// so they hide nobody.
    pub development_pseudonym_key: bool,
    pub events: u64,
    pub shows: u64,
    pub files: Vec<FileEntry>,
    /// The Parquet columns and their types (NDJSON has the same names).
    pub columns: Vec<(String, String)>,
}

enum Writer {
    Parquet(Box<ArrowWriter<File>>),
    Ndjson(BufWriter<File>),
}

/// The files of an export, rolled over every `file_rows` rows.
struct Files {
    dir: PathBuf,
    format: Format,
    file_rows: usize,
    open: Option<(Writer, String, u64)>,
    done: Vec<FileEntry>,
}

impl Files {
    fn write(&mut self, rows: &[Row]) -> anyhow::Result<()> {
        let mut rest = rows;
        while !rest.is_empty() {
            if self.open.is_none() {
                let name = format!("events-{:05}.{}", self.done.len(), self.format.extension());
                let file = File::create(self.dir.join(format!("{name}.partial")))
                    .with_context(|| format!("create {name}"))?;
                let writer = match self.format {
                    Format::Parquet => {
                        let props = WriterProperties::builder()
                            .set_compression(Compression::SNAPPY)
                            .set_max_row_group_row_count(Some(ROW_GROUP))
                            .build();
                        Writer::Parquet(Box::new(ArrowWriter::try_new(
                            file,
                            row::schema(),
                            Some(props),
                        )?))
                    }
                    Format::Ndjson => Writer::Ndjson(BufWriter::new(file)),
                };
                self.open = Some((writer, name, 0));
            }
            let Some((writer, _, written)) = self.open.as_mut() else {
                unreachable!("a file was just opened")
            };
            let room = self.file_rows - *written as usize;
            let (now, later) = rest.split_at(rest.len().min(room));
            match writer {
                Writer::Parquet(w) => w.write(&row::batch(now)?)?,
                Writer::Ndjson(w) => {
                    for r in now {
                        serde_json::to_writer(&mut *w, r)?;
                        w.write_all(b"\n")?;
                    }
                }
            }
            *written += now.len() as u64;
            if *written as usize >= self.file_rows {
                self.close()?;
            }
            rest = later;
        }
        Ok(())
    }

    fn close(&mut self) -> anyhow::Result<()> {
        let Some((writer, name, rows)) = self.open.take() else {
            return Ok(());
        };
        match writer {
            Writer::Parquet(w) => {
                w.close()?;
            }
            Writer::Ndjson(mut w) => {
                w.flush()?;
                w.get_ref().sync_all()?;
            }
        }
        let partial = self.dir.join(format!("{name}.partial"));
        let bytes = std::fs::metadata(&partial)?.len();
        std::fs::rename(&partial, self.dir.join(&name))?;
        self.done.push(FileEntry { name, rows, bytes });
        Ok(())
    }
}

/// The log's range the options select.
fn range(o: &Options) -> Range {
    let seq = |b: Option<Bound>| match b {
        Some(Bound::Sequence(n)) => Some(n),
        _ => None,
    };
    let time = |b: Option<Bound>| match b {
        Some(Bound::Time(t)) => Some(t),
        _ => None,
    };
    Range {
        show: o.show.clone(),
        from_sequence: seq(o.from),
        until_sequence: seq(o.until),
        from_time: time(o.from),
        until_time: time(o.until),
    }
}

/// Runs an export of the logs on `shards` (one database per write cluster, docs/adr/021; a
/// show lives on one) into `o.out` (created if missing; it must not hold an export already).
/// The rows come shard by shard, each show's in order.
pub async fn export(shards: &[PgPool], o: &Options) -> anyhow::Result<Manifest> {
    anyhow::ensure!(o.file_rows > 0, "a file holds at least one row");
    std::fs::create_dir_all(&o.out).with_context(|| format!("create {}", o.out.display()))?;
    anyhow::ensure!(
        !o.out.join("manifest.json").exists()
            && !std::fs::read_dir(&o.out)?.any(|e| e
                .map(|e| e.file_name().to_string_lossy().starts_with("events-"))
                .unwrap_or(false)),
        "{} holds an export already: choose an empty directory",
        o.out.display()
    );
    let range = range(o);
    let mut total: i64 = 0;
    for pool in shards {
        total += scan::count(pool, &range)
            .await
            .context("count the events")?;
    }
    let bar = if o.progress {
        ProgressBar::new(total.max(0) as u64).with_style(ProgressStyle::with_template(
            "{elapsed_precise} {wide_bar} {human_pos}/{human_len} events ({per_sec}, {eta} left)",
        )?)
    } else {
        ProgressBar::hidden()
    };
    let mut files = Files {
        dir: o.out.clone(),
        format: o.format,
        file_rows: o.file_rows,
        open: None,
        done: Vec::new(),
    };
    let mut typer = Typer::new(o.accounts.clone());
    let mut chunk = Vec::with_capacity(CHUNK);
    let (mut events, mut shows, mut last_show) = (0u64, 0u64, String::new());
    let mut stream = scan::events(shards, &range);
    while let Some(stored) = stream.try_next().await.context("read the log")? {
        if stored.show_id != last_show {
            last_show.clone_from(&stored.show_id);
            shows += 1;
        }
        chunk.push(typer.row(stored)?);
        if chunk.len() == CHUNK {
            files.write(&chunk)?;
            events += chunk.len() as u64;
            bar.inc(chunk.len() as u64);
            chunk.clear();
        }
    }
    files.write(&chunk)?;
    events += chunk.len() as u64;
    bar.inc(chunk.len() as u64);
    files.close()?;
    bar.finish_and_clear();
    let manifest = Manifest {
        format: o.format,
        schema_version: 1,
        exported_at: Utc::now(),
        show: o.show.clone(),
        from: o.from,
        until: o.until,
        account_ids: o.accounts.mode(),
        pseudonym_key_id: o.accounts.key_id(),
        development_pseudonym_key: o.development_key,
        events,
        shows,
        files: files.done,
        columns: row::schema()
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().to_string()))
            .collect(),
    };
    write_manifest(&o.out, &manifest)?;
    Ok(manifest)
}

fn write_manifest(dir: &Path, manifest: &Manifest) -> anyhow::Result<()> {
    let partial = dir.join("manifest.json.partial");
    std::fs::write(&partial, serde_json::to_vec_pretty(manifest)?)?;
    std::fs::rename(partial, dir.join("manifest.json"))?;
    Ok(())
}

#[cfg(test)]
mod tests;
