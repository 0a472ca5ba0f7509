//! Shows ("events"): scheduling one at a venue (admin) and its on-sale policies.

use onsale_edge::ErrorCode;
use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use onsale_domain::{Currency, SalePolicy, ShowCommand, ShowId, ShowInfo, VenueEvent, VenueId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use onsale_edge::{ApiError, Problem};
use onsale_edge::{ApiJson, BestAvailableOnlyDoc, Caller, Integer, Role, SalePolicyView};

use super::state::{text, AppState};

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

pub(super) const DEFAULT_HOLD_TTL_SECONDS: u32 = onsale_domain::show::DEFAULT_HOLD_TTL_SECONDS;

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
    /// The ISO 4217 code of the prices' currency; they are in its minor unit (default `USD`).
    #[schema(pattern = "^[A-Z]{3}$", example = "EUR")]
    currency: Option<String>,
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

/// Set a show's on-sale policies (admin): the hold TTL in and out of the on-sale window, the
/// window, best-available only, the per-account cap, who may join the waiting room. They apply to what is decided from now
/// on: holds already made keep their expiry, seats already held stay held.
#[utoipa::path(put, path = "/v1/events/{id}/policy", request_body = SalePolicyDoc, params(("id" = String, Path)),
    security(("bearer" = [])),
    responses((status = 200, body = SalePolicyView), (status = 404, body = Problem), (status = 422, body = Problem)))]
pub(super) async fn set_policy(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<SalePolicyDoc>,
) -> Result<Response, ApiError> {
    caller.require(&[Role::Admin])?;
    let show_id: ShowId = id.parse()?;
    // A made-up id is answered 404 from the catalog, never by starting an owner for it.
    state.catalog.exists(show_id).await?;
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
pub(super) async fn create_event(
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
        ..
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
        currency: body
            .currency
            .as_deref()
            .map(Currency::parse)
            .transpose()?
            .unwrap_or_default(),
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
