//! Orders placed from a hold: the card token kept, the charge after the commit (`202`).

use onsale_edge::ErrorCode;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use onsale_domain::{HoldId, Idempotency, OrderId, ShowCommand, ShowError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::protocol::Answer;
use onsale_edge::{ApiError, Problem};
use onsale_edge::{ApiJson, Caller, Role};

use super::state::{admitted, fingerprint, idempotency_key, AppState};

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OrderRequest {
    pub hold_id: String,
    pub payment_token: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderAccepted {
    pub order_id: String,
    pub status: String,
}

/// An order request's fingerprint, stored in the log with its key: the hold it orders, never
/// the payment token (issue 53, item 11: the log and the topic carry no card token, not even
/// hashed). A retry with the same key and another token is the same order, answered as first.
fn order_fingerprint(request: &OrderRequest) -> Result<String, ApiError> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Fingerprinted<'a> {
        hold_id: &'a str,
    }
    fingerprint(
        "POST /v1/orders",
        &Fingerprinted {
            hold_id: &request.hold_id,
        },
    )
}

/// Place an order from a hold. The charge happens after the commit, so the answer is 202.
#[utoipa::path(post, path = "/v1/orders", request_body = OrderRequest, security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header),
        ("X-Onsale-Session" = Option<String>, Header, description = "The caller's live waiting-room session (required for a show with a waiting room, admins excepted)")),
    responses((status = 202, body = OrderAccepted),
        (status = 403, body = Problem, description = "ADMISSION_REQUIRED: the show sells through its waiting room and the caller has no live session of it (FORBIDDEN: the caller's role may not order)"), (status = 409, body = Problem, description = "HOLD_EXPIRED or HOLD_ORDERED"),
        (status = 422, body = Problem, description = "IDEMPOTENCY_KEY_REUSED"), (status = 404, body = Problem),
        (status = 429, body = Problem, description = "PAYMENT_ATTEMPTS_EXCEEDED: this account had as many payments declined for this show within a day as its policy allows (Retry-After)")))]
pub(super) async fn place_order(
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
            fingerprint: order_fingerprint(&request)?,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn order(hold: &str, token: &str) -> String {
        order_fingerprint(&OrderRequest {
            hold_id: hold.into(),
            payment_token: token.into(),
        })
        .expect("fingerprint")
    }

    #[test]
    fn an_orders_fingerprint_is_its_hold_and_never_its_payment_token() {
        assert_eq!(order("h_1", "tok_visa_4242"), order("h_1", "tok_other"));
        assert_ne!(order("h_1", "tok_visa_4242"), order("h_2", "tok_visa_4242"));
    }
}
