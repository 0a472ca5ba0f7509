//! The REST command API of docs/api.md: venues and events (admin), holds, release, orders.

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

const DEFAULT_HOLD_TTL_SECONDS: u32 = onsale_domain::show::DEFAULT_HOLD_TTL_SECONDS;

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

/// The largest venue body: 200 sections of 100 rows fit (the schema's bounds).
pub const VENUE_BODY_BYTES: usize = 1024 * 1024;

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
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VenueCreated {
    venue_id: String,
}

fn text(field: &str, s: &str, max: usize) -> Result<String, ApiError> {
    let t = s.trim();
    if t.is_empty() || t.chars().count() > max {
        return Err(ShowError::Invalid(format!("{field} must be 1 to {max} characters")).into());
    }
    Ok(t.to_owned())
}

/// Register a venue and its seat map.
#[utoipa::path(post, path = "/v1/venues", request_body = NewVenue, security(("bearer" = [])),
    responses((status = 201, body = VenueCreated), (status = 422, body = Problem), (status = 403, body = Problem)))]
async fn create_venue(
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
    let venue_id = VenueId::random();
    state
        .shows
        .log()
        .register_venue(
            venue_id,
            &VenueEvent::VenueRegistered { name, city, layout },
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
async fn get_venue(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let venue_id: VenueId = id.parse()?;
    let Some(VenueEvent::VenueRegistered { name, city, layout }) =
        state.public_catalog.venue(venue_id).await?
    else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::VenueNotFound,
            "no such venue",
        ));
    };
    let doc = VenueDoc {
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

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewEvent {
    name: String,
    performer: String,
    venue_id: String,
    starts_at: DateTime<Utc>,
    on_sale_at: DateTime<Utc>,
    /// Cents per price tier of the venue.
    #[schema(value_type = BTreeMap<String, i64>)]
    prices: BTreeMap<String, Integer<i64>>,
    #[serde(default)]
    waiting_room: bool,
    #[schema(value_type = Option<u32>)]
    hold_ttl_seconds: Option<Integer<u32>>,
    /// The hold TTL inside the on-sale window (120 for the documents' hot on-sales).
    #[schema(value_type = Option<u32>)]
    on_sale_hold_ttl_seconds: Option<Integer<u32>>,
    /// How long the on-sale window lasts from `onSaleAt` (0 or absent: no window).
    #[schema(value_type = Option<u32>)]
    on_sale_window_seconds: Option<Integer<u32>>,
    /// When explicit seat picks are refused: NEVER (default), ON_SALE_WINDOW or ALWAYS.
    best_available_only: Option<BestAvailableOnlyDoc>,
    /// The per-account cap of this show (default 8).
    #[schema(value_type = Option<u32>)]
    max_seats_per_account: Option<Integer<u32>>,
    /// Only accounts whose token carries `verified: true` may join the waiting room.
    #[serde(default)]
    require_verified_account: bool,
    /// The proof of work a waiting-room join must carry, in leading zero bits of SHA-256 (0 or
    /// absent: none; 20 is about a second of a phone).
    #[schema(value_type = Option<u8>)]
    join_challenge_bits: Option<Integer<u8>>,
    /// Declined payments one account may have on this show within a day before its next
    /// order answers 429 `PAYMENT_ATTEMPTS_EXCEEDED` (default 5, at most 50).
    #[schema(value_type = Option<u32>)]
    max_failed_payments: Option<Integer<u32>>,
    /// The write cluster the show lives on (1 to the deployment's number of shards); absent:
    /// the one holding the fewest shows. Fixed once scheduled (a move changes it).
    #[schema(value_type = Option<u16>, minimum = 1)]
    shard: Option<Integer<u16>>,
}

/// When explicit seat picks are refused (`BEST_AVAILABLE_ONLY`): the show hands out the best
/// available seats instead, so fans stop racing for the same ones.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BestAvailableOnlyDoc {
    Never,
    OnSaleWindow,
    Always,
}

impl From<BestAvailableOnlyDoc> for BestAvailableOnly {
    fn from(d: BestAvailableOnlyDoc) -> Self {
        match d {
            BestAvailableOnlyDoc::Never => Self::Never,
            BestAvailableOnlyDoc::OnSaleWindow => Self::OnSaleWindow,
            BestAvailableOnlyDoc::Always => Self::Always,
        }
    }
}

impl From<BestAvailableOnly> for BestAvailableOnlyDoc {
    fn from(d: BestAvailableOnly) -> Self {
        match d {
            BestAvailableOnly::Never => Self::Never,
            BestAvailableOnly::OnSaleWindow => Self::OnSaleWindow,
            BestAvailableOnly::Always => Self::Always,
        }
    }
}

/// A show's on-sale policies as `PUT /v1/events/{id}/policy` takes them and the event page
/// shows them: the whole policy (an absent field is its default). `NewEvent` repeats these
/// fields rather than flattening this struct into it: serde cannot flatten into a struct that
/// denies unknown fields, and a misspelt field must be refused; `policy_of!` maps both.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SalePolicyDoc {
    /// The hold TTL outside the on-sale window (default 600).
    #[schema(value_type = Option<u32>)]
    hold_ttl_seconds: Option<Integer<u32>>,
    /// The hold TTL inside the on-sale window; absent: `holdTtlSeconds` all along.
    #[schema(value_type = Option<u32>)]
    on_sale_hold_ttl_seconds: Option<Integer<u32>>,
    #[schema(value_type = Option<u32>)]
    on_sale_window_seconds: Option<Integer<u32>>,
    best_available_only: Option<BestAvailableOnlyDoc>,
    #[schema(value_type = Option<u32>)]
    max_seats_per_account: Option<Integer<u32>>,
    /// Only accounts whose token carries `verified: true` may join the waiting room.
    #[serde(default)]
    require_verified_account: bool,
    /// The proof of work a waiting-room join must carry, in leading zero bits of SHA-256 (0 or
    /// absent: none; 20 is about a second of a phone).
    #[schema(value_type = Option<u8>)]
    join_challenge_bits: Option<Integer<u8>>,
    /// Declined payments one account may have on this show within a day before its next
    /// order answers 429 `PAYMENT_ATTEMPTS_EXCEEDED` (default 5, at most 50).
    #[schema(value_type = Option<u32>)]
    max_failed_payments: Option<Integer<u32>>,
}

/// The policies in force, as the event page and the policy route answer them.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SalePolicyView {
    hold_ttl_seconds: u32,
    on_sale_hold_ttl_seconds: Option<u32>,
    on_sale_window_seconds: u32,
    best_available_only: BestAvailableOnlyDoc,
    max_seats_per_account: u32,
    require_verified_account: bool,
    join_challenge_bits: u8,
    max_failed_payments: u32,
}

impl SalePolicyView {
    fn of(hold_ttl_seconds: u32, p: &SalePolicy) -> Self {
        Self {
            hold_ttl_seconds,
            on_sale_hold_ttl_seconds: p.on_sale_hold_ttl_seconds,
            on_sale_window_seconds: p.on_sale_window_seconds,
            best_available_only: p.best_available_only.into(),
            max_seats_per_account: p.max_seats_per_account.unwrap_or(MAX_SEATS_PER_ACCOUNT),
            require_verified_account: p.require_verified_account,
            join_challenge_bits: p.join_challenge_bits,
            max_failed_payments: p.failed_payment_cap(),
        }
    }
}

/// The on-sale policies named by a request that carries them (a new event, or a policy of its
/// own): the same fields in both.
macro_rules! policy_of {
    ($body:expr) => {
        SalePolicy {
            on_sale_hold_ttl_seconds: $body.on_sale_hold_ttl_seconds.map(|t| t.0),
            on_sale_window_seconds: $body.on_sale_window_seconds.map_or(0, |t| t.0),
            best_available_only: $body
                .best_available_only
                .map_or_else(Default::default, Into::into),
            max_seats_per_account: $body.max_seats_per_account.map(|t| t.0),
            require_verified_account: $body.require_verified_account,
            join_challenge_bits: $body.join_challenge_bits.map_or(0, |b| b.0),
            max_failed_payments: $body.max_failed_payments.map(|n| n.0),
        }
    };
}

/// Set a show's on-sale policies (admin): the hold TTL in and out of the on-sale window, the
/// window, best-available only, the per-account cap, who may join the waiting room. They apply to what is decided from now
/// on: holds already made keep their expiry, seats already held stay held.
#[utoipa::path(put, path = "/v1/events/{id}/policy", request_body = SalePolicyDoc, params(("id" = String, Path)),
    security(("bearer" = [])),
    responses((status = 200, body = SalePolicyView), (status = 404, body = Problem), (status = 422, body = Problem)))]
async fn set_policy(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<SalePolicyDoc>,
) -> Result<Response, ApiError> {
    caller.require(&[Role::Admin])?;
    let show_id: ShowId = id.parse()?;
    let hold_ttl_seconds = body
        .hold_ttl_seconds
        .map_or(DEFAULT_HOLD_TTL_SECONDS, |t| t.0);
    let policy = policy_of!(body);
    state
        .shows
        .execute(
            show_id,
            ShowCommand::SetSalePolicy {
                hold_ttl_seconds,
                policy,
            },
        )
        .await?;
    Ok(Json(SalePolicyView::of(hold_ttl_seconds, &policy)).into_response())
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventCreated {
    event_id: String,
    /// The write cluster the show was placed on.
    shard: u16,
}

/// Schedule a show (an "event") at a venue.
#[utoipa::path(post, path = "/v1/events", request_body = NewEvent, security(("bearer" = [])),
    responses((status = 201, body = EventCreated), (status = 404, body = Problem), (status = 422, body = Problem)))]
async fn create_event(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewEvent>,
) -> Result<Response, ApiError> {
    caller.require(&[Role::Admin])?;
    if body.waiting_room && state.gate.is_none() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::WaitingRoomUnavailable,
            "this deployment runs without a waiting room (no Redis configured); create the event with waitingRoom: false",
        ));
    }
    let venue_id: VenueId = body.venue_id.parse()?;
    let venue = state
        .shows
        .log()
        .load_venue(venue_id)
        .await
        .map_err(|_| ApiError::unavailable())?;
    let Some(VenueEvent::VenueRegistered {
        name: venue_name,
        city,
        layout,
    }) = venue
    else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::VenueNotFound,
            "no such venue",
        ));
    };
    let show_id = ShowId::random();
    let info = ShowInfo {
        show_id,
        venue_id,
        venue_name,
        city,
        name: text("name", &body.name, 200)?,
        performer: text("performer", &body.performer, 200)?,
        starts_at: body.starts_at,
        on_sale_at: body.on_sale_at,
        prices: body.prices.into_iter().map(|(t, c)| (t, c.0)).collect(),
        waiting_room: body.waiting_room,
        hold_ttl_seconds: body
            .hold_ttl_seconds
            .map_or(DEFAULT_HOLD_TTL_SECONDS, |t| t.0),
        policy: policy_of!(body),
    };
    // Placed before its first event: the directory points at a shard the show is not on only
    // for a show whose scheduling failed, which no one else can name.
    let shard = state.shows.place(show_id, body.shard.map(|s| s.0)).await?;
    state
        .shows
        .execute(show_id, ShowCommand::Schedule { info, layout })
        .await?;
    state.catalog.scheduled(show_id).await;
    Ok((
        StatusCode::CREATED,
        Json(EventCreated {
            event_id: show_id.to_string(),
            shard: shard.get(),
        }),
    )
        .into_response())
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
async fn get_event(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let show_id: ShowId = id.parse()?;
    let now = state.shows.clock().now();
    let scheduled = state.public_catalog.get(show_id).await?;
    let (info, layout) = (&scheduled.info, &scheduled.layout);
    // The facts come from the show's first event, the policies in force from the log (read
    // back at once after a change), the availability from the catalog projection (absent for
    // a moment after the show is scheduled: then all seats are).
    let available = state.public_catalog.live(show_id).await.available;
    let (hold_ttl_seconds, policy) = state.public_catalog.policy(show_id).await?;
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
        min_price_cents: prices.clone().min(),
        max_price_cents: prices.max(),
        waiting_room: info.waiting_room,
        hold_ttl_seconds,
        policy: SalePolicyView::of(hold_ttl_seconds, &policy),
        seat_count: layout.seat_count(),
        available_seats: available.map_or(i64::from(layout.seat_count()), i64::from),
        sections,
    };
    let body = serde_json::to_vec(&doc)
        .map_err(|e| crate::protocol::CommandError::Internal(e.to_string()))?;
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

/// Written back (absent members omitted) for the request's fingerprint: the same request, however
/// its JSON was spelt, has one fingerprint.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HoldRequest {
    /// Explicit seats, all or none.
    #[serde(skip_serializing_if = "Option::is_none")]
    seat_ids: Option<Vec<String>>,
    /// Best available: how many seats (adjacent in one row where possible).
    #[schema(value_type = Option<i64>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    quantity: Option<Integer<i64>>,
    /// Best available within this section.
    #[serde(skip_serializing_if = "Option::is_none")]
    section: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HoldResponse {
    hold_id: String,
    event_id: String,
    /// Seat ids, `<section>-<row>-<number>`.
    #[schema(value_type = Vec<String>)]
    seat_ids: Vec<SeatId>,
    expires_at: DateTime<Utc>,
}

/// A request's fingerprint: its route and the request as it was read, written back (serde_json
/// writes a struct's members in their declared order), so key order and spelling do not count.
fn fingerprint<T: Serialize>(route: &str, request: &T) -> Result<String, ApiError> {
    let body = serde_json::to_vec(request)
        .map_err(|e| crate::protocol::CommandError::Internal(e.to_string()))?;
    let mut h = Sha256::new();
    h.update(route.as_bytes());
    h.update(b"\n");
    h.update(&body);
    Ok(hex::encode(h.finalize()))
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    match headers.get("idempotency-key") {
        None => Ok(None),
        Some(v) => {
            let s = v
                .to_str()
                .map_err(|_| ShowError::Invalid("Idempotency-Key must be ASCII".into()))?;
            Ok(Some(IdempotencyKey::parse(s)?))
        }
    }
}

/// Hold explicit seats (all or none) or the best available ones.
#[utoipa::path(post, path = "/v1/events/{id}/holds", request_body = HoldRequest, security(("bearer" = [])),
    params(("id" = String, Path), ("Idempotency-Key" = Option<String>, Header),
        ("X-Onsale-Session" = Option<String>, Header, description = "The caller's live waiting-room session (required for a show with a waiting room, admins excepted)")),
    responses((status = 201, body = HoldResponse), (status = 409, body = Problem, description = "SEAT_UNAVAILABLE with lostSeatIds; BEST_AVAILABLE_ONLY: the show hands out the best available now, ask for a quantity"),
        (status = 403, body = Problem, description = "ADMISSION_REQUIRED: the show sells through its waiting room and the caller has no live session of it (FORBIDDEN: the caller's role may not hold)"),
        (status = 429, body = Problem, description = "HOLD_LIMIT"), (status = 404, body = Problem), (status = 422, body = Problem),
        (status = 503, body = Problem)))]
async fn create_hold(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<HoldRequest>,
) -> Result<Response, ApiError> {
    caller.require(&[Role::Fan, Role::Admin])?;
    let show_id: ShowId = id.parse()?;
    admitted(&state, show_id, &caller, &headers).await?;
    let idempotency = match idempotency_key(&headers)? {
        Some(key) => Some(Idempotency {
            key,
            fingerprint: fingerprint(&format!("POST /v1/events/{show_id}/holds"), &request)?,
        }),
        None => None,
    };
    let hold_id = HoldId::new(show_id);
    let account = caller.account.clone();
    let command = match (request.seat_ids, request.quantity) {
        (Some(seat_ids), None) => {
            if request.section.is_some() {
                return Err(
                    ShowError::Invalid("section goes with quantity, not seatIds".into()).into(),
                );
            }
            if seat_ids.len() > MAX_SEATS_PER_HOLD {
                return Err(ShowError::Invalid(format!(
                    "at most {MAX_SEATS_PER_HOLD} seatIds per request"
                ))
                .into());
            }
            ShowCommand::HoldSeats {
                hold_id,
                account,
                seat_ids,
                idempotency,
            }
        }
        (None, Some(Integer(quantity))) => {
            let quantity = u32::try_from(quantity)
                .ok()
                .filter(|&q| q >= 1)
                .ok_or_else(|| ShowError::Invalid("quantity must be a positive integer".into()))?;
            ShowCommand::HoldBestAvailable {
                hold_id,
                account,
                quantity,
                section: request.section,
                idempotency,
            }
        }
        _ => return Err(ShowError::Invalid("give either seatIds or quantity".into()).into()),
    };
    let started = std::time::Instant::now();
    let result = state.shows.execute(show_id, command).await;
    let secs = started.elapsed().as_secs_f64();
    metrics::histogram!(onsale_telemetry::metrics::HOLD_SECONDS).record(secs);
    let served = !matches!(
        result,
        Err(crate::protocol::CommandError::Unavailable
            | crate::protocol::CommandError::Overloaded
            | crate::protocol::CommandError::Internal(_))
    );
    state.health.record(secs, served);
    let outcome = match &result {
        Ok(_) => "held",
        Err(crate::protocol::CommandError::Domain(e)) => ErrorCode::from(e).as_str(),
        Err(_) => "error",
    };
    metrics::counter!(onsale_telemetry::metrics::HOLD_REQUESTS_TOTAL, "outcome" => outcome)
        .increment(1);
    match result? {
        Answer::Hold(view) => Ok((
            StatusCode::CREATED,
            [(header::LOCATION, format!("/v1/holds/{}", view.hold_id))],
            Json(HoldResponse {
                hold_id: view.hold_id.to_string(),
                event_id: view.event_id.to_string(),
                seat_ids: view.seat_ids,
                expires_at: view.expires_at,
            }),
        )
            .into_response()),
        other => {
            Err(crate::protocol::CommandError::Internal(format!("hold answered {other:?}")).into())
        }
    }
}

/// Release a hold early. Idempotent.
#[utoipa::path(delete, path = "/v1/holds/{id}", params(("id" = String, Path)), security(("bearer" = [])),
    responses((status = 204), (status = 404, body = Problem), (status = 409, body = Problem, description = "HOLD_ORDERED")))]
async fn release_hold(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(&[Role::Fan, Role::Admin])?;
    let hold_id: HoldId = id.parse()?;
    // A made-up show answers 404 here (cached), before an owner would claim and load it.
    state.catalog.exists(hold_id.show()).await?;
    state
        .shows
        .execute(
            hold_id.show(),
            ShowCommand::ReleaseHold {
                hold_id,
                account: caller.account,
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OrderRequest {
    hold_id: String,
    payment_token: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderAccepted {
    order_id: String,
    status: String,
}

/// Place an order from a hold. The charge happens after the commit, so the answer is 202.
#[utoipa::path(post, path = "/v1/orders", request_body = OrderRequest, security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header),
        ("X-Onsale-Session" = Option<String>, Header, description = "The caller's live waiting-room session (required for a show with a waiting room, admins excepted)")),
    responses((status = 202, body = OrderAccepted),
        (status = 403, body = Problem, description = "ADMISSION_REQUIRED: the show sells through its waiting room and the caller has no live session of it (FORBIDDEN: the caller's role may not order)"), (status = 409, body = Problem, description = "HOLD_EXPIRED or HOLD_ORDERED"),
        (status = 422, body = Problem, description = "IDEMPOTENCY_KEY_REUSED"), (status = 404, body = Problem),
        (status = 429, body = Problem, description = "PAYMENT_ATTEMPTS_EXCEEDED: this account had as many payments declined for this show within a day as its policy allows (Retry-After)")))]
async fn place_order(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<OrderRequest>,
) -> Result<Response, ApiError> {
    caller.require(&[Role::Fan, Role::Admin])?;
    let key = idempotency_key(&headers)?.ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::IdempotencyKeyRequired,
            "POST /v1/orders needs an Idempotency-Key header",
        )
    })?;
    let hold_id: HoldId = request.hold_id.parse()?;
    admitted(&state, hold_id.show(), &caller, &headers).await?;
    let token = request.payment_token.trim();
    if token.is_empty() || token.len() > 128 {
        return Err(ShowError::Invalid("paymentToken must be 1 to 128 characters".into()).into());
    }
    let order_id = OrderId::new(hold_id.show());
    state.tokens.keep(order_id, token).await?;
    let command = ShowCommand::PlaceOrder {
        order_id,
        hold_id,
        account: caller.account.clone(),
        idempotency: Idempotency {
            key,
            fingerprint: fingerprint("POST /v1/orders", &request)?,
        },
    };
    let answer = state.shows.execute(hold_id.show(), command).await;
    match &answer {
        // A retry answered with the order its key placed first: this id was never used.
        Ok(Answer::Order(view)) if view.order_id != order_id => {
            state.tokens.forget(order_id).await;
        }
        // Refused outright: nothing was placed. (An outage may have placed it: the token
        // stays for the payment, or for the jobs to sweep.)
        Err(crate::protocol::CommandError::Domain(_)) => state.tokens.forget(order_id).await,
        _ => {}
    }
    match answer? {
        Answer::Order(view) => Ok((
            StatusCode::ACCEPTED,
            [(header::LOCATION, format!("/v1/orders/{}", view.order_id))],
            Json(OrderAccepted {
                order_id: view.order_id.to_string(),
                status: view.status.into_owned(),
            }),
        )
            .into_response()),
        other => {
            Err(crate::protocol::CommandError::Internal(format!("order answered {other:?}")).into())
        }
    }
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

async fn healthz(State(state): State<AppState>) -> Response {
    match state.live.as_ref().map_or(Ok(()), |check| check()) {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(why) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unhealthy, why)
            .into_response(),
    }
}

async fn readyz(State(state): State<AppState>) -> Response {
    if state.shows.log().ping().await.is_err() {
        return ApiError::unavailable().into_response();
    }
    match state.ready.as_ref().map_or(Ok(()), |check| check()) {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(why) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::NotReady, why).into_response()
        }
    }
}

async fn metrics_page(State(state): State<AppState>) -> Response {
    match &state.metrics {
        Some(h) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            )],
            h.render(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(json: &str) -> String {
        let request: HoldRequest = serde_json::from_str(json).expect("a hold request");
        fingerprint("POST /v1/events/e/holds", &request).expect("fingerprint")
    }

    #[test]
    fn a_request_has_one_fingerprint_however_its_json_is_spelt() {
        let best = hold(r#"{"quantity":2,"section":"A"}"#);
        assert_eq!(best, hold(r#"{ "section": "A", "quantity": 2 }"#));
        assert_eq!(
            best,
            hold(r#"{"section":"A","quantity":2.0,"seatIds":null}"#)
        );
        assert_ne!(best, hold(r#"{"quantity":3,"section":"A"}"#));
        assert_ne!(best, hold(r#"{"quantity":2}"#));
        let seats = hold(r#"{"seatIds":["A-1-1","A-1-2"]}"#);
        assert_ne!(seats, hold(r#"{"seatIds":["A-1-2","A-1-1"]}"#));
        let other_route = fingerprint(
            "POST /v1/events/f/holds",
            &serde_json::from_str::<HoldRequest>(r#"{"quantity":2,"section":"A"}"#)
                .expect("a hold request"),
        )
        .expect("fingerprint");
        assert_ne!(best, other_route);
        // As the fingerprint of the body as sent was, for a body spelt in key order: a key
        // reused across an upgrade still finds its first answer.
        let mut h = Sha256::new();
        h.update(b"POST /v1/events/e/holds\n");
        h.update(br#"{"quantity":2,"section":"A"}"#);
        assert_eq!(best, hex::encode(h.finalize()));
    }
}
