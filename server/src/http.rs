//! The serve loop of every HTTP listener (the API, gRPC, `/metrics`), in place of
//! `axum::serve`, which exposes none of hyper's builder: a header-read timeout (a slow client
//! cannot hold a connection by trickling its request line), a cap on open connections, HTTP/2
//! stream and keep-alive limits, each connection's peer address for the rate limits, and a
//! graceful stop (no new connections; those open finish their requests).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Connection limits of one process's listeners.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpSettings {
    /// A client must send a request's headers within this long (milliseconds) of starting
    /// them, or of opening the connection; otherwise the connection is closed.
    #[arg(long, env = "ONSALE_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_read_timeout_ms: u64,
    /// Most connections open at once per listener; a connection past it is closed at once.
    #[arg(long, env = "ONSALE_MAX_CONNECTIONS", default_value_t = 50_000)]
    pub max_connections: usize,
    /// Most concurrent HTTP/2 streams (gRPC calls) on one connection.
    #[arg(long, env = "ONSALE_HTTP2_MAX_STREAMS", default_value_t = 256)]
    pub http2_max_streams: u32,
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
            metrics::counter!("onsale_connections_refused_total", "listener" => what).increment(1);
            drop(tcp);
            continue;
        };
        // Small answers must leave at once, not wait on Nagle and the peer's delayed ACK.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "TCP_NODELAY not set");
        }
        let svc =
            router
                .clone()
                .map_request(move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(ConnectInfo(peer));
                    req
                });
        let svc = TowerToHyperService::new(svc);
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(tcp), svc)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A peer that went away mid-request is its own business.
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A request's span in the trace (docs/adr/019): a child of the caller's `traceparent` when it
/// sends one, named by its route. Nothing at all when this process exports no traces.
pub async fn traced(
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
    trace::follow_headers(&span, req.headers());
    let res = next.run(req).instrument(span.clone()).await;
    span.record("http.response.status_code", res.status().as_u16());
    res
}
