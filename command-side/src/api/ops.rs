//! The process's probes and metrics: `/healthz`, `/readyz`, `/metrics`.

use onsale_edge::ErrorCode;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use onsale_edge::ApiError;

use super::state::AppState;

pub(super) async fn healthz(State(state): State<AppState>) -> Response {
    match state.live.as_ref().map_or(Ok(()), |check| check()) {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(why) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unhealthy, why)
            .into_response(),
    }
}

/// Whether this process serves: what `state.ready` says (the server refreshes it in the
/// background; the probe itself reads no database).
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    match state.ready.as_ref().map_or(Ok(()), |check| check()) {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(why) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::NotReady, why).into_response()
        }
    }
}

pub(super) async fn metrics_page(State(state): State<AppState>) -> Response {
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
