//! The query side's REST and SSE routes (docs/api.md "Seat map", "Audit and the log", GET order).

use onsale_edge::ErrorCode;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Extension;
use axum::{Json, Router};
use futures::{Stream, StreamExt};
use onsale_domain::{OrderId, ShowError, ShowId};
use onsale_edge::auth::{Caller, Role};
use onsale_edge::limits::ClientAddress;
use onsale_edge::{ApiError, Problem};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, OpenApi, ToSchema};

// utoipa names a path given with its module after the module (a tag); these carry none.
use crate::history::{__path_seat_history, seat_history};
use crate::hub::Update;
use crate::pages::{__path_get_event, __path_get_venue, get_event, get_venue};
use crate::snapshots::{Missing, Read, Seats};
use crate::unavailable::{db_unavailable, log_unavailable};
use crate::QueryState;

pub fn router(state: QueryState) -> Router {
    Router::new()
        .route("/v1/events", get(search_events))
        .route("/v1/events/suggest", get(suggest_events))
        .route("/v1/events/{id}", get(get_event))
        .route("/v1/venues/{id}", get(get_venue))
        .route("/v1/events/{id}/seats", get(seat_map))
        .route("/v1/events/{id}/updates", get(updates))
        .route("/v1/events/{id}/seats/{seat}/history", get(seat_history))
        .route("/v1/orders/{id}", get(get_order))
        .route("/v1/holds/{id}", get(get_hold))
        .with_state(state)
}

#[derive(OpenApi)]
#[openapi(
    paths(
        search_events,
        suggest_events,
        get_event,
        get_venue,
        seat_map,
        updates,
        seat_history,
        get_order,
        get_hold
    ),
    components(schemas(
        crate::pages::EventDoc,
        crate::pages::EventSectionDoc,
        crate::pages::VenueDoc,
        crate::pages::VenueSectionDoc,
        crate::pages::VenueRowDoc,
        OrderResponse,
        TicketRef,
        crate::history::HistoryResponse,
        crate::history::HistoryEntry,
        HoldResponse,
        crate::catalog::SearchResults,
        crate::catalog::EventSummary,
        crate::search::Facets,
        crate::search::Facet,
        crate::search::Suggestions,
        crate::search::Suggestion,
        crate::search::SuggestionKind,
        AllSeats
    ))
)]
#[derive(Debug)]
pub struct QueryDoc;

#[derive(Debug, Deserialize, IntoParams)]
pub struct SectionQuery {
    /// Per-seat detail (and, on the stream, seat changes) for this section only.
    section: Option<String>,
    /// `all`: every seat change of the show (the venue chart), not one section's.
    seats: Option<AllSeats>,
}

/// Every seat, not one section's: `seats=all`.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AllSeats {
    All,
}

/// Search and browse the catalog (everyone): ranked by relevance when `q` is given (typos in
/// performers and names tolerated), soonest first otherwise.
#[utoipa::path(get, path = "/v1/events", params(crate::catalog::SearchQuery),
    responses((status = 200, body = crate::catalog::SearchResults), (status = 400), (status = 503)))]
async fn search_events(
    State(state): State<QueryState>,
    Query(q): Query<crate::catalog::SearchQuery>,
) -> Result<Response, ApiError> {
    let results = crate::catalog::search(&state.pool, &state.search, &q).await?;
    Ok((
        [(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=5"),
        )],
        Json(results),
    )
        .into_response())
}

/// What type-ahead is asked.
#[derive(Debug, Deserialize, IntoParams)]
pub struct SuggestQuery {
    /// What the fan has typed so far (1 to 100 characters); the last word may be unfinished.
    q: String,
    /// Suggestions at most, 1 to 20 (default 8).
    limit: Option<i64>,
}

/// Type-ahead (everyone): performers, shows, venues and cities for what a fan has typed so far
/// (the last word begun, a typo forgiven from four letters), of shows not started yet, the
/// soonest on sale and the fastest selling first. Answered from this process's search index:
/// 503 with Retry-After while it is still reading the catalog.
#[utoipa::path(get, path = "/v1/events/suggest", params(SuggestQuery),
    responses((status = 200, body = crate::search::Suggestions), (status = 400), (status = 503)))]
async fn suggest_events(
    State(state): State<QueryState>,
    Query(q): Query<SuggestQuery>,
) -> Result<Response, ApiError> {
    let bad =
        |detail: &str| ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, detail);
    let text = q.q.trim().to_owned();
    if text.is_empty() || text.chars().count() > 100 || text.contains('\0') {
        return Err(bad("q is 1 to 100 characters, no NUL"));
    }
    let limit = match q.limit {
        None => 8,
        Some(n @ 1..=20) => n as usize,
        Some(_) => return Err(bad("limit is 1 to 20")),
    };
    if !state.search.ready() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Unavailable,
            "the search index is still reading the catalog; retry shortly",
        )
        .retry_after(1));
    }
    let index = state.search.clone();
    let found = tokio::task::spawn_blocking(move || {
        crate::search::suggest(&index, &text, limit, chrono::Utc::now())
    })
    .await
    .map_err(|e| ApiError::internal(&format!("the suggestion stopped: {e}")))?
    .map_err(|e| ApiError::internal(&format!("the search index failed: {e}")))?;
    Ok((
        [(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=5"),
        )],
        Json(found),
    )
        .into_response())
}

/// The seat map's query: a section's detail, and (auditors, admins) a map of the past.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
pub struct MapQuery {
    /// Per-seat detail for this section only.
    section: Option<String>,
    /// `all`: every reserved seat, sold or not, as a bitmap in the layout's order
    /// (`soldSeats`): what the venue chart draws.
    seats: Option<AllSeats>,
    /// The map as it was at this instant (RFC 3339): after the last event decided at or
    /// before it. Auditors and admins.
    at: Option<String>,
    /// The map as it was right after this event of the show's log (from 1). Auditors and
    /// admins.
    at_sequence: Option<i64>,
}

fn parse_show(id: &str) -> Result<ShowId, ApiError> {
    Ok(id.parse::<ShowId>()?)
}

/// What a map or a stream carries besides the counts: every seat (`seats=all`; a section named
/// beside it is checked and otherwise moot, every seat includes its seats), one section's seats
/// (checked as a label of the venue grammar, so an arbitrary string never becomes a cache key),
/// or none.
fn parse_seats(section: Option<&str>, all: Option<AllSeats>) -> Result<Seats, ApiError> {
    if let Some(s) = section {
        onsale_domain::ids::valid_label("section", s).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidRequest,
                e.to_string(),
            )
        })?;
    }
    Ok(match (section, all) {
        (_, Some(AllSeats::All)) => Seats::All,
        (Some(s), None) => Seats::Section(s.to_owned()),
        (None, None) => Seats::None,
    })
}

fn missing(m: Missing) -> ApiError {
    match m {
        Missing::Show => ShowError::ShowNotFound.into(),
        Missing::Section => ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::UnknownSection,
            "the show has no such section",
        ),
    }
}

/// The seat map: section counts, and a section's seats with `?section=`. Cached; `ETag` and
/// `If-None-Match` spare the body.
#[utoipa::path(get, path = "/v1/events/{id}/seats", params(("id" = String, Path), MapQuery),
    responses((status = 200, description = "{eventId, asOf, lsn, seq, sections, seats?, soldSeats?}; with at or atSequence the map of the past (seq: the log's sequence)"),
        (status = 400, body = Problem, description = "INVALID_REQUEST: a section that is no label"),
        (status = 304), (status = 403), (status = 404), (status = 422), (status = 503)))]
async fn seat_map(
    State(state): State<QueryState>,
    Path(id): Path<String>,
    Query(q): Query<MapQuery>,
    caller: Result<Caller, ApiError>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let show = parse_show(&id)?;
    let seats = parse_seats(q.section.as_deref(), q.seats)?;
    if let Some(until) = parse_until(&q)? {
        caller?.require(&[Role::Auditor, Role::Admin])?;
        let map = past_map(&state, show, until, &seats).await?;
        return Ok((
            [(
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, no-cache"),
            )],
            Json(map),
        )
            .into_response());
    }
    let (snap, stale) = match state.snapshots.get(show, &seats).await {
        Read::Fresh(s) => (s, false),
        Read::Stale(s) => (s, true),
        Read::Missing(m) => return Err(missing(m)),
        Read::Unavailable => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Unavailable,
                "the seat map is unreachable; retry shortly",
            ))
        }
    };
    let etag = HeaderValue::from_str(&snap.etag).map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            "bad etag",
        )
    })?;
    let cache = HeaderValue::from_static(if stale {
        "no-cache"
    } else {
        "public, max-age=1"
    });
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == snap.etag.as_bytes())
    {
        return Ok((
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, etag), (header::CACHE_CONTROL, cache)],
        )
            .into_response());
    }
    let mut res = (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::ETAG, etag),
            (header::CACHE_CONTROL, cache),
        ],
        snap.body.clone(),
    )
        .into_response();
    if stale {
        res.headers_mut().insert(
            header::WARNING,
            HeaderValue::from_static("110 - \"Response is Stale\""),
        );
    }
    Ok(res)
}

fn parse_until(q: &MapQuery) -> Result<Option<onsale_eventlog::Until>, ApiError> {
    let bad = |detail: &str| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest,
            detail.to_owned(),
        )
    };
    match (&q.at, q.at_sequence) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(bad("give at or atSequence, not both")),
        (None, Some(n)) if n >= 1 => Ok(Some(onsale_eventlog::Until::Sequence(n))),
        (None, Some(_)) => Err(bad("atSequence counts the show's events from 1")),
        (Some(t), None) => chrono::DateTime::parse_from_rfc3339(t)
            .map(|t| Some(onsale_eventlog::Until::Time(t.with_timezone(&chrono::Utc))))
            .map_err(|_| bad("at is an RFC 3339 time, e.g. 2026-12-01T19:30:00Z")),
    }
}

/// The map of a show as it was, rebuilt from the log (the nearest kept snapshot plus the
/// events after it). Its `seq` is the last event of the show's log folded in (not a delta
/// seq) and its `asOf` when that event was decided; `lsn` is empty (the log's rows do not
/// know their commit's LSN).
pub async fn past_map(
    state: &QueryState,
    show: ShowId,
    until: onsale_eventlog::Until,
    seats: &Seats,
) -> Result<crate::snapshots::SeatMap, ApiError> {
    use onsale_eventlog::Past;
    let mut log = state.log.of(show).await.map_err(log_unavailable)?;
    if log.head(show).await.map_err(log_unavailable)?.is_none() {
        // Known here on a shard where it has no log: it may have moved since.
        if let Some(moved) = state.log.recheck(show).await.map_err(log_unavailable)? {
            log = moved;
        }
    }
    let past = log.load_until(show, until).await.map_err(|e| match e {
        onsale_eventlog::StoreError::Corrupt(m) => {
            tracing::error!(%m, "a show of the past could not be rebuilt");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::Internal,
                "the log could not be read",
            )
        }
        other => log_unavailable(other),
    })?;
    match past {
        Past::Found {
            show: s,
            sequence,
            at,
            ..
        } => crate::snapshots::map_of(&s, show.to_string(), at, sequence, String::new(), seats)
            .map_err(missing),
        Past::NoShow => Err(ShowError::ShowNotFound.into()),
        Past::Before => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotScheduledYet,
            "the show was scheduled after that instant",
        )),
        Past::Beyond { head } => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::BeyondTheLog,
            format!("the show's log ends at sequence {head}"),
        )),
    }
}

/// The stream's `resync` event: fetch the snapshot and resume from its `seq`.
#[derive(Serialize)]
struct Resync {
    seq: i64,
    reason: &'static str,
}

/// The stream's `closing` event: this process is shutting down.
#[derive(Serialize)]
struct Closing {
    reason: &'static str,
}

/// Server-sent deltas: `id:` is the delta `seq`, `event: delta` or `event: resync`;
/// `Last-Event-ID` resumes.
#[utoipa::path(get, path = "/v1/events/{id}/updates", params(("id" = String, Path), SectionQuery),
    responses((status = 200, description = "text/event-stream of deltas"),
        (status = 400, body = Problem, description = "INVALID_REQUEST: a section that is no label"),
        (status = 404)))]
async fn updates(
    State(state): State<QueryState>,
    Path(id): Path<String>,
    Query(q): Query<SectionQuery>,
    address: Option<Extension<ClientAddress>>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let show = parse_show(&id)?;
    let seats = parse_seats(q.section.as_deref(), q.seats)?;
    let after = match headers.get("last-event-id") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .filter(|s| *s >= 0)
                .ok_or_else(|| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        ErrorCode::InvalidRequest,
                        "Last-Event-ID must be a delta seq",
                    )
                })?,
        ),
    };
    let slot = state.open_stream(
        address.map(|Extension(ClientAddress(ip))| ip),
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    )?;
    let stream = state
        .subscribe(show, after)
        .await
        .map_err(|e| db_unavailable(sqlx::Error::Protocol(e.to_string())))?
        .ok_or_else(|| ApiError::from(ShowError::ShowNotFound))?;
    // Reconnects spread over 1-3 s, so a restart does not bring every client back at once.
    let jitter = Duration::from_millis(
        1_000 + u64::from(chrono::Utc::now().timestamp_subsec_micros() % 2_000),
    );
    let hello = futures::stream::once(async move {
        Ok(Event::default()
            .retry(jitter)
            .comment("onsale seat-map deltas"))
    });
    let events = stream.map(move |u| {
        // The stream holds its slot of the cap until it ends.
        let _open = &slot;
        Ok(match u {
            Update::Delta(d) => Event::default()
                .id(d.seq.to_string())
                .event("delta")
                .data(d.body(&seats)),
            Update::Resync { seq, reason } => Event::default()
                .event("resync")
                .json_data(Resync { seq, reason })
                .unwrap_or_else(|_| Event::default().event("resync")),
            Update::Closing => Event::default()
                .event("closing")
                .retry(jitter)
                .json_data(Closing {
                    reason: "the server is shutting down; reconnect with Last-Event-ID",
                })
                .unwrap_or_else(|_| Event::default().event("closing")),
        })
    });
    Ok(
        Sse::new(hello.chain(events))
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15))),
    )
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderResponse {
    pub order_id: String,
    pub event_id: String,
    pub status: String,
    pub seat_ids: Vec<String>,
    pub total_cents: i64,
    pub placed_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
    /// Captured after it had failed while its seats were resold: refunded, and the buyer is
    /// owed a make-good.
    pub make_good: bool,
    /// Why the order failed, while its status is FAILED: `CARD_DECLINED` (another card may
    /// work), `PAYMENT_TIMED_OUT` (the processor never answered in time; nothing was charged)
    /// or `FAILED` (unclassified).
    #[schema(value_type = Option<String>, example = "CARD_DECLINED")]
    pub failure_reason: Option<String>,
    /// One per seat, issued once the payment succeeded; a cancelled order's are revoked.
    pub tickets: Vec<TicketRef>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct TicketRef {
    pub ticket_id: uuid::Uuid,
    /// The seat; for general admission, the place's unit (`FLOOR-GA1-17`: no seat, one
    /// ticket per place).
    pub seat_id: String,
    /// A place in a general-admission section, not a seat.
    pub general_admission: bool,
    pub revoked: bool,
}

/// One order row as the projection holds it, with its owner.
#[derive(Debug, sqlx::FromRow)]
pub struct OrderRow {
    pub order_id: String,
    pub show_id: String,
    pub hold_id: String,
    pub account_id: String,
    pub status: String,
    pub seat_ids: Vec<String>,
    pub total_cents: i64,
    pub placed_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
    pub make_good: bool,
    pub failure_reason: Option<String>,
}

/// How long a read of a hold or order waits for the projection to fold what its show had
/// committed when the read began.
const READ_YOUR_WRITES: Duration = Duration::from_secs(2);

/// A caller reads its own writes: a hold or an order acknowledged (or released, or paid) a
/// moment ago may not be projected yet. Reads the show's head as the read begins, waits
/// (bounded) until the orders projection has folded up to it, then reads `row`: everything
/// committed before the read is in the answer. Three index probes when the projection is
/// current; an id of a show that does not exist costs one.
async fn read_own_write<T, F, Fut>(
    state: &QueryState,
    show: ShowId,
    row: F,
) -> Result<Option<T>, ApiError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, sqlx::Error>>,
{
    let log = state.log.of(show).await.map_err(log_unavailable)?;
    let mut head = log.head(show).await.map_err(log_unavailable)?;
    if head.is_none() {
        // Known here on a shard where it has no log: it may have moved since.
        if let Some(moved) = state.log.recheck(show).await.map_err(log_unavailable)? {
            head = moved.head(show).await.map_err(log_unavailable)?;
        }
    }
    let Some(head) = head else {
        return Ok(None);
    };
    let deadline = tokio::time::Instant::now() + READ_YOUR_WRITES;
    loop {
        let folded = onsale_projections::runner::folded(&state.pool, "orders", show)
            .await
            .map_err(db_unavailable)?;
        if folded.is_some_and(|f| f >= head) {
            return row().await.map_err(db_unavailable);
        }
        if tokio::time::Instant::now() >= deadline {
            // The projection is behind: say so rather than answer from an older state.
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ProjectionBehind,
                "this changed a moment ago and is not readable yet; retry shortly",
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The order, if the caller may see it (a fan only their own: another's is "not found").
pub async fn find_order(
    state: &QueryState,
    caller: &Caller,
    id: &str,
) -> Result<OrderRow, ApiError> {
    let order_id: OrderId = id.parse()?;
    let row = read_own_write(state, order_id.show(), || {
        onsale_projections::orders::order::<OrderRow>(&state.pool, order_id)
    })
    .await?;
    match row {
        Some(r) if caller.sees(&onsale_domain::AccountId::parse(&r.account_id)?) => Ok(r),
        _ => Err(ShowError::OrderNotFound.into()),
    }
}

/// An order from the orders projection.
#[utoipa::path(get, path = "/v1/orders/{id}", params(("id" = String, Path)), security(("bearer" = [])),
    responses((status = 200, body = OrderResponse), (status = 404)))]
async fn get_order(
    State(state): State<QueryState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<OrderResponse>, ApiError> {
    let r = find_order(&state, &caller, &id).await?;
    // The order's tickets live on its show's shard (docs/adr/021).
    let show = parse_show(&r.show_id)?;
    let shard = state.log.pool_of(show).await.map_err(|e| {
        tracing::warn!(%show, error = %e, "the show's shard is not known");
        ApiError::unavailable()
    })?;
    let tickets = onsale_payments_store::tickets::of_order(shard, &r.order_id)
        .await
        .map_err(db_unavailable)?;
    Ok(Json(OrderResponse {
        order_id: r.order_id,
        event_id: r.show_id,
        status: r.status,
        seat_ids: r.seat_ids,
        total_cents: r.total_cents,
        placed_at: r.placed_at,
        updated_at: r.updated_at,
        make_good: r.make_good,
        failure_reason: r.failure_reason,
        tickets,
    }))
}

#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct HoldResponse {
    pub hold_id: String,
    #[sqlx(rename = "show_id")]
    pub event_id: String,
    pub seat_ids: Vec<String>,
    pub expires_at: chrono::DateTime<chrono::Utc>,
    /// ACTIVE, RELEASED, EXPIRED or ORDERED.
    pub status: String,
    #[serde(skip)]
    pub account_id: String,
}

/// A hold of the caller's (an admin sees any), from the orders projection, as of the moment
/// of the read (a change acknowledged a moment ago is in it).
#[utoipa::path(get, path = "/v1/holds/{id}", params(("id" = String, Path)), security(("bearer" = [])),
    responses((status = 200, body = HoldResponse), (status = 404), (status = 422), (status = 503)))]
async fn get_hold(
    State(state): State<QueryState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<HoldResponse>, ApiError> {
    let hold_id: onsale_domain::HoldId = id.parse()?;
    let row = read_own_write(&state, hold_id.show(), || {
        onsale_projections::orders::hold::<HoldResponse>(&state.pool, hold_id)
    })
    .await?;
    match row {
        Some(r) if caller.sees(&onsale_domain::AccountId::parse(&r.account_id)?) => Ok(Json(r)),
        _ => Err(ShowError::HoldNotFound.into()),
    }
}

#[cfg(test)]
#[path = "rest_tests.rs"]
mod tests;
