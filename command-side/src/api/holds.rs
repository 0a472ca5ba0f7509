//! Holds: explicit seats (all or none) or the best available, release; the idempotency key
//! and the request's fingerprint.

use onsale_edge::ErrorCode;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use onsale_domain::show::messages::MAX_SEATS_PER_HOLD;
use onsale_domain::{HoldId, Idempotency, SeatId, ShowCommand, ShowError, ShowId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::protocol::Answer;
use onsale_edge::{ApiError, Problem};
use onsale_edge::{ApiJson, Caller, Integer, Role};

use super::state::{admitted, fingerprint, idempotency_key, AppState};

/// Written back (absent members omitted) for the request's fingerprint: the same request, however
/// its JSON was spelt, has one fingerprint.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HoldRequest {
    /// Explicit seats, all or none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seat_ids: Option<Vec<String>>,
    /// Best available: how many seats (adjacent in one row where possible).
    #[schema(value_type = Option<i64>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantity: Option<Integer<i64>>,
    /// Best available within this section.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HoldResponse {
    pub hold_id: String,
    pub event_id: String,
    /// Seat ids, `<section>-<row>-<number>`.
    #[schema(value_type = Vec<String>)]
    pub seat_ids: Vec<SeatId>,
    pub expires_at: DateTime<Utc>,
}

/// Hold explicit seats (all or none) or the best available ones.
#[utoipa::path(post, path = "/v1/events/{id}/holds", request_body = HoldRequest, security(("bearer" = [])),
    params(("id" = String, Path), ("Idempotency-Key" = Option<String>, Header),
        ("X-Onsale-Session" = Option<String>, Header, description = "The caller's live waiting-room session (required for a show with a waiting room, admins excepted)")),
    responses((status = 201, body = HoldResponse), (status = 409, body = Problem, description = "SEAT_UNAVAILABLE with lostSeatIds; BEST_AVAILABLE_ONLY: the show hands out the best available now, ask for a quantity"),
        (status = 403, body = Problem, description = "ADMISSION_REQUIRED: the show sells through its waiting room and the caller has no live session of it (FORBIDDEN: the caller's role may not hold)"),
        (status = 429, body = Problem, description = "HOLD_LIMIT"), (status = 404, body = Problem), (status = 422, body = Problem),
        (status = 503, body = Problem)))]
pub(super) async fn create_hold(
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
    state.health.record(show_id, secs, served);
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
pub(super) async fn release_hold(
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

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

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
