//! Moving a show to another shard while it sells (docs/adr/022): fence it on its shard, copy
//! its log (every row as stored, its hash chain with it), snapshots, payments, refunds and
//! tickets (and its orders' card tokens), verify the copy, switch
//! the directory, and only then remove the old rows. Commands that reach the show meanwhile are
//! fenced or refused (503 with `Retry-After`) and find it on its new shard once the directory
//! says so; nothing acknowledged is lost, because nothing is appended on the old shard after
//! the fence and the copy is taken after it.

use anyhow::Context;
use onsale_domain::ShowId;
use sqlx::PgPool;

use crate::shards::{Directory, PgDirectory, ShardId};

/// The owner a show moved off a shard keeps there: registered alive forever at no address, so
/// every claim on the old shard finds the show owned elsewhere (a node whose cache still names
/// the old shard looks the show up again) and every append there is fenced. Migration 0024
/// lets the log's rows of a show owned by it, and only those, be removed.
pub const MOVED_NODE: uuid::Uuid = uuid::Uuid::from_u128(0x6d6f_7665_6421);

/// The SQLSTATE a shard answers a write of a row of a show that moved off it with (a code of
/// onsale's own, migration 0025: no server condition shares it).
pub const MOVED_SQLSTATE: &str = "OSMVD";

/// Whether `e` is a shard refusing a payment's, a ticket's or a card token's row because its
/// show moved off it: the writer forgets the show's shard and tries again on the new one.
pub fn is_moved(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == MOVED_SQLSTATE)
}

/// The shows of this shard's `pool` that moved (or are moving) off it: their rows here are
/// fenced, and the payment worker leaves them alone.
pub async fn moved_off(pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT show_id FROM show_owners WHERE node_id = $1")
        .bind(MOVED_NODE)
        .fetch_all(pool)
        .await
}

/// Rows copied per statement: memory stays bounded whatever the show's history.
const PAGE: i64 = 10_000;

/// What a move did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Moved {
    pub show: String,
    pub from: ShardId,
    pub to: ShardId,
    /// Events copied, verified on the new shard and removed from the old.
    pub events: i64,
    pub snapshots: i64,
    /// Whether the copy was an earlier, interrupted move's (its switch never happened), found
    /// whole on the new shard and taken as it is.
    pub resumed: bool,
    /// Events an earlier move left on shards the show moved off (its removal failed: that shard
    /// was down), removed now.
    pub leftovers: i64,
}

/// Moves `show` to shard `to`. `directory` is the main database; `shards` every shard in order;
/// all as the schema's owner (the removal of the old rows is refused to the processes' role).
///
/// Run again after a move that stopped part way, it finishes that move: a whole copy on `to`
/// whose switch never happened is taken as it is, and rows left fenced on a shard the show
/// moved off are removed (a show already on `to` with leftovers elsewhere: just the removal).
pub async fn move_show(
    directory: &PgPool,
    shards: &[PgPool],
    show: ShowId,
    to: ShardId,
) -> anyhow::Result<Moved> {
    let dir = PgDirectory::new(directory.clone());
    let from = dir.lookup(show).await?.unwrap_or(ShardId::FIRST);
    let id = show.to_string();
    let mut leftovers = 0;
    for (n, pool) in (1u16..).zip(shards) {
        if n != from.get() {
            leftovers += remove_leftovers(pool, &id).await.with_context(|| {
                format!("remove what an earlier move left of show {show} on shard {n}")
            })?;
        }
    }
    if from == to {
        anyhow::ensure!(leftovers > 0, "show {show} is on shard {to} already");
        return Ok(Moved {
            show: id,
            from,
            to,
            events: 0,
            snapshots: 0,
            resumed: false,
            leftovers,
        });
    }
    let shard = |s: ShardId| {
        shards
            .get(s.index())
            .with_context(|| format!("shard {s} is not configured"))
    };
    let (source, target) = (shard(from)?, shard(to)?);
    let head: Option<i64> = sqlx::query_scalar(
        "SELECT max(sequence) FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1",
    )
    .bind(&id)
    .fetch_one(source)
    .await?;
    anyhow::ensure!(head.is_some(), "show {show} has no log on shard {from}");

    fence(source, &id).await?;
    let copied = match resume(source, target, &id).await {
        Ok(Some(copied)) => Ok(copied),
        Ok(None) => copy(source, target, &id).await.map(|(e, s)| (e, s, false)),
        Err(e) => Err(e),
    };
    let copied = match copied {
        Ok(copied) => copied,
        Err(e) => {
            // Nothing switched: the show sells on where it was.
            unfence(source, &id)
                .await
                .context("unfence after a failed copy")?;
            return Err(e.context(format!("copy show {show} to shard {to}")));
        }
    };
    dir.switch(show, to).await?;
    remove(source, &id).await.with_context(|| {
        format!(
            "show {show} moved to shard {to}; its old rows on shard {from} are still there \
             (fenced): run the move again to remove them"
        )
    })?;
    Ok(Moved {
        show: id,
        from,
        to,
        events: copied.0,
        snapshots: copied.1,
        resumed: copied.2,
        leftovers,
    })
}

/// An earlier move's copy on the new shard, committed whole (the copy is one transaction) but
/// never switched to: taken as it is if it is the fenced source's log, event for event (same
/// count, same last hash); `None` when the new shard holds nothing of the show.
async fn resume(
    source: &PgPool,
    target: &PgPool,
    id: &str,
) -> anyhow::Result<Option<(i64, i64, bool)>> {
    let there = count(target, id).await?;
    if there == 0 {
        return Ok(None);
    }
    let here = count(source, id).await?;
    anyhow::ensure!(
        there == here && last_hash(source, id).await? == last_hash(target, id).await?,
        "the new shard holds {there} rows of the show that are not its log ({here} events): \
         not an interrupted move's copy; remove them by hand"
    );
    let verified = crate::chain::verify(target, Some(id), PAGE).await?;
    if let Some(b) = verified.broken {
        anyhow::bail!("an earlier move's copy does not verify: {b}");
    }
    // The rows that live with the show, committed with the copy: the fenced source's still.
    // Card tokens excepted: the edge forgets the token of an order it refused, on the old
    // shard too, and the jobs sweep the copy's.
    for table in WITH_THE_SHOW.iter().filter(|t| **t != "payment_tokens") {
        anyhow::ensure!(
            rows_digest(target, table, id).await? == rows_digest(source, table, id).await?,
            "an earlier move's copy of the show's {table} is not the fenced shard's"
        );
    }
    let snapshots: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM snapshots WHERE aggregate_type = 'show' AND aggregate_id = $1",
    )
    .bind(id)
    .fetch_one(target)
    .await?;
    Ok(Some((there, snapshots, true)))
}

/// The show's rows on a shard it moved off, where its owner is the tombstone: what a move whose
/// removal failed left behind. Answers how many events went.
async fn remove_leftovers(pool: &PgPool, id: &str) -> anyhow::Result<i64> {
    let fenced: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM show_owners WHERE show_id = $1 AND node_id = $2)",
    )
    .bind(id)
    .bind(MOVED_NODE)
    .fetch_one(pool)
    .await?;
    if !fenced {
        return Ok(0);
    }
    remove(pool, id).await
}

/// The show's owner on its old shard becomes [`MOVED_NODE`] under a new epoch: whatever its
/// owner appends from now on is fenced. An append in flight holds the owner row `FOR SHARE`,
/// and a payment or ticket write its show's advisory lock shared, so this waits for them; the
/// copy, taken after, has them.
async fn fence(source: &PgPool, id: &str) -> anyhow::Result<()> {
    let mut tx = source.begin().await?;
    // The show's payment and ticket writes in flight hold its advisory lock shared (migration
    // 0025): taken exclusively, it waits for them, and the ones after see the tombstone.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('onsale.show:' || $1, 0))")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO nodes (node_id, addr, alive_until) VALUES ($1, '', 'infinity')
         ON CONFLICT (node_id) DO UPDATE SET addr = '', alive_until = 'infinity'",
    )
    .bind(MOVED_NODE)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO show_owners (show_id, node_id, epoch) VALUES ($1, $2, nextval('show_owner_epochs'))
         ON CONFLICT (show_id) DO UPDATE
           SET node_id = EXCLUDED.node_id, epoch = EXCLUDED.epoch, claimed_at = now()",
    )
    .bind(id)
    .bind(MOVED_NODE)
    .execute(&mut *tx)
    .await?;
    tx.commit().await.context("fence the show on its shard")?;
    Ok(())
}

async fn unfence(source: &PgPool, id: &str) -> anyhow::Result<()> {
    sqlx::query("DELETE FROM show_owners WHERE show_id = $1 AND node_id = $2")
        .bind(id)
        .bind(MOVED_NODE)
        .execute(source)
        .await?;
    Ok(())
}

type Row = (i64, String, String, String, String, String, Option<Vec<u8>>);

/// A page of rows column by column, as `unnest` takes them.
#[derive(Default)]
struct Columns {
    sequences: Vec<i64>,
    types: Vec<String>,
    versions: Vec<String>,
    payloads: Vec<String>,
    metadata: Vec<String>,
    xids: Vec<String>,
    hashes: Vec<Vec<u8>>,
}

/// Copies the show's rows as stored (hash, metadata and transaction id included) and its
/// snapshots in one transaction of the new shard, then checks the copy: its chain recomputed
/// intact, as long as the old one and ending on the same hash. Answers (events, snapshots).
async fn copy(source: &PgPool, target: &PgPool, id: &str) -> anyhow::Result<(i64, i64)> {
    let mut tx = target.begin().await?;
    let there: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1",
    )
    .bind(id)
    .fetch_one(&mut *tx)
    .await?;
    anyhow::ensure!(
        there == 0,
        "the new shard holds {there} rows of the show already"
    );
    // Moved away from this shard once and back now: the old tombstone goes.
    sqlx::query("DELETE FROM show_owners WHERE show_id = $1 AND node_id = $2")
        .bind(id)
        .bind(MOVED_NODE)
        .execute(&mut *tx)
        .await?;
    let events = copy_events(source, &mut tx, id).await?;
    let snapshots = sqlx::query(
        "SELECT last_sequence, current_snapshot, payload::text AS payload FROM snapshots
          WHERE aggregate_type = 'show' AND aggregate_id = $1",
    )
    .bind(id)
    .fetch_all(source)
    .await?;
    for s in &snapshots {
        use sqlx::Row as _;
        sqlx::query(
            "INSERT INTO snapshots (aggregate_type, aggregate_id, last_sequence, current_snapshot, payload)
             VALUES ('show', $1, $2, $3, $4::json)",
        )
        .bind(id)
        .bind(s.try_get::<i64, _>("last_sequence")?)
        .bind(s.try_get::<i64, _>("current_snapshot")?)
        .bind(s.try_get::<String, _>("payload")?)
        .execute(&mut *tx)
        .await?;
    }
    let mut copied = Vec::new();
    for table in WITH_THE_SHOW {
        copied.push((table, copy_rows(source, &mut tx, table, id).await?));
    }
    tx.commit().await?;
    for (table, digest) in copied {
        anyhow::ensure!(
            rows_digest(target, table, id).await? == digest,
            "the copy of the show's {table} is not the rows it was taken from"
        );
    }

    let verified = crate::chain::verify(target, Some(id), PAGE).await?;
    if let Some(b) = verified.broken {
        anyhow::bail!("the copy does not verify: {b}");
    }
    anyhow::ensure!(
        i64::try_from(verified.events)? == events
            && last_hash(source, id).await? == last_hash(target, id).await?,
        "the copy ({} events) is not the log it was taken from ({events} events)",
        verified.events
    );
    Ok((events, i64::try_from(snapshots.len())?))
}

/// Copies the show's events, page by page, as stored (hash, metadata and transaction id
/// included) into `tx`; answers how many.
async fn copy_events(
    source: &PgPool,
    tx: &mut sqlx::PgConnection,
    id: &str,
) -> anyhow::Result<i64> {
    let (mut after, mut events) = (0i64, 0i64);
    loop {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT sequence, event_type, event_version, payload::text, metadata::text, xid::text, hash
               FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1 AND sequence > $2
              ORDER BY sequence LIMIT $3",
        )
        .bind(id)
        .bind(after)
        .bind(PAGE)
        .fetch_all(source)
        .await?;
        let Some(last) = rows.last() else { break };
        after = last.0;
        let mut c = Columns::default();
        for (seq, event_type, version, payload, metadata, xid, hash) in rows {
            c.hashes
                .push(hash.with_context(|| format!("row {seq} has no hash"))?);
            c.sequences.push(seq);
            c.types.push(event_type);
            c.versions.push(version);
            c.payloads.push(payload);
            c.metadata.push(metadata);
            c.xids.push(xid);
        }
        events += i64::try_from(c.sequences.len())?;
        sqlx::query(
            "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version,
                                 payload, metadata, xid, hash)
             SELECT 'show', $1, s, t, v, p::json, m::json, x::xid8, h
               FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[],
                           $7::text[], $8::bytea[]) AS u(s, t, v, p, m, x, h)",
        )
        .bind(id)
        .bind(&c.sequences)
        .bind(&c.types)
        .bind(&c.versions)
        .bind(&c.payloads)
        .bind(&c.metadata)
        .bind(&c.xids)
        .bind(&c.hashes)
        .execute(&mut *tx)
        .await?;
    }
    Ok(events)
}

async fn count(pool: &PgPool, id: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await?)
}

async fn last_hash(pool: &PgPool, id: &str) -> anyhow::Result<Option<Vec<u8>>> {
    Ok(sqlx::query_scalar::<_, Option<Vec<u8>>>(
        "SELECT hash FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1
          ORDER BY sequence DESC LIMIT 1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?
    .flatten())
}

/// What lives with a show on its shard besides its log and snapshots (migration 0025): moved
/// with it, under the same fence.
const WITH_THE_SHOW: [&str; 5] = [
    "payments",
    "refunds",
    "ticket_orders",
    "tickets",
    "payment_tokens",
];

/// A table's rows of the show, as one comparable value: how many, and a digest of them all.
type Digest = (i64, String);

/// `table`'s rows of the show on `pool` (or in a transaction), digested.
async fn rows_digest<'c>(
    db: impl sqlx::PgExecutor<'c>,
    table: &str,
    id: &str,
) -> anyhow::Result<Digest> {
    Ok(sqlx::query_as(&format!(
        "SELECT count(*), coalesce(md5(string_agg(r, ',' ORDER BY r)), '')
           FROM (SELECT to_jsonb(t)::text AS r FROM {table} t WHERE show_id = $1) rows"
    ))
    .bind(id)
    .fetch_one(db)
    .await?)
}

/// Copies `table`'s rows of the show from the fenced `source` into the new shard's transaction,
/// column for column (through their JSON form, which every column type here round-trips).
/// Read in one snapshot of the source with their digest, which the copy must match. A show's
/// rows here are bounded by its seats (a payment, a refund and a ticket order per order, a
/// ticket per seat), so they go in one statement.
async fn copy_rows(
    source: &PgPool,
    tx: &mut sqlx::PgConnection,
    table: &str,
    id: &str,
) -> anyhow::Result<Digest> {
    let mut read = source.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *read)
        .await?;
    let rows: Option<serde_json::Value> = sqlx::query_scalar(&format!(
        "SELECT jsonb_agg(to_jsonb(t)) FROM {table} t WHERE show_id = $1"
    ))
    .bind(id)
    .fetch_one(&mut *read)
    .await?;
    let digest = rows_digest(&mut *read, table, id).await?;
    read.commit().await?;
    if let Some(rows) = rows {
        sqlx::query(&format!(
            "INSERT INTO {table} SELECT * FROM jsonb_populate_recordset(NULL::{table}, $1)"
        ))
        .bind(rows)
        .execute(&mut *tx)
        .await?;
    }
    Ok(digest)
}

/// Removes the show's rows from its old shard, where it stays fenced; answers how many events.
async fn remove(source: &PgPool, id: &str) -> anyhow::Result<i64> {
    let mut tx = source.begin().await?;
    for table in WITH_THE_SHOW {
        sqlx::query(&format!("DELETE FROM {table} WHERE show_id = $1"))
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    let events =
        sqlx::query("DELETE FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    sqlx::query("DELETE FROM snapshots WHERE aggregate_type = 'show' AND aggregate_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(i64::try_from(events)?)
}
