//! The routes this crate serves from the main process: the processor's webhooks, the ticket's
//! barcode, the gate's scan, and order cancellation.

use onsale_edge::ErrorCode;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRef, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use onsale_command::CommandError;
use onsale_command::Shows;
use onsale_domain::{OrderId, OrderStatus, ShowCommand, ShowError, ShowId};
use onsale_edge::auth::Verifier;
use onsale_edge::auth::{Caller, Gates, Role};
use onsale_edge::ApiJson;
use onsale_edge::{ApiError, ProblemMembers};
use onsale_processor_api::signature;

use crate::client::{Processor, WebhookRejection};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{OpenApi, ToSchema};
use uuid::Uuid;

use onsale_payments_store::barcodes;
use onsale_payments_store::tickets::{self, Revocation, ScanRefusal};
use onsale_payments_store::{webhooks, Shards};

#[derive(Clone)]
pub struct PaymentsState {
    pub shows: Shows,
    /// Whether a show exists, before a request for it reaches an owner.
    pub catalog: onsale_eventlog::Catalog,
    /// The main database: the webhook deliveries already applied.
    pub pool: PgPool,
    /// Every shard: a show's tickets and cancellations live on its own.
    pub shards: Shards,
    pub verifier: Verifier,
    /// Checks webhook signatures.
    pub processor: Arc<dyn Processor>,
    /// Webhooks handled at once ([`WEBHOOKS_IN_FLIGHT`]); one more is answered 503 at once.
    pub webhook_slots: Arc<tokio::sync::Semaphore>,
}

/// Webhooks handled at once by a process. A processor re-delivers what was not answered 2xx
/// (the simulator within 2 s, a real one over hours), so a flood of deliveries (after an
/// outage that failed them, say) is answered 503 at the door instead of queueing for the main
/// database's connections, which the directory and the log consumers need too: the shards
/// drill saw such a flood time out thousands of deliveries a second, every one holding a place
/// in the pool's queue. The worker settles every payment without webhooks; they only hasten it.
pub const WEBHOOKS_IN_FLIGHT: usize = 32;

impl std::fmt::Debug for PaymentsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentsState").finish_non_exhaustive()
    }
}

impl FromRef<PaymentsState> for Verifier {
    fn from_ref(s: &PaymentsState) -> Self {
        s.verifier.clone()
    }
}

pub fn router(state: PaymentsState) -> Router {
    Router::new()
        .route("/v1/webhooks/processor", post(webhook))
        .route("/v1/tickets/{id}/barcode", get(get_barcode))
        .route("/v1/scans", post(scan))
        .route("/v1/orders/{id}/cancel", post(cancel_order))
        .with_state(state)
}

#[derive(OpenApi)]
#[openapi(
    paths(get_barcode, scan, cancel_order),
    components(schemas(Barcode, ScanRequest, Admitted, Cancelled))
)]
#[derive(Debug)]
pub struct PaymentsDoc;

fn db_unavailable(e: sqlx::Error) -> ApiError {
    tracing::warn!(error = %e, "database unavailable");
    ApiError::unavailable()
}

/// The database of the shard `show` lives on; unavailable if the directory cannot say.
async fn shard_of(shards: &Shards, show: ShowId) -> Result<&PgPool, ApiError> {
    shards.pool_of(show).await.map_err(|e| {
        tracing::warn!(%show, error = %e, "the show's shard is not known");
        ApiError::unavailable()
    })
}

/// [`db_unavailable`] for a statement on `show`'s shard: a show found moved off it is looked
/// up again on the retry.
fn shard_unavailable(shards: &Shards, show: ShowId) -> impl Fn(sqlx::Error) -> ApiError + '_ {
    move |e| {
        if onsale_eventlog::moving::is_moved(&e) {
            shards.forget(show);
        }
        db_unavailable(e)
    }
}

/// A ticket's owner, barcode key and whether it was revoked, from whichever shard holds it
/// (ticket ids name no show): unavailable if it is on none that answered and one did not.
async fn find_ticket(
    shards: &Shards,
    ticket: Uuid,
) -> Result<Option<(String, Vec<u8>, bool)>, ApiError> {
    tickets::find(shards, ticket).await.map_err(db_unavailable)
}

/// The code a gate's refusal is answered with (docs/api.md's codes).
fn refused(refusal: ScanRefusal) -> ErrorCode {
    match refusal {
        ScanRefusal::InvalidCode => ErrorCode::InvalidCode,
        ScanRefusal::ExpiredCode => ErrorCode::ExpiredCode,
        ScanRefusal::Revoked => ErrorCode::TicketRevoked,
        ScanRefusal::AlreadyScanned => ErrorCode::AlreadyScanned,
    }
}

/// Webhooks: verified (signature and age), deduplicated on the delivery id, applied through
/// the show's state table (a late or out-of-order event never regresses a terminal state).
/// A 5xx asks the processor to deliver again; everything it cannot fix is acknowledged.
async fn webhook(State(state): State<PaymentsState>, headers: HeaderMap, body: Bytes) -> Response {
    let Ok(_slot) = state.webhook_slots.clone().try_acquire_owned() else {
        metrics::counter!(onsale_telemetry::metrics::WEBHOOKS_SHED_TOTAL).increment(1);
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Unavailable,
            "too many webhook deliveries at once; deliver again shortly",
        )
        .retry_after(1)
        .into_response();
    };
    let header = headers
        .get(signature::HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let event = match state
        .processor
        .verify_webhook(header, &body, Utc::now().timestamp())
    {
        Ok(event) => event,
        Err(WebhookRejection::Signature(e)) => {
            metrics::counter!(onsale_telemetry::metrics::WEBHOOKS_REJECTED_TOTAL).increment(1);
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidSignature,
                e.to_string(),
            )
            .into_response();
        }
        Err(WebhookRejection::Body(_)) => {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidRequest,
                "not a webhook event",
            )
            .into_response();
        }
    };
    match webhooks::seen(&state.pool, &event.id).await {
        Ok(true) => {
            metrics::counter!(onsale_telemetry::metrics::WEBHOOKS_DUPLICATE_TOTAL).increment(1);
            return (StatusCode::OK, Json(WebhookAck::DUPLICATE)).into_response();
        }
        Ok(false) => {}
        Err(e) => return db_unavailable(e).into_response(),
    }
    if let Some((order, command)) = crate::worker::webhook_command(&event) {
        match state.shows.execute(order.show(), command).await {
            Ok(_) => {}
            Err(CommandError::Domain(e @ ShowError::AmountMismatch { .. })) => {
                // Signed, yet not what was charged for: never confirms the order (the worker
                // asks the processor itself); an operator looks at it.
                metrics::counter!(onsale_telemetry::metrics::WEBHOOKS_REFUSED_TOTAL).increment(1);
                tracing::error!(delivery = %event.id, reference = %event.reference, error = %e, "webhook amount differs from the order's total");
            }
            Err(CommandError::Domain(
                ShowError::InvalidTransition { .. }
                | ShowError::OrderNotFound
                | ShowError::ShowNotFound,
            )) => {
                // A stale or foreign event: the state table keeps what is there.
                metrics::counter!(onsale_telemetry::metrics::WEBHOOKS_REFUSED_TOTAL).increment(1);
                tracing::info!(delivery = %event.id, kind = %event.kind, reference = %event.reference, "webhook changes nothing");
            }
            Err(e) => return ApiError::from(e).into_response(),
        }
    }
    let stored = webhooks::applied(&state.pool, &event.id, &event.kind, &event.charge_key).await;
    if let Err(e) = stored {
        // Applied but not remembered: a re-delivery is applied again, which the table absorbs.
        return db_unavailable(e).into_response();
    }
    metrics::counter!(onsale_telemetry::metrics::WEBHOOKS_APPLIED_TOTAL).increment(1);
    (StatusCode::OK, Json(WebhookAck::APPLIED)).into_response()
}

/// A webhook delivery's acknowledgement (200): applied now, or a delivery seen before.
#[derive(Debug, Serialize)]
struct WebhookAck {
    applied: bool,
    duplicate: bool,
}

impl WebhookAck {
    const APPLIED: Self = Self {
        applied: true,
        duplicate: false,
    };
    const DUPLICATE: Self = Self {
        applied: false,
        duplicate: true,
    };
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Barcode {
    pub code: String,
    pub valid_until: DateTime<Utc>,
}

/// The ticket's current barcode (its owner, or an admin). It changes every 15 s.
#[utoipa::path(get, path = "/v1/tickets/{ticketId}/barcode", params(("ticketId" = String, Path)),
    security(("bearer" = [])), responses((status = 200, body = Barcode), (status = 404), (status = 409)))]
async fn get_barcode(
    State(state): State<PaymentsState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Barcode>, ApiError> {
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::TicketNotFound,
            "no such ticket",
        )
    };
    let ticket: Uuid = id.parse().map_err(|_| not_found())?;
    let Some((owner, secret, revoked)) = find_ticket(&state.shards, ticket).await? else {
        return Err(not_found());
    };
    if !(caller.account.as_str() == owner || caller.role == Role::Admin) {
        return Err(not_found());
    }
    if revoked {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::TicketRevoked,
            "this ticket was revoked (its order was cancelled)",
        ));
    }
    let (code, valid_until) = barcodes::barcode(&secret, ticket, Utc::now());
    Ok(Json(Barcode { code, valid_until }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScanRequest {
    pub event_id: String,
    pub code: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Admitted {
    pub ticket_id: Uuid,
    pub seat_id: String,
}

/// The gate: admits a ticket once (scanners only).
#[utoipa::path(post, path = "/v1/scans", request_body = ScanRequest, security(("bearer" = [])),
    responses((status = 200, body = Admitted), (status = 403), (status = 404), (status = 409)))]
async fn scan(
    State(state): State<PaymentsState>,
    caller: Caller,
    ApiJson(body): ApiJson<ScanRequest>,
) -> Result<Json<Admitted>, ApiError> {
    caller.require(&[Role::Scanner, Role::Admin])?;
    let show: ShowId = body.event_id.parse()?;
    // A scanner admits at its own venue's or shows' gates only (admins anywhere).
    if let Some(gates) = &caller.gates {
        // A venue's gates need the show's venue (a made-up show: 404); named shows do not.
        let venue = match gates {
            Gates::Venue(_) => state.catalog.get(show).await?.info.venue_id.to_string(),
            Gates::Shows(_) => String::new(),
        };
        if !gates.admit(&show.to_string(), &venue) {
            metrics::counter!(onsale_telemetry::metrics::SCANS_TOTAL, "result" => ErrorCode::NotThisGate.as_str())
                .increment(1);
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::NotThisGate,
                "this scanner does not admit tickets of this show",
            ));
        }
    }
    let result = tickets::scan(
        shard_of(&state.shards, show).await?,
        &show.to_string(),
        &body.code,
        caller.account.as_str(),
        Utc::now(),
    )
    .await
    .map_err(shard_unavailable(&state.shards, show))?;
    match result {
        Ok((ticket_id, seat_id)) => {
            metrics::counter!(onsale_telemetry::metrics::SCANS_TOTAL, "result" => "admitted")
                .increment(1);
            Ok(Json(Admitted { ticket_id, seat_id }))
        }
        Err(refusal) => {
            metrics::counter!(onsale_telemetry::metrics::SCANS_TOTAL, "result" => refused(refusal).as_str())
                .increment(1);
            let status = if refusal == ScanRefusal::AlreadyScanned {
                StatusCode::CONFLICT
            } else {
                StatusCode::FORBIDDEN
            };
            Err(ApiError::new(
                status,
                refused(refusal),
                "the ticket is not admitted",
            ))
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cancelled {
    pub order_id: String,
    pub status: String,
}

/// Cancels a paid order (its buyer, or an admin): first its tickets stop working, then its
/// seats go back on sale and the refund is owed (sent by the payment worker, idempotent at the
/// processor). A ticket already used at the gate refuses the cancellation: that goes to a
/// person, not to an automatic refund.
#[utoipa::path(post, path = "/v1/orders/{id}/cancel", params(("id" = String, Path)),
    security(("bearer" = [])),
    responses((status = 202, body = Cancelled), (status = 404), (status = 409)))]
async fn cancel_order(
    State(state): State<PaymentsState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(&[Role::Fan, Role::Admin])?;
    let order: OrderId = id.parse()?;
    // A made-up show answers 404 here (cached), before an owner would claim and load it.
    state.catalog.exists(order.show()).await?;
    let admin = caller.role == Role::Admin;
    let account = caller.account.clone();
    // Check first, with the domain's rule, so a refusal changes nothing (no ticket revoked for
    // an order that stays).
    let before = match state
        .shows
        .ask(
            order.show(),
            onsale_command::ShowQuery::Cancellable {
                order,
                account,
                admin,
            },
        )
        .await?
    {
        onsale_command::Found::Cancellable(status) => status,
        other => {
            return Err(CommandError::Internal(format!("cancellable answered {other:?}")).into())
        }
    };
    let shard = shard_of(&state.shards, order.show()).await?;
    match tickets::revoke_for_cancel(
        shard,
        &order.to_string(),
        &order.show().to_string(),
        caller.account.as_str(),
    )
    .await
    .map_err(shard_unavailable(&state.shards, order.show()))?
    {
        Revocation::Revoked => {}
        Revocation::AlreadyScanned { ticket_id, seat_id } => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::TicketUsed,
                "a ticket of this order was already scanned at the gate; an admin must review the cancellation",
            )
            .with(ProblemMembers {
                ticket_id: Some(ticket_id.to_string()),
                seat_id: Some(seat_id.to_string()),
                ..ProblemMembers::default()
            }));
        }
    }
    state
        .shows
        .execute(
            order.show(),
            ShowCommand::CancelOrder {
                order_id: order,
                account: caller.account.clone(),
                admin,
            },
        )
        .await?;
    // Not remembered (the database went away just now): the jobs find the cancellation
    // unfinished and record it again, which the show answers as already done.
    if let Err(e) = tickets::cancellation_recorded(shard, &order.to_string()).await {
        tracing::warn!(%order, error = %e, "cancellation recorded, not remembered");
    }
    metrics::counter!(onsale_telemetry::metrics::ORDERS_CANCELLED_TOTAL).increment(1);
    let body = Cancelled {
        order_id: order.to_string(),
        // Cancelling again answers where the order stands; a first cancellation, CANCELLED.
        status: match before {
            OrderStatus::Refunded => before.public_status().to_owned(),
            _ => OrderStatus::Cancelled.public_status().to_owned(),
        },
    };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}
