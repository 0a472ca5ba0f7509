//! What keeps one process standing under abuse: a cap on long-lived streams (SSE, gRPC
//! streams, the waiting room's), rate limits per account and per client address (GCRA,
//! `governor`), and a bound on how long a request may take. Each refusal is problem+json with
//! `Retry-After`: 503 past a cap or a deadline, 429 past a rate.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::Verifier;
use crate::problem::ApiError;

/// The limits of one process (flattened into `onsale serve`'s settings).
#[derive(Debug, Clone, clap::Args)]
pub struct LimitSettings {
    /// Most long-lived streams (SSE, gRPC `StreamDeltas`, the waiting room's) open at once in
    /// this process; past it a new one is answered 503 with `Retry-After`.
    #[arg(long, env = "ONSALE_MAX_STREAMS", default_value_t = 20_000)]
    pub max_streams: usize,
    /// Longest a request may take to be answered (a stream: until its first byte), in
    /// milliseconds; past it: 503 `REQUEST_TIMEOUT` with `Retry-After`.
    #[arg(long, env = "ONSALE_REQUEST_TIMEOUT_MS", default_value_t = 10_000)]
    pub request_timeout_ms: u64,
    /// Holds, orders, joins and scans per second one account may make (0: no limit).
    #[arg(long, env = "ONSALE_RATE_ACCOUNT_PER_SEC", default_value_t = 10)]
    pub rate_account_per_sec: u32,
    /// How many of them one account may make at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_ACCOUNT_BURST", default_value_t = 20)]
    pub rate_account_burst: u32,
    /// Holds, orders, joins and scans per second from one client address (0: no limit). The
    /// local stack turns it off: every simulated fan comes from 127.0.0.1.
    #[arg(long, env = "ONSALE_RATE_ADDRESS_PER_SEC", default_value_t = 200)]
    pub rate_address_per_sec: u32,
    /// How many of them one address may make at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_ADDRESS_BURST", default_value_t = 400)]
    pub rate_address_burst: u32,
    /// The client's address is the last one of `X-Forwarded-For` (set when onsale runs behind
    /// a proxy that appends it, as the local stack's router does), not the peer's.
    #[arg(long, env = "ONSALE_TRUST_FORWARDED_FOR", default_value_t = false, value_parser = clap::builder::BoolishValueParser::new())]
    pub trust_forwarded_for: bool,
}

/// A per-process cap on open streams: a stream holds a [`StreamSlot`] for as long as it runs.
#[derive(Debug, Clone)]
pub struct StreamSlots {
    slots: Arc<Semaphore>,
}

/// One open stream's share of the cap: dropping it (the stream ending) frees it.
#[derive(Debug)]
pub struct StreamSlot {
    _permit: OwnedSemaphorePermit,
}

impl StreamSlots {
    pub fn new(max: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
        }
    }

    /// A slot for a new stream, or 503 `TOO_MANY_STREAMS` with `Retry-After` when all are
    /// taken.
    pub fn open(&self) -> Result<StreamSlot, ApiError> {
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => Ok(StreamSlot { _permit: permit }),
            Err(_) => {
                metrics::counter!(names::STREAMS_REFUSED_TOTAL).increment(1);
                Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "TOO_MANY_STREAMS",
                    "this server has as many open streams as it serves; retry shortly",
                )
                .retry_after(5))
            }
        }
    }
}

/// The metrics this module counts.
pub mod names {
    pub const STREAMS_REFUSED_TOTAL: &str = "onsale_streams_refused_total";
    pub const RATE_LIMITED_TOTAL: &str = "onsale_rate_limited_total";
    pub const REQUESTS_TIMED_OUT_TOTAL: &str = "onsale_requests_timed_out_total";
}

/// Rate limits per account and per client address on the writes a crowd repeats: holds,
/// orders, joins and scans.
#[derive(Clone)]
pub struct RateLimits {
    accounts: Option<Arc<DefaultKeyedRateLimiter<String>>>,
    addresses: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    verifier: Verifier,
    trust_forwarded_for: bool,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits")
            .field("accounts", &self.accounts.is_some())
            .field("addresses", &self.addresses.is_some())
            .finish_non_exhaustive()
    }
}

fn quota(per_sec: u32, burst: u32) -> Option<Quota> {
    let rate = NonZeroU32::new(per_sec)?;
    let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
    Some(Quota::per_second(rate).allow_burst(burst))
}

impl RateLimits {
    pub fn new(settings: &LimitSettings, verifier: Verifier) -> Self {
        Self {
            accounts: quota(settings.rate_account_per_sec, settings.rate_account_burst)
                .map(|q| Arc::new(RateLimiter::dashmap(q))),
            addresses: quota(settings.rate_address_per_sec, settings.rate_address_burst)
                .map(|q| Arc::new(RateLimiter::dashmap(q))),
            verifier,
            trust_forwarded_for: settings.trust_forwarded_for,
        }
    }

    /// Forgets the keys whose allowance is full again (the maps stay as large as the callers
    /// of the last seconds). Run every few seconds.
    pub fn prune(&self) {
        if let Some(a) = &self.accounts {
            a.retain_recent();
            a.shrink_to_fit();
        }
        if let Some(a) = &self.addresses {
            a.retain_recent();
            a.shrink_to_fit();
        }
    }

    /// Whether a request is one of the rate-limited writes: every route a fan can send to a
    /// show's owner (holds, their release, orders, cancellations), the line's joins and the
    /// gate's scans.
    fn limited(method: &Method, path: &str) -> bool {
        if method == Method::DELETE {
            return path.starts_with("/v1/holds/");
        }
        if method != Method::POST {
            return false;
        }
        if let Some(rest) = path.strip_prefix("/v1/events/") {
            return rest.ends_with("/holds") || rest.ends_with("/waiting-room");
        }
        if let Some(rest) = path.strip_prefix("/v1/orders/") {
            return rest.ends_with("/cancel");
        }
        path == "/v1/orders" || path == "/v1/scans"
    }

    fn client(&self, req: &Request) -> Option<IpAddr> {
        if self.trust_forwarded_for {
            let forwarded = req
                .headers()
                .get_all("x-forwarded-for")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .next_back()
                .and_then(|a| a.trim().parse::<IpAddr>().ok());
            if forwarded.is_some() {
                return forwarded;
            }
        }
        req.extensions()
            .get::<ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip())
    }

    fn check(&self, req: &Request) -> Result<(), ApiError> {
        if let (Some(limiter), Some(ip)) = (&self.addresses, self.client(req)) {
            limiter
                .check_key(&ip)
                .map_err(|n| too_many(n, "this address"))?;
        }
        if let Some(limiter) = &self.accounts {
            let caller = req
                .headers()
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .and_then(|t| self.verifier.verify(t).ok());
            // An unauthenticated request is refused by its handler; only accounts are keyed.
            if let Some(caller) = caller {
                limiter
                    .check_key(&caller.account.as_str().to_owned())
                    .map_err(|n| too_many(n, "this account"))?;
            }
        }
        Ok(())
    }
}

fn too_many(
    not_until: governor::NotUntil<<DefaultClock as Clock>::Instant>,
    who: &str,
) -> ApiError {
    metrics::counter!(names::RATE_LIMITED_TOTAL).increment(1);
    let wait = not_until.wait_time_from(DefaultClock::default().now());
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "RATE_LIMITED",
        format!("too many requests from {who}; retry after the time Retry-After says"),
    )
    .retry_after(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
}

/// Middleware: holds, orders, joins and scans past a rate answer 429 before their handler.
pub async fn rate_limit(State(limits): State<RateLimits>, req: Request, next: Next) -> Response {
    if RateLimits::limited(req.method(), req.uri().path()) {
        if let Err(e) = limits.check(&req) {
            return e.into_response();
        }
    }
    next.run(req).await
}

/// Middleware: a request not answered within the deadline is answered 503 `REQUEST_TIMEOUT`
/// (its handler is dropped; a command already submitted to its show's owner still runs, and
/// its idempotency key gives the same answer on a retry).
pub async fn deadline(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(res) => res,
        Err(_) => {
            metrics::counter!(names::REQUESTS_TIMED_OUT_TOTAL).increment(1);
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "REQUEST_TIMEOUT",
                "the request took too long to answer; retry (with the same Idempotency-Key)",
            )
            .retry_after(1)
            .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_writes_a_crowd_repeats_are_limited() {
        for (m, p) in [
            (Method::POST, "/v1/events/e/holds"),
            (Method::POST, "/v1/events/e/waiting-room"),
            (Method::POST, "/v1/orders"),
            (Method::POST, "/v1/scans"),
            (Method::POST, "/v1/orders/o/cancel"),
            (Method::DELETE, "/v1/holds/h"),
        ] {
            assert!(RateLimits::limited(&m, p), "{m} {p}");
        }
        for (m, p) in [
            (Method::GET, "/v1/events/e/waiting-room"),
            (Method::GET, "/v1/orders/o"),
            (Method::GET, "/v1/holds/h"),
            (Method::POST, "/v1/webhooks/processor"),
        ] {
            assert!(!RateLimits::limited(&m, p), "{m} {p}");
        }
    }

    #[test]
    fn a_stream_past_the_cap_is_refused_until_one_ends() {
        let slots = StreamSlots::new(2);
        let a = slots.open().expect("first");
        let _b = slots.open().expect("second");
        let e = slots.open().expect_err("third");
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.retry_after_secs, Some(5));
        drop(a);
        assert!(slots.open().is_ok(), "a slot came back");
    }
}
