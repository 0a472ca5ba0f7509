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
