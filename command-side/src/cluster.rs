//! Many command nodes (docs/adr/011). Every `onsale serve` is a node: it registers in the
//! `nodes` table and keeps itself alive there; a show is decided by the node that claimed it
//! (`show_owners`, an epoch that every append carries: the fence). A command for a show another
//! live node owns is forwarded to that node over HTTP (`POST /internal/v1/shows/{id}/work`,
//! authenticated with the nodes' shared secret) and answered with what the owner answered, so a
//! request that reaches the "wrong" node (the router moved the show, or a client bypassed it)
//! is still answered correctly.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use onsale_domain::{AccountId, OrderId, OrderStatus, Show, ShowCommand, ShowError, ShowId};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::owner::{Answer, CommandError, Shows};

/// How the nodes find each other and decide who owns a show.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterConfig {
    /// A node that has not renewed its registration for this long (milliseconds) is presumed
    /// dead: its shows may be claimed by another node. It renews five times per TTL.
    #[arg(long = "node-ttl-ms", env = "ONSALE_NODE_TTL_MS", default_value = "5000", value_parser = ttl)]
    pub node_ttl: Duration,
    /// The secret the nodes present to each other when they forward a command: at least 32
    /// bytes (required unless development mode is on).
    #[arg(long = "node-secret", env = "ONSALE_NODE_SECRET", default_value = "", hide_default_value = true, value_parser = secret)]
    pub node_secret: SecretString,
    /// Where other nodes reach this one's HTTP API (`host:port`); by default the address it
    /// listens on.
    #[arg(long = "advertise-addr", env = "ONSALE_ADVERTISE_ADDR")]
    pub advertise_addr: Option<String>,
}

fn ttl(s: &str) -> Result<Duration, String> {
    match s.parse::<u64>() {
        Ok(ms) if ms >= 500 => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "{s} is not a number of milliseconds of at least 500"
        )),
    }
}

fn secret(s: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(s))
}

/// A read of a show's authoritative state that a command needs (the payment jobs'): typed, so
/// that it can be asked of the node that owns the show.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ShowQuery {
    /// The order's state, `None` when the show has no such order.
    OrderState(OrderId),
    /// Whether the account (or an admin) may cancel the order now, with the domain's rule.
    Cancellable {
        order: OrderId,
        account: AccountId,
        admin: bool,
    },
}

/// What a [`ShowQuery`] found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Found {
    OrderState(Option<OrderStatus>),
    Cancellable(OrderStatus),
}

impl ShowQuery {
    pub(crate) fn ask(&self, show: &Show) -> Result<Found, ShowError> {
        match self {
            Self::OrderState(order) => Ok(Found::OrderState(show.order(order).map(|o| o.state))),
            Self::Cancellable {
                order,
                account,
                admin,
            } => show
                .cancellable(order, account, *admin)
                .map(|o| Found::Cancellable(o.state)),
        }
    }
}

/// What travels to the owner.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Forwarded {
    Command(ShowCommand),
    Ask(ShowQuery),
}

/// What comes back.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Returned {
    Answer(Answer),
    Found(Found),
}

pub(crate) const SECRET_HEADER: &str = "x-onsale-node-secret";
pub(crate) const WORK_PATH: &str = "/internal/v1/shows/{id}/work";

fn digest(s: &[u8]) -> [u8; 32] {
    Sha256::digest(s).into()
}

/// The route other nodes forward commands to. It never forwards again: a node that does not
/// own the show either (it changed hands meanwhile) answers 503 and the first node's caller
/// retries.
pub fn router(shows: Shows) -> Router {
    Router::new()
        .route(WORK_PATH, post(work))
        .layer(axum::extract::DefaultBodyLimit::max(256 * 1024))
        .with_state(shows)
}

async fn work(
    State(shows): State<Shows>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Forwarded>,
) -> Response {
    let presented = headers
        .get(SECRET_HEADER)
        .map(|v| digest(v.as_bytes()))
        .unwrap_or_default();
    let expected = digest(shows.cluster().node_secret.expose_secret().as_bytes());
    if presented != expected {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Ok(show) = id.parse::<ShowId>() else {
        return StatusCode::UNPROCESSABLE_ENTITY.into_response();
    };
    let result: Result<Returned, CommandError> = shows.run_forwarded(show, body).await;
    Json(result).into_response()
}
