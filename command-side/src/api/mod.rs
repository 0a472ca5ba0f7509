//! The REST command API of docs/api.md, one module per resource: venues and events (admin),
//! holds and release, orders, and the process's probes; here the state they share, the router,
//! the OpenAPI document's command half and the checks every command makes (the text rule, the
//! waiting room's gate).

use onsale_edge::ErrorCode;
use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use metrics_exporter_prometheus::PrometheusHandle;
use onsale_domain::show::messages::MAX_SEATS_PER_HOLD;
use onsale_domain::{
    BestAvailableOnly, HoldId, Idempotency, IdempotencyKey, OrderId, SalePolicy, SeatId,
    SectionLayout, ShowCommand, ShowError, ShowId, ShowInfo, VenueEvent, VenueId, VenueLayout,
    MAX_SEATS_PER_ACCOUNT,
};
use onsale_edge::auth::Verifier;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use utoipa::{OpenApi, ToSchema};

use crate::owner::Shows;
use crate::protocol::{Answer, CommandError};
use onsale_edge::admission::GateRefusal;
use onsale_edge::{ApiError, Problem};
use onsale_edge::{ApiJson, Caller, Integer, Role};

mod events;
mod holds;
mod ops;
mod orders;
mod venues;

pub use events::*;
pub use holds::*;
use ops::*;
pub use orders::*;
pub use venues::*;

/// Something else the process needs before `/readyz` answers 200 (the read path's health when
/// the query side is served by the same process): `Err` names what is wrong.
pub type ReadyCheck = std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

#[derive(Clone)]
pub struct AppState {
    pub shows: Shows,
    /// Shows as scheduled, for the waiting-room check and the existence check before an
    /// owner (never the owners themselves).
    pub catalog: crate::Catalog,
    /// The same catalog reading through the public pool: the venue and event pages.
    pub public_catalog: crate::Catalog,
    pub verifier: Verifier,
    pub metrics: Option<PrometheusHandle>,
    pub ready: Option<ReadyCheck>,
    /// Whether the process should go on at all (`/healthz`): `Err` names a part that keeps
    /// dying.
    pub live: Option<ReadyCheck>,
    /// The waiting room's session check; `None`: this deployment has no waiting room.
    pub gate: Option<std::sync::Arc<dyn onsale_edge::admission::SessionGate>>,
    /// The hold path's recent latencies and failures (the admission controller's input).
    pub health: std::sync::Arc<onsale_edge::admission::BookingHealth>,
    /// Where a card's token waits for the payment worker (never in the log).
    pub tokens: crate::TokenVault,
    /// The OpenAPI document served at `/openapi.json`: [`ApiDoc`], plus the query side's paths
    /// when it is served by the same process, made exact (`onsale_edge::openapi::exact`).
    pub openapi: std::sync::Arc<Value>,
}

impl axum::extract::FromRef<AppState> for Verifier {
    fn from_ref(state: &AppState) -> Self {
        state.verifier.clone()
    }
}

impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> Self {
        match e {
            CommandError::Domain(d) => d.into(),
            CommandError::Unavailable => Self::unavailable(),
            CommandError::Overloaded => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Overloaded,
                "too many requests are waiting for this show; retry shortly",
            ),
            CommandError::ShuttingDown => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ShuttingDown,
                "this server is shutting down; retry shortly",
            ),
            CommandError::Moving => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ShowMoving,
                "this show is moving to another database shard; retry shortly",
            ),
            CommandError::Internal(m) => {
                tracing::error!(error = %m, "internal error");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ErrorCode::Internal,
                    "an unexpected error; it was logged",
                )
            }
        }
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("shows", &self.shows)
            .finish_non_exhaustive()
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        // A venue's layout is the one large body (up to 200 sections of 100 rows).
        .route(
            "/v1/venues",
            post(create_venue).layer(axum::extract::DefaultBodyLimit::max(VENUE_BODY_BYTES)),
        )
        .route("/v1/venues/{id}", get(get_venue))
        .route("/v1/events", post(create_event))
        .route("/v1/events/{id}", get(get_event))
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
    paths(create_venue, get_venue, create_event, get_event, set_policy, create_hold, release_hold, place_order),
    components(schemas(EventDoc, EventSectionDoc, SalePolicyDoc, SalePolicyView, BestAvailableOnlyDoc, NewVenue, SectionLayoutDoc, RowLayoutDoc, VenueDoc, VenueSectionDoc, VenueRowDoc, NewEvent, HoldRequest, HoldResponse, OrderRequest,
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

fn text(field: &str, s: &str, max: usize) -> Result<String, ApiError> {
    let t = s.trim();
    if t.is_empty() || t.chars().count() > max {
        return Err(ShowError::Invalid(format!("{field} must be 1 to {max} characters")).into());
    }
    Ok(t.to_owned())
}

/// A show with a waiting room takes holds and orders only from a live session of the caller
/// (`X-Onsale-Session`); admins (the box office) pass. Nothing below changes: the session only
/// decides who may ask, the seat rules still decide what they get.
async fn admitted(
    state: &AppState,
    show: ShowId,
    caller: &Caller,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    // The show must exist (404 otherwise, before anything reaches an owner).
    let waiting_room = state.catalog.get(show).await?.info.waiting_room;
    if caller.role == Role::Admin || !waiting_room {
        return Ok(());
    }
    let Some(gate) = &state.gate else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::WaitingRoomUnavailable,
            "this show sells through a waiting room, which this process does not run",
        ));
    };
    let session = headers
        .get("x-onsale-session")
        .and_then(|v| v.to_str().ok());
    gate.check(show, &caller.account, session)
        .await
        .map_err(|refusal| match refusal {
            GateRefusal::AdmissionRequired(why) => {
                ApiError::new(StatusCode::FORBIDDEN, ErrorCode::AdmissionRequired, why)
            }
            GateRefusal::Unavailable => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::WaitingRoomUnavailable,
                "the waiting room's sessions cannot be checked now; retry shortly",
            ),
        })
}
