//! Cross-origin requests: a page served from another origin than onsale's (a fan app on its
//! own domain, a development server) may call the REST API, the SSE streams and gRPC-web only
//! from the origins an operator lists. None by default; in development mode (the local stack),
//! the pages of the REST listener itself (the fan app at `/` calls gRPC-web on the gRPC port,
//! another origin) and of the front end's development server (`http://localhost:5173`).
//! Credentials travel as a bearer token in a header, never as cookies: no
//! `Access-Control-Allow-Credentials`.

use std::time::Duration;

use axum::http::{header, HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Which other origins may call onsale from a browser.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CorsSettings {
    /// Origins (`scheme://host[:port]`, comma-separated) whose pages may call the API, its
    /// streams and gRPC-web (list the REST origin itself when the fan app it serves calls
    /// gRPC-web). Empty: none; in development mode, the REST listener's own origin and the
    /// front end's development server's.
    #[arg(long, env = "ONSALE_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,
}

/// What development mode allows when no origin is listed, beside the REST listener's own
/// origin: the front end's development server.
pub const DEV_ORIGINS: [&str; 2] = ["http://localhost:5173", "http://127.0.0.1:5173"];

/// The request headers a page may send: the API's (docs/api.md: the waiting room's queue token and
/// session among them), SSE's resume, and gRPC-web's.
const ALLOWED_HEADERS: [&str; 11] = [
    "authorization",
    "content-type",
    "idempotency-key",
    "x-onsale-session",
    "x-onsale-queue-token",
    "last-event-id",
    "x-grpc-web",
    "x-user-agent",
    "grpc-timeout",
    "connect-protocol-version",
    "connect-timeout-ms",
];

/// The response headers a page may read: gRPC-web's status in headers (a call that fails
/// before any message), where a created resource is, and when to come back.
const EXPOSED_HEADERS: [&str; 6] = [
    "grpc-status",
    "grpc-message",
    "grpc-status-details-bin",
    "location",
    "retry-after",
    "x-request-id",
];

impl CorsSettings {
    /// The layer for the listed origins (or development's), `None` when no origin may call:
    /// then a browser's preflight is refused and no response carries CORS headers.
    /// `rest` is where the REST listener listens (its own origin, in development mode).
    pub fn layer(
        &self,
        dev_mode: bool,
        rest: std::net::SocketAddr,
    ) -> anyhow::Result<Option<CorsLayer>> {
        let listed: Vec<String> = self
            .cors_origins
            .iter()
            .map(|o| o.trim().to_owned())
            .filter(|o| !o.is_empty())
            .collect();
        let origins: Vec<String> = match (listed.is_empty(), dev_mode) {
            (false, _) => listed,
            (true, true) => {
                let mut own = vec![format!("http://{rest}")];
                if rest.ip().is_loopback() {
                    own.push(format!("http://localhost:{}", rest.port()));
                }
                own.into_iter()
                    .chain(DEV_ORIGINS.map(String::from))
                    .collect()
            }
            (true, false) => return Ok(None),
        };
        let origins = origins
            .iter()
            .map(|o| origin(o))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Some(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(origins))
                .allow_methods([
                    Method::GET,
                    Method::POST,
                    Method::PUT,
                    Method::DELETE,
                    Method::OPTIONS,
                ])
                .allow_headers(ALLOWED_HEADERS.map(HeaderName::from_static))
                .expose_headers(EXPOSED_HEADERS.map(HeaderName::from_static))
                .max_age(Duration::from_secs(600))
                .vary([header::ORIGIN]),
        ))
    }
}

/// One allowed origin, checked: a scheme (http or https), a host, a port perhaps, nothing
/// else (a path, `*` or `null` is refused: the list names pages, it does not open the API).
fn origin(o: &str) -> anyhow::Result<HeaderValue> {
    let bad =
        || anyhow::anyhow!("ONSALE_CORS_ORIGINS: {o:?} is not an origin (scheme://host[:port])");
    let rest = o
        .strip_prefix("https://")
        .or_else(|| o.strip_prefix("http://"))
        .ok_or_else(bad)?;
    let host = rest.rsplit_once(':').map_or(rest, |(host, port)| {
        if port.parse::<u16>().is_ok() {
            host
        } else {
            rest
        }
    });
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':'));
    if !host_ok || rest.contains('/') || rest.contains('@') {
        return Err(bad());
    }
    HeaderValue::from_str(o).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_scheme_host_and_port_only() {
        for good in [
            "https://fans.example",
            "http://127.0.0.1:5173",
            "https://tickets.example.com:8443",
            "http://[::1]:8080",
        ] {
            assert!(origin(good).is_ok(), "{good}");
        }
        for bad in [
            "*",
            "null",
            "fans.example",
            "https://fans.example/",
            "https://fans.example/app",
            "ftp://fans.example",
            "https://user@fans.example",
            "https://",
            "https://fans example",
        ] {
            assert!(origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn none_by_default_and_the_development_server_in_development_mode() {
        let rest: std::net::SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        let none = CorsSettings::default();
        assert!(none.layer(false, rest).expect("layer").is_none());
        assert!(none.layer(true, rest).expect("layer").is_some());
        let listed = CorsSettings {
            cors_origins: vec!["https://fans.example".into()],
        };
        assert!(listed.layer(false, rest).expect("layer").is_some());
        let wildcard = CorsSettings {
            cors_origins: vec!["*".into()],
        };
        assert!(
            wildcard.layer(false, rest).is_err(),
            "a wildcard is refused"
        );
    }
}
