//! The REST command API of docs/api.md, one module per resource: venues and events (admin),
//! holds and release, orders, and the process's probes; `state` holds what they share (the
//! state, the checks every command makes); here the router and the OpenAPI document's command
//! half.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use utoipa::OpenApi;

use onsale_edge::Problem;

mod events;
mod holds;
mod ops;
mod orders;
mod state;
mod venues;

pub use events::*;
pub use holds::*;
use ops::*;
pub use orders::*;
pub use state::{AppParts, AppState, ReadyCheck};
pub use venues::*;

pub fn router(state: AppState) -> Router {
    Router::new()
        // A venue's layout is the one large body (up to 200 sections of 100 rows).
        .route(
            "/v1/venues",
            post(create_venue).layer(axum::extract::DefaultBodyLimit::max(VENUE_BODY_BYTES)),
        )
        .route("/v1/events", post(create_event))
        .route("/v1/events/{id}/policy", axum::routing::put(set_policy))
        .route("/v1/events/{id}/holds", post(create_hold))
        .route("/v1/holds/{id}", axum::routing::delete(release_hold))
        .route("/v1/orders", post(place_order))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_page))
        .route(
            "/openapi.json",
            get(|State(state): State<AppState>| async move { Json(state.openapi.clone()) }),
        )
        .with_state(state)
}

#[derive(OpenApi)]
#[openapi(
    info(title = "onsale", description = "Reserved-seat ticketing: the command API (contract v1)."),
    paths(create_venue, create_event, set_policy, create_hold, release_hold, place_order),
    components(schemas(SalePolicyDoc, onsale_edge::SalePolicyView, onsale_edge::BestAvailableOnlyDoc, NewVenue, SectionLayoutDoc, RowLayoutDoc, NewEvent, HoldRequest, HoldResponse, OrderRequest,
        OrderAccepted, Problem, VenueCreated, EventCreated)),
    modifiers(&BearerAuth)
)]
#[derive(Debug)]
pub struct ApiDoc;

#[derive(Debug)]
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}
