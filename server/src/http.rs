//! The serve loop of every HTTP listener (the API, gRPC, `/metrics`), in place of
//! `axum::serve`, which exposes none of hyper's builder: a header-read timeout (a slow client
//! cannot hold a connection by trickling its request line), a deadline from accept to the
//! first request and an idle deadline between requests (a client that sends nothing, half a
//! preface, or keeps an HTTP/2 connection alive with pings but opens no stream, is let go), a
//! cap on open connections in all and per address, HTTP/2 stream and keep-alive limits, each
//! connection's peer address for the rate limits, and a graceful stop (no new connections;
//! those open finish their requests).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ConnectInfo;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use onsale_edge::limits::address_key;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Connection limits of one process's listeners.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpSettings {
    /// A client must send a request's headers within this long (milliseconds) of starting
    /// them, or of opening the connection (its first request, over HTTP/1 or HTTP/2);
    /// otherwise the connection is closed.
    #[arg(long, env = "ONSALE_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_read_timeout_ms: u64,
    /// A connection with no request under way (no open HTTP/2 stream, no streaming answer)
    /// for this long (milliseconds) is closed; a client opens another when it needs one.
    /// Longer than clients keep idle connections in their pools (hyper's and reqwest's 90 s):
    /// a client that sends on a keep-alive connection the moment the server closes it gets a
    /// reset, so the client should be the one to let go of an idle connection.
    #[arg(long, env = "ONSALE_IDLE_TIMEOUT_MS", default_value_t = 120_000)]
    pub idle_timeout_ms: u64,
    /// Most connections open at once per listener; a connection past it is closed at once.
    #[arg(long, env = "ONSALE_MAX_CONNECTIONS", default_value_t = 50_000)]
    pub max_connections: usize,
    /// Most connections open at once per listener from one address (an IPv6 client's /64);
    /// a connection past it is closed at once, so one machine cannot take the whole cap.
    #[arg(
        long,
        env = "ONSALE_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 2_000
    )]
    pub max_connections_per_address: usize,
    /// Most concurrent HTTP/2 streams (gRPC calls) on one connection.
    #[arg(long, env = "ONSALE_HTTP2_MAX_STREAMS", default_value_t = 256)]
    pub http2_max_streams: u32,
}

/// The open connections of one listener per address.
#[derive(Debug, Default)]
struct PerAddress {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection counted against its address until dropped.
#[derive(Debug)]
struct AddressSlot {
    table: Arc<PerAddress>,
    key: IpAddr,
}

impl PerAddress {
    fn take(table: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<AddressSlot> {
        let key = address_key(ip);
        let mut open = table.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(key).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(AddressSlot {
            table: table.clone(),
            key,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// What one connection is doing, for its deadlines: how many requests are under way (an
/// answer still streaming counts), whether one ever came, and since when none is under way.
#[derive(Debug)]
struct Activity {
    open: AtomicUsize,
    seen: AtomicBool,
    /// Milliseconds from `accepted` to when the last request finished.
    idle_since_ms: AtomicU64,
    accepted: Instant,
    changed: Notify,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            open: AtomicUsize::new(0),
            seen: AtomicBool::new(false),
            idle_since_ms: AtomicU64::new(0),
            accepted: Instant::now(),
            changed: Notify::new(),
        })
    }

    /// A request head arrived: under way until the returned guard drops (with its answer's
    /// body, or when the request is abandoned).
    fn begin(self: &Arc<Self>) -> Underway {
        self.seen.store(true, Ordering::Release);
        self.open.fetch_add(1, Ordering::AcqRel);
        Underway(self.clone())
    }

    /// When the connection is to be closed if nothing happens: `None` while a request is under
    /// way.
    fn deadline(&self, first: Duration, idle: Duration) -> Option<Instant> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        if !self.seen.load(Ordering::Acquire) {
            return Some(self.accepted + first);
        }
        let since = Duration::from_millis(self.idle_since_ms.load(Ordering::Acquire));
        Some(self.accepted + since + idle)
    }
}

/// A request under way on its connection.
#[derive(Debug)]
struct Underway(Arc<Activity>);

impl Drop for Underway {
    fn drop(&mut self) {
        let a = &self.0;
        let since = u64::try_from(a.accepted.elapsed().as_millis()).unwrap_or(u64::MAX);
        a.idle_since_ms.store(since, Ordering::Release);
        a.open.fetch_sub(1, Ordering::AcqRel);
        // A stored permit if the watchdog is not waiting yet: it looks again either way.
        a.changed.notify_one();
    }
}

/// An answer's body that keeps its request under way until it is sent (or dropped).
struct Tracked {
    inner: axum::body::Body,
    _underway: Underway,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `router` on `listener` until `stop`; then waits for the open connections to finish.
pub async fn serve(
    what: &'static str,
    listener: TcpListener,
    router: axum::Router,
    settings: HttpSettings,
    stop: CancellationToken,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(settings.header_read_timeout_ms));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(settings.http2_max_streams)
        .keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(20));
    let builder = Arc::new(builder);
    let open = Arc::new(Semaphore::new(settings.max_connections));
    let per_address = Arc::new(PerAddress::default());
    let first = Duration::from_millis(settings.header_read_timeout_ms);
    let idle = Duration::from_millis(settings.idle_timeout_ms);
    let graceful = GracefulShutdown::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, most likely: let some connections close.
                    tracing::warn!(error = %e, "{what}: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            metrics::counter!("onsale_connections_refused_total", "listener" => what, "why" => "cap").increment(1);
            drop(tcp);
            continue;
        };
        let Some(slot) = PerAddress::take(
            &per_address,
            peer.ip(),
            settings.max_connections_per_address,
        ) else {
            metrics::counter!("onsale_connections_refused_total", "listener" => what, "why" => "address").increment(1);
            drop(tcp);
            continue;
        };
        // Small answers must leave at once, not wait on Nagle and the peer's delayed ACK.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "TCP_NODELAY not set");
        }
        let activity = Activity::new();
        let (router, underway) = (router.clone(), activity.clone());
        let svc = tower::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            let guard = underway.begin();
            let call = router.clone().oneshot(req);
            async move {
                let res = call.await?;
                Ok::<_, Infallible>(res.map(|inner| {
                    axum::body::Body::new(Tracked {
                        inner,
                        _underway: guard,
                    })
                }))
            }
        });
        let svc = TowerToHyperService::new(svc);
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(tcp), svc)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            tokio::pin!(conn);
            loop {
                let deadline = activity.deadline(first, idle);
                tokio::select! {
                    // A peer that went away mid-request is its own business.
                    _ = &mut conn => break,
                    () = activity.changed.notified() => {}
                    () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                        if activity.deadline(first, idle).is_some_and(|d| d <= Instant::now()) {
                            // Dropping the connection closes its socket.
                            metrics::counter!("onsale_connections_idle_closed_total", "listener" => what).increment(1);
                            break;
                        }
                    }
                }
            }
            drop(permit);
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A request's span in the trace (docs/adr/019): a child of the caller's `traceparent` when it
/// sends one (the public's sampled ones within a budget: `trace::Caller`), named by its route.
/// Nothing at all when this process exports no traces.
pub async fn traced(
    axum::extract::State(caller): axum::extract::State<onsale_telemetry::trace::Caller>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use onsale_telemetry::trace;
    use tracing::Instrument;
    if !trace::enabled() {
        return next.run(req).await;
    }
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    let span = tracing::info_span!(
        target: trace::TARGET,
        "http.request",
        otel.name = format!("{} {route}", req.method()),
        otel.kind = "server",
        http.request.method = %req.method(),
        url.path = %req.uri().path(),
        http.response.status_code = tracing::field::Empty,
    );
    trace::follow_headers(&span, req.headers(), caller);
    let res = next.run(req).instrument(span.clone()).await;
    span.record("http.response.status_code", res.status().as_u16());
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_takes_at_most_its_cap_and_gets_places_back() {
        let table = Arc::new(PerAddress::default());
        let ip: IpAddr = "192.0.2.7".parse().expect("an address");
        let other: IpAddr = "192.0.2.8".parse().expect("an address");
        let one = PerAddress::take(&table, ip, 2).expect("first");
        let _two = PerAddress::take(&table, ip, 2).expect("second");
        assert!(PerAddress::take(&table, ip, 2).is_none(), "past the cap");
        assert!(
            PerAddress::take(&table, other, 2).is_some(),
            "another address"
        );
        drop(one);
        assert!(PerAddress::take(&table, ip, 2).is_some(), "a place back");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_has_a_deadline_only_while_nothing_is_under_way() {
        let (first, idle) = (Duration::from_secs(10), Duration::from_secs(60));
        let a = Activity::new();
        let accepted = a.accepted;
        assert_eq!(
            a.deadline(first, idle),
            Some(accepted + first),
            "the first request's"
        );
        let req = a.begin();
        assert_eq!(a.deadline(first, idle), None, "a request under way");
        tokio::time::advance(Duration::from_secs(5)).await;
        drop(req);
        assert_eq!(
            a.deadline(first, idle),
            Some(accepted + Duration::from_secs(5) + idle),
            "idle from the end of the last answer"
        );
    }
}
