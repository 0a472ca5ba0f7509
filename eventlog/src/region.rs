//! Which region writes, as each PostgreSQL cluster records it (docs/adr/024, the decisions in
//! `onsale_domain::region`): what a process reads to know whether it may write, and what a
//! promotion does to each of the new writer's clusters.

use anyhow::Context;
use onsale_domain::region::{Lsn, RegionName, Writer};
use sqlx::PgPool;

use crate::moving::MOVED_NODE;

/// One cluster as a process or a promotion sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterState {
    /// Replaying another cluster's WAL: a standby.
    pub in_recovery: bool,
    /// The writer this cluster records (`None`: no region has written yet).
    pub writer: Option<Writer>,
    /// Standbys: the last position received and flushed, and the last replayed.
    pub received: Option<Lsn>,
    pub replayed: Option<Lsn>,
}

fn lsn(s: Option<String>) -> anyhow::Result<Option<Lsn>> {
    s.map(|s| s.parse().map_err(|e: String| anyhow::anyhow!(e)))
        .transpose()
}

fn writer(row: Option<(String, i64)>) -> anyhow::Result<Option<Writer>> {
    row.map(|(region, epoch)| {
        Ok(Writer {
            region: region.parse().map_err(|e: String| anyhow::anyhow!(e))?,
            epoch,
        })
    })
    .transpose()
}

/// The cluster behind `pool`: standby or not, the writer it records, its WAL positions.
pub async fn state(pool: &PgPool) -> anyhow::Result<ClusterState> {
    let (in_recovery, received, replayed): (bool, Option<String>, Option<String>) =
        sqlx::query_as(
            "SELECT pg_is_in_recovery(), pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text",
        )
        .fetch_one(pool)
        .await
        .context("read the cluster's recovery state")?;
    Ok(ClusterState {
        in_recovery,
        writer: recorded_writer(pool).await?,
        received: lsn(received)?,
        replayed: lsn(replayed)?,
    })
}

/// The writer the cluster behind `pool` records.
pub async fn recorded_writer(pool: &PgPool) -> anyhow::Result<Option<Writer>> {
    let row: Option<(String, i64)> =
        sqlx::query_as("SELECT region, epoch FROM regions WHERE writer")
            .fetch_optional(pool)
            .await
            .context("read the writer region")?;
    writer(row)
}

/// Records `me` as the writer (epoch 1) on a cluster that records none yet: the region a
/// deployment starts in. Run as the schema's owner, after the migrations.
pub async fn record_first_writer(owner: &PgPool, me: &RegionName) -> anyhow::Result<()> {
    sqlx::query(
        // Processes starting together race here: the first insert wins, the others do nothing.
        "INSERT INTO regions (region, writer, epoch)
         SELECT $1, true, 1 WHERE NOT EXISTS (SELECT 1 FROM regions)
         ON CONFLICT DO NOTHING",
    )
    .bind(me.as_str())
    .execute(owner)
    .await
    .context("record the first writer region")?;
    Ok(())
}

/// Where a standby streams from (its `primary_conninfo`), as libpq keywords; `None` on a
/// primary. Needs the schema's owner (a superuser reads the setting).
pub async fn upstream(owner: &PgPool) -> anyhow::Result<Option<String>> {
    let info: String = sqlx::query_scalar("SELECT current_setting('primary_conninfo')")
        .fetch_one(owner)
        .await
        .context("read primary_conninfo")?;
    Ok((!info.trim().is_empty()).then_some(info))
}

/// Makes the cluster behind `owner` (the schema's owner) the new writer's: promoted if it is
/// a standby; then, in one transaction, `writer` recorded as the writer, every claim and
/// node lease of the old region void (claims go on from the epochs' sequence, which a
/// promotion never hands out twice; the tombstones of moved shows stay), and on the main
/// database (`directory`) every show's region rewritten. Answers the WAL position the
/// cluster writes from. Safe to run again.
pub async fn take_over(owner: &PgPool, writer: &Writer, directory: bool) -> anyhow::Result<Lsn> {
    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(owner)
        .await?;
    if in_recovery {
        let promoted: bool = sqlx::query_scalar("SELECT pg_promote(true, 60)")
            .fetch_one(owner)
            .await
            .context("pg_promote")?;
        anyhow::ensure!(
            promoted,
            "the cluster did not finish its promotion within 60 s"
        );
        // The control file names the new timeline only after a checkpoint: until then
        // pg_rewind takes the old writer for one on the same timeline and rewinds nothing.
        sqlx::query("CHECKPOINT").execute(owner).await?;
    }
    let mut tx = owner.begin().await?;
    sqlx::query("UPDATE regions SET writer = false WHERE writer AND region <> $1")
        .bind(writer.region.as_str())
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO regions (region, writer, epoch) VALUES ($1, true, $2)
         ON CONFLICT (region) DO UPDATE SET writer = true, epoch = EXCLUDED.epoch, since = now()
         WHERE regions.epoch < EXCLUDED.epoch OR NOT regions.writer",
    )
    .bind(writer.region.as_str())
    .bind(writer.epoch)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM show_owners WHERE node_id <> $1")
        .bind(MOVED_NODE)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM nodes WHERE node_id <> $1")
        .bind(MOVED_NODE)
        .execute(&mut *tx)
        .await?;
    if directory {
        sqlx::query("UPDATE show_shards SET region = $1 WHERE region IS DISTINCT FROM $1")
            .bind(writer.region.as_str())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    let at: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(owner)
        .await?;
    at.parse().map_err(|e: String| anyhow::anyhow!(e))
}
