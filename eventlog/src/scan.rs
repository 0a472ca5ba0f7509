//! Reading the log whole or in a range, for `onsale export` (every statement on `events`
//! lives in this crate: migrations/OWNERS).

use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use sqlx::PgPool;

/// Which of the shows' events: all, or one show's, within sequences or commit times (each
/// bound inclusive, none when unset).
#[derive(Debug, Clone, Default)]
pub struct Range {
    pub show: Option<String>,
    pub from_sequence: Option<i64>,
    pub until_sequence: Option<i64>,
    pub from_time: Option<DateTime<Utc>>,
    pub until_time: Option<DateTime<Utc>>,
}

/// An event as the store holds it, before its payload is typed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Stored {
    #[sqlx(rename = "aggregate_id")]
    pub show_id: String,
    pub sequence: i64,
    pub event_type: String,
    pub event_version: String,
    /// When its transaction committed (the metadata's `at`).
    #[sqlx(rename = "at")]
    pub committed_at: DateTime<Utc>,
    pub xid: i64,
    pub payload: String,
}

/// The statement's filter, shared by the count and the rows. Every parameter is bound, null
/// when unused; the statement runs once, so PostgreSQL plans it with the values (the show's
/// rows by the primary key when one is named).
const FILTER: &str = "aggregate_type = 'show'
    AND ($1::text IS NULL OR aggregate_id = $1)
    AND ($2::bigint IS NULL OR sequence >= $2)
    AND ($3::bigint IS NULL OR sequence <= $3)
    AND ($4::timestamptz IS NULL OR (metadata->>'at')::timestamptz >= $4)
    AND ($5::timestamptz IS NULL OR (metadata->>'at')::timestamptz <= $5)";

fn bind<'q, O>(
    q: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    r: &'q Range,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    q.bind(r.show.as_deref())
        .bind(r.from_sequence)
        .bind(r.until_sequence)
        .bind(r.from_time)
        .bind(r.until_time)
}

/// How many events of `range` the log on `pool` holds.
pub async fn count(pool: &PgPool, range: &Range) -> Result<i64, sqlx::Error> {
    static COUNT: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| format!("SELECT count(*) FROM events WHERE {FILTER}"));
    let (n,): (i64,) = bind(sqlx::query_as(&COUNT), range).fetch_one(pool).await?;
    Ok(n)
}

/// The events of `range` on each pool of `pools` in turn, each show's in order.
pub fn events<'a>(
    pools: &'a [PgPool],
    range: &'a Range,
) -> BoxStream<'a, Result<Stored, sqlx::Error>> {
    static ROWS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "SELECT aggregate_id, sequence, event_type, event_version, payload::text AS payload,
                    (metadata->>'at')::timestamptz AS at, xid::text::bigint AS xid
               FROM events WHERE {FILTER}
              ORDER BY aggregate_type, aggregate_id, sequence"
        )
    });
    futures::stream::iter(pools)
        .map(move |pool| bind(sqlx::query_as::<_, Stored>(&ROWS), range).fetch(pool))
        .flatten()
        .into_stream()
        .boxed()
}

/// The log's rows past a mark per aggregate (every row of an aggregate with no mark), in key
/// order, a page at a time: what the relay's gap fill republishes, given the last sequence of
/// each aggregate it knows is in the topic. The marks go into a temporary table on one
/// connection, and each row is checked with a probe of its key: the scan walks the log's
/// primary key in order and stops at the page's end (as a join, the planner sorted the whole
/// rest of the log for every page: 30 s a page at ten million events, `make bench-replay`
/// found it), and only the rows past their mark leave PostgreSQL.
#[derive(Debug)]
pub struct PastMarks {
    conn: sqlx::pool::PoolConnection<sqlx::Postgres>,
    after: crate::ScanKey,
}

/// One aggregate's mark: (aggregate type, id, last sequence known published).
pub type Mark = (String, String, i64);

impl PastMarks {
    pub async fn open(pool: &PgPool, marks: &[Mark]) -> Result<Self, sqlx::Error> {
        let mut conn = pool.acquire().await?;
        sqlx::query(
            "CREATE TEMPORARY TABLE IF NOT EXISTS scan_marks (
                 aggregate_type text NOT NULL, aggregate_id text NOT NULL, sequence bigint NOT NULL,
                 PRIMARY KEY (aggregate_type, aggregate_id))",
        )
        .execute(&mut *conn)
        .await?;
        sqlx::query("TRUNCATE scan_marks")
            .execute(&mut *conn)
            .await?;
        for chunk in marks.chunks(10_000) {
            let types: Vec<&str> = chunk.iter().map(|m| m.0.as_str()).collect();
            let ids: Vec<&str> = chunk.iter().map(|m| m.1.as_str()).collect();
            let seqs: Vec<i64> = chunk.iter().map(|m| m.2).collect();
            sqlx::query(
                "INSERT INTO scan_marks SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])",
            )
            .bind(&types)
            .bind(&ids)
            .bind(&seqs)
            .execute(&mut *conn)
            .await?;
        }
        Ok(Self {
            conn,
            after: (String::new(), String::new(), 0),
        })
    }

    /// The next rows past their marks, at most `limit`; empty once the log is read through.
    pub async fn next(&mut self, limit: i64) -> Result<Vec<crate::LogRow>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT e.aggregate_type, e.aggregate_id, e.sequence, e.event_type, e.event_version,
                    e.payload::text AS payload, e.metadata::text AS metadata, e.hash
               FROM events e
              WHERE (e.aggregate_type, e.aggregate_id, e.sequence) > ($1, $2, $3)
                AND e.sequence > COALESCE((SELECT m.sequence FROM scan_marks m
                                            WHERE m.aggregate_type = e.aggregate_type
                                              AND m.aggregate_id = e.aggregate_id), 0)
              ORDER BY e.aggregate_type, e.aggregate_id, e.sequence
              LIMIT $4",
        )
        .bind(&self.after.0)
        .bind(&self.after.1)
        .bind(self.after.2)
        .bind(limit)
        .fetch_all(&mut *self.conn)
        .await?
        .iter()
        .map(crate::log_row)
        .collect::<Result<Vec<_>, _>>()?;
        if let Some(last) = rows.last() {
            self.after = (
                last.aggregate_type.clone(),
                last.aggregate_id.clone(),
                last.sequence,
            );
        }
        Ok(rows)
    }
}
