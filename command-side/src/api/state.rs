//! What the command routes share: the state, how a command's error becomes an answer, and the
//! checks every command makes (the text rule, the waiting room's gate).

use onsale_edge::ErrorCode;

use axum::http::{HeaderMap, StatusCode};
use metrics_exporter_prometheus::PrometheusHandle;
use onsale_domain::{IdempotencyKey, ShowError, ShowId};
use onsale_edge::auth::Verifier;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::owner::Shows;
use crate::protocol::CommandError;
use onsale_edge::admission::GateRefusal;
use onsale_edge::ApiError;
use onsale_edge::{Caller, Role};

/// Something else the process needs before `/readyz` answers 200 (the read path's health when
/// the query side is served by the same process): `Err` names what is wrong.
pub type ReadyCheck = std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the command routes share. axum clones a router's state for every request (the
/// route's service, then the handler's state), so it is one `Arc`: a clone is one increment,
/// where cloning and dropping the parts (the catalogs' caches and their channels, a dozen
/// `Arc`s) took ~15% of `onsale serve`'s CPU on a request that does nothing (BENCHMARKS.md,
/// issue 30).
#[derive(Clone, Debug)]
pub struct AppState(std::sync::Arc<AppParts>);

// A part added to the handle instead of its parts would be cloned with every request again.
const _: () = assert!(std::mem::size_of::<AppState>() == std::mem::size_of::<usize>());

impl AppState {
    pub fn new(parts: AppParts) -> Self {
        Self(std::sync::Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

pub struct AppParts {
    pub shows: Shows,
    /// Shows as scheduled, for the waiting-room check and the existence check before an
    /// owner (never the owners themselves).
    pub catalog: onsale_eventlog::Catalog,
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
            CommandError::OtherRegion { region } => Self::other_region(Some(&region)),
            CommandError::Internal(m) => Self::internal(&m),
        }
    }
}

impl std::fmt::Debug for AppParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppParts")
            .field("shows", &self.shows)
            .finish_non_exhaustive()
    }
}

pub(super) fn text(field: &str, s: &str, max: usize) -> Result<String, ApiError> {
    let t = s.trim();
    if t.is_empty() || t.chars().count() > max {
        return Err(ShowError::Invalid(format!("{field} must be 1 to {max} characters")).into());
    }
    Ok(t.to_owned())
}

/// A show with a waiting room takes holds and orders only from a live session of the caller
/// (`X-Onsale-Session`); admins (the box office) pass. Nothing below changes: the session only
/// decides who may ask, the seat rules still decide what they get.
pub(super) async fn admitted(
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

/// A request's fingerprint: its route and the request as it was read, written back (serde_json
/// writes a struct's members in their declared order), so key order and spelling do not count.
pub(super) fn fingerprint<T: Serialize>(route: &str, request: &T) -> Result<String, ApiError> {
    let body = serde_json::to_vec(request)
        .map_err(|e| crate::protocol::CommandError::Internal(e.to_string()))?;
    let mut h = Sha256::new();
    h.update(route.as_bytes());
    h.update(b"\n");
    h.update(&body);
    Ok(hex::encode(h.finalize()))
}

pub(super) fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
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
