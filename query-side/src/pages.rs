//! The event and venue pages: a show as scheduled (the catalog, beside the log: its first
//! event, and its last policy change) with the seats the catalog projection counts available,
//! and a venue as registered. Read through the public pool, never through an owner.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use onsale_domain::chart::Chart;
use onsale_domain::{ShowId, VenueEvent, VenueId};
use serde::Serialize;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use onsale_edge::{ApiError, ErrorCode, Problem, SalePolicyView};

use crate::QueryState;

/// How many seats the catalog projection counts available now (`None` when it has not folded
/// the show yet, or cannot be read: the page then goes with the schedule's).
async fn available(pool: &sqlx::PgPool, show: ShowId) -> Option<i32> {
    onsale_projections::catalog::available(pool, show)
        .await
        .inspect_err(|e| tracing::warn!(error = %e, "catalog projection not read"))
        .ok()
        .flatten()
}

/// An event (show) as `GET /v1/events/{id}` answers it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventDoc {
    event_id: String,
    name: String,
    performer: String,
    venue_id: String,
    venue_name: String,
    city: String,
    starts_at: DateTime<Utc>,
    on_sale_at: DateTime<Utc>,
    status: onsale_edge::EventStatus,
    /// Cents per price tier.
    prices: BTreeMap<String, i64>,
    /// The ISO 4217 code of the prices' currency (they are in its minor unit).
    currency: String,
    min_price_cents: Option<i64>,
    max_price_cents: Option<i64>,
    /// Holds and orders need a live session of the show's waiting room (`X-Onsale-Session`).
    waiting_room: bool,
    hold_ttl_seconds: u32,
    /// The on-sale policies in force now.
    policy: SalePolicyView,
    seat_count: u32,
    /// Seats neither held nor sold, as of the catalog projection.
    available_seats: i64,
    sections: Vec<EventSectionDoc>,
}

/// A section of an event: its price and size.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventSectionDoc {
    section: String,
    price_tier: String,
    price_cents: Option<i64>,
    /// Seats, or places of a general-admission section.
    seats: u32,
    /// Sold by quantity (`{"quantity": n, "section": ...}`), no seats to pick.
    general_admission: bool,
}

/// The event page: catalog facts, sections and prices (from the show's first event), seats
/// available and the status (`SCHEDULED`, `ON_SALE`, `SOLD_OUT`, `STARTED`; from the catalog
/// projection). Cacheable.
#[utoipa::path(get, path = "/v1/events/{id}", params(("id" = String, Path)),
    responses((status = 200, body = EventDoc, description = "the event document (ETag; If-None-Match answers 304)"),
        (status = 304, description = "Not modified since the ETag sent in If-None-Match"), (status = 404, body = Problem)))]
pub(crate) async fn get_event(
    State(state): State<QueryState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let show_id: ShowId = id.parse()?;
    let now = state.clock.now();
    let scheduled = state.catalog.get(show_id).await?;
    let (info, layout) = (&scheduled.info, &scheduled.layout);
    // The facts come from the show's first event, the policies in force from the log (read
    // back at once after a change), the availability from the catalog projection (absent for
    // a moment after the show is scheduled: then all seats are).
    let available = available(&state.pool, show_id).await;
    let (hold_ttl_seconds, policy) = state.catalog.policy(show_id).await?;
    let status = onsale_edge::EventStatus::at(now, info.starts_at, info.on_sale_at, available);
    let sections = layout
        .sections()
        .iter()
        .map(|s| EventSectionDoc {
            section: s.section.clone(),
            price_tier: s.price_tier.clone(),
            price_cents: info.prices.get(&s.price_tier).copied(),
            seats: s.capacity(),
            general_admission: s.general_admission,
        })
        .collect();
    let prices = info.prices.values().copied();
    let doc = EventDoc {
        event_id: info.show_id.to_string(),
        name: info.name.clone(),
        performer: info.performer.clone(),
        venue_id: info.venue_id.to_string(),
        venue_name: info.venue_name.clone(),
        city: info.city.clone(),
        starts_at: info.starts_at,
        on_sale_at: info.on_sale_at,
        status,
        prices: info.prices.clone(),
        currency: info.currency.as_str().to_owned(),
        min_price_cents: prices.clone().min(),
        max_price_cents: prices.max(),
        waiting_room: info.waiting_room,
        hold_ttl_seconds,
        policy: SalePolicyView::of(hold_ttl_seconds, &policy),
        seat_count: layout.seat_count(),
        available_seats: available.map_or(i64::from(layout.seat_count()), i64::from),
        sections,
    };
    let body = serde_json::to_vec(&doc).map_err(|e| ApiError::internal(&e.to_string()))?;
    let etag = format!("\"{}\"", &hex::encode(Sha256::digest(&body))[..32]);
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        == Some(etag.as_str())
    {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response());
    }
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (header::CACHE_CONTROL, "public, max-age=30".to_owned()),
            (header::ETAG, etag),
        ],
        body,
    )
        .into_response())
}

/// A venue as registered: its sections (best first), rows and seat counts.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VenueDoc {
    venue_id: String,
    name: String,
    city: String,
    seats: u32,
    sections: Vec<VenueSectionDoc>,
    /// Where its parts are drawn: as registered, or generated.
    chart: Chart,
    /// The chart was generated (the venue was registered without one).
    chart_generated: bool,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VenueSectionDoc {
    section: String,
    price_tier: String,
    /// Seats, or places of a general-admission section.
    seats: u32,
    /// Sold by quantity, no seats (and no rows).
    general_admission: bool,
    rows: Vec<VenueRowDoc>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VenueRowDoc {
    row: String,
    seats: u32,
}

/// A venue (everyone): read from the log through the read pool, never through an owner.
#[utoipa::path(get, path = "/v1/venues/{id}", params(("id" = String, Path)),
    responses((status = 200, body = VenueDoc), (status = 404), (status = 503)))]
pub(crate) async fn get_venue(
    State(state): State<QueryState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let venue_id: VenueId = id.parse()?;
    let Some(VenueEvent::VenueRegistered {
        name,
        city,
        layout,
        chart,
    }) = state.catalog.venue(venue_id).await?
    else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::VenueNotFound,
            "no such venue",
        ));
    };
    let chart_generated = chart.is_none();
    let doc = VenueDoc {
        chart: chart.unwrap_or_else(|| Chart::generated(&layout)),
        chart_generated,
        venue_id: venue_id.to_string(),
        name,
        city,
        seats: layout.seat_count(),
        sections: layout
            .sections()
            .iter()
            .map(|s| VenueSectionDoc {
                section: s.section.clone(),
                price_tier: s.price_tier.clone(),
                seats: s.capacity(),
                general_admission: s.general_admission,
                rows: if s.general_admission {
                    Vec::new()
                } else {
                    s.rows
                        .iter()
                        .map(|r| VenueRowDoc {
                            row: r.row.clone(),
                            seats: r.seats,
                        })
                        .collect()
                },
            })
            .collect(),
    };
    Ok((
        [(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=300"),
        )],
        Json(doc),
    )
        .into_response())
}
