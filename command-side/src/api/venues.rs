//! Venues: registering one and its layout of sections, rows and seats (admin; the venue page
//! is the query side's).

use axum::extract::State;
use axum::http::StatusCode;
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
