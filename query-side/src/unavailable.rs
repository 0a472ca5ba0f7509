//! How a read that could not be made now is answered: 503 with a retry hint, the cause logged,
//! never a guess.

use axum::http::StatusCode;
use onsale_edge::{ApiError, ErrorCode};

/// A read model could not be read: 503, retry.
pub(crate) fn db_unavailable(e: sqlx::Error) -> ApiError {
    tracing::warn!(error = %e, "read model unreachable");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Unavailable,
        "the read models are unreachable; retry shortly",
    )
}

/// The log could not be read: 503, retry.
pub(crate) fn log_unavailable(e: onsale_eventlog::StoreError) -> ApiError {
    tracing::warn!(error = %e, "event log unreachable");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Unavailable,
        "the event log is unreachable; retry shortly",
    )
}
