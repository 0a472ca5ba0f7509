//! What the command side's parts say to each other and to their callers: a command's answer
//! and error, the reads a command may ask of a show's owner, what a node forwards to the node
//! owning a show and what comes back, the nodes' settings, and the signature a forwarded request
//! carries. A leaf: it imports no other module of the crate, and both the owners (`owner`) and
//! the internal route (`cluster`) import it, so neither imports the other back.

use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use onsale_domain::{
    AccountId, HoldView, OrderId, OrderStatus, OrderView, Show, ShowCommand, ShowError,
};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Why a command got no answer from the domain. Serializable: a command forwarded to the node
/// owning its show comes back with it.
#[derive(Debug, Clone, thiserror::Error, Serialize, Deserialize)]
pub enum CommandError {
    #[error(transparent)]
    Domain(#[from] ShowError),
    #[error("the event store is unavailable")]
    Unavailable,
    #[error("the show's queue is full")]
    Overloaded,
    #[error("this process is shutting down")]
    ShuttingDown,
    /// The show is moving to another shard (docs/adr/022): the retry finds it there.
    #[error("the show is moving to another shard")]
    Moving,
    /// The show's write cluster records another region as its writer (docs/adr/024).
    #[error("writes for the show are taken in region {region}")]
    OtherRegion { region: String },
    #[error("internal error: {0}")]
    Internal(String),
}

impl CommandError {
    /// "Try again": the command may succeed if sent again (to this node later, or another).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unavailable | Self::Overloaded | Self::ShuttingDown | Self::Moving
        )
    }
}

/// What a command answers with, computed from the committed state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Answer {
    Done,
    Hold(HoldView),
    Order(OrderView),
}

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

/// What an answer is signed as: the request's path, marked as its answer (a request's
/// signature never passes for an answer, nor the reverse).
fn answer_path(path: &str) -> String {
    format!("{path}#answer")
}

/// The signature header of the owner's answer (`body`) to the request to `path` signed with
/// `nonce`: the node key over the answer, bound to that request, so nobody between two nodes
/// can change an answer or pass off another request's.
pub fn sign_answer(secret: &str, path: &str, t: i64, nonce: &str, body: &[u8]) -> String {
    sign(secret, &answer_path(path), t, nonce, body)
}

/// Checks an answer to the request to `path` the caller signed with `nonce`.
pub fn verify_answer(
    secret: &str,
    path: &str,
    nonce: &str,
    header: Option<&str>,
    body: &[u8],
    now_ms: i64,
) -> Result<(), Refused> {
    let answered = verify(secret, &answer_path(path), header, body, now_ms)?;
    if answered != nonce {
        return Err(Refused::Mismatch);
    }
    Ok(())
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

    #[test]
    fn an_answer_is_signed_for_its_request_alone() {
        let (path, t, nonce, body) = (
            "/internal/v1/shows/s1/work",
            1_000_000,
            "0123456789abcdef",
            b"{\"Ok\":1}",
        );
        let answer = sign_answer(SECRET, path, t, nonce, body);
        assert_eq!(
            verify_answer(SECRET, path, nonce, Some(&answer), body, t),
            Ok(())
        );
        // Another request's answer, another show's, a changed body, another key, none at all.
        assert_eq!(
            verify_answer(SECRET, path, "fedcba9876543210", Some(&answer), body, t),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            verify_answer(
                SECRET,
                "/internal/v1/shows/s2/work",
                nonce,
                Some(&answer),
                body,
                t
            ),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            verify_answer(SECRET, path, nonce, Some(&answer), b"{\"Ok\":2}", t),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            verify_answer(
                "another-node-secret-of-32-bytes!!!!",
                path,
                nonce,
                Some(&answer),
                body,
                t
            ),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            verify_answer(SECRET, path, nonce, None, body, t),
            Err(Refused::Malformed)
        );
        // A request's signature is not an answer's, nor the reverse.
        let request = sign(SECRET, path, t, nonce, body);
        assert_eq!(
            verify_answer(SECRET, path, nonce, Some(&request), body, t),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            verify(SECRET, path, Some(&answer), body, t),
            Err(Refused::Mismatch)
        );
    }
}
