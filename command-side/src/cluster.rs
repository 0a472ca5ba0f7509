//! Many command nodes (docs/adr/011). Every `onsale serve` is a node: it registers in the
//! `nodes` table and keeps itself alive there; a show is decided by the node that claimed it
//! (`show_owners`, an epoch that every append carries: the fence). A command for a show another
//! live node owns is forwarded to that node over HTTP (`POST /internal/v1/shows/{id}/work`)
//! and answered with what the owner answered, so a request that reaches the "wrong" node (the
//! router moved the show, or a client bypassed it) is still answered correctly.
//!
//! The route is served on an internal listener of its own (`--internal-listen`), never on the
//! public one. Each request is signed (`x-onsale-node-signature: t=<unix ms>,n=<nonce>,v1=<hex
//! HMAC-SHA256 of method, path, t, nonce and body under the nodes' secret>`), and the
//! signature is checked before the body is parsed: older or newer than [`WINDOW`] is refused,
//! and a nonce seen within the window is refused (a replay). Only what forwarding carries is
//! accepted: a fan's or admin's command, a payment outcome, a query; never a show's schedule
//! or the sweeper's expiry, which only ever run on the node that decides them.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use hmac::{Hmac, KeyInit, Mac};
use onsale_domain::{AccountId, OrderId, OrderStatus, Show, ShowCommand, ShowError, ShowId};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

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
    /// Where this node listens for the commands other nodes forward to it: an internal
    /// address, not the public one (port 0: any free port).
    #[arg(
        long = "internal-listen",
        env = "ONSALE_INTERNAL_LISTEN",
        default_value = "127.0.0.1:0"
    )]
    pub internal_listen: String,
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

pub(crate) const SIGNATURE_HEADER: &str = "x-onsale-node-signature";
pub const WORK_PATH: &str = "/internal/v1/shows/{id}/work";
/// How far a signed request's time may be from the receiver's.
pub const WINDOW: Duration = Duration::from_secs(30);

fn mac(secret: &str, path: &str, t: i64, nonce: &str, body: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes keys of any length");
    for part in ["POST", path, &t.to_string(), nonce] {
        m.update(part.as_bytes());
        m.update(b"\n");
    }
    m.update(body);
    m
}

/// The signature header of a forwarded request to `path` with `body`, at `t` (unix ms).
pub fn sign(secret: &str, path: &str, t: i64, nonce: &str, body: &[u8]) -> String {
    let v1 = hex::encode(mac(secret, path, t, nonce, body).finalize().into_bytes());
    format!("t={t},n={nonce},v1={v1}")
}

/// Why a forwarded request was refused before its body was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("no signature, or a malformed one")]
    Malformed,
    #[error("the signature does not match")]
    Mismatch,
    #[error("signed too long ago or in the future")]
    Stale,
    #[error("this signature was used already")]
    Replayed,
}

/// Checks a forwarded request's signature (in constant time) and its time; the nonce is
/// checked by the caller, once the MAC proved it is the sender's.
pub fn verify(
    secret: &str,
    path: &str,
    header: Option<&str>,
    body: &[u8],
    now_ms: i64,
) -> Result<String, Refused> {
    let (mut t, mut nonce, mut v1) = (None, None, None);
    for part in header.ok_or(Refused::Malformed)?.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("n", v)) if (16..=64).contains(&v.len()) => nonce = Some(v.to_owned()),
            Some(("v1", v)) => v1 = hex::decode(v).ok(),
            _ => {}
        }
    }
    let (Some(t), Some(nonce), Some(v1)) = (t, nonce, v1) else {
        return Err(Refused::Malformed);
    };
    mac(secret, path, t, &nonce, body)
        .verify_slice(&v1)
        .map_err(|_| Refused::Mismatch)?;
    if (now_ms - t).unsigned_abs() > WINDOW.as_millis() as u64 {
        return Err(Refused::Stale);
    }
    Ok(nonce)
}

/// What the route needs: the owners, and the nonces seen within the window.
#[derive(Clone, Debug)]
struct Internal {
    shows: Shows,
    seen: moka::sync::Cache<String, ()>,
}

/// The route other nodes forward commands to. It never forwards again: a node that does not
/// own the show either (it changed hands meanwhile) answers 503 and the first node's caller
/// retries.
pub fn router(shows: Shows) -> Router {
    let seen = moka::sync::Cache::builder()
        .max_capacity(1_000_000)
        .time_to_live(WINDOW * 2)
        .build();
    Router::new()
        .route(WORK_PATH, post(work))
        .layer(axum::extract::DefaultBodyLimit::max(256 * 1024))
        .with_state(Internal { shows, seen })
}

fn refused(why: Refused) -> Response {
    metrics::counter!(onsale_telemetry::metrics::FORWARDS_REFUSED_TOTAL).increment(1);
    tracing::warn!(%why, "a forwarded request was refused");
    (StatusCode::UNAUTHORIZED, why.to_string()).into_response()
}

async fn work(
    State(internal): State<Internal>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = WORK_PATH.replace("{id}", &id);
    let header = headers.get(SIGNATURE_HEADER).and_then(|v| v.to_str().ok());
    let secret = internal.shows.cluster().node_secret.expose_secret();
    let now = chrono::Utc::now().timestamp_millis();
    let nonce = match verify(secret, &path, header, &body, now) {
        Ok(n) => n,
        Err(why) => return refused(why),
    };
    if internal.seen.contains_key(&nonce) {
        return refused(Refused::Replayed);
    }
    internal.seen.insert(nonce, ());
    let Ok(show) = id.parse::<ShowId>() else {
        return StatusCode::UNPROCESSABLE_ENTITY.into_response();
    };
    let Ok(work) = serde_json::from_slice::<Forwarded>(&body) else {
        return StatusCode::UNPROCESSABLE_ENTITY.into_response();
    };
    if !work.forwardable() {
        return (
            StatusCode::FORBIDDEN,
            "only a node's own owner schedules a show or expires its holds",
        )
            .into_response();
    }
    let result: Result<Returned, CommandError> = internal.shows.run_forwarded(show, work).await;
    Json(result).into_response()
}

impl Forwarded {
    /// What forwarding carries: never a schedule (the node that schedules a show owns it) nor
    /// the sweeper's expiry (run by the owner itself).
    fn forwardable(&self) -> bool {
        !matches!(
            self,
            Self::Command(ShowCommand::Schedule { .. } | ShowCommand::ExpireHolds { .. })
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "a-node-secret-of-at-least-32-bytes!!";

    #[test]
    fn a_signature_binds_path_body_time_and_nonce() {
        let (path, body, t) = ("/internal/v1/shows/s/work", b"{}".as_slice(), 1_000_000);
        let nonce = "0123456789abcdef";
        let h = sign(SECRET, path, t, nonce, body);
        assert_eq!(
            verify(SECRET, path, Some(&h), body, t + 5_000),
            Ok(nonce.to_owned())
        );
        assert_eq!(
            verify(SECRET, path, Some(&h), b"{ }", t),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            verify(SECRET, "/internal/v1/shows/x/work", Some(&h), body, t),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            verify(
                "another-secret-of-at-least-32-bytes!",
                path,
                Some(&h),
                body,
                t
            ),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            verify(SECRET, path, Some(&h), body, t + 31_000),
            Err(Refused::Stale)
        );
        assert_eq!(
            verify(SECRET, path, Some(&h), body, t - 31_000),
            Err(Refused::Stale)
        );
        assert_eq!(verify(SECRET, path, None, body, t), Err(Refused::Malformed));
        let other_nonce = h.replace(nonce, "fedcba9876543210");
        assert_eq!(
            verify(SECRET, path, Some(&other_nonce), body, t),
            Err(Refused::Mismatch)
        );
    }
}
