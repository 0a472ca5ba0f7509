//! Catalog search and browse (docs/api.md "Catalog": `GET /v1/events?q=&city=&date=`): the
//! process's search index (`crate::search`, ADR 033) once it has read the catalog, with facets
//! and "did you mean"; until then the catalog projection's table (`projections/src/catalog.rs`,
//! ADR 013: PostgreSQL full text and trigram word similarity). Filters by city, date, date
//! range or month, status, price range or band; pages of `limit` with an opaque `cursor`,
//! which names the engine that wrote it.

use axum::http::StatusCode;
use chrono::{DateTime, NaiveDate, Utc};
use onsale_edge::ApiError;
use onsale_edge::ErrorCode;
use onsale_projections::catalog::Search;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};

use crate::search::hits::{Rank, PRICE_BANDS};
use crate::search::{IndexCursor, SearchIndex};

pub const PAGE: i64 = 20;
pub const PAGE_MAX: i64 = 100;

/// What a fan searches with. Every filter is optional; without `q` the shows come soonest
/// first.
#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
pub struct SearchQuery {
    /// Words of the performer, the show's name, the venue or the city; typos in the performer
    /// and the name are tolerated.
    pub q: Option<String>,
    /// The city, any case.
    pub city: Option<String>,
    /// Shows starting on this day (UTC), YYYY-MM-DD.
    pub date: Option<String>,
    /// Shows starting at or after this instant (RFC 3339) or day (YYYY-MM-DD).
    pub from: Option<String>,
    /// Shows starting before this instant (RFC 3339) or before the end of this day.
    pub to: Option<String>,
    /// SCHEDULED (not on sale yet), ON_SALE, SOLD_OUT or STARTED.
    pub status: Option<String>,
    /// Shows with a price at or above this (cents).
    pub min_price: Option<i64>,
    /// Shows with a price at or below this (cents).
    pub max_price: Option<i64>,
    /// Shows starting in this month (UTC), YYYY-MM.
    pub month: Option<String>,
    /// Shows whose cheapest seat is in this band: UNDER_25, 25_TO_50, 50_TO_100, 100_TO_200
    /// or 200_AND_OVER (the currency's units).
    pub price_band: Option<String>,
    /// Results per page, 1 to 100 (default 20).
    pub limit: Option<i64>,
    /// The previous page's `nextCursor`.
    pub cursor: Option<String>,
}

pub use crate::summary::EventSummary;

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchResults {
    pub events: Vec<EventSummary>,
    /// Where the next page starts (`?cursor=`); absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// How every match spreads (absent while this process's search index is still reading
    /// the catalog, when PostgreSQL answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub facets: Option<crate::search::Facets>,
    /// When nothing matched: the performer or show nearest to what was typed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub did_you_mean: Option<String>,
}

fn bad(detail: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, detail)
}

/// An instant, or a day (its start, or with `end` its end).
fn instant(name: &str, s: &str, end: bool) -> Result<DateTime<Utc>, ApiError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    let day = NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map_err(|_| bad(format!("{name} is an RFC 3339 time or a day (YYYY-MM-DD)")))?;
    let day = if end {
        day.succ_opt().unwrap_or(day)
    } else {
        day
    };
    Ok(day.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc())
}

/// How alike a typed word and a performer's or show's name must be (pg_trgm word similarity).
/// A search tries [`STRICT`] first, PostgreSQL's default: a name with one letter dropped or
/// swapped often scores below it (45% of such typos found nothing on 100,000 shows). When that
/// finds nothing, it searches again at [`LOOSE`] (3% found nothing), which ranks about twice
/// the candidates; the cursor keeps the threshold its first page used.
pub const STRICT: f64 = 0.6;
pub const LOOSE: f64 = 0.4;

/// Where a page stops, as the engine that wrote the cursor reads it.
#[derive(Debug, Clone, PartialEq)]
enum After {
    /// PostgreSQL: (threshold, score, start, id).
    Sql(f64, f64, DateTime<Utc>, String),
    /// The search index: the last result's rank.
    Index(IndexCursor),
}

fn encode(raw: String) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// The position after a result of PostgreSQL's, opaque to callers.
fn cursor_of(threshold: f64, e: &EventSummary) -> String {
    encode(format!(
        "{threshold:?}|{:?}|{}|{}",
        e.score,
        e.starts_at.timestamp_micros(),
        e.event_id
    ))
}

/// The position after a result of the index's, opaque to callers.
fn index_cursor(c: IndexCursor) -> String {
    encode(format!("i|{:?}|{}|{}", c.0.score, c.0.starts, c.0.key))
}

fn parse_cursor(c: &str) -> Result<After, ApiError> {
    use base64::Engine;
    let invalid = || bad("cursor is not one this server gave");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(c)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(invalid)?;
    if let Some(rank) = raw.strip_prefix("i|") {
        let mut parts = rank.split('|');
        let score: f32 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|s: &f32| s.is_finite())
            .ok_or_else(invalid)?;
        let starts = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(invalid)?;
        let key = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(invalid)?;
        if parts.next().is_some() {
            return Err(invalid());
        }
        return Ok(After::Index(IndexCursor(Rank { score, starts, key })));
    }
    let mut parts = raw.splitn(4, '|');
    let threshold: f64 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|t| [STRICT, LOOSE].contains(t))
        .ok_or_else(invalid)?;
    let score: f64 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| s.is_finite())
        .ok_or_else(invalid)?;
    let starts = parts
        .next()
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(DateTime::from_timestamp_micros)
        .ok_or_else(invalid)?;
    let id = parts.next().ok_or_else(invalid)?.to_owned();
    Ok(After::Sql(threshold, score, starts, id))
}

fn text(name: &str, s: &Option<String>, max: usize) -> Result<Option<String>, ApiError> {
    match s.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(t) if t.chars().count() > max => {
            Err(bad(format!("{name} is at most {max} characters")))
        }
        // PostgreSQL text cannot hold a NUL: refused here, not a 503 from the database.
        Some(t) if t.contains('\0') => Err(bad(format!("{name} may not contain a NUL character"))),
        Some(t) => Ok(Some(t.to_owned())),
    }
}

/// A parameter given and not empty (`?date=` is an absent date, as for `q` and `city`).
fn given(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// `from` and `to` narrowed to the span `[start, end)`.
fn narrow(
    from: &mut Option<DateTime<Utc>>,
    to: &mut Option<DateTime<Utc>>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) {
    *from = Some(from.map_or(start, |f| f.max(start)));
    *to = Some(to.map_or(end, |t| t.min(end)));
}

/// The filters of `query`, checked.
fn checked(query: &SearchQuery) -> Result<Search, ApiError> {
    let q = text("q", &query.q, 200)?;
    let city = text("city", &query.city, 100)?;
    let status = match text("status", &query.status, 20)? {
        Some(s) if onsale_edge::EventStatus::try_from(s.clone()).is_ok() => Some(s),
        Some(_) => return Err(bad("status is SCHEDULED, ON_SALE, SOLD_OUT or STARTED")),
        None => None,
    };
    let mut from = given(&query.from)
        .map(|s| instant("from", s, false))
        .transpose()?;
    let mut to = given(&query.to)
        .map(|s| instant("to", s, true))
        .transpose()?;
    if let Some(d) = given(&query.date) {
        let start = NaiveDate::parse_from_str(d, "%Y-%m-%d")
            .map_err(|_| bad("date is a day, YYYY-MM-DD"))?;
        let (day_from, day_to) = (
            instant("date", d, false)?,
            instant("date", &start.to_string(), true)?,
        );
        narrow(&mut from, &mut to, day_from, day_to);
    }
    if let Some(m) = given(&query.month) {
        let first = NaiveDate::parse_from_str(&format!("{m}-01"), "%Y-%m-%d")
            .ok()
            .filter(|_| m.len() == 7)
            .ok_or_else(|| bad("month is YYYY-MM"))?;
        let next = first
            .checked_add_months(chrono::Months::new(1))
            .ok_or_else(|| bad("month is YYYY-MM"))?;
        let midnight = |d: NaiveDate| d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc();
        narrow(&mut from, &mut to, midnight(first), midnight(next));
    }
    for (name, p) in [("minPrice", query.min_price), ("maxPrice", query.max_price)] {
        if p.is_some_and(|p| p < 0) {
            return Err(bad(format!("{name} is cents, 0 or more")));
        }
    }
    let cheapest = match given(&query.price_band) {
        None => None,
        Some(b) => Some(
            PRICE_BANDS
                .iter()
                .find(|(name, _, _)| *name == b)
                .map(|(_, lo, hi)| (*lo, *hi))
                .ok_or_else(|| {
                    bad("priceBand is UNDER_25, 25_TO_50, 50_TO_100, 100_TO_200 or 200_AND_OVER")
                })?,
        ),
    };
    let limit = match query.limit {
        None => PAGE,
        Some(n) if (1..=PAGE_MAX).contains(&n) => n,
        Some(_) => return Err(bad(format!("limit is 1 to {PAGE_MAX}"))),
    };
    Ok(Search {
        q,
        city,
        status,
        from,
        to,
        min_price: query.min_price,
        max_price: query.max_price,
        cheapest,
        limit,
    })
}

/// One page of the catalog for `query`: from `index` once it has read the catalog, else from
/// PostgreSQL on `pool`; a cursor is read by the engine that wrote it.
pub async fn search(
    pool: &PgPool,
    index: &SearchIndex,
    query: &SearchQuery,
) -> Result<SearchResults, ApiError> {
    let filters = checked(query)?;
    match given(&query.cursor).map(parse_cursor).transpose()? {
        Some(After::Sql(threshold, score, starts, id)) => {
            sql_search(pool, filters, Some((threshold, score, starts, id))).await
        }
        Some(After::Index(_)) if !index.ready() => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Unavailable,
            "the search index is still reading the catalog; retry shortly",
        )
        .retry_after(1)),
        Some(After::Index(c)) => indexed(index, filters, Some(c)).await,
        None if index.ready() => indexed(index, filters, None).await,
        None => sql_search(pool, filters, None).await,
    }
}

async fn indexed(
    index: &SearchIndex,
    filters: Search,
    after: Option<IndexCursor>,
) -> Result<SearchResults, ApiError> {
    let index = index.clone();
    let found = tokio::task::spawn_blocking(move || {
        crate::search::find(&index, &filters, after, Utc::now())
    })
    .await
    .map_err(|e| ApiError::internal(&format!("the search stopped: {e}")))?
    .map_err(|e| ApiError::internal(&format!("the search index failed: {e}")))?;
    Ok(SearchResults {
        events: found.events,
        next_cursor: found.next.map(index_cursor),
        facets: Some(found.facets),
        did_you_mean: found.did_you_mean,
    })
}

async fn sql_search(
    pool: &PgPool,
    filters: Search,
    after: Option<(f64, f64, DateTime<Utc>, String)>,
) -> Result<SearchResults, ApiError> {
    let limit = filters.limit;
    let (threshold, mut events) = match &after {
        Some(a) => (a.0, page(pool, &filters, a.0, Some(a)).await?),
        None => {
            let strict = page(pool, &filters, STRICT, None).await?;
            // Nothing near enough: the words may be misspelt. (Whether the strict search
            // finds anything does not depend on `limit`, so pages of any size agree.)
            if filters.q.is_some() && strict.is_empty() {
                (LOOSE, page(pool, &filters, LOOSE, None).await?)
            } else {
                (STRICT, strict)
            }
        }
    };
    let next_cursor = if events.len() as i64 > limit {
        events.truncate(limit as usize);
        events.last().map(|e| cursor_of(threshold, e))
    } else {
        None
    };
    Ok(SearchResults {
        events,
        next_cursor,
        facets: None,
        did_you_mean: None,
    })
}

fn unavailable(e: sqlx::Error) -> ApiError {
    tracing::warn!(error = %e, "catalog search failed");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Unavailable,
        "the catalog is unreachable; retry shortly",
    )
    .retry_after(2)
}

/// Up to `limit + 1` results after `after`, names matched at `threshold`.
async fn page(
    pool: &PgPool,
    f: &Search,
    threshold: f64,
    after: Option<&(f64, f64, DateTime<Utc>, String)>,
) -> Result<Vec<EventSummary>, ApiError> {
    let after = after.map(|(_, score, starts, id)| (*score, *starts, id.as_str()));
    onsale_projections::catalog::search(pool, f, threshold, after)
        .await
        .map_err(unavailable)
}

/// One show of the catalog, by id: what the event page and gRPC `Events.GetEvent` show.
pub async fn get(pool: &PgPool, id: &str) -> Result<Option<EventSummary>, ApiError> {
    onsale_projections::catalog::show(pool, id)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "catalog read failed");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Unavailable,
                "the catalog is unreachable; retry shortly",
            )
            .retry_after(2)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn encoded(raw: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    #[test]
    fn an_instant_is_a_time_or_a_day_and_a_days_end_is_the_next_midnight() {
        let t = instant("from", "2026-12-07T10:30:00+01:00", false).expect("a time");
        assert_eq!(t.to_rfc3339(), "2026-12-07T09:30:00+00:00");
        let start = instant("from", "2026-12-07", false).expect("a day");
        let end = instant("until", "2026-12-07", true).expect("a day");
        assert_eq!(start.to_rfc3339(), "2026-12-07T00:00:00+00:00");
        assert_eq!(end.to_rfc3339(), "2026-12-08T00:00:00+00:00");
        let e = instant("from", "7 December", false).expect_err("neither");
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest)
        );
    }

    #[test]
    fn a_cursor_is_read_back_only_as_this_server_writes_it() {
        let Ok(After::Sql(threshold, score, starts, id)) =
            parse_cursor(&encoded("0.6|1.25|1796630400000000|ev-1"))
        else {
            panic!("a cursor of PostgreSQL's");
        };
        assert_eq!((threshold, score, id.as_str()), (STRICT, 1.25, "ev-1"));
        assert_eq!(starts.timestamp(), 1_796_630_400);
        // An id may hold the separator: only the first three split.
        assert!(
            matches!(parse_cursor(&encoded("0.4|0|0|a|b")), Ok(After::Sql(_, _, _, id)) if id == "a|b")
        );
        // The index's: its rank, read back as written.
        let rank = IndexCursor(Rank {
            score: 2.5,
            starts: 1_796_630_400_000_000,
            key: u64::MAX,
        });
        assert_eq!(
            parse_cursor(&index_cursor(rank)).expect("a cursor of the index's"),
            After::Index(rank)
        );
        for forged in [
            "not base64 at all!".to_owned(),
            encoded("0.5|1|0|ev"),    // a threshold the server never uses
            encoded("0.6|NaN|0|ev"),  // no score
            encoded("0.6|1|soon|ev"), // no start
            encoded("0.6|1|0"),       // no id
            encoded("i|1|0"),         // an index cursor without its key
            encoded("i|inf|0|1"),     // nor a score
            encoded("i|1|0|-1"),      // a key is no negative number
            encoded("i|1|0|1|2"),     // nor anything after it
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([0xff, 0xfe]),
        ] {
            let e = parse_cursor(&forged).expect_err("refused");
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{forged}");
        }
    }

    #[test]
    fn text_parameters_are_trimmed_bounded_and_never_hold_a_nul() {
        assert_eq!(text("q", &None, 5).expect("none"), None);
        assert_eq!(text("q", &Some("   ".into()), 5).expect("blank"), None);
        assert_eq!(
            text("q", &Some(" abc ".into()), 5).expect("trimmed"),
            Some("abc".into())
        );
        assert_eq!(
            text("q", &Some("ééééé".into()), 5).expect("characters, not bytes"),
            Some("ééééé".into())
        );
        assert!(text("q", &Some("abcdef".into()), 5).is_err());
        assert!(text("q", &Some("a\0b".into()), 5).is_err());
        assert_eq!(given(&Some(" x ".into())), Some("x"));
        assert_eq!(given(&Some(String::new())), None);
    }
}
