//! Venues (admin writes, everyone reads): a venue's layout of sections, rows and seats.

use onsale_edge::ErrorCode;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use onsale_domain::chart::Chart;
use onsale_domain::{SectionLayout, ShowError, VenueEvent, VenueId, VenueLayout};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use onsale_edge::{ApiError, Problem};
use onsale_edge::{ApiJson, Caller, Integer, Role};

use super::state::{text, AppState};

/// The largest venue body: 200 sections of 100 rows fit (the schema's bounds), with a chart
/// placing every row.
pub const VENUE_BODY_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RowLayoutDoc {
    row: String,
    #[schema(value_type = u32)]
    seats: Integer<u32>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
/// A section: rows of numbered seats, or general admission (a `capacity`, no seats).
pub struct SectionLayoutDoc {
    section: String,
    price_tier: String,
    #[serde(default)]
    rows: Vec<RowLayoutDoc>,
    /// General admission: this many places, sold by quantity; no `rows`.
    #[schema(value_type = Option<u32>)]
    capacity: Option<Integer<u32>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewVenue {
    name: String,
    city: String,
    sections: Vec<SectionLayoutDoc>,
    /// Where the stage, the sections and every row are drawn (docs/api.md, "The venue's
    /// chart"); absent: one is generated (the sections in rings facing the stage).
    chart: Option<Chart>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VenueCreated {
    venue_id: String,
}

/// Register a venue and its seat map.
#[utoipa::path(post, path = "/v1/venues", request_body = NewVenue, security(("bearer" = [])),
    responses((status = 201, body = VenueCreated), (status = 422, body = Problem), (status = 403, body = Problem)))]
pub(super) async fn create_venue(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewVenue>,
) -> Result<Response, ApiError> {
    caller.require(&[Role::Admin])?;
    let name = text("name", &body.name, 200)?;
    let city = text("city", &body.city, 100)?;
    let layout = VenueLayout::parse(
        body.sections
            .into_iter()
            .map(|s| match s.capacity {
                Some(_) if !s.rows.is_empty() => Err(ShowError::Invalid(format!(
                    "section {} has both rows and a capacity: one or the other",
                    s.section
                ))),
                Some(capacity) if capacity.0 == 0 => Err(ShowError::Invalid(format!(
                    "section {} must have a capacity of at least 1",
                    s.section
                ))),
                Some(capacity) => Ok(SectionLayout::general_admission(
                    s.section,
                    s.price_tier,
                    capacity
                        .0
                        .min(onsale_domain::layout::MAX_SEATS_PER_SHOW + 1),
                )),
                None => Ok(SectionLayout {
                    section: s.section,
                    price_tier: s.price_tier,
                    rows: s
                        .rows
                        .into_iter()
                        .map(|r| onsale_domain::RowLayout {
                            row: r.row,
                            seats: r.seats.0,
                        })
                        .collect(),
                    general_admission: false,
                }),
            })
            .collect::<Result<_, _>>()?,
    )?;
    if let Some(chart) = &body.chart {
        chart.check(&layout)?;
    }
    let venue_id = VenueId::random();
    state
        .shows
        .log()
        .register_venue(
            venue_id,
            &VenueEvent::VenueRegistered {
                name,
                city,
                layout,
                chart: body.chart,
            },
        )
        .await
        .map_err(|_| ApiError::unavailable())?;
    Ok((
        StatusCode::CREATED,
        Json(VenueCreated {
            venue_id: venue_id.to_string(),
        }),
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
pub(super) async fn get_venue(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let venue_id: VenueId = id.parse()?;
    let Some(VenueEvent::VenueRegistered {
        name,
        city,
        layout,
        chart,
    }) = state.public_catalog.venue(venue_id).await?
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
