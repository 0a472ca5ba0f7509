//! The catalog's search projection: one row per scheduled show with what fans search and
//! filter on (names, venue, city, times, prices) and how many of its seats are available, so a
//! search can say a show is sold out. Searched by the query side (`query-side/src/catalog.rs`).

use std::collections::{BTreeMap, HashMap};

use onsale_domain::transitions::SeatStatus;
use onsale_domain::{Show, ShowEvent, ShowId, ShowInfo};
use sqlx::postgres::PgConnection;

use crate::fold::{status_at, EventCtx};
use crate::runner::Projection;

/// The catalog projection.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Available seats per show folded here.
    available: HashMap<ShowId, i32>,
    /// Shows scheduled since the last flush (inserted with their facts).
    scheduled: BTreeMap<ShowId, (ShowInfo, i32)>,
    /// Shows whose count changed since the last flush.
    dirty: BTreeMap<ShowId, i32>,
}

fn count_available(show: &Show) -> i32 {
    show.seats()
        .filter(|(_, s)| s.status() == SeatStatus::Available)
        .count() as i32
}

impl Projection for Catalog {
    const NAME: &'static str = "catalog";

    fn loaded(&mut self, show_id: ShowId, show: &Show) {
        self.available.insert(show_id, count_available(show));
    }

    fn unloaded(&mut self, show_id: ShowId) {
        self.available.remove(&show_id);
    }

    fn event(&mut self, ctx: &EventCtx<'_>) {
        let show = ctx.log.show_id;
        if let ShowEvent::ShowScheduled { info, layout } = &ctx.log.event {
            let seats = layout.seat_count() as i32;
            self.available.insert(show, seats);
            self.scheduled.insert(show, (info.clone(), seats));
            return;
        }
        let mut delta = 0;
        for &(seat, before) in ctx.touched {
            let after = status_at(ctx.after, seat);
            match (
                before == SeatStatus::Available,
                after == SeatStatus::Available,
            ) {
                (true, false) => delta -= 1,
                (false, true) => delta += 1,
                _ => {}
            }
        }
        if delta != 0 {
            let n = self.available.entry(show).or_default();
            *n += delta;
            self.dirty.insert(show, *n);
        }
    }

    async fn flush(&mut self, tx: &mut PgConnection) -> anyhow::Result<()> {
        for (show, (info, seats)) in std::mem::take(&mut self.scheduled) {
            let available = self.dirty.remove(&show).unwrap_or(seats);
            let prices = info.prices.values();
            sqlx::query(
                "INSERT INTO catalog_events (event_id, name, performer, venue_id, venue_name, city,
                        starts_at, on_sale_at, min_price_cents, max_price_cents, waiting_room, seats, available,
                        seats_band)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, onsale_seats_band($13, $12))
                 ON CONFLICT (event_id) DO UPDATE SET available = EXCLUDED.available,
                        seats_band = EXCLUDED.seats_band, written = pg_current_xact_id()",
            )
            .bind(show.to_string())
            .bind(&info.name)
            .bind(&info.performer)
            .bind(info.venue_id.to_string())
            .bind(&info.venue_name)
            .bind(&info.city)
            .bind(info.starts_at)
            .bind(info.on_sale_at)
            .bind(prices.clone().min().copied().unwrap_or(0))
            .bind(prices.max().copied().unwrap_or(0))
            .bind(info.waiting_room)
            .bind(seats)
            .bind(available)
            .execute(&mut *tx)
            .await?;
        }
        let dirty = std::mem::take(&mut self.dirty);
        if !dirty.is_empty() {
            let (ids, counts): (Vec<String>, Vec<i32>) =
                dirty.into_iter().map(|(s, n)| (s.to_string(), n)).unzip();
            sqlx::query(
                // The search indexes read a row again only when its band of seats left moved
                // (past a boundary by more than 1% of the seats, or to or from none).
                "UPDATE catalog_events c
                    SET available = u.n, seats_band = onsale_seats_band_after(c.seats_band, u.n, c.seats),
                        written = CASE WHEN c.seats_band = onsale_seats_band_after(c.seats_band, u.n, c.seats)
                                       THEN c.written ELSE pg_current_xact_id() END
                   FROM UNNEST($1::text[], $2::int[]) AS u(id, n) WHERE c.event_id = u.id",
            )
            .bind(&ids)
            .bind(&counts)
            .execute(&mut *tx)
            .await?;
        }
        Ok(())
    }

    async fn reset(tx: &mut PgConnection) -> anyhow::Result<()> {
        sqlx::query("TRUNCATE catalog_events")
            .execute(&mut *tx)
            .await?;
        Ok(())
    }
}

/// A show as the catalog lists it, for a catalog made up rather than folded from the log.
#[derive(Debug, Clone)]
pub struct Listing {
    pub event_id: String,
    pub name: String,
    pub performer: String,
    pub venue_name: String,
    pub city: String,
    pub starts_at: chrono::DateTime<chrono::Utc>,
    pub on_sale_at: chrono::DateTime<chrono::Utc>,
    pub min_price_cents: i64,
    pub max_price_cents: i64,
    pub seats: i32,
    pub available: i32,
}

/// Replaces the catalog with `listings` and analyzes it: `make bench-search`'s synthetic
/// catalog of many shows, which the log does not hold. The projection's next rebuild replaces
/// it in turn.
pub async fn replace_with(pool: &sqlx::PgPool, listings: &[Listing]) -> Result<(), sqlx::Error> {
    sqlx::query("TRUNCATE catalog_events").execute(pool).await?;
    for chunk in listings.chunks(5_000) {
        let col = |f: fn(&Listing) -> String| chunk.iter().map(f).collect::<Vec<_>>();
        sqlx::query(
            "INSERT INTO catalog_events (event_id, name, performer, venue_id, venue_name, city, starts_at,
                    on_sale_at, min_price_cents, max_price_cents, waiting_room, seats, available, seats_band)
             SELECT id, name, performer, id, venue, city, starts_at, on_sale_at, lo, hi, false, seats, available,
                    onsale_seats_band(available, seats)
               FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
                           $7::timestamptz[], $8::bigint[], $9::bigint[], $10::int[], $11::int[])
                    AS u(id, name, performer, venue, city, starts_at, on_sale_at, lo, hi, seats, available)",
        )
        .bind(col(|l| l.event_id.clone()))
        .bind(col(|l| l.name.clone()))
        .bind(col(|l| l.performer.clone()))
        .bind(col(|l| l.venue_name.clone()))
        .bind(col(|l| l.city.clone()))
        .bind(chunk.iter().map(|l| l.starts_at).collect::<Vec<_>>())
        .bind(chunk.iter().map(|l| l.on_sale_at).collect::<Vec<_>>())
        .bind(chunk.iter().map(|l| l.min_price_cents).collect::<Vec<_>>())
        .bind(chunk.iter().map(|l| l.max_price_cents).collect::<Vec<_>>())
        .bind(chunk.iter().map(|l| l.seats).collect::<Vec<_>>())
        .bind(chunk.iter().map(|l| l.available).collect::<Vec<_>>())
        .execute(pool)
        .await?;
    }
    sqlx::raw_sql("VACUUM ANALYZE catalog_events")
        .execute(pool)
        .await?;
    Ok(())
}

/// How many seats of `show` the catalog has available now (`None` before it folded the show).
pub async fn available(pool: &sqlx::PgPool, show: ShowId) -> Result<Option<i32>, sqlx::Error> {
    sqlx::query_scalar("SELECT available FROM catalog_events WHERE event_id = $1")
        .bind(show.to_string())
        .fetch_optional(pool)
        .await
}

/// A search's checked filters (`GET /v1/events`).
#[derive(Debug, Default)]
pub struct Search {
    /// Words of the performer, the show's name, the venue or the city.
    pub q: Option<String>,
    pub city: Option<String>,
    /// SCHEDULED, ON_SALE, SOLD_OUT or STARTED.
    pub status: Option<String>,
    pub from: Option<chrono::DateTime<chrono::Utc>>,
    pub to: Option<chrono::DateTime<chrono::Utc>>,
    pub min_price: Option<i64>,
    pub max_price: Option<i64>,
    /// The cheapest seat's price at or above the first and below the second (cents).
    pub cheapest: Option<(i64, i64)>,
    pub limit: i64,
}

/// The columns of a show as the catalog answers it (rows `T` of [`search`] and [`show`]):
/// `event_id, name, performer, venue_id, venue_name, city, starts_at, on_sale_at,
/// min_price_cents, max_price_cents, waiting_room, status, score`. The status is
/// `onsale_edge::EventStatus::at` said again in SQL, so a search can filter by it;
/// `tests/tests/catalog.rs` checks the two agree on every combination.
const SHOW_COLUMNS: &str = "c.event_id, c.name, c.performer, c.venue_id, c.venue_name, c.city,
        c.starts_at, c.on_sale_at, c.min_price_cents, c.max_price_cents, c.waiting_room,
        CASE WHEN c.starts_at <= now() THEN 'STARTED' WHEN c.available = 0 THEN 'SOLD_OUT'
             WHEN c.on_sale_at > now() THEN 'SCHEDULED' ELSE 'ON_SALE' END AS status, ";

/// Up to `f.limit + 1` shows matching `f` after `after` (score, start, id), best first, names
/// matched at word similarity `threshold`.
pub async fn search<T>(
    reads: &sqlx::PgPool,
    f: &Search,
    threshold: f64,
    after: Option<(f64, chrono::DateTime<chrono::Utc>, &str)>,
) -> Result<Vec<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    // Only the predicates asked for go into the statement, so each shape gets the plan its
    // indexes allow (GIN on the text, B-tree on city and start).
    let mut sql: sqlx::QueryBuilder<'_, sqlx::Postgres> =
        sqlx::QueryBuilder::new("SELECT * FROM (SELECT ");
    sql.push(SHOW_COLUMNS);
    match &f.q {
        Some(q) => {
            sql.push("(ts_rank(c.search, websearch_to_tsquery('simple', ")
                .push_bind(q.clone())
                .push(")) + word_similarity(lower(")
                .push_bind(q.clone())
                .push("), c.words))::float8 AS score FROM catalog_events c WHERE (c.search @@ websearch_to_tsquery('simple', ")
                .push_bind(q.clone())
                .push(") OR lower(")
                .push_bind(q.clone())
                .push(") <% c.words)");
        }
        None => {
            sql.push("0::float8 AS score FROM catalog_events c WHERE true");
        }
    }
    if let Some(city) = &f.city {
        sql.push(" AND lower(c.city) = lower(")
            .push_bind(city.clone())
            .push(")");
    }
    if let Some(from) = f.from {
        sql.push(" AND c.starts_at >= ").push_bind(from);
    }
    if let Some(to) = f.to {
        sql.push(" AND c.starts_at < ").push_bind(to);
    }
    if let Some(p) = f.min_price {
        sql.push(" AND c.max_price_cents >= ").push_bind(p);
    }
    if let Some(p) = f.max_price {
        sql.push(" AND c.min_price_cents <= ").push_bind(p);
    }
    if let Some((lo, hi)) = f.cheapest {
        sql.push(" AND c.min_price_cents >= ")
            .push_bind(lo)
            .push(" AND c.min_price_cents < ")
            .push_bind(hi);
    }
    sql.push(") e WHERE true");
    if let Some(status) = &f.status {
        sql.push(" AND e.status = ").push_bind(status.clone());
    }
    if let Some((score, starts, id)) = after {
        sql.push(" AND (e.score < ")
            .push_bind(score)
            .push(" OR (e.score = ")
            .push_bind(score)
            .push(" AND (e.starts_at, e.event_id) > (")
            .push_bind(starts)
            .push(", ")
            .push_bind(id.to_owned())
            .push(")))");
    }
    sql.push(" ORDER BY e.score DESC, e.starts_at, e.event_id LIMIT ")
        .push_bind(f.limit + 1);
    if f.q.is_none() {
        return sql.build_query_as().fetch_all(reads).await;
    }
    // The threshold is the session's (`<%` reads it): set for this transaction only.
    let mut tx = reads.begin().await?;
    sqlx::query("SELECT set_config('pg_trgm.word_similarity_threshold', $1, true)")
        .bind(threshold.to_string())
        .execute(&mut *tx)
        .await?;
    let rows = sql.build_query_as().fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(rows)
}

/// One show of the catalog, by id (row `T`, [`SHOW_COLUMNS`] with a score of 0).
pub async fn show<T>(reads: &sqlx::PgPool, id: &str) -> Result<Option<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    static ONE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "SELECT {SHOW_COLUMNS} 0::float8 AS score FROM catalog_events c WHERE c.event_id = $1"
        )
    });
    sqlx::query_as(&ONE).bind(id).fetch_optional(reads).await
}

/// A show as a search index holds it: its facts and its band of seats left (0 when none is
/// available, else the tenths still available, rounded up), never the count itself.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Document {
    pub event_id: String,
    pub name: String,
    pub performer: String,
    pub venue_id: String,
    pub venue_name: String,
    pub city: String,
    pub starts_at: chrono::DateTime<chrono::Utc>,
    pub on_sale_at: chrono::DateTime<chrono::Utc>,
    pub min_price_cents: i64,
    pub max_price_cents: i64,
    pub waiting_room: bool,
    pub seats_band: i16,
}

/// The documents whose facts or band were last written by a transaction below `upto` and at or
/// above `from` (transaction ids, `xid8`), and `upto`: the oldest transaction still running when
/// they were read, so every transaction below it had finished. A follower starts at 0 and reads
/// again from the `upto` it was given: it sees each change once it is committed, whatever the
/// order the writers committed in, and reads a row again only when it changed again.
pub async fn documents_since(
    reads: &sqlx::PgPool,
    from: u64,
) -> Result<(Vec<Document>, u64), sqlx::Error> {
    let mut tx = reads.begin().await?;
    // One snapshot for the bound and the rows.
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let upto: String = sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot())::text")
        .fetch_one(&mut *tx)
        .await?;
    let docs = sqlx::query_as(
        "SELECT event_id, name, performer, venue_id, venue_name, city, starts_at, on_sale_at,
                min_price_cents, max_price_cents, waiting_room, seats_band
           FROM catalog_events WHERE written >= $1::text::xid8 AND written < $2::text::xid8",
    )
    .bind(from.to_string())
    .bind(&upto)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let upto = upto.parse().map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    Ok((docs, upto))
}
