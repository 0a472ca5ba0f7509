//! Hostile load (issue 29): bots with made-up ids, card testers, floods of anonymous reads, and
//! parts of a node that die. Each test drives a real `onsale` API on a real PostgreSQL (Kafka
//! and Redis where the part needs them) and fails without the fix it names.

use std::sync::Arc;
use std::time::Duration;

use onsale_domain::SystemClock;
use onsale_server::{Part, Settings};
use onsale_tests::read_path::{shared_brokers, ReadPath};
use onsale_tests::{settings, wait_for, Api, TestApp, TestDb};
use serde_json::json;

async fn app_with(db: &TestDb, parts: &[Part], tweak: impl FnOnce(&mut Settings)) -> TestApp {
    let mut s = settings(db);
    tweak(&mut s);
    TestApp::start(s, parts, Arc::new(SystemClock))
        .await
        .expect("the API starts")
}

/// A hold id and an order id of a show that does not exist.
fn made_up_ids() -> (String, String) {
    let (show, id) = (uuid::Uuid::now_v7().simple(), uuid::Uuid::now_v7().simple());
    (format!("h_{show}_{id}"), format!("o_{show}_{id}"))
}

#[tokio::test]
async fn ids_of_shows_that_do_not_exist_are_answered_404_without_starting_an_owner() {
    let db = TestDb::new().await.expect("db");
    let app = app_with(&db, &[Part::Api], |_| {}).await;
    let fan = app.fan("bot");
    let started = app.shows().owners_started();
    let lookups = app.server.catalog.lookups();
    let (hold, order) = made_up_ids();
    for _ in 0..20 {
        let (status, body) = app.delete(&format!("/v1/holds/{hold}"), &fan).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("EVENT_NOT_FOUND")),
            "{body}"
        );
        let (status, body) = app
            .post(&format!("/v1/orders/{order}/cancel"), &fan, json!({}), None)
            .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("EVENT_NOT_FOUND")),
            "{body}"
        );
        let (status, body) = app
            .post(
                "/v1/orders",
                &fan,
                json!({"holdId": hold, "paymentToken": "tok_ok"}),
                Some("k-1"),
            )
            .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("EVENT_NOT_FOUND")),
            "{body}"
        );
        // An admin's policy for a made-up show: 404 too, no owner (issue 53, item 11).
        let show = hold.split('_').nth(1).expect("the hold id names its show");
        let (status, body) = app
            .put(
                &format!("/v1/events/{show}/policy"),
                &app.admin(),
                json!({"holdTtlSeconds": 300}),
            )
            .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("EVENT_NOT_FOUND")),
            "{body}"
        );
    }
    assert_eq!(
        app.shows().owners_started(),
        started,
        "no owner claimed or loaded a show that is not there"
    );
    assert_eq!(
        app.server.catalog.lookups(),
        lookups + 1,
        "the miss is cached: 80 requests, one read"
    );
    let claims: i64 = sqlx::query_scalar("SELECT count(*) FROM show_owners")
        .fetch_one(&db.pool().await.expect("pool"))
        .await
        .expect("counted");
    assert_eq!(claims, 0, "nothing was claimed");
    // A show scheduled now is found at once by the same process.
    let event = app.on_sale_event(1, 1, 4, None).await;
    let (status, body) = app
        .hold(&event, &fan, json!({"seatIds": ["S1-R1-1"]}), None)
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = app
        .delete(
            &format!("/v1/holds/{}", body["holdId"].as_str().expect("id")),
            &fan,
        )
        .await;
    assert_eq!(status, 204);
}

/// Waits until `/readyz` answers `status` with a body containing `naming`.
async fn readyz(api: &Api, path: &str, status: u16, naming: &str) {
    wait_for(
        &format!("{path} answers {status} naming {naming:?}"),
        Duration::from_secs(30),
        || {
            let req = api.http.get(format!("{}{path}", api.base)).send();
            async move {
                match req.await {
                    Ok(r) => {
                        let s = r.status().as_u16();
                        s == status && r.text().await.is_ok_and(|t| t.contains(naming))
                    }
                    Err(_) => false,
                }
            }
        },
    )
    .await;
}

#[tokio::test]
async fn each_part_that_dies_is_named_by_readyz_and_restarted() {
    let db = TestDb::new().await.expect("db");
    let rp = ReadPath::spawn_parts(
        &db,
        &shared_brokers().expect("broker"),
        |_| {},
        &[Part::Worker, Part::Jobs, Part::PaymentConsumers],
    )
    .await
    .expect("the read path starts");
    let app = &rp.app;
    readyz(app, "/readyz", 200, "ready").await;
    for part in [
        Part::Worker,
        Part::Jobs,
        Part::Relay,
        Part::Projections,
        Part::PaymentConsumers,
    ] {
        app.server.crash(part);
        readyz(app, "/readyz", 503, part.name()).await;
        // Restarted, and up again once it has run for a while.
        readyz(app, "/readyz", 200, "ready").await;
    }
    // The part works after its restart: a hold reaches the seat map through the restarted
    // relay and projections.
    let event = rp.show_on_map(1, 1, 4).await;
    let fan = app.fan("ann");
    let (status, _) = app
        .hold(&event, &fan, json!({"seatIds": ["S1-R1-1"]}), None)
        .await;
    assert_eq!(status, 201);
    rp.stop().await;
}

#[tokio::test]
async fn the_node_route_is_internal_signed_checked_before_parsing_and_narrow() {
    let db = TestDb::new().await.expect("db");
    let app = app_with(&db, &[Part::Api], |_| {}).await;
    let event = app.on_sale_event(1, 1, 4, None).await;
    let show: onsale_domain::ShowId = event.parse().expect("show id");
    let path = onsale_command::protocol::WORK_PATH.replace("{id}", &event);
    let internal = app.server.internal_addr().expect("an internal listener");
    let secret = "onsale-dev-node-secret";
    let ask =
        serde_json::to_vec(&json!({"Ask": {"OrderState": onsale_domain::OrderId::new(show)}}))
            .expect("json");
    let send = |body: Vec<u8>, signature: Option<String>| {
        let mut req = app
            .http
            .post(format!("http://{internal}{path}"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(s) = signature {
            req = req.header("x-onsale-node-signature", s);
        }
        async move { req.send().await.expect("an answer").status().as_u16() }
    };
    let now = chrono::Utc::now().timestamp_millis();
    let nonce = || uuid::Uuid::new_v4().simple().to_string();
    let signed = |body: &[u8], secret: &str, t: i64, n: &str| {
        onsale_command::protocol::sign(secret, &path, t, n, body)
    };
    // Not on the public listener at all.
    let public = app
        .http
        .post(format!("{}{path}", app.base))
        .header(
            "x-onsale-node-signature",
            signed(&ask, secret, now, &nonce()),
        )
        .body(ask.clone())
        .send()
        .await
        .expect("an answer");
    assert_eq!(public.status(), 404);
    // Unsigned, signed with another secret, stale: refused.
    assert_eq!(send(ask.clone(), None).await, 401);
    let other = "another-node-secret-of-32-bytes-or-more";
    assert_eq!(
        send(ask.clone(), Some(signed(&ask, other, now, &nonce()))).await,
        401
    );
    assert_eq!(
        send(
            ask.clone(),
            Some(signed(&ask, secret, now - 60_000, &nonce()))
        )
        .await,
        401
    );
    // A body that does not parse, under a bad signature: refused for the signature (401), not
    // read (422).
    let garbage = b"{not json".to_vec();
    assert_eq!(
        send(
            garbage.clone(),
            Some(signed(&garbage, other, now, &nonce()))
        )
        .await,
        401
    );
    assert_eq!(
        send(
            garbage.clone(),
            Some(signed(&garbage, secret, now, &nonce()))
        )
        .await,
        422
    );
    // Signed right: answered once; the same signature again is a replay.
    let n = nonce();
    let good = signed(&ask, secret, now, &n);
    assert_eq!(send(ask.clone(), Some(good.clone())).await, 200);
    assert_eq!(send(ask.clone(), Some(good)).await, 401);
    // Only what forwarding carries: never a show's expiry sweep or schedule.
    let sweep =
        serde_json::to_vec(&json!({"Command": {"ExpireHolds": {"hold_ids": []}}})).expect("json");
    assert_eq!(
        send(sweep.clone(), Some(signed(&sweep, secret, now, &nonce()))).await,
        403
    );
}

#[tokio::test]
async fn a_show_just_scheduled_is_readable_at_once_on_every_read_path() {
    let db = TestDb::new().await.expect("db");
    let rp = ReadPath::spawn(&db, &shared_brokers().expect("broker"))
        .await
        .expect("the read path starts");
    let app = &rp.app;
    let mut grpc = onsale_proto::v1::seat_maps_client::SeatMapsClient::connect(rp.grpc.clone())
        .await
        .expect("gRPC connects");
    for _ in 0..8 {
        // Right after its 201, before the projection can have folded it.
        let event = app.on_sale_event(2, 2, 5, None).await;
        let res = app
            .http
            .get(format!("{}/v1/events/{event}/seats?section=S1", app.base))
            .send()
            .await
            .expect("an answer");
        assert_eq!(res.status(), 200, "the seat map of a show just scheduled");
        let map: serde_json::Value = res.json().await.expect("json");
        let seats = map["seats"].as_array().expect("seats");
        assert_eq!(seats.len(), 10, "{map}");
        assert!(seats.iter().all(|s| s["status"] == "AVAILABLE"), "{map}");
        let sse = app
            .http
            .get(format!("{}/v1/events/{event}/updates", app.base))
            .send()
            .await
            .expect("an answer");
        assert_eq!(sse.status(), 200, "SSE of a show just scheduled");
        drop(sse);
        let got = grpc
            .get_seat_map(onsale_proto::v1::GetSeatMapRequest {
                event_id: event.clone(),
                section: String::new(),
                all_seats: false,
            })
            .await
            .expect("gRPC reads it");
        assert_eq!(got.into_inner().sections.len(), 2);
    }
    // A hold made at once reaches a stream opened at once (its deltas follow seq 0).
    let event = app.on_sale_event(1, 1, 4, None).await;
    let mut stream = grpc
        .stream_deltas(onsale_proto::v1::StreamDeltasRequest {
            event_id: event.clone(),
            section: String::new(),
            all_seats: false,
            after_seq: 0,
        })
        .await
        .expect("a stream")
        .into_inner();
    let (status, _) = app
        .hold(
            &event,
            &app.fan("ann"),
            json!({"seatIds": ["S1-R1-1"]}),
            None,
        )
        .await;
    assert_eq!(status, 201);
    let first = tokio::time::timeout(Duration::from_secs(20), stream.message())
        .await
        .expect("a delta within 20 s")
        .expect("the stream goes on")
        .expect("an update");
    match first.update {
        Some(onsale_proto::v1::seat_map_update::Update::Delta(d)) => assert_eq!(d.seq, 1),
        other => panic!("the hold's delta, seq 1: {other:?}"),
    }
    // And the map after it says so, at seq 1 (seq 0 is the show as scheduled).
    rp.eventually(&format!("/v1/events/{event}/seats"), "", |status, m| {
        status == 200 && m["seq"] == 1 && m["sections"][0]["held"] == 1
    })
    .await;
    rp.stop().await;
}

#[tokio::test]
async fn reads_without_a_token_are_limited_per_address_on_rest_and_grpc() {
    let db = TestDb::new().await.expect("db");
    let rp = ReadPath::spawn_parts(
        &db,
        &shared_brokers().expect("broker"),
        |s| {
            s.limits.rate_read_address_per_sec = 1;
            s.limits.rate_read_address_burst = 3;
            // One person's reads: fewer than an address's (many people behind a NAT).
            s.limits.rate_read_account_per_sec = 1;
            s.limits.rate_read_account_burst = 2;
        },
        &[],
    )
    .await
    .expect("the read path starts");
    let app = &rp.app;
    let event = app.on_sale_event(1, 1, 4, None).await;
    let url = format!("{}/v1/events/{event}/seats", app.base);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(
            app.http
                .get(&url)
                .send()
                .await
                .expect("answer")
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    // With a token the same reads are the account's budget (its own, smaller), not the
    // address's.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = app
            .http
            .get(&url)
            .bearer_auth(app.fan("ann"))
            .send()
            .await
            .expect("answer");
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
    let mut grpc = onsale_proto::v1::seat_maps_client::SeatMapsClient::connect(rp.grpc.clone())
        .await
        .expect("gRPC connects");
    let refused = grpc
        .get_seat_map(onsale_proto::v1::GetSeatMapRequest {
            event_id: event.clone(),
            section: String::new(),
            all_seats: false,
        })
        .await
        .expect_err("past the address's rate");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(refused.metadata().get("retry-after").is_some());
    rp.stop().await;
}

#[tokio::test]
async fn a_flood_of_public_reads_neither_pauses_the_line_nor_refuses_orders() {
    let db = TestDb::new().await.expect("db");
    let mut room = onsale_tests::waiting_room::Room::start(&db, |_| {})
        .await
        .expect("a room");
    room.start_admitter().await;
    let event = room.show(1, 1, 10, chrono::Duration::minutes(-1)).await;
    let app = &room.app;
    // The flood: every connection of the public pool taken (as slow anonymous reads would).
    let public = app.server.public_pool.clone();
    let mut taken = Vec::new();
    while let Ok(Ok(c)) = tokio::time::timeout(Duration::from_millis(500), public.acquire()).await {
        taken.push(c);
    }
    assert!(!taken.is_empty());
    let (status, _) = app.get(&format!("/v1/events/{event}/seats"), "").await;
    assert_eq!(status, 503, "public reads wait for the flood");
    // The line still admits, and a fan holds and orders: nothing on those paths waits for
    // the public pool (the admitter's health is the write path's).
    let session = room.enter_sale(&event, "ann").await;
    let (status, hold) = room
        .hold(
            &event,
            "ann",
            Some(&session),
            json!({"seatIds": ["S1-R1-1"]}),
        )
        .await;
    assert_eq!(status, 201, "{hold}");
    let (status, order) = room.order("ann", &session, &hold["holdId"], "k-ann").await;
    assert_eq!(status, 202, "{order}");
    drop(taken);
}

/// `n` made-up hold releases by `fan` through `api` (with `X-Forwarded-For: xff` if given):
/// their statuses.
async fn bogus_releases(api: &Api, fan: &str, n: usize, xff: Option<&str>) -> Vec<u16> {
    let token = api.fan(fan);
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        let (hold, _) = made_up_ids();
        let mut req = api
            .http
            .delete(format!("{}/v1/holds/{hold}", api.base))
            .bearer_auth(&token);
        if let Some(x) = xff {
            req = req.header("x-forwarded-for", x);
        }
        statuses.push(req.send().await.expect("an answer").status().as_u16());
    }
    statuses
}

#[tokio::test]
async fn an_accounts_budget_holds_across_nodes_and_each_node_limits_alone_without_redis() {
    let db = TestDb::new().await.expect("db");
    let url = onsale_tests::waiting_room::redis_url()
        .await
        .expect("redis");
    let limited = |redis: String| {
        move |s: &mut Settings| {
            s.limits.rate_account_per_sec = 1;
            s.limits.rate_account_burst = 3;
            s.waiting_room.redis_url = Some(redis);
        }
    };
    let a = app_with(&db, &[Part::Api], limited(url.clone())).await;
    let b = app_with(&db, &[Part::Api], limited(url.clone())).await;
    // Both nodes keep their budgets in Redis once connected (a probe's key shows up there).
    let redis = redis::Client::open(url.as_str()).expect("a client");
    for (node, name) in [(&a, "probe-a"), (&b, "probe-b")] {
        wait_for(
            "the node's limits reach Redis",
            Duration::from_secs(10),
            || {
                let (api, redis) = (node.api.clone(), redis.clone());
                async move {
                    bogus_releases(&api, name, 1, None).await;
                    let mut c = redis
                        .get_multiplexed_async_connection()
                        .await
                        .expect("redis");
                    redis::cmd("EXISTS")
                        .arg(format!("rl:a:{name}"))
                        .query_async::<i64>(&mut c)
                        .await
                        .is_ok_and(|n| n == 1)
                }
            },
        )
        .await;
    }
    // Three on node a spend the account's burst; node b knows it.
    assert_eq!(bogus_releases(&a, "bot", 3, None).await, [404, 404, 404]);
    assert_eq!(
        bogus_releases(&b, "bot", 1, None).await,
        [429],
        "one budget for both nodes"
    );
    // A node remembers what Redis refused until Redis said it would allow: a flood of
    // refused requests costs no round trip each. Shown by taking the budget away from Redis
    // right after a refusal: the node still refuses, for as long as the refusal said (the
    // check is kept to answers that came back well within that second).
    let mut c = redis
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let mut shown = false;
    for _ in 0..20 {
        let refused = std::time::Instant::now();
        if bogus_releases(&b, "bot", 1, None).await != [429] {
            continue;
        }
        redis::cmd("DEL")
            .arg("rl:a:bot")
            .query_async::<i64>(&mut c)
            .await
            .expect("del");
        let again = bogus_releases(&b, "bot", 1, None).await;
        if refused.elapsed() < Duration::from_millis(400) {
            assert_eq!(again, [429], "refused from memory, Redis not asked");
            shown = true;
            break;
        }
        // Too slow to tell (a loaded machine): spend the budget again and retry.
        bogus_releases(&a, "bot", 3, None).await;
    }
    assert!(shown, "one refusal and its repeat within 400 ms");
    // Redis away (nothing listens there): each node still limits, on its own budgets.
    let dead = format!("redis://127.0.0.1:{}/", onsale_tests::free_port());
    let c = app_with(&db, &[Part::Api], limited(dead)).await;
    assert_eq!(
        bogus_releases(&c, "bot", 4, None).await,
        [404, 404, 404, 429]
    );
}

#[tokio::test]
async fn fans_behind_one_address_are_not_punished_for_the_bots_among_them() {
    let db = TestDb::new().await.expect("db");
    let app = app_with(&db, &[Part::Api], |s| {
        s.limits.rate_account_per_sec = 5;
        s.limits.rate_account_burst = 5;
        s.limits.rate_address_per_sec = 100;
        s.limits.rate_address_burst = 100;
        s.limits.trusted_proxies = vec!["127.0.0.1/32".parse().expect("a block")];
    })
    .await;
    let event = app.on_sale_event(1, 8, 10, None).await;
    let nat = "198.51.100.7";
    // Four bot accounts flood made-up ids from the address...
    let started = std::time::Instant::now();
    let bots: Vec<_> = (0..4)
        .map(|i| {
            let api = app.api.clone();
            tokio::spawn(async move {
                let statuses = bogus_releases(&api, &format!("bot-{i}"), 100, Some(nat)).await;
                (statuses, started.elapsed())
            })
        })
        .collect();
    // ...while 24 fans behind it hold three seats each.
    let fans: Vec<_> = (0..24u32)
        .map(|f| {
            let (api, event) = (app.api.clone(), event.clone());
            tokio::spawn(async move {
                let token = api.fan(&format!("fan-{f}"));
                let mut statuses = Vec::new();
                for k in 0..3 {
                    let n = f * 3 + k;
                    let seat = format!("S1-R{}-{}", n / 10 + 1, n % 10 + 1);
                    let r = api
                        .http
                        .post(format!("{}/v1/events/{event}/holds", api.base))
                        .bearer_auth(&token)
                        .header("x-forwarded-for", nat)
                        .json(&json!({"seatIds": [seat]}))
                        .send()
                        .await
                        .expect("an answer");
                    statuses.push(r.status().as_u16());
                }
                statuses
            })
        })
        .collect();
    let mut fan = Vec::new();
    for f in fans {
        fan.extend(f.await.expect("a fan"));
    }
    // Each bot got its account's budget and no more (5 at once, then 5 a second of its
    // flood, whatever the machine's pace), the rest 429.
    for b in bots {
        let (statuses, took) = b.await.expect("a bot");
        let allowed = statuses.iter().filter(|s| **s != 429).count();
        let budget = 5.0 + 5.0 * took.as_secs_f64() + 1.0;
        assert!(
            allowed as f64 <= budget,
            "{allowed} of 100 allowed in {took:?}: more than the account's budget"
        );
        assert!(
            statuses.iter().all(|s| *s == 404 || *s == 429),
            "{statuses:?}"
        );
    }
    assert!(
        fan.iter().all(|s| *s == 201),
        "every fan's hold granted: {fan:?}"
    );
}

/// Issue 53, item 4: the API's metrics are served on the operators' listener only, unless
/// `--public-metrics` says otherwise; the probes answer there too.
#[tokio::test]
async fn metrics_are_served_to_operators_only_unless_said_otherwise() {
    let db = TestDb::new().await.expect("db");
    let app = app_with(&db, &[Part::Api], |s| {
        s.metrics_listen = Some("127.0.0.1:0".into());
    })
    .await;
    let public = app
        .http
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .expect("an answer");
    assert_eq!(public.status(), 404, "no metrics on the public listener");
    let said = app_with(&db, &[Part::Api], |s| s.public_metrics = true).await;
    let (status, _) = said.get("/metrics", "").await;
    assert_eq!(status, 200, "--public-metrics");
    // Something for the page to count.
    let event = app.on_sale_event(1, 1, 2, None).await;
    let (status, _) = app
        .hold(&event, &app.fan("ann"), json!({"quantity": 1}), None)
        .await;
    assert_eq!(status, 201);
    let operator = app.server.metrics_addr().expect("an operators' listener");
    for path in ["/metrics", "/healthz", "/readyz"] {
        let r = app
            .http
            .get(format!("http://{operator}{path}"))
            .send()
            .await
            .expect("an answer");
        // The operators' /readyz says what the public one says (the API's readiness, refreshed
        // in the background: here not ready, as no projection runs beside the API).
        if path == "/readyz" {
            onsale_tests::wait_for("the operators' /readyz", Duration::from_secs(10), || {
                let req = app.http.get(format!("http://{operator}{path}")).send();
                async move {
                    match req.await {
                        Ok(r) => r.text().await.is_ok_and(|t| !t.contains("starting")),
                        Err(_) => false,
                    }
                }
            })
            .await;
            let operators = app
                .http
                .get(format!("http://{operator}{path}"))
                .send()
                .await
                .expect("an answer")
                .status();
            let (public, _) = app.get(path, "").await;
            assert_eq!(operators.as_u16(), public, "{path}");
            continue;
        }
        assert_eq!(r.status(), 200, "{path}");
        if path == "/metrics" {
            let text = r.text().await.expect("text");
            assert!(
                text.contains("onsale_"),
                "the process's metrics: {text:.200}"
            );
        }
    }
}

#[tokio::test]
async fn a_caller_who_keeps_asking_for_what_does_not_exist_is_refused_for_a_while() {
    let db = TestDb::new().await.expect("db");
    let app = app_with(&db, &[Part::Api], |s| {
        s.limits.rate_misses_per_sec = 1;
        s.limits.rate_misses_burst = 3;
        s.limits.trusted_proxies = vec!["127.0.0.1/32".parse().expect("a block")];
    })
    .await;
    let event = app.on_sale_event(1, 1, 4, None).await;
    let read = |path: String, from: &'static str, token: Option<String>| {
        let api = app.api.clone();
        async move {
            let mut r = api
                .http
                .get(format!("{}{path}", api.base))
                .header("x-forwarded-for", from);
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            r.send().await.expect("an answer").status().as_u16()
        }
    };
    let (scanner, neighbour) = ("198.51.100.7", "198.51.100.8");
    // Reads of shows that do not exist: a few are answered, then the address is refused.
    let mut statuses = Vec::new();
    while statuses.last() != Some(&429) && statuses.len() < 12 {
        let made_up = uuid::Uuid::now_v7();
        statuses.push(read(format!("/v1/events/{made_up}"), scanner, None).await);
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    assert!(
        statuses.iter().filter(|s| **s == 404).count() >= 3,
        "its burst of misses answered first: {statuses:?}"
    );
    // Refused now even for a show that exists: the refusal is the caller's, not the id's...
    assert_eq!(
        read(format!("/v1/events/{event}"), scanner, None).await,
        429
    );
    // ...and nobody else's: another address, and an account behind the same one.
    assert_eq!(
        read(format!("/v1/events/{event}"), neighbour, None).await,
        200
    );
    assert_eq!(
        read(format!("/v1/events/{event}"), scanner, Some(app.fan("ann"))).await,
        200
    );
    // The refusal lasts a while (10 s), then the address reads again.
    let waited = wait_for(
        "the scanner's reads are served again",
        Duration::from_secs(30),
        || {
            let status = read(format!("/v1/events/{event}"), scanner, None);
            async move { status.await == 200 }
        },
    )
    .await;
    assert!(waited >= Duration::from_secs(5), "refused for {waited:?}");
}
