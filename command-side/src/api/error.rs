//! The one edge type that turns every failure into an RFC 7807 problem+json answer.

use axum::extract::rejection::JsonRejection;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use onsale_domain::ShowError;
use serde_json::{json, Map, Value};

use crate::owner::CommandError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub detail: String,
    pub extra: Map<String, Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            extra: Map::new(),
        }
    }

    pub fn with(mut self, key: &str, value: Value) -> Self {
        self.extra.insert(key.to_owned(), value);
        self
    }

    pub fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "UNAVAILABLE",
            "the event store is unreachable; retry shortly",
        )
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
            ShowError::Invalid(_) | ShowError::IdempotencyKeyReused => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ShowError::HoldLimit { .. } => StatusCode::TOO_MANY_REQUESTS,
            ShowError::ShowAlreadyExists
            | ShowError::SeatUnavailable { .. }
            | ShowError::SaleNotOpen
            | ShowError::SaleClosed
            | ShowError::HoldExpired
            | ShowError::HoldOrdered(_)
            | ShowError::NotCancellable(_)
            | ShowError::InvalidTransition { .. } => StatusCode::CONFLICT,
        };
        let err = ApiError::new(status, e.code(), e.to_string());
        match e {
            ShowError::SeatUnavailable { lost } => err.with("lostSeatIds", json!(lost)),
            ShowError::UnknownSeat(ids) => err.with("unknownSeatIds", json!(ids)),
            ShowError::HoldOrdered(order) => err.with("orderId", json!(order.to_string())),
            ShowError::HoldLimit { limit, already } => err
                .with("limit", json!(limit))
                .with("alreadyClaimed", json!(already)),
            _ => err,
        }
    }
}

impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> Self {
        match e {
            CommandError::Domain(d) => d.into(),
            CommandError::Unavailable => Self::unavailable(),
            CommandError::Overloaded => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "OVERLOADED",
                "too many requests are waiting for this show; retry shortly",
            ),
            CommandError::Internal(m) => {
                tracing::error!(error = %m, "internal error");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "INTERNAL",
                    "an unexpected error; it was logged",
                )
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let status = r.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "PAYLOAD_TOO_LARGE",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "UNSUPPORTED_MEDIA_TYPE",
            StatusCode::UNPROCESSABLE_ENTITY => "INVALID_REQUEST",
            _ => "MALFORMED_JSON",
        };
        Self::new(status, code, r.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = Map::new();
        body.insert(
            "type".into(),
            json!(format!(
                "https://onsale.dev/problems/{}",
                self.code.to_lowercase()
            )),
        );
        body.insert(
            "title".into(),
            json!(self.status.canonical_reason().unwrap_or("error")),
        );
        body.insert("status".into(), json!(self.status.as_u16()));
        body.insert("code".into(), json!(self.code));
        body.insert("detail".into(), json!(self.detail));
        body.extend(self.extra);
        let mut res = (self.status, axum::Json(Value::Object(body))).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        res
    }
}
