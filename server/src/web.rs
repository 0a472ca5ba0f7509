//! The browser's side of `onsale serve`: the fan app at `/` and the ops console at `/ops`
//! (one built front end, `web/`, served from `ONSALE_WEB_DIR`; nothing from a CDN), and in
//! development mode only, the sign-in that mints a token for the local stack.

use onsale_edge::ErrorCode;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use onsale_domain::AccountId;
use onsale_edge::auth::{Gates, Role, Verifier};
use onsale_edge::problem::ApiError;
use onsale_edge::AuthSettings;
use serde::{Deserialize, Serialize};
use tower_http::services::ServeDir;
use tower_http::set_header::SetResponseHeaderLayer;

/// The routes of this module in the OpenAPI document.
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    paths(alerts, ops_metrics),
    components(schemas(AlertRules, AlertRule, ActiveAlert))
)]
pub struct WebDoc;

/// The development sign-in in the OpenAPI document (development mode only, as the route).
#[derive(Debug, utoipa::OpenApi)]
#[openapi(paths(dev_token), components(schemas(DevSignIn, DevToken, Role)))]
pub struct DevDoc;

/// Where the built front end is.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WebSettings {
    /// The built fan app and ops console (`web/dist`, built by `npm run build` in `web/`):
    /// served at `/` and `/ops`, their assets under `/assets/`. Unset: no pages are served.
    #[arg(long, env = "ONSALE_WEB_DIR")]
    pub web_dir: Option<PathBuf>,
    /// Where browsers reach gRPC-web, when not on the page's own host at the gRPC listener's
    /// port (behind a proxy, another name): `https://grpc.tickets.example`.
    #[arg(long, env = "ONSALE_PUBLIC_GRPC_WEB_URL")]
    pub public_grpc_web_url: Option<String>,
    /// The Prometheus that scrapes this process with the alerting rules of telemetry/alerts
    /// loaded (`http://127.0.0.1:9090`): the ops console asks it which alerts fire
    /// (`GET /v1/ops/alerts`, admins). Unset: the console says no Prometheus is configured.
    #[arg(long, env = "ONSALE_PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,
}

/// How long a development token lives: a sitting at the local stack.
const DEV_TOKEN_SECS: u64 = 8 * 3600;

impl WebSettings {
    /// The pages' routes, and in development mode the sign-in; an unset directory serves no
    /// page, a directory without the built app stops the process with what to do.
    /// `grpc` is where the gRPC listener listens (the page is told its port); `verifier` is
    /// the process's (its provider's keys shared).
    pub fn routes(
        &self,
        auth: &AuthSettings,
        verifier: &Verifier,
        grpc: SocketAddr,
    ) -> anyhow::Result<Router> {
        let mut router = Router::new();
        if let Some(dir) = &self.web_dir {
            let grpc_web = match &self.public_grpc_web_url {
                Some(url) => url.clone(),
                None => format!(":{}", grpc.port()),
            };
            router = router.merge(pages(dir, &grpc_web)?);
        }
        router = router.merge(
            Router::new()
                .route("/v1/ops/alerts", get(alerts))
                .route("/v1/ops/metrics", get(ops_metrics))
                .with_state(Alerts {
                    verifier: verifier.clone(),
                    prometheus: self.prometheus_url.clone(),
                    http: reqwest::Client::builder()
                        .timeout(std::time::Duration::from_secs(3))
                        .build()?,
                }),
        );
        if auth.dev_mode {
            router = router.merge(
                Router::new()
                    .route("/v1/dev/token", post(dev_token))
                    .with_state(auth.clone()),
            );
        }
        Ok(router)
    }
}

/// The page (told where gRPC-web is: `%ONSALE_GRPC_WEB%` in index.html), the API reference
/// (docs.html at `/docs`: Redoc drawing `/openapi.json`) and their assets.
fn pages(dir: &Path, grpc_web: &str) -> anyhow::Result<Router> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).map_err(|e| {
            anyhow::anyhow!(
                "ONSALE_WEB_DIR: {} cannot be read ({e}); build the front end first (`make web`)",
                path.display()
            )
        })
    };
    let page = read("index.html")?.replace("%ONSALE_GRPC_WEB%", &html_attr(grpc_web));
    let serve = |page: String| {
        let page = std::sync::Arc::new(page);
        move || {
            let page = page.clone();
            async move {
                (
                    [
                        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                        // A page names its assets by content hash: it is revalidated, they are not.
                        (header::CACHE_CONTROL, "no-cache"),
                    ],
                    page.as_str().to_owned(),
                )
            }
        }
    };
    let serve_page = serve(page);
    let csp = HeaderValue::from_str(&app_csp(grpc_web))?;
    let app = |route| {
        get(route).layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            csp.clone(),
        ))
    };
    Ok(Router::new()
        .route("/", app(serve_page.clone()))
        .route("/ops", app(serve_page))
        .route(
            "/docs",
            get(serve(read("docs.html")?)).layer(SetResponseHeaderLayer::overriding(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(DOCS_CSP),
            )),
        )
        .nest_service(
            "/assets",
            tower::ServiceBuilder::new()
                .layer(SetResponseHeaderLayer::overriding(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=31536000, immutable"),
                ))
                .service(ServeDir::new(dir.join("assets"))),
        ))
}

/// The fan app's and the ops console's policy (issue 53, item 11): scripts, styles, workers
/// and everything else from this server only (no inline script, no eval), images from it or
/// `data:`, calls to it and to gRPC-web (`grpc_web`: ":PORT" on the page's host, or a URL),
/// never framed by another page.
fn app_csp(grpc_web: &str) -> String {
    let grpc = match grpc_web.strip_prefix(':') {
        Some(port) => format!("http://*:{port} https://*:{port}"),
        None => match grpc_web.split_once("://") {
            Some((scheme, rest)) => {
                let host = rest
                    .split(['/', '?', '#', '"', ' ', ';', ','])
                    .next()
                    .unwrap_or("");
                format!("{scheme}://{host}")
            }
            None => String::new(),
        },
    };
    format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self' {grpc}; worker-src 'self'; object-src 'none'; base-uri 'none'; \
         form-action 'self'; frame-ancestors 'none'"
    )
}

/// The API reference: Redoc's bundle from this server, its inline styles, its search in a blob
/// worker, nothing from elsewhere (its attribution logo on a CDN is refused).
const DOCS_CSP: &str = "default-src 'self'; script-src 'self'; worker-src blob:; img-src 'self' data:; style-src 'self' 'unsafe-inline'; font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Text safe inside a double-quoted HTML attribute.
fn html_attr(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The development sign-in's request: who to be, and as what.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DevSignIn {
    /// The account id (visible ASCII, 1 to 128 characters).
    #[schema(example = "ann")]
    sub: String,
    /// `fan` when absent.
    #[serde(default = "fan")]
    #[schema(required = false)]
    role: Role,
    /// Sign the `verified` claim (a verified account with a payment history); false when
    /// absent.
    #[serde(default)]
    #[schema(required = false)]
    verified: bool,
    /// A scanner's venue: it admits tickets of that venue's shows only (a scanner names its
    /// venue or its shows).
    #[serde(default)]
    #[schema(required = false)]
    venue: Option<String>,
    /// A scanner's shows: it admits tickets of these shows only.
    #[serde(default)]
    #[schema(required = false)]
    shows: Vec<String>,
}

fn fan() -> Role {
    Role::Fan
}

/// A bearer token for the local stack.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DevToken {
    token: String,
    sub: String,
    role: Role,
    verified: bool,
    #[serde(rename = "expiresInSeconds")]
    expires_in_seconds: u64,
}

/// `POST /v1/dev/token {sub, role?, verified?}`: a token for the local stack (development mode only; the
/// route does not exist otherwise).
#[utoipa::path(post, path = "/v1/dev/token", request_body = DevSignIn,
    description = "A bearer token for the local stack, for whoever asks: served in development mode (ONSALE_DEV_MODE) only; the route and this entry do not exist otherwise.",
    responses((status = 201, body = DevToken),
        (status = 422, description = "The body is not a sign-in, or its sub is not an account id (INVALID_REQUEST)")))]
async fn dev_token(
    State(auth): State<AuthSettings>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: axum::http::HeaderMap,
    body: Result<Json<DevSignIn>, axum::extract::rejection::JsonRejection>,
) -> Response {
    // Tokens for whoever asks, so only from this machine: a development stack reachable from
    // a network must not hand out admin tokens to it. A proxy on this machine connects from
    // loopback for anyone it serves: a request it forwarded (it says so) is refused too.
    let forwarded = ["forwarded", "x-forwarded-for", "x-real-ip"]
        .iter()
        .any(|h| headers.contains_key(*h));
    if forwarded || !peer.is_some_and(|p| p.0 .0.ip().is_loopback()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::DevTokenLoopbackOnly,
            "development tokens are handed out to this machine only",
        )
        .into_response();
    }
    let Json(body) = match body {
        Ok(b) => b,
        Err(e) => {
            return ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidRequest,
                e.body_text(),
            )
            .into_response()
        }
    };
    if let Err(e) = AccountId::parse(&body.sub) {
        return ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::InvalidRequest,
            e.to_string(),
        )
        .into_response();
    }
    let gates = match (body.role, body.venue, body.shows) {
        (Role::Scanner, _, shows) if !shows.is_empty() => Some(Gates::Shows(shows)),
        (Role::Scanner, Some(venue), _) => Some(Gates::Venue(venue)),
        (Role::Scanner, None, _) => {
            return ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidRequest,
                "a scanner names the venue or the shows it admits (venue, shows)",
            )
            .into_response()
        }
        _ => None,
    };
    let ttl = DEV_TOKEN_SECS.min(auth.max_lifetime_secs(body.role));
    match auth.mint(&body.sub, body.role, body.verified, gates.as_ref(), ttl) {
        Ok(token) => (
            StatusCode::CREATED,
            Json(DevToken {
                token,
                sub: body.sub,
                role: body.role,
                verified: body.verified,
                expires_in_seconds: ttl,
            }),
        )
            .into_response(),
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            e.to_string(),
        )
        .into_response(),
    }
}

#[derive(Clone)]
struct Alerts {
    verifier: Verifier,
    prometheus: Option<String>,
    http: reqwest::Client,
}

/// One alerting rule as the console shows it: its state in Prometheus (`inactive`, `pending`,
/// `firing`), its severity, and what each firing instance says.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertRule {
    name: String,
    state: String,
    severity: String,
    active: Vec<ActiveAlert>,
}

/// A firing or pending instance of an alerting rule.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActiveAlert {
    state: String,
    summary: String,
    active_at: Option<String>,
}

/// The rules and their states, as the console reads them.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AlertRules {
    rules: Vec<AlertRule>,
}

/// `GET /v1/ops/alerts` (admin): every alerting rule the configured Prometheus evaluates and
/// its state, from its `/api/v1/rules`. 404 NOT_CONFIGURED without one; 503 with Retry-After
/// when it does not answer.
#[utoipa::path(get, path = "/v1/ops/alerts", security(("bearer" = [])),
    description = "Every alerting rule of telemetry/alerts the configured Prometheus (ONSALE_PROMETHEUS_URL) evaluates, with its state (inactive, pending, firing) and what each active alert says (admins).",
    responses((status = 200, body = AlertRules),
        (status = 404, description = "NOT_CONFIGURED: no Prometheus is configured"),
        (status = 503, description = "UNAVAILABLE: Prometheus does not answer; retry after Retry-After")))]
async fn alerts(State(a): State<Alerts>, headers: axum::http::HeaderMap) -> Response {
    if let Err(e) = admin(&a, &headers).await {
        return e.into_response();
    }
    let Some(base) = &a.prometheus else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotConfigured,
            "no Prometheus is configured (ONSALE_PROMETHEUS_URL)",
        )
        .into_response();
    };
    let url = format!("{}/api/v1/rules?type=alert", base.trim_end_matches('/'));
    let body: serde_json::Value = match a.http.get(&url).send().await {
        Ok(r) if r.status().is_success() => match r.json().await {
            Ok(b) => b,
            Err(e) => return unavailable(&e.to_string()),
        },
        Ok(r) => return unavailable(&format!("Prometheus answered {}", r.status())),
        Err(e) => return unavailable(&e.to_string()),
    };
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let rules: Vec<AlertRule> = body["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .map(|r| AlertRule {
            name: text(&r["name"]),
            state: text(&r["state"]),
            severity: text(&r["labels"]["severity"]),
            active: r["alerts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|x| ActiveAlert {
                    state: text(&x["state"]),
                    summary: text(&x["annotations"]["summary"]),
                    active_at: x["activeAt"].as_str().map(str::to_owned),
                })
                .collect(),
        })
        .collect();
    Json(AlertRules { rules }).into_response()
}

/// The caller is an admin (a bearer token of that role), or the refusal to answer.
async fn admin(a: &Alerts, headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthenticated,
                "a bearer token is required",
            )
        })?;
    a.verifier
        .verify_fresh(token)
        .await?
        .require(&[Role::Admin])
}

/// `GET /v1/ops/metrics` (admin): this process's metrics, as its operators' `/metrics` serves
/// them (the public listener serves no `/metrics` by default): what the ops console draws.
#[utoipa::path(get, path = "/v1/ops/metrics", security(("bearer" = [])),
    description = "This process's metrics in Prometheus's text format (admins): what the ops console draws. Operators scrape the operators' listener (ONSALE_METRICS_LISTEN) instead.",
    responses((status = 200, content_type = "text/plain", body = String)))]
async fn ops_metrics(State(a): State<Alerts>, headers: axum::http::HeaderMap) -> Response {
    if let Err(e) = admin(&a, &headers).await {
        return e.into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        onsale_telemetry::metrics()
            .map(|h| h.render())
            .unwrap_or_default(),
    )
        .into_response()
}

fn unavailable(why: &str) -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Unavailable,
        format!("Prometheus does not answer: {why}"),
    )
    .retry_after(5)
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use clap::Parser;
    use tower::ServiceExt;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        auth: AuthSettings,
    }

    fn auth(dev: bool) -> AuthSettings {
        let mut args = vec!["t", "--jwt-secret", "a-test-secret-of-at-least-32-bytes!!"];
        if dev {
            args.push("--dev-mode");
        }
        Args::parse_from(args).auth
    }

    const GRPC: &str = "127.0.0.1:50999";

    async fn call(router: &Router, method: &str, uri: &str, body: &str) -> (StatusCode, Response) {
        call_from(router, "127.0.0.1:40000", method, uri, body).await
    }

    async fn call_from(
        router: &Router,
        peer: &str,
        method: &str,
        uri: &str,
        body: &str,
    ) -> (StatusCode, Response) {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(Body::from(body.to_owned()))
            .expect("request");
        req.extensions_mut().insert(axum::extract::ConnectInfo(
            peer.parse::<std::net::SocketAddr>().expect("a peer"),
        ));
        let r = router.clone().oneshot(req).await.expect("answer");
        (r.status(), r)
    }

    async fn text(r: Response) -> String {
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 20)
            .await
            .expect("body");
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[tokio::test]
    async fn the_development_sign_in_exists_only_in_development_mode() {
        let grpc = GRPC.parse().expect("addr");
        let prod = WebSettings::default()
            .routes(&auth(false), &auth(false).verifier(), grpc)
            .expect("routes");
        let (status, _) = call(&prod, "POST", "/v1/dev/token", r#"{"sub":"ann"}"#).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        let dev_auth = auth(true);
        let dev = WebSettings::default()
            .routes(&dev_auth, &dev_auth.verifier(), grpc)
            .expect("routes");
        let (status, r) = call(
            &dev,
            "POST",
            "/v1/dev/token",
            r#"{"sub":"ann","role":"admin"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::CREATED);
        let body: serde_json::Value = serde_json::from_str(&text(r).await).expect("json");
        let caller = dev_auth
            .verifier()
            .verify(body["token"].as_str().expect("token"))
            .expect("the token verifies");
        assert_eq!(caller.account.as_str(), "ann");
        assert_eq!(caller.role, Role::Admin);
        for bad in [
            r#"{"sub":""}"#,
            r#"{"sub":"has space"}"#,
            r#"{"sub":"a","role":"root"}"#,
            "{",
        ] {
            let (status, _) = call(&dev, "POST", "/v1/dev/token", bad).await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        }
        // Only to this machine: a peer on a network gets no token.
        let (status, _) = call_from(
            &dev,
            "192.0.2.10:40000",
            "POST",
            "/v1/dev/token",
            r#"{"sub":"ann","role":"admin"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        // Nor through a proxy on this machine (it connects from loopback for anyone).
        for header in ["x-forwarded-for", "forwarded", "x-real-ip"] {
            let mut req = Request::builder()
                .method("POST")
                .uri("/v1/dev/token")
                .header("content-type", "application/json")
                .header(header, "203.0.113.9")
                .body(Body::from(r#"{"sub":"ann","role":"admin"}"#))
                .expect("request");
            req.extensions_mut().insert(axum::extract::ConnectInfo(
                "127.0.0.1:40000"
                    .parse::<std::net::SocketAddr>()
                    .expect("a peer"),
            ));
            let r = dev.clone().oneshot(req).await.expect("answer");
            assert_eq!(r.status(), StatusCode::FORBIDDEN, "{header}");
        }
    }

    #[tokio::test]
    async fn the_pages_name_where_grpc_web_is_and_their_assets_are_cached_for_good() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(
            dir.path().join("index.html"),
            r#"<meta name="onsale-grpc-web" content="%ONSALE_GRPC_WEB%">"#,
        )
        .expect("index");
        std::fs::write(
            dir.path().join("docs.html"),
            "<title>onsale API reference</title>",
        )
        .expect("docs");
        std::fs::create_dir(dir.path().join("assets")).expect("assets");
        std::fs::write(dir.path().join("assets/app-1.js"), "console.log(1)").expect("asset");
        let grpc = GRPC.parse().expect("addr");
        let web = WebSettings {
            web_dir: Some(dir.path().to_owned()),
            ..WebSettings::default()
        };
        let router = web
            .routes(&auth(false), &auth(false).verifier(), grpc)
            .expect("routes");
        for page in ["/", "/ops"] {
            let (status, r) = call(&router, "GET", page, "").await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(r.headers()[header::CACHE_CONTROL], "no-cache");
            let csp = r.headers()[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .expect("csp")
                .to_owned();
            for part in [
                "script-src 'self';",
                "frame-ancestors 'none'",
                "connect-src 'self' http://*:50999 https://*:50999;",
            ] {
                assert!(csp.contains(part), "{page}: {csp}");
            }
            assert!(text(r).await.contains(r#"content=":50999""#), "{page}");
        }
        assert_eq!(
            app_csp("https://grpc.example:8443/web?x=1")
                .split("connect-src ")
                .nth(1)
                .and_then(|c| c.split(';').next()),
            Some("'self' https://grpc.example:8443")
        );
        let (status, r) = call(&router, "GET", "/docs", "").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(r.headers()[header::CONTENT_SECURITY_POLICY], DOCS_CSP);
        assert!(text(r).await.contains("API reference"));
        let (status, r) = call(&router, "GET", "/assets/app-1.js", "").await;
        assert_eq!(status, StatusCode::OK);
        assert!(r.headers()[header::CACHE_CONTROL]
            .to_str()
            .expect("header")
            .contains("immutable"));
        let (status, _) = call(&router, "GET", "/assets/nope.js", "").await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        let proxied = WebSettings {
            web_dir: Some(dir.path().to_owned()),
            public_grpc_web_url: Some("https://grpc.example/\"x".into()),
            ..WebSettings::default()
        };
        let (_, r) = call(
            &proxied
                .routes(&auth(false), &auth(false).verifier(), grpc)
                .expect("routes"),
            "GET",
            "/",
            "",
        )
        .await;
        assert!(text(r)
            .await
            .contains(r#"content="https://grpc.example/&quot;x""#));

        let missing = WebSettings {
            web_dir: Some(dir.path().join("nowhere")),
            ..WebSettings::default()
        };
        let err = missing
            .routes(&auth(false), &auth(false).verifier(), grpc)
            .expect_err("no built app");
        assert!(err.to_string().contains("make web"), "{err}");
    }
}
