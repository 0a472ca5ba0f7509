//! The REST command API against a real PostgreSQL: the contract's answers, pinned with insta.

use onsale_tests::read_path::ReadPath;
use onsale_tests::{TestApp, TestDb};
use serde_json::json;

fn redact(v: &serde_json::Value) -> serde_json::Value {
    let mut v = v.clone();
    for key in [
        "holdId",
        "orderId",
        "eventId",
        "expiresAt",
        "venueId",
        "placedAt",
        "updatedAt",
    ] {
        if v.get(key).is_some() {
            v[key] = json!(format!("[{key}]"));
        }
    }
    if let Some(detail) = v.get("detail").and_then(|d| d.as_str()) {
        if detail.contains("o_") {
            v["detail"] = json!("[detail with order id]");
        }
    }
    if v.get("orderId").is_some() {
        v["orderId"] = json!("[orderId]");
    }
    v
}

#[tokio::test]
async fn a_fan_holds_orders_and_retries_as_the_contract_says() {
    // The whole read path: GET /v1/orders/{id} is served by the orders projection.
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let app = &rp.app;
    let event = app.on_sale_event(2, 2, 10, None).await;
    let ann = app.fan("ann");
    let bob = app.fan("bob");

    let (status, hold) = app
        .hold(
            &event,
            &ann,
            json!({"seatIds": ["S1-R1-1", "S1-R1-2"]}),
            Some("h-1"),
        )
        .await;
    assert_eq!(status, 201);
    insta::assert_json_snapshot!("hold_created", redact(&hold));

    // The same key and body replays the same hold; another body under that key is refused.
    let (status, again) = app
        .hold(
            &event,
            &ann,
            json!({"seatIds": ["S1-R1-1", "S1-R1-2"]}),
            Some("h-1"),
        )
        .await;
    assert_eq!((status, &again["holdId"]), (201, &hold["holdId"]));
    let (status, reused) = app
        .hold(&event, &ann, json!({"seatIds": ["S1-R1-3"]}), Some("h-1"))
        .await;
    assert_eq!(status, 422);
    insta::assert_json_snapshot!("hold_key_reused", redact(&reused));

    // Bob loses the race for one of them: all or none, and he is told which.
    let (status, lost) = app
        .hold(
            &event,
            &bob,
            json!({"seatIds": ["S1-R1-2", "S1-R1-3"]}),
            None,
        )
        .await;
    assert_eq!(status, 409);
    insta::assert_json_snapshot!("seat_unavailable", redact(&lost));
    let (status, _) = app
        .hold(&event, &bob, json!({"seatIds": ["S1-R1-3"]}), None)
        .await;
    assert_eq!(status, 201, "the lost request held nothing");

    // Best available: adjacent seats in one row.
    let (status, best) = app
        .hold(&event, &bob, json!({"quantity": 3, "section": "S2"}), None)
        .await;
    assert_eq!(status, 201);
    assert_eq!(best["seatIds"], json!(["S2-R1-1", "S2-R1-2", "S2-R1-3"]));

    let hold_id = hold["holdId"].as_str().expect("hold id");
    let order_body = json!({"holdId": hold_id, "paymentToken": "tok_ok"});
    let (status, order) = app
        .post("/v1/orders", &ann, order_body.clone(), Some("o-1"))
        .await;
    assert_eq!(status, 202);
    insta::assert_json_snapshot!("order_accepted", redact(&order));
    let (status, replay) = app
        .post("/v1/orders", &ann, order_body.clone(), Some("o-1"))
        .await;
    assert_eq!(
        (status, &replay["orderId"]),
        (202, &order["orderId"]),
        "a retry replays the same 202"
    );
    let (status, other_key) = app.post("/v1/orders", &ann, order_body, Some("o-2")).await;
    assert_eq!(status, 409);
    assert_eq!(other_key["code"], "HOLD_ORDERED");

    let order_id = order["orderId"].as_str().expect("order id");
    // The card's token waits outside the log for the payment worker, for the order placed
    // only: the replay's and the refusal's ids were never used, and their tokens are gone.
    let kept: Vec<(String, String)> = sqlx::query_as("SELECT order_id, token FROM payment_tokens")
        .fetch_all(&rp.pool)
        .await
        .expect("tokens");
    assert_eq!(kept, [(order_id.to_owned(), "tok_ok".to_owned())]);
    let got = rp
        .eventually(&format!("/v1/orders/{order_id}"), &ann, |s, _| s == 200)
        .await;
    insta::assert_json_snapshot!("order_view", redact(&got));
    let (status, _) = app.get(&format!("/v1/orders/{order_id}"), &bob).await;
    assert_eq!(status, 404, "someone else's order is not found");
    let (status, _) = app
        .get(
            &format!("/v1/orders/{order_id}"),
            &app.token("audit", onsale_edge::auth::Role::Auditor),
        )
        .await;
    assert_eq!(status, 200, "auditors see every order");

    let (status, ordered) = app.delete(&format!("/v1/holds/{hold_id}"), &ann).await;
    assert_eq!(status, 409);
    assert_eq!(ordered["code"], "HOLD_ORDERED");
    let (status, _) = app
        .delete(
            &format!("/v1/holds/{}", best["holdId"].as_str().expect("id")),
            &ann,
        )
        .await;
    assert_eq!(status, 404, "Ann cannot release Bob's hold");
    for _ in 0..2 {
        let (status, _) = app
            .delete(
                &format!("/v1/holds/{}", best["holdId"].as_str().expect("id")),
                &bob,
            )
            .await;
        assert_eq!(status, 204, "release is idempotent");
    }

    let (status, doc) = app.get(&format!("/v1/events/{event}"), &ann).await;
    assert_eq!(status, 200);
    assert_eq!(doc["seatCount"], 40);
    assert_eq!(doc["status"], "ON_SALE");
    rp.stop().await;
}

#[tokio::test]
async fn the_per_account_cap_spans_holds_and_orders() {
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let event = app.on_sale_event(1, 2, 10, None).await;
    let ann = app.fan("ann");
    let (status, _) = app.hold(&event, &ann, json!({"quantity": 6}), None).await;
    assert_eq!(status, 201);
    let (status, limit) = app.hold(&event, &ann, json!({"quantity": 3}), None).await;
    assert_eq!(status, 429);
    insta::assert_json_snapshot!("hold_limit", redact(&limit));
    let (status, _) = app.hold(&event, &ann, json!({"quantity": 2}), None).await;
    assert_eq!(status, 201);
}

#[tokio::test]
async fn bad_input_is_refused_with_a_code_and_changes_nothing() {
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let event = app.on_sale_event(1, 1, 4, None).await;
    let ann = app.fan("ann");
    let holds = format!("{}/v1/events/{event}/holds", app.base);

    let res = app
        .http
        .post(&holds)
        .bearer_auth(&ann)
        .header("content-type", "application/json")
        .body("{\"seatIds\": [")
        .send()
        .await
        .expect("answer");
    assert_eq!(res.status(), 400);
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    let body: serde_json::Value = res.json().await.expect("json");
    assert_eq!(body["code"], "MALFORMED_JSON");

    let res = app
        .http
        .post(&holds)
        .bearer_auth(&ann)
        .header("content-type", "application/json")
        .body(format!("{{\"seatIds\": [\"{}\"]}}", "x".repeat(70_000)))
        .send()
        .await
        .expect("answer");
    assert_eq!(res.status(), 413, "oversize bodies are refused");

    let cases = [
        (
            json!({"seatIds": ["S1-R1-1", "S9-R9-9"]}),
            404,
            "UNKNOWN_SEAT",
        ),
        (json!({"quantity": -2}), 422, "INVALID_REQUEST"),
        (json!({"quantity": 0}), 422, "INVALID_REQUEST"),
        (
            json!({"seatIds": ["S1-R1-1"], "quantity": 1}),
            422,
            "INVALID_REQUEST",
        ),
        (json!({"seatIds": []}), 422, "INVALID_REQUEST"),
        (json!({"seatIds": "S1-R1-1"}), 422, "INVALID_REQUEST"),
        (
            json!({"quantity": 2, "section": "S9"}),
            404,
            "UNKNOWN_SECTION",
        ),
        (json!({"quantity": 9}), 429, "HOLD_LIMIT"),
        (json!({"seats": ["S1-R1-1"]}), 422, "INVALID_REQUEST"),
    ];
    for (body, status, code) in cases {
        let (got, problem) = app.hold(&event, &ann, body.clone(), None).await;
        assert_eq!(
            (got, problem["code"].as_str()),
            (status, Some(code)),
            "{body}"
        );
    }
    let admin = app.admin();
    let unknown_event = format!("/v1/events/{}/holds", uuid::Uuid::new_v4());
    let dashed = json!({"name": "x", "city": "y", "sections": [{"section": "A-1", "priceTier": "A", "rows": [{"row": "1", "seats": 2}]}]});
    let order = json!({"holdId": "h_nope", "paymentToken": "tok_ok"});
    let calls = [
        (
            "/v1/events/not-a-uuid/holds",
            &ann,
            json!({"quantity": 1}),
            None,
            422,
            "INVALID_REQUEST",
        ),
        (
            &unknown_event,
            &ann,
            json!({"quantity": 1}),
            None,
            404,
            "EVENT_NOT_FOUND",
        ),
        (
            "/v1/orders",
            &ann,
            order.clone(),
            Some("k"),
            422,
            "INVALID_REQUEST",
        ),
        (
            "/v1/orders",
            &ann,
            order,
            None,
            400,
            "IDEMPOTENCY_KEY_REQUIRED",
        ),
        (
            "/v1/venues",
            &ann,
            json!({"name": "x", "city": "y", "sections": []}),
            None,
            403,
            "FORBIDDEN",
        ),
        // A dash in a section name would make seat ids ambiguous.
        ("/v1/venues", &admin, dashed, None, 422, "INVALID_REQUEST"),
    ];
    for (path, token, body, key, status, code) in calls {
        let (got, problem) = app.post(path, token, body, key).await;
        assert_eq!(
            (got, problem["code"].as_str()),
            (status, Some(code)),
            "{path}"
        );
    }
    let res = app
        .http
        .post(&holds)
        .json(&json!({"quantity": 1}))
        .send()
        .await
        .expect("answer");
    assert_eq!(res.status(), 401);
    let res = app
        .http
        .post(&holds)
        .bearer_auth("not.a.jwt")
        .json(&json!({"quantity": 1}))
        .send()
        .await
        .expect("answer");
    assert_eq!(res.status(), 401);

    // Nothing above took a seat: all four are still free for one fan.
    let (status, hold) = app.hold(&event, &ann, json!({"quantity": 4}), None).await;
    assert_eq!(status, 201, "{hold}");
}

#[tokio::test]
async fn the_openapi_document_describes_the_api() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let app = &rp.app;
    let (status, doc) = app.get("/openapi.json", "").await;
    assert_eq!(status, 200);
    for path in [
        "/v1/venues",
        "/v1/events",
        "/v1/events/{id}/holds",
        "/v1/holds/{id}",
        "/v1/orders",
        "/v1/orders/{id}",
        "/v1/events/{id}/seats",
        "/v1/events/{id}/updates",
        "/v1/events/{id}/seats/{seat}/history",
        "/v1/ops/alerts",
    ] {
        assert!(
            doc["paths"].get(path).is_some(),
            "{path} missing from the OpenAPI document"
        );
    }
    // What the fan app's generated client reads: the session header of the writes a waiting
    // room guards, why an order failed, the event document's fields.
    for (path, method) in [("/v1/events/{id}/holds", "post"), ("/v1/orders", "post")] {
        let params = doc["paths"][path][method]["parameters"]
            .as_array()
            .expect("parameters");
        assert!(
            params
                .iter()
                .any(|p| p["name"] == "X-Onsale-Session" && p["in"] == "header"),
            "{method} {path} does not name X-Onsale-Session"
        );
        assert!(
            doc["paths"][path][method]["responses"]["403"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("ADMISSION_REQUIRED"))
        );
    }
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["OrderResponse"]["properties"]["failureReason"]["enum"],
        json!(["CARD_DECLINED", "PAYMENT_TIMED_OUT", "FAILED", null])
    );
    assert_eq!(
        doc["paths"]["/v1/events/{id}"]["get"]["responses"]["200"]["content"]["application/json"]
            ["schema"]["$ref"],
        "#/components/schemas/EventDoc"
    );
    assert!(schemas["EventDoc"]["properties"]["availableSeats"].is_object());
    // The development sign-in is documented where it is served: in development mode only.
    assert_eq!(
        doc["paths"].get("/v1/dev/token").is_some(),
        app.server.settings().auth.dev_mode
    );
    for dev in [false, true] {
        let doc = onsale_server::openapi(true, dev).expect("document");
        assert_eq!(doc["paths"].get("/v1/dev/token").is_some(), dev);
    }
    rp.eventually("/readyz", "", |s, _| s == 200).await;
    rp.stop().await;
}

#[tokio::test]
async fn the_metrics_page_describes_what_it_exports() {
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let event = app.on_sale_event(1, 1, 4, None).await;
    let (status, _) = app
        .hold(
            &event,
            &app.fan("ann"),
            json!({"seatIds": ["S1-R1-1"]}),
            None,
        )
        .await;
    assert_eq!(status, 201);
    let page = app.metrics_page().await;
    for name in [
        onsale_telemetry::metrics::HOLD_REQUESTS_TOTAL,
        onsale_telemetry::metrics::EVENTS_COMMITTED_TOTAL,
        onsale_telemetry::metrics::COMMIT_SECONDS,
    ] {
        assert!(
            page.contains(&format!("# HELP {name} ")),
            "{name} has no help text on /metrics"
        );
    }
}

/// A venue's chart (issue 34): one that draws the layout is kept and answered as given; one
/// that does not (a row missing, a point off the plane, a floor with rows) is refused with a
/// code and registers nothing; a venue without one answers a generated chart. A show names its
/// currency (ISO 4217), `USD` when it does not; anything else is refused.
#[tokio::test]
async fn a_venue_keeps_a_chart_that_draws_its_layout_and_refuses_one_that_does_not() {
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let admin = app.admin();
    let sections = json!([
        {"section": "A", "priceTier": "A", "rows": [{"row": "1", "seats": 3}]},
        {"section": "F", "priceTier": "B", "capacity": 50},
    ]);
    let chart = json!({
        "stage": {"x": 4000, "y": 500, "width": 2000, "height": 500},
        "sections": [
            {"section": "A", "outline": [[1000, 2000], [3000, 2000], [3000, 3000]],
             "rows": [{"row": "1", "from": [1000, 2500], "to": [3000, 2500], "bend": 200}]},
            {"section": "F", "outline": [[5000, 2000], [7000, 2000], [7000, 3000], [5000, 3000]]},
        ],
    });
    let (status, created) = app
        .post(
            "/v1/venues",
            &admin,
            json!({"name": "Hall", "city": "Oslo", "sections": sections, "chart": chart}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let venue = created["venueId"].as_str().expect("id");
    let (status, doc) = app.get(&format!("/v1/venues/{venue}"), "").await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["chartGenerated"], false);
    assert_eq!(doc["chart"]["sections"][0]["rows"][0]["bend"], 200.0);
    assert_eq!(doc["chart"]["stage"]["width"], 2000.0);

    let mut broken = Vec::new();
    let mut row_missing = chart.clone();
    row_missing["sections"][0]["rows"] = json!([]);
    broken.push(("a row missing", row_missing));
    let mut off_plane = chart.clone();
    off_plane["sections"][1]["outline"][0] = json!([20000, 2000]);
    broken.push(("a point off the plane", off_plane));
    let mut floor_rows = chart.clone();
    floor_rows["sections"][1]["rows"] =
        json!([{"row": "1", "from": [5000, 2500], "to": [6000, 2500]}]);
    broken.push(("a floor with rows", floor_rows));
    let mut swapped = chart.clone();
    let s = swapped["sections"].as_array_mut().expect("sections");
    s.swap(0, 1);
    broken.push(("sections out of order", swapped));
    let mut three = chart.clone();
    three["sections"][0]["rows"][0]["from"] = json!([1000, 2500, 7]);
    broken.push(("a point of three numbers", three));
    for (what, chart) in broken {
        let (status, refused) = app
            .post(
                "/v1/venues",
                &admin,
                json!({"name": "Hall", "city": "Oslo", "sections": sections, "chart": chart}),
                None,
            )
            .await;
        assert!(
            (status == 422 || status == 400) && refused["code"].is_string(),
            "{what}: {status} {refused}"
        );
    }
    let (status, plain) = app
        .post(
            "/v1/venues",
            &admin,
            json!({"name": "Plain", "city": "Oslo", "sections": sections}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{plain}");
    let (_, doc) = app
        .get(
            &format!("/v1/venues/{}", plain["venueId"].as_str().expect("id")),
            "",
        )
        .await;
    assert_eq!(doc["chartGenerated"], true);
    assert_eq!(doc["chart"]["sections"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        doc["chart"]["sections"][0]["rows"].as_array().map(Vec::len),
        Some(1)
    );

    // The currency: named, defaulted, refused.
    let event = |currency: serde_json::Value| {
        let mut body = json!({
            "name": "Night", "performer": "Band", "venueId": venue,
            "startsAt": chrono::Utc::now() + chrono::Duration::days(30),
            "onSaleAt": chrono::Utc::now(), "prices": {"A": 5000, "B": 2500},
        });
        if !currency.is_null() {
            body["currency"] = currency;
        }
        body
    };
    for (asked, named) in [(json!("EUR"), "EUR"), (json!(null), "USD")] {
        let (status, created) = app.post("/v1/events", &admin, event(asked), None).await;
        assert_eq!(status, 201, "{created}");
        let id = created["eventId"].as_str().expect("id");
        let (_, page) = app.get(&format!("/v1/events/{id}"), "").await;
        assert_eq!(page["currency"], named);
    }
    for bad in ["euro", "eu", "EURO", "€"] {
        let (status, refused) = app
            .post("/v1/events", &admin, event(json!(bad)), None)
            .await;
        assert_eq!(
            (status, &refused["code"]),
            (422, &json!("INVALID_REQUEST")),
            "{bad}: {refused}"
        );
    }
}

/// Issue 53, item 8: bearer tokens from a real OpenID provider (oidc-provider, its machine
/// clients' JWT access tokens) are taken against its JWKS; its keys rotate without a restart of
/// onsale (a new key's token taken at once at every door, the old key's honoured until it
/// leaves the set, then refused); an admin's token is an admin's, a fan's is not.
#[tokio::test]
async fn a_real_openid_providers_tokens_are_taken_and_its_keys_rotate_without_a_restart() {
    let db = TestDb::new().await.expect("db");
    let mut provider = onsale_tests::oidc::Provider::start("EdDSA")
        .await
        .expect("the provider");
    let mut settings = onsale_tests::settings(&db);
    settings.auth.jwks_url = Some(provider.jwks_url());
    settings.auth.jwks_issuer = Some(provider.issuer());
    // No periodic fetch within the test: every key is taken through a token naming it.
    settings.auth.jwks_refresh_secs = 300;
    let app = TestApp::spawn_with(settings, std::sync::Arc::new(onsale_domain::SystemClock))
        .await
        .expect("app");
    let event = app.on_sale_event(1, 1, 20, None).await;
    // Whether a token is taken, with no side effect: a fan's is forbidden the ops console's
    // metrics (403), a refused one is unauthenticated (401).
    let taken = |token: String| {
        let app = &app;
        async move { app.get("/v1/ops/metrics", &token).await.0 != 401 }
    };
    let by_first = provider.token("ann").await.expect("a token");
    let (status, body) = app
        .hold(&event, &by_first, json!({"seatIds": ["S1-R1-1"]}), None)
        .await;
    assert_eq!(status, 201, "the provider's fan holds: {body}");
    // The hold is the account the provider named (sub = its client): ann's, not bob's.
    let held = format!("/v1/holds/{}", body["holdId"].as_str().expect("hold id"));
    assert_eq!(app.delete(&held, &app.fan("bob")).await.0, 404);
    assert_eq!(app.delete(&held, &app.fan("ann")).await.0, 204);
    let admin = provider.token("boss").await.expect("an admin's token");
    assert_eq!(app.get("/v1/ops/metrics", &admin).await.0, 200);
    assert_eq!(app.get("/v1/ops/metrics", &by_first).await.0, 403);

    // A new key (another algorithm too) signs from now on: taken at its first token, at every
    // door (the ops console's, the holds').
    provider.rotate("ES256").await.expect("rotated");
    assert_eq!(provider.kids().await.expect("kids").len(), 2);
    let admin = provider.token("boss").await.expect("an admin's token");
    assert_eq!(app.get("/v1/ops/metrics", &admin).await.0, 200);
    let by_second = provider.token("ann").await.expect("a token");
    assert_ne!(by_second, by_first);
    let (status, body) = app
        .hold(&event, &by_second, json!({"seatIds": ["S1-R1-2"]}), None)
        .await;
    assert_eq!(status, 201, "the new key's token: {body}");
    assert!(
        taken(by_first.clone()).await,
        "the old key is still in the set"
    );

    // The first key leaves the set and a third signs: the third's first token fetches the set
    // again (unknown kids fetch it at most every 10 s), and from then the first key's tokens
    // are refused.
    provider.retire().await.expect("retired");
    provider.rotate("EdDSA").await.expect("rotated again");
    let by_third = provider.token("ann").await.expect("a token");
    onsale_tests::wait_for(
        "the third key's token taken",
        std::time::Duration::from_secs(20),
        || taken(by_third.clone()),
    )
    .await;
    assert!(!taken(by_first.clone()).await, "the retired key's token");
    assert!(
        taken(by_second.clone()).await,
        "the second key is still in the set"
    );
    app.server.shutdown().await.expect("stops");
}
