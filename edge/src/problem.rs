//! The one edge type that turns every failure into an answer: RFC 7807 problem+json on HTTP
//! ([`Problem`] is both the body on the wire and its schema in the OpenAPI document) and a
//! `tonic::Status` with the same code on gRPC.

use axum::extract::rejection::JsonRejection;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use onsale_domain::ShowError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ErrorCode;

/// RFC 7807 problem details with a machine-readable code; some codes carry more members
/// ([`ProblemMembers`]), listed with the operation that answers them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// `https://onsale.dev/problems/<code in lower case>`
    #[serde(rename = "type")]
    pub kind: String,
    /// The HTTP status's reason phrase.
    pub title: String,
    pub status: u16,
    pub code: ErrorCode,
    /// What went wrong, in words.
    pub detail: String,
    /// The members particular to the code.
    #[serde(flatten)]
    pub members: ProblemMembers,
}

/// The members some codes add to a problem; each is absent unless its code says it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProblemMembers {
    /// `SEAT_UNAVAILABLE`: the asked seats another hold or order has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_seat_ids: Option<Vec<String>>,
    /// `UNKNOWN_SEAT`: the asked seats the show does not have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_seat_ids: Option<Vec<String>>,
    /// `HOLD_ORDERED`: the order the hold already became.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_id: Option<String>,
    /// `HOLD_LIMIT` and `PAYMENT_ATTEMPTS_EXCEEDED`: the limit reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// `HOLD_LIMIT`: the seats the account already holds or bought for the show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub already_claimed: Option<u32>,
    /// `TICKET_USED`: the ticket scanned at the gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket_id: Option<String>,
    /// `TICKET_USED`: that ticket's seat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seat_id: Option<String>,
    /// `OTHER_REGION`: the region that takes writes now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_region: Option<String>,
}

/// A failure on its way to the caller.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub detail: String,
    /// The members particular to the code (boxed: most errors carry none).
    pub members: Option<Box<ProblemMembers>>,
    /// `Retry-After` (seconds) on a 429 or 503; a 503 without one says 1.
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            members: None,
            retry_after_secs: None,
        }
    }

    /// The same error, answered with `Retry-After: secs`.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs.max(1));
        self
    }

    /// The same error with the members its code carries.
    pub fn with(mut self, members: ProblemMembers) -> Self {
        self.members = Some(Box::new(members));
        self
    }

    /// Something this build did not expect: logged with `detail`, answered 500 without it.
    pub fn internal(detail: &str) -> Self {
        tracing::error!(error = %detail, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            "an unexpected error; it was logged",
        )
    }

    pub fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Unavailable,
            "the event store is unreachable; retry shortly",
        )
    }

    /// Writes go to region `writer` (unknown: `None`), not this one (docs/adr/024): 503 with
    /// `Retry-After`, never a guess and never a write here.
    pub fn other_region(writer: Option<&str>) -> Self {
        let detail = match writer {
            Some(w) => format!("writes are taken in region {w}, not this one; send it there"),
            None => "this region takes no writes now; retry shortly".to_owned(),
        };
        let e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::OtherRegion,
            detail,
        )
        .retry_after(5);
        e.with(ProblemMembers {
            write_region: writer.map(str::to_owned),
            ..ProblemMembers::default()
        })
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, detail)
    }

    /// The body this error is answered with.
    pub fn problem(&self) -> Problem {
        Problem {
            kind: format!(
                "https://onsale.dev/problems/{}",
                self.code.as_str().to_lowercase()
            ),
            title: self.status.canonical_reason().unwrap_or("error").to_owned(),
            status: self.status.as_u16(),
            code: self.code,
            detail: self.detail.clone(),
            members: self.members.as_deref().cloned().unwrap_or_default(),
        }
    }

    /// The same failure as a gRPC status: the code leads the message and rides in the
    /// `onsale-code` metadata.
    pub fn into_status(self) -> tonic::Status {
        let code = match self.status {
            StatusCode::NOT_FOUND => tonic::Code::NotFound,
            StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => {
                tonic::Code::InvalidArgument
            }
            StatusCode::UNAUTHORIZED => tonic::Code::Unauthenticated,
            StatusCode::FORBIDDEN => tonic::Code::PermissionDenied,
            StatusCode::CONFLICT => tonic::Code::FailedPrecondition,
            StatusCode::TOO_MANY_REQUESTS => tonic::Code::ResourceExhausted,
            StatusCode::SERVICE_UNAVAILABLE => tonic::Code::Unavailable,
            _ => tonic::Code::Internal,
        };
        let mut s = tonic::Status::new(code, format!("{}: {}", self.code, self.detail));
        if let Ok(v) = self.code.as_str().parse() {
            s.metadata_mut().insert("onsale-code", v);
        }
        // As over HTTP: an outage always says when to come back.
        let retry = match (self.retry_after_secs, self.status) {
            (Some(secs), _) => Some(secs),
            (None, StatusCode::SERVICE_UNAVAILABLE) => Some(1),
            _ => None,
        };
        if let Some(secs) = retry {
            s.metadata_mut().insert("retry-after", secs.into());
        }
        s
    }
}

impl From<ApiError> for tonic::Status {
    fn from(e: ApiError) -> Self {
        e.into_status()
    }
}

impl From<ShowError> for ApiError {
    fn from(e: ShowError) -> Self {
        let status = match &e {
            ShowError::ShowNotFound
            | ShowError::UnknownSeat(_)
            | ShowError::UnknownSection(_)
            | ShowError::HoldNotFound
            | ShowError::OrderNotFound => StatusCode::NOT_FOUND,
            ShowError::Invalid(_)
            | ShowError::IdempotencyKeyReused
            | ShowError::GeneralAdmission(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ShowError::HoldLimit { .. } | ShowError::PaymentAttemptsExceeded { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ShowError::ShowAlreadyExists
            | ShowError::SeatUnavailable { .. }
            | ShowError::BestAvailableOnly
            | ShowError::SaleNotOpen
            | ShowError::SaleClosed
            | ShowError::HoldExpired
            | ShowError::HoldOrdered(_)
            | ShowError::NotCancellable(_)
            | ShowError::AmountMismatch { .. }
            | ShowError::InvalidTransition { .. } => StatusCode::CONFLICT,
        };
        let err = ApiError::new(status, ErrorCode::from(&e), e.to_string());
        let none = ProblemMembers::default();
        match e {
            ShowError::SeatUnavailable { lost } => err.with(ProblemMembers {
                lost_seat_ids: Some(lost),
                ..none
            }),
            ShowError::UnknownSeat(ids) => err.with(ProblemMembers {
                unknown_seat_ids: Some(ids),
                ..none
            }),
            ShowError::HoldOrdered(order) => err.with(ProblemMembers {
                order_id: Some(order.to_string()),
                ..none
            }),
            ShowError::HoldLimit { limit, already } => err.with(ProblemMembers {
                limit: Some(limit),
                already_claimed: Some(already),
                ..none
            }),
            ShowError::PaymentAttemptsExceeded {
                limit,
                retry_after_secs,
            } => err
                .with(ProblemMembers {
                    limit: Some(limit),
                    ..none
                })
                .retry_after(retry_after_secs),
            _ => err,
        }
    }
}

/// The catalog (a show as scheduled, read beside the log): 404 for a show that is not there,
/// 503 when the log cannot be read, 500 (logged) for what this build cannot read.
impl From<onsale_eventlog::CatalogError> for ApiError {
    fn from(e: onsale_eventlog::CatalogError) -> Self {
        use onsale_eventlog::CatalogError;
        match e {
            CatalogError::NotFound => ShowError::ShowNotFound.into(),
            CatalogError::Unavailable => Self::unavailable(),
            CatalogError::Corrupt(m) => Self::internal(&m),
        }
    }
}

/// An id that does not parse is the domain's `Invalid` (422 `INVALID_REQUEST`).
impl From<onsale_domain::InvalidId> for ApiError {
    fn from(e: onsale_domain::InvalidId) -> Self {
        ShowError::from(e).into()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let status = r.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
            StatusCode::UNPROCESSABLE_ENTITY => ErrorCode::InvalidRequest,
            _ => ErrorCode::MalformedJson,
        };
        Self::new(status, code, r.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status, axum::Json(self.problem())).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        let retry = match (self.retry_after_secs, self.status) {
            (Some(secs), _) => Some(secs),
            (None, StatusCode::SERVICE_UNAVAILABLE) => Some(1),
            _ => None,
        };
        if let Some(secs) = retry {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}

/// Middleware: an error the framework answers by itself (a path or query that does not
/// parse, an unknown route, a method not allowed, a body too large, a wrong media type) is
/// answered problem+json with a code like every other error, its detail cut to 200
/// characters. Answers that are already JSON, and successful ones, pass untouched.
pub async fn problem_json(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let res = next.run(req).await;
    let status = res.status();
    let json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("json") || t.starts_with("application/grpc"));
    if !(status.is_client_error() || status.is_server_error()) || json {
        return res;
    }
    let (parts, body) = res.into_parts();
    let text = axum::body::to_bytes(body, 4 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let code = match status {
        StatusCode::UNAUTHORIZED => ErrorCode::Unauthenticated,
        StatusCode::FORBIDDEN => ErrorCode::Forbidden,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        StatusCode::TOO_MANY_REQUESTS => ErrorCode::RateLimited,
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable,
        s if s.is_server_error() => ErrorCode::Internal,
        _ => ErrorCode::InvalidRequest,
    };
    let detail = match text.trim() {
        "" => status.canonical_reason().unwrap_or("error").to_owned(),
        t => t.chars().take(200).collect(),
    };
    let mut out = ApiError::new(status, code, detail).into_response();
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_body_is_the_documented_problem_with_its_extra_members() {
        let e = ApiError::from(ShowError::HoldLimit {
            limit: 6,
            already: 4,
        });
        let body = serde_json::to_value(e.problem()).expect("serializes");
        assert_eq!(body["type"], "https://onsale.dev/problems/hold_limit");
        assert_eq!(body["status"], 429);
        assert_eq!(body["code"], "HOLD_LIMIT");
        assert_eq!(body["limit"], 6);
        assert_eq!(body["alreadyClaimed"], 4);
        assert_eq!(
            body.as_object().map(|o| o.len()),
            Some(7),
            "the other codes' members are absent, not null: {body}"
        );
        let back: Problem = serde_json::from_value(body).expect("parses back");
        assert_eq!(back, e.problem());
    }

    #[test]
    fn an_outage_is_unavailable_on_grpc_with_its_code() {
        let s = ApiError::unavailable().into_status();
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert_eq!(
            s.metadata()
                .get("onsale-code")
                .and_then(|v| v.to_str().ok()),
            Some("UNAVAILABLE")
        );
    }
}
