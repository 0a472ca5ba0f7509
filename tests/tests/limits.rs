//! What keeps a process standing (issue 15, items 3 and 6): the header-read timeout, the
//! connection cap, the stream cap, the rate limits per account and per address, the request
//! deadline, the body limit on every route, and problem+json for the framework's own errors;
//! and cross-origin requests (issue 17, item 5) only from the listed origins. Each against a
//! real `onsale` API on a real PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use onsale_domain::SystemClock;
use onsale_server::Settings;
use onsale_tests::read_path::{shared_brokers, ReadPath};
use onsale_tests::{settings, wait_for, TestApp, TestDb};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn app_with(db: &TestDb, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    let mut s = settings(db);
    tweak(&mut s);
    TestApp::spawn_with(s, Arc::new(SystemClock))
        .await
        .expect("the API starts")
}

/// The API with each account's writes limited to one a second, `burst` at once.
async fn one_write_a_second(db: &TestDb, burst: u32) -> TestApp {
    app_with(db, |s| {
        s.limits.rate_account_per_sec = 1;
        s.limits.rate_account_burst = burst;
    })
    .await
}

/// Whether the server closes `tcp` (end of stream or reset) within `within`.
async fn closed_within(tcp: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(within, tcp.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

fn addr(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_owned()
}

/// Waits (10 s at most) until a request on a connection of its own is answered.
async fn served_on_a_new_connection(app: &TestApp, what: &str) {
    wait_for(what, Duration::from_secs(10), || {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("client");
        let url = format!("{}/healthz", app.base);
        async move { http.get(url).send().await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
}

#[tokio::test]
async fn a_client_trickling_its_headers_is_cut_off() {
    let db = TestDb::new().await.expect("db");
    let app = app_with(&db, |s| s.http.header_read_timeout_ms = 300).await;
    let mut slow = TcpStream::connect(addr(&app)).await.expect("connects");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("writes");
    assert!(
        closed_within(&mut slow, Duration::from_secs(5)).await,
        "a request whose headers never end holds no connection"
    );
    // A client that sends its request at once is served.
    let r = app
        .http
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .expect("an answer");
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_and_come_back_when_one_ends() {
    let db = TestDb::new().await.expect("db");
    let app = app_with(&db, |s| s.http.max_connections = 2).await;
    let first = TcpStream::connect(addr(&app)).await.expect("first");
    let _second = TcpStream::connect(addr(&app)).await.expect("second");
    // Accepted by the kernel, then closed by onsale: no request is read from it.
    let mut third = TcpStream::connect(addr(&app)).await.expect("third");
    assert!(closed_within(&mut third, Duration::from_secs(5)).await);
    drop(first);
    served_on_a_new_connection(&app, "a connection is served again").await;
}

/// Connections that hold a place without asking anything (issue 53, item 1), on each of the
/// process's listeners: one that sends nothing, one that sends half of HTTP/2's preface, and
/// an HTTP/2 connection that completes its handshake and answers pings but opens no stream.
/// Each is closed by the deadlines, and the per-address cap refuses the connection past it.
#[tokio::test]
async fn silent_connections_are_let_go_on_every_listener() {
    let db = TestDb::new().await.expect("db");
    let app = app_with(&db, |s| {
        s.http.header_read_timeout_ms = 500;
        s.http.idle_timeout_ms = 1_000;
        s.metrics_listen = Some("127.0.0.1:0".into());
    })
    .await;
    let listeners = [
        ("REST", app.server.http_addr().expect("REST")),
        ("gRPC", app.server.grpc_addr().expect("gRPC")),
        ("internal", app.server.internal_addr().expect("internal")),
        ("metrics", app.server.metrics_addr().expect("metrics")),
    ];
    for (what, addr) in listeners {
        let mut silent = TcpStream::connect(addr).await.expect("connects");
        let mut half = TcpStream::connect(addr).await.expect("connects");
        half.write_all(b"PRI * HTTP/2.0\r\n").await.expect("writes");
        assert!(
            closed_within(&mut silent, Duration::from_secs(5)).await,
            "{what}: a connection that sends nothing is closed"
        );
        assert!(
            closed_within(&mut half, Duration::from_secs(5)).await,
            "{what}: half a preface is closed"
        );
        // A whole HTTP/2 handshake (preface, an empty SETTINGS, the server's SETTINGS
        // acknowledged), then nothing: no stream is ever opened.
        let mut quiet = TcpStream::connect(addr).await.expect("connects");
        quiet
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            .await
            .expect("the preface");
        quiet
            .write_all(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
            .await
            .expect("a SETTINGS acknowledgement");
        assert!(
            closed_within(&mut quiet, Duration::from_secs(5)).await,
            "{what}: an HTTP/2 connection with no stream is closed"
        );
    }
    // A connection that asked something and then keeps quiet is let go after the idle
    // deadline, not before its answer.
    let mut asked = TcpStream::connect(addr(&app)).await.expect("connects");
    asked
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("writes");
    let mut answer = [0u8; 12];
    asked.read_exact(&mut answer).await.expect("an answer");
    assert_eq!(&answer, b"HTTP/1.1 200");
    assert!(
        closed_within(&mut asked, Duration::from_secs(5)).await,
        "an idle keep-alive connection is closed"
    );
}

#[tokio::test]
async fn one_address_cannot_take_every_connection() {
    let db = TestDb::new().await.expect("db");
    let app = app_with(&db, |s| s.http.max_connections_per_address = 2).await;
    let first = TcpStream::connect(addr(&app)).await.expect("first");
    let _second = TcpStream::connect(addr(&app)).await.expect("second");
    let mut third = TcpStream::connect(addr(&app)).await.expect("third");
    assert!(
        closed_within(&mut third, Duration::from_secs(5)).await,
        "the address's third connection is closed (the total cap is 50,000)"
    );
    // One of the address's connections ends: its place is free again.
    drop(first);
    served_on_a_new_connection(&app, "the address is served again").await;
}

#[tokio::test]
async fn streams_past_the_cap_answer_503_with_retry_after() {
    // A stream needs the show's seat map: the whole read path runs here.
    let db = TestDb::new().await.expect("db");
    let rp = ReadPath::spawn_parts(
        &db,
        &shared_brokers().expect("broker"),
        |s| s.limits.max_streams = 1,
        &[],
    )
    .await
    .expect("the read path starts");
    let event = rp.show_on_map(1, 1, 4).await;
    let app = &rp.app;
    let url = format!("{}/v1/events/{event}/updates", app.base);
    let open = app.http.get(&url).send().await.expect("the first stream");
    assert_eq!(open.status(), 200);
    let refused = app.http.get(&url).send().await.expect("an answer");
    assert_eq!(refused.status(), 503);
    assert_eq!(
        refused.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"5"[..])
    );
    let body: Value = refused.json().await.expect("problem+json");
    assert_eq!(body["code"], "TOO_MANY_STREAMS");
    drop(open);
    wait_for("the slot comes back", Duration::from_secs(10), || {
        let req = app.http.get(&url).send();
        async move { req.await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    rp.stop().await;
}

/// Issue 53, item 2: one client cannot take every stream slot. Seat-map SSE and gRPC
/// `StreamDeltas` count against the same per-account and per-address caps (an address is
/// told apart here by `X-Forwarded-For` from a trusted proxy); past either a new stream is
/// answered 429 `TOO_MANY_STREAMS` with `Retry-After`, and every other client is served.
#[tokio::test]
async fn one_account_or_address_opens_only_its_share_of_the_streams() {
    let db = TestDb::new().await.expect("db");
    let rp = ReadPath::spawn_parts(
        &db,
        &shared_brokers().expect("broker"),
        |s| {
            s.limits.max_streams = 100;
            s.limits.max_streams_per_address = 3;
            s.limits.max_streams_per_account = 2;
            s.limits.trusted_proxies = vec!["127.0.0.1/32".parse().expect("a block")];
        },
        &[],
    )
    .await
    .expect("the read path starts");
    let event = rp.show_on_map(1, 1, 4).await;
    let app = &rp.app;
    let url = format!("{}/v1/events/{event}/updates", app.base);
    let ann = app.fan("ann");
    let open = |from: &'static str, token: Option<String>| {
        let mut req = app.http.get(&url).header("x-forwarded-for", from);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let refused = |res: reqwest::Response, why: &'static str| async move {
        assert_eq!(res.status(), 429, "{why}");
        assert_eq!(
            res.headers().get("retry-after").map(|v| v.as_bytes()),
            Some(&b"5"[..]),
            "{why}"
        );
        let body: Value = res.json().await.expect("problem+json");
        assert_eq!(body["code"], "TOO_MANY_STREAMS", "{why}");
    };
    // Ann's account: two streams, from anywhere.
    let a1 = open("192.0.2.1", Some(ann.clone()))
        .await
        .expect("an answer");
    assert_eq!(a1.status(), 200);
    let a2 = open("192.0.2.2", Some(ann.clone()))
        .await
        .expect("an answer");
    assert_eq!(a2.status(), 200);
    refused(
        open("192.0.2.3", Some(ann.clone()))
            .await
            .expect("an answer"),
        "ann's third stream",
    )
    .await;
    // One address: three streams whoever opens them, then SSE and gRPC alike are refused.
    let mut held = Vec::new();
    for _ in 0..2 {
        let res = open("192.0.2.1", None).await.expect("an answer");
        assert_eq!(res.status(), 200);
        held.push(res);
    }
    refused(
        open("192.0.2.1", None).await.expect("an answer"),
        "the address's fourth stream",
    )
    .await;
    let mut grpc = onsale_proto::v1::seat_maps_client::SeatMapsClient::connect(rp.grpc.clone())
        .await
        .expect("gRPC connects");
    let mut req = tonic::Request::new(onsale_proto::v1::StreamDeltasRequest {
        event_id: event.clone(),
        section: String::new(),
        all_seats: false,
        after_seq: 0,
    });
    req.metadata_mut()
        .insert("x-forwarded-for", "192.0.2.1".parse().expect("metadata"));
    let status = grpc
        .stream_deltas(req)
        .await
        .expect_err("the address's gRPC stream is refused too");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    // Every other client is served; a stream that ends gives its slot back.
    let other = open("198.51.100.7", Some(app.fan("bob")))
        .await
        .expect("an answer");
    assert_eq!(other.status(), 200, "another address and account");
    drop(held);
    wait_for(
        "the address's slots come back",
        Duration::from_secs(10),
        || {
            let req = open("192.0.2.1", None);
            async move { req.await.is_ok_and(|r| r.status() == 200) }
        },
    )
    .await;
    drop((a1, a2));
    rp.stop().await;
}

/// Issue 53, item 3: an order without its Idempotency-Key is told so (400), even past its
/// account's budget, and spends none of it.
#[tokio::test]
async fn an_order_without_its_idempotency_key_is_told_so_even_past_the_budget() {
    let db = TestDb::new().await.expect("db");
    let app = one_write_a_second(&db, 1).await;
    let event = app.on_sale_event(1, 1, 10, None).await;
    let ann = app.fan("ann");
    let (status, hold) = app
        .hold(&event, &ann, json!({"seatIds": ["S1-R1-1"]}), None)
        .await;
    assert_eq!(status, 201, "{hold}");
    let body = json!({"holdId": hold["holdId"], "paymentToken": "tok_ok"});
    for _ in 0..3 {
        let (status, problem) = app.post("/v1/orders", &ann, body.clone(), None).await;
        assert_eq!(status, 400, "{problem}");
        assert_eq!(problem["code"], "IDEMPOTENCY_KEY_REQUIRED", "{problem}");
    }
    // With its key the order spends the (spent) budget as before.
    let (status, problem) = app.post("/v1/orders", &ann, body, Some("k1")).await;
    assert_eq!(status, 429, "{problem}");
}

#[tokio::test]
async fn holds_past_an_accounts_rate_answer_429_and_others_are_served() {
    let db = TestDb::new().await.expect("db");
    let app = one_write_a_second(&db, 2).await;
    let event = app.on_sale_event(1, 1, 10, None).await;
    let ann = app.fan("ann");
    for seat in ["S1-R1-1", "S1-R1-2"] {
        let (status, body) = app
            .hold(&event, &ann, json!({"seatIds": [seat]}), None)
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let r = app
        .http
        .post(format!("{}/v1/events/{event}/holds", app.base))
        .bearer_auth(&ann)
        .json(&json!({"seatIds": ["S1-R1-3"]}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(r.status(), 429);
    let wait: u64 = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=2).contains(&wait), "{wait}");
    let body: Value = r.json().await.expect("problem+json");
    assert_eq!(body["code"], "RATE_LIMITED");
    // Nothing was held by the refused request, and another fan is not slowed by ann.
    let (status, body) = app
        .hold(
            &event,
            &app.fan("bob"),
            json!({"seatIds": ["S1-R1-3"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn writes_past_an_addresses_rate_answer_429_whoever_signs_them() {
    let db = TestDb::new().await.expect("db");
    let app = app_with(&db, |s| {
        s.limits.rate_address_per_sec = 1;
        s.limits.rate_address_burst = 3;
    })
    .await;
    let event = app.on_sale_event(1, 1, 10, None).await;
    let mut statuses = Vec::new();
    for (i, fan) in ["a1", "a2", "a3", "a4"].iter().enumerate() {
        let (status, _) = app
            .hold(
                &event,
                &app.fan(fan),
                json!({"seatIds": [format!("S1-R1-{}", i + 1)]}),
                None,
            )
            .await;
        statuses.push(status);
    }
    assert_eq!(statuses, [201, 201, 201, 429]);
    // Reads are not rate-limited.
    let (status, _) = app
        .get(&format!("/v1/events/{event}"), &app.fan("a4"))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_request_past_its_deadline_answers_503() {
    let db = TestDb::new().await.expect("db");
    // No projections run here: a GET of a hold waits (2 s at most) for the orders
    // projection, longer than this deadline.
    let app = app_with(&db, |s| s.limits.request_timeout_ms = 300).await;
    let event = app.on_sale_event(1, 1, 4, None).await;
    let ann = app.fan("ann");
    let (status, hold) = app
        .hold(&event, &ann, json!({"seatIds": ["S1-R1-1"]}), None)
        .await;
    assert_eq!(status, 201, "{hold}");
    let hold_id = hold["holdId"].as_str().expect("hold id");
    let r = app
        .http
        .get(format!("{}/v1/holds/{hold_id}", app.base))
        .bearer_auth(&ann)
        .send()
        .await
        .expect("an answer");
    assert_eq!(r.status(), 503);
    assert!(r.headers().get("retry-after").is_some());
    let body: Value = r.json().await.expect("problem+json");
    assert_eq!(body["code"], "REQUEST_TIMEOUT");
}

#[tokio::test]
async fn every_route_limits_its_body_and_answers_the_frameworks_errors_as_problems() {
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("the API starts");
    let event = app.on_sale_event(1, 1, 4, None).await;
    let big = "x".repeat(100 * 1024);
    for path in [
        "/v1/scans".to_owned(),
        "/v1/webhooks/processor".to_owned(),
        format!("/v1/events/{event}/holds"),
        "/v1/orders".to_owned(),
    ] {
        let r = app
            .http
            .post(format!("{}{path}", app.base))
            .bearer_auth(app.admin())
            .header("content-type", "application/json")
            .body(format!("{{\"pad\": \"{big}\"}}"))
            .send()
            .await
            .expect("an answer");
        assert_eq!(r.status(), 413, "{path}");
        assert_eq!(
            r.headers().get("content-type").map(|v| v.as_bytes()),
            Some(&b"application/problem+json"[..]),
            "{path}"
        );
        let body: Value = r.json().await.expect("problem+json");
        assert_eq!(body["code"], "PAYLOAD_TOO_LARGE", "{path}");
    }
    let problem = |r: reqwest::Response| async move {
        let status = r.status().as_u16();
        let ct = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        (
            status,
            ct,
            body["code"].as_str().unwrap_or_default().to_owned(),
        )
    };
    for (req, want) in [
        // A query that does not parse.
        (
            app.http.get(format!(
                "{}/v1/events/{event}/seats?section=S1&section=S2",
                app.base
            )),
            Some((400, "INVALID_REQUEST")),
        ),
        // A path that is no UTF-8.
        (
            app.http
                .get(format!("{}/v1/orders/%FF%FE", app.base))
                .bearer_auth(app.fan("ann")),
            Some((400, "INVALID_REQUEST")),
        ),
        // No such route.
        (
            app.http.get(format!("{}/v1/nothing/here", app.base)),
            Some((404, "NOT_FOUND")),
        ),
        // A method the route does not serve.
        (
            app.http.put(format!("{}/v1/orders", app.base)),
            Some((405, "METHOD_NOT_ALLOWED")),
        ),
        // A body that is not JSON.
        (
            app.http
                .post(format!("{}/v1/events/{event}/holds", app.base))
                .bearer_auth(app.fan("ann"))
                .header("content-type", "text/plain")
                .body("seats please"),
            Some((415, "UNSUPPORTED_MEDIA_TYPE")),
        ),
    ] {
        let (status, ct, code) = problem(req.send().await.expect("an answer")).await;
        assert_eq!(ct, "application/problem+json", "{status} {code}");
        assert!(!code.is_empty(), "{status} has a code");
        if let Some((s, c)) = want {
            assert_eq!((status, code.as_str()), (s, c));
        }
    }
}

/// A browser's preflight from `origin` for `method` on `url`, asking to send `headers`.
async fn preflight(url: &str, origin: &str, method: &str, headers: &str) -> reqwest::Response {
    reqwest::Client::new()
        .request(reqwest::Method::OPTIONS, url)
        .header("origin", origin)
        .header("access-control-request-method", method)
        .header("access-control-request-headers", headers)
        .send()
        .await
        .expect("preflight")
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn only_the_listed_origins_may_call_from_a_browser_over_rest_sse_and_grpc_web() {
    let db = TestDb::new().await.expect("db");
    let app = app_with(&db, |s| {
        s.cors.cors_origins = vec![
            "https://fans.example".into(),
            "http://127.0.0.1:3000".into(),
        ];
    })
    .await;
    let event = app.on_sale_event(1, 1, 4, None).await;
    let grpc = format!("http://{}", app.server.grpc_addr().expect("gRPC"));
    let hold = format!("{}/v1/events/{event}/holds", app.base);
    let updates = format!("{}/v1/events/{event}/updates", app.base);
    let deltas = format!("{grpc}/onsale.v1.SeatMaps/StreamDeltas");

    // A hold: the API's headers; SSE: resuming; gRPC-web: its own headers.
    for (url, method, headers) in [
        (&hold, "POST", "authorization,content-type,idempotency-key"),
        (&updates, "GET", "last-event-id"),
        (
            &deltas,
            "POST",
            "content-type,x-grpc-web,x-user-agent,authorization",
        ),
    ] {
        let ok = preflight(url, "https://fans.example", method, headers).await;
        assert!(ok.status().is_success(), "{url}: {}", ok.status());
        assert_eq!(
            header(&ok, "access-control-allow-origin"),
            Some("https://fans.example"),
            "{url}"
        );
        let methods = header(&ok, "access-control-allow-methods").expect("methods");
        assert!(methods.contains(method), "{url}: {methods}");
        let allowed = header(&ok, "access-control-allow-headers")
            .expect("headers")
            .to_lowercase();
        for h in headers.split(',') {
            assert!(allowed.contains(h), "{url}: {h} not in {allowed}");
        }
        assert_eq!(
            header(&ok, "access-control-allow-credentials"),
            None,
            "bearer tokens, no cookies"
        );

        let refused = preflight(url, "https://evil.example", method, headers).await;
        assert_eq!(
            header(&refused, "access-control-allow-origin"),
            None,
            "{url}"
        );
    }

    // The answers themselves: the origin echoed for a listed page, gRPC-web's status readable.
    let r = app
        .http
        .get(format!("{}/v1/events/{event}", app.base))
        .header("origin", "http://127.0.0.1:3000")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        Some("http://127.0.0.1:3000")
    );
    assert!(header(&r, "vary").is_some_and(|v| v.to_lowercase().contains("origin")));
    let r = app
        .http
        .get(format!("{}/v1/events/{event}", app.base))
        .header("origin", "https://evil.example")
        .send()
        .await
        .expect("get");
    assert_eq!(
        r.status(),
        200,
        "CORS is the browser's check; the server still answers"
    );
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    // A gRPC-web call (an empty GetSeatMap request): the page may read its status headers.
    let call = app
        .http
        .post(format!("{grpc}/onsale.v1.SeatMaps/GetSeatMap"))
        .header("origin", "https://fans.example")
        .header("content-type", "application/grpc-web+proto")
        .header("x-grpc-web", "1")
        .body(vec![0u8, 0, 0, 0, 0])
        .send()
        .await
        .expect("a gRPC-web call");
    assert_eq!(
        header(&call, "access-control-allow-origin"),
        Some("https://fans.example")
    );
    let exposed = header(&call, "access-control-expose-headers")
        .expect("exposed headers")
        .to_lowercase();
    assert!(
        exposed.contains("grpc-status") && exposed.contains("grpc-message"),
        "{exposed}"
    );
}

#[tokio::test]
async fn the_local_stack_lets_its_own_page_and_development_server_call_and_nobody_else() {
    let db = TestDb::new().await.expect("db");
    // The tests run in development mode, with no origin listed.
    let app = app_with(&db, |_| {}).await;
    let url = format!("{}/v1/events", app.base);
    let dev = preflight(&url, "http://localhost:5173", "GET", "authorization").await;
    assert_eq!(
        header(&dev, "access-control-allow-origin"),
        Some("http://localhost:5173")
    );
    // The fan app the REST listener serves calls gRPC-web on the gRPC listener.
    let own = app.base.trim_end_matches('/').to_owned();
    let grpc = format!(
        "http://{}/onsale.v1.SeatMaps/StreamDeltas",
        app.server.grpc_addr().expect("gRPC")
    );
    let page = preflight(&grpc, &own, "POST", "content-type,x-grpc-web").await;
    assert_eq!(
        header(&page, "access-control-allow-origin"),
        Some(own.as_str())
    );
    let other = preflight(&url, "https://fans.example", "GET", "authorization").await;
    assert_eq!(header(&other, "access-control-allow-origin"), None);
}
