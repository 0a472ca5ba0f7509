//! What keeps one process standing under abuse: a cap on long-lived streams (SSE, gRPC
//! streams, the waiting room's), rate limits per account and per client address (GCRA,
//! `governor`), and a bound on how long a request may take. Each refusal is problem+json with
//! `Retry-After`: 503 past a cap or a deadline, 429 past a rate.

use crate::ErrorCode;
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
use ipnet::IpNet;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::Verifier;
use crate::problem::ApiError;

mod rates;
mod shared;
mod streams;

pub use rates::{address_key, RateLimits};
use rates::{Budget, Class};
use shared::{Shared, REFUSED_REMEMBERED};
pub use shared::{MISS_PENALTY, SHARED_TIMEOUT};
pub use streams::{StreamSlot, StreamSlots};

/// The limits of one process (flattened into `onsale serve`'s settings).
#[derive(Debug, Clone, clap::Args)]
pub struct LimitSettings {
    /// Most long-lived streams (SSE, gRPC `StreamDeltas`, the waiting room's) open at once in
    /// this process; past it a new one is answered 503 with `Retry-After`.
    #[arg(long, env = "ONSALE_MAX_STREAMS", default_value_t = 20_000)]
    pub max_streams: usize,
    /// Most waiting-room status streams open at once in this process: slots of their own, so
    /// seat-map streams cannot take the ones fans in a line read their turn through.
    #[arg(long, env = "ONSALE_MAX_QUEUE_STREAMS", default_value_t = 20_000)]
    pub max_queue_streams: usize,
    /// Most streams one client address (an IPv6 client's /64) may have open at once in this
    /// process, of each kind; past it a new one is answered 429 `TOO_MANY_STREAMS` (0: no cap).
    /// Many fans share an address behind a NAT, so this is a ceiling, not one fan's need.
    #[arg(long, env = "ONSALE_MAX_STREAMS_PER_ADDRESS", default_value_t = 500)]
    pub max_streams_per_address: usize,
    /// Most streams one account may have open at once in this process, of each kind (a fan
    /// with a few tabs); past it 429 `TOO_MANY_STREAMS` (0: no cap).
    #[arg(long, env = "ONSALE_MAX_STREAMS_PER_ACCOUNT", default_value_t = 16)]
    pub max_streams_per_account: usize,
    /// Longest a request may take to be answered (a stream: until its first byte), in
    /// milliseconds; past it: 503 `REQUEST_TIMEOUT` with `Retry-After`.
    #[arg(long, env = "ONSALE_REQUEST_TIMEOUT_MS", default_value_t = 10_000)]
    pub request_timeout_ms: u64,
    /// Writes that reach a show (holds, their release, orders, cancellations), joins and
    /// scans per second one account may make (0: no limit).
    #[arg(long, env = "ONSALE_RATE_ACCOUNT_PER_SEC", default_value_t = 10)]
    pub rate_account_per_sec: u32,
    /// How many of them one account may make at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_ACCOUNT_BURST", default_value_t = 20)]
    pub rate_account_burst: u32,
    /// The same writes per second from one client address, counted after the account's own
    /// limit (so a bot's refused requests take nothing from the fans behind its address): a
    /// ceiling for many accounts behind one NAT or proxy (0: no limit). The local stack turns
    /// it off: every simulated fan comes from 127.0.0.1.
    #[arg(long, env = "ONSALE_RATE_ADDRESS_PER_SEC", default_value_t = 200)]
    pub rate_address_per_sec: u32,
    /// How many of them one address may make at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_ADDRESS_BURST", default_value_t = 400)]
    pub rate_address_burst: u32,
    /// An IPv6 client's address is its /64 (what one subscriber is given); the /48 around it
    /// (what one site is given, 65,536 of them) has budgets this many times an address's, for
    /// writes and for reads without a token, so rotating through a /48 buys little (0: none).
    #[arg(long, env = "ONSALE_RATE_PREFIX48_FACTOR", default_value_t = 16)]
    pub rate_prefix48_factor: u32,
    /// Reads without a bearer token (event pages, seat maps, search, SSE and gRPC reads) per
    /// second from one client address: many people behind one NAT browse anonymously, so
    /// this is an address's ceiling, not one person's pace (0: no limit).
    #[arg(long, env = "ONSALE_RATE_READ_ADDRESS_PER_SEC", default_value_t = 100)]
    pub rate_read_address_per_sec: u32,
    /// How many of them one address may make at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_READ_ADDRESS_BURST", default_value_t = 200)]
    pub rate_read_address_burst: u32,
    /// Reads with a bearer token per second per account: one person at a seat map (a map, a
    /// stream, an order's status now and then), so far less than an address's (0: no limit).
    #[arg(long, env = "ONSALE_RATE_READ_ACCOUNT_PER_SEC", default_value_t = 10)]
    pub rate_read_account_per_sec: u32,
    /// How many of them one account may make at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_READ_ACCOUNT_BURST", default_value_t = 30)]
    pub rate_read_account_burst: u32,
    /// Reads answered "not found" per second per caller (its account with a token, else its
    /// address) before the caller's reads are refused for a while (10 s): a
    /// client that keeps naming shows, orders or holds that do not exist is enumerating, and
    /// each miss costs a lookup (0: no limit).
    #[arg(long, env = "ONSALE_RATE_MISSES_PER_SEC", default_value_t = 1)]
    pub rate_misses_per_sec: u32,
    /// How many misses a caller may have at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_MISSES_BURST", default_value_t = 20)]
    pub rate_misses_burst: u32,
    /// The proxies whose `X-Forwarded-For` is believed (addresses or CIDR blocks, comma
    /// separated): the client is the last address of the header that is not one of them. A
    /// header from any other peer is ignored (anyone can write one).
    #[arg(long, env = "ONSALE_TRUSTED_PROXIES", value_delimiter = ',', value_parser = proxy)]
    pub trusted_proxies: Vec<IpNet>,
}

fn proxy(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("{s} is neither an address nor a CIDR block"))
}

/// Whether a request of `method` to `path` (a route's template will do) spends a budget, so
/// may be answered 429: what the OpenAPI document names 429 on.
pub fn budgeted(method: &Method, path: &str) -> bool {
    RateLimits::class(method, path, false, false) != Class::Free
}

/// The client's address as the limits see it (the peer's, or a trusted proxy's
/// `X-Forwarded-For`), put in each request's extensions by [`rate_limit`]: what the stream
/// caps count against.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub IpAddr);

/// The metrics this module counts.
pub mod names {
    pub const STREAMS_REFUSED_TOTAL: &str = "onsale_streams_refused_total";
    pub const RATE_LIMITED_TOTAL: &str = "onsale_rate_limited_total";
    pub const REQUESTS_TIMED_OUT_TOTAL: &str = "onsale_requests_timed_out_total";
    /// Limit checks decided by this node alone because Redis did not answer.
    pub const RATE_LIMIT_FALLBACKS_TOTAL: &str = "onsale_rate_limit_fallbacks_total";
}

fn too_many(wait: Duration, who: &str) -> ApiError {
    metrics::counter!(names::RATE_LIMITED_TOTAL).increment(1);
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::RateLimited,
        format!("too many requests from {who}; retry after the time Retry-After says"),
    )
    .retry_after(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
}

/// Whether a request is gRPC (or gRPC-web): its refusals are gRPC statuses, not problem+json.
fn is_grpc(req: &Request) -> bool {
    req.headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"))
}

/// Middleware: requests past a rate answer 429 (gRPC: `RESOURCE_EXHAUSTED`) before their
/// handler.
///
/// The limits come in an `Arc`: axum clones a middleware's state for every request, and
/// cloning [`RateLimits`] itself (its limiters, its cache's channels) is a dozen atomic
/// operations where this is one.
pub async fn rate_limit(
    State(limits): State<Arc<RateLimits>>,
    req: Request,
    next: Next,
) -> Response {
    let grpc = is_grpc(&req);
    // Read from the request before anything is awaited (a request is not `Sync`).
    let spend = limits.budgets(&req, grpc);
    let mut req = req;
    if let Some(ip) = limits.client(&req) {
        req.extensions_mut().insert(ClientAddress(ip));
    }
    if let Err(e) = limits.check(&spend).await {
        if grpc {
            return e.into_status().into_http();
        }
        return e.into_response();
    }
    let res = next.run(req).await;
    if let Some(m) = &spend.missed {
        if found_nothing(&res) {
            limits.missed(m).await;
        }
    }
    res
}

/// A 404, or gRPC's `NOT_FOUND` (sent in the headers of a trailers-only answer).
fn found_nothing(res: &Response) -> bool {
    res.status() == StatusCode::NOT_FOUND
        || res
            .headers()
            .get("grpc-status")
            .is_some_and(|v| v.as_bytes() == b"5")
}

/// Middleware: a request not answered within the deadline is answered 503 `REQUEST_TIMEOUT`
/// (its handler is dropped; a command already submitted to its show's owner still runs, and
/// its idempotency key gives the same answer on a retry).
pub async fn deadline(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    let grpc = is_grpc(&req);
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(res) => res,
        Err(_) => {
            metrics::counter!(names::REQUESTS_TIMED_OUT_TOTAL).increment(1);
            let e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::RequestTimeout,
                "the request took too long to answer; retry (with the same Idempotency-Key)",
            )
            .retry_after(1);
            if grpc {
                return e.into_status().into_http();
            }
            e.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::rates::prefix48;
    use super::*;

    #[test]
    fn writes_that_reach_a_show_and_anonymous_reads_are_limited() {
        let class =
            |m: Method, p: &str, grpc: bool, auth: bool| RateLimits::class(&m, p, grpc, auth);
        for (m, p) in [
            (Method::POST, "/v1/events/e/holds"),
            (Method::POST, "/v1/events/e/waiting-room"),
            (Method::POST, "/v1/events/e/enter"),
            (Method::POST, "/v1/events/e/heartbeat"),
            (Method::POST, "/v1/events/e/leave"),
            (Method::POST, "/v1/orders"),
            (Method::POST, "/v1/scans"),
            (Method::POST, "/v1/orders/o/cancel"),
            (Method::DELETE, "/v1/holds/h"),
        ] {
            assert_eq!(class(m.clone(), p, false, true), Class::Write, "{m} {p}");
        }
        for (m, p) in [
            (Method::GET, "/v1/events/e"),
            (Method::GET, "/v1/events/e/seats"),
            (Method::GET, "/v1/search?q=x"),
        ] {
            assert_eq!(
                class(m.clone(), p, false, false),
                Class::AnonymousRead,
                "{m} {p}"
            );
            assert_eq!(
                class(m.clone(), p, false, true),
                Class::AccountRead,
                "{m} {p} with a token"
            );
        }
        assert_eq!(
            class(
                Method::POST,
                "/onsale.v1.SeatMaps/StreamDeltas",
                true,
                false
            ),
            Class::AnonymousRead
        );
        for (m, p) in [
            (Method::GET, "/healthz"),
            (Method::GET, "/assets/app.js"),
            (Method::POST, "/v1/webhooks/processor"),
            (Method::GET, "/v1/orders/o"),
            (Method::POST, "/v1/events"),
            (Method::PUT, "/v1/events/e/policy"),
        ] {
            assert_ne!(class(m.clone(), p, false, true), Class::Write, "{m} {p}");
            assert_ne!(
                class(m.clone(), p, false, true),
                Class::AnonymousRead,
                "{m} {p}"
            );
        }
    }

    #[test]
    fn ipv6_clients_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(
            address_key(ip("2001:db8:1:2:aaaa::1")),
            address_key(ip("2001:db8:1:2:ffff:1:2:3")),
            "one /64"
        );
        assert_ne!(
            address_key(ip("2001:db8:1:2::1")),
            address_key(ip("2001:db8:1:3::1"))
        );
        assert_eq!(address_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(address_key(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(
            prefix48(ip("2001:db8:1:2:3:4:5:6")),
            Some(ip("2001:db8:1::"))
        );
        assert_eq!(prefix48(ip("192.0.2.7")), None);
    }

    #[tokio::test]
    async fn a_client_rotating_through_its_ipv6_network_meets_the_48s_budget() {
        let settings = LimitSettings {
            max_streams: 1,
            max_queue_streams: 1,
            max_streams_per_address: 0,
            max_streams_per_account: 0,
            request_timeout_ms: 1,
            rate_account_per_sec: 0,
            rate_account_burst: 0,
            rate_address_per_sec: 0,
            rate_address_burst: 0,
            rate_prefix48_factor: 2,
            rate_read_address_per_sec: 1,
            rate_read_address_burst: 2,
            rate_read_account_per_sec: 0,
            rate_read_account_burst: 0,
            rate_misses_per_sec: 0,
            rate_misses_burst: 0,
            trusted_proxies: Vec::new(),
        };
        let verifier = Verifier::with_defaults("a-secret-of-at-least-32-bytes-long");
        let limits = RateLimits::new(&settings, verifier);
        let read = |peer: &str| {
            let mut r = Request::builder()
                .uri("/v1/events/e")
                .body(axum::body::Body::empty())
                .expect("a request");
            r.extensions_mut()
                .insert(ConnectInfo(std::net::SocketAddr::new(
                    peer.parse().expect("ip"),
                    1,
                )));
            let spend = limits.budgets(&r, false);
            let limits = limits.clone();
            async move { limits.check(&spend).await.is_ok() }
        };
        // An address's burst of two, whatever the last 64 bits say.
        assert!(read("2001:db8:1:1::1").await);
        assert!(read("2001:db8:1:1::2").await);
        assert!(!read("2001:db8:1:1:ffff::9").await, "the same /64");
        // Another /64 of the same /48 has a budget of its own, until the /48's (4) is spent.
        assert!(read("2001:db8:1:2::1").await);
        assert!(read("2001:db8:1:2::2").await);
        assert!(
            !read("2001:db8:1:3::1").await,
            "a third /64 of the /48 meets the network's budget"
        );
        assert!(read("2001:db8:2::1").await, "another /48");
        assert!(read("192.0.2.7").await, "IPv4 has no /48 budget");
    }

    #[test]
    fn forwarded_for_is_believed_only_from_a_trusted_proxy() {
        let settings = |proxies: &str| {
            let mut s = LimitSettings {
                max_streams: 1,
                max_queue_streams: 1,
                max_streams_per_address: 0,
                max_streams_per_account: 0,
                request_timeout_ms: 1,
                rate_account_per_sec: 0,
                rate_account_burst: 0,
                rate_address_per_sec: 0,
                rate_address_burst: 0,
                rate_prefix48_factor: 0,
                rate_read_address_per_sec: 0,
                rate_read_address_burst: 0,
                rate_read_account_per_sec: 0,
                rate_read_account_burst: 0,
                rate_misses_per_sec: 0,
                rate_misses_burst: 0,
                trusted_proxies: Vec::new(),
            };
            s.trusted_proxies = proxies
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|p| proxy(p).expect("a proxy"))
                .collect();
            s
        };
        let verifier = Verifier::with_defaults("a-secret-of-at-least-32-bytes-long");
        let req = |peer: &str, xff: &str| {
            let mut r = Request::builder()
                .uri("/v1/events/e")
                .header("x-forwarded-for", xff)
                .body(axum::body::Body::empty())
                .expect("a request");
            r.extensions_mut().insert(ConnectInfo(
                format!("{peer}:1")
                    .parse::<std::net::SocketAddr>()
                    .expect("addr"),
            ));
            r
        };
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let open = RateLimits::new(&settings(""), verifier.clone());
        assert_eq!(
            open.client(&req("203.0.113.9", "10.0.0.1")),
            Some(ip("203.0.113.9")),
            "an untrusted peer's header is a lie"
        );
        let behind = RateLimits::new(&settings("127.0.0.1,10.1.0.0/16"), verifier);
        assert_eq!(
            behind.client(&req("127.0.0.1", "198.51.100.7, 10.1.2.3")),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(behind.client(&req("127.0.0.1", "")), Some(ip("127.0.0.1")));
        assert_eq!(
            behind.client(&req("203.0.113.9", "198.51.100.7")),
            Some(ip("203.0.113.9"))
        );
    }

    #[test]
    fn a_miss_is_a_404_or_grpcs_not_found() {
        let answer = |status: u16, grpc: Option<&str>| {
            let mut r = Response::builder().status(status);
            if let Some(g) = grpc {
                r = r.header("grpc-status", g);
            }
            r.body(axum::body::Body::empty()).expect("a response")
        };
        assert!(found_nothing(&answer(404, None)));
        assert!(found_nothing(&answer(200, Some("5"))));
        assert!(!found_nothing(&answer(200, Some("0"))));
        assert!(!found_nothing(&answer(200, None)));
        assert!(!found_nothing(&answer(429, None)));
    }

    #[test]
    fn a_stream_past_the_cap_is_refused_until_one_ends() {
        let slots = StreamSlots::new(2, 0, 0);
        let a = slots.open(None, None).expect("first");
        let _b = slots.open(None, None).expect("second");
        let e = slots.open(None, None).expect_err("third");
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.retry_after_secs, Some(5));
        drop(a);
        assert!(slots.open(None, None).is_ok(), "a slot came back");
    }

    #[test]
    fn one_address_or_account_takes_only_its_share_of_the_streams() {
        let slots = StreamSlots::new(100, 3, 2);
        let ip = |s: &str| Some(s.parse::<IpAddr>().expect("an address"));
        // An account: two streams, then 429 wherever it comes from.
        let a1 = slots
            .open(ip("192.0.2.1"), Some("ann"))
            .expect("ann's first");
        let _a2 = slots
            .open(ip("192.0.2.2"), Some("ann"))
            .expect("ann's second");
        let e = slots
            .open(ip("192.0.2.3"), Some("ann"))
            .expect_err("ann's third");
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.code, ErrorCode::TooManyStreams);
        assert_eq!(e.retry_after_secs, Some(5));
        // An address: three streams whatever the accounts, an IPv6 client counted by its /64.
        let _x = slots.open(ip("2001:db8:1:2::1"), None).expect("first");
        let _y = slots
            .open(ip("2001:db8:1:2::2"), Some("bob"))
            .expect("second");
        let _z = slots
            .open(ip("2001:db8:1:2:ffff::9"), Some("cat"))
            .expect("third");
        let e = slots
            .open(ip("2001:db8:1:2::77"), Some("dan"))
            .expect_err("the /64's fourth");
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            slots.open(ip("2001:db8:1:3::1"), None).is_ok(),
            "the next /64 is another client"
        );
        // A refusal took nothing: dan was not counted; ann gets a slot back when one ends.
        assert!(slots.open(ip("198.51.100.1"), Some("dan")).is_ok());
        drop(a1);
        assert!(
            slots.open(ip("198.51.100.2"), Some("ann")).is_ok(),
            "ann's slot came back"
        );
        assert!(
            slots.clients.lock().len() <= 8,
            "closed streams leave no count behind"
        );
    }

    #[test]
    fn counts_of_closed_streams_are_forgotten() {
        let slots = StreamSlots::new(10, 5, 5);
        let ip = "203.0.113.9".parse::<IpAddr>().ok();
        let open: Vec<_> = (0..5)
            .map(|_| slots.open(ip, Some("eve")).expect("a slot"))
            .collect();
        drop(open);
        assert!(slots.clients.lock().is_empty());
    }
}
