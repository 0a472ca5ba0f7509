//! The waiting room against the real Redis and PostgreSQL that `make test` starts.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use onsale_tests::waiting_room::Room;
use onsale_tests::TestDb;
use onsale_waiting_room::tokens::{self, AdmissionClaims, Signer};
use serde_json::{json, Value};

fn qt(v: &Value) -> String {
    v["queueToken"].as_str().expect("queue token").to_owned()
}

#[tokio::test]
async fn positions_are_one_per_account_in_join_order_and_bound_to_it() {
    let db = TestDb::new().await.expect("db");
    let room = Room::start(&db, |_| {}).await.expect("room");
    let event = room.show(1, 2, 10, chrono::Duration::seconds(-60)).await;
    let mut last = 0;
    let mut tokens = HashMap::new();
    for i in 0..40 {
        let fan = format!("fan{i}");
        let j = room.join(&event, &fan).await;
        let pos = j["position"]
            .as_i64()
            .expect("a position once the sale is open");
        assert!(
            pos > last,
            "positions grow in join order: {pos} after {last}"
        );
        last = pos;
        tokens.insert(fan, (pos, qt(&j)));
    }
    // Joining again answers the same place.
    let again = room.join(&event, "fan7").await;
    assert_eq!(again["position"].as_i64(), Some(tokens["fan7"].0));
    // A queue token works for its own account only.
    let (status, v) = room.view(&event, "fan7", &tokens["fan7"].1).await;
    assert_eq!(
        (status, v["position"].as_i64()),
        (200, Some(tokens["fan7"].0)),
        "{v}"
    );
    let (status, v) = room.view(&event, "fan8", &tokens["fan7"].1).await;
    assert_eq!(
        (status, v["code"].clone()),
        (403, json!("INVALID_QUEUE_TOKEN"))
    );
    let (status, _) = room.view(&event, "fan7", "forged.token.here").await;
    assert_eq!(status, 403);
}

/// Issue 53, item 2: the line's status streams have slots of their own (seat-map streams
/// cannot take them: here the seat maps have none at all), and a fan whose stream is refused
/// still reads its standing by asking (the fan app falls back to that).
#[tokio::test]
async fn the_lines_streams_have_slots_of_their_own_and_a_refused_one_leaves_the_standing_readable()
{
    let db = TestDb::new().await.expect("db");
    let room = Room::start_with(&db, |s| {
        s.limits.max_streams = 0;
        s.limits.max_queue_streams = 1;
    })
    .await
    .expect("room");
    let event = room.show(1, 2, 10, chrono::Duration::seconds(-60)).await;
    let ann = room.join(&event, "ann").await;
    let bob = room.join(&event, "bob").await;
    let stream = |fan: &str, token: &str| {
        room.app
            .http
            .get(format!("{}/v1/events/{event}/waiting-room", room.app.base))
            .bearer_auth(room.app.fan(fan))
            .header("x-onsale-queue-token", token)
            .header("accept", "text/event-stream")
            .send()
    };
    let held = stream("ann", &qt(&ann)).await.expect("an answer");
    assert_eq!(held.status(), 200, "the line's own slot");
    let refused = stream("bob", &qt(&bob)).await.expect("an answer");
    assert_eq!(refused.status(), 503, "the line's one slot is taken");
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.expect("problem+json");
    assert_eq!(body["code"], "TOO_MANY_STREAMS");
    let (status, v) = room.view(&event, "bob", &qt(&bob)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["position"], bob["position"],
        "bob's standing, asked for: {v}"
    );
    drop(held);
}

/// Issue 53, item 3: the line's enter, heartbeat and leave are budgeted writes, and one
/// naming a show that does not exist spends its caller's misses: an account flooding
/// heartbeats at made-up shows is answered 429 with `Retry-After` within its burst, and
/// another account is served meanwhile.
#[tokio::test]
async fn a_flood_of_heartbeats_at_made_up_shows_is_refused_and_others_are_served() {
    let db = TestDb::new().await.expect("db");
    let room = Room::start_with(&db, |s| {
        s.limits.rate_account_per_sec = 10;
        s.limits.rate_account_burst = 20;
        s.limits.rate_misses_per_sec = 1;
        s.limits.rate_misses_burst = 5;
    })
    .await
    .expect("room");
    let event = room.show(1, 2, 10, chrono::Duration::seconds(-60)).await;
    let mallory = room.app.fan("mallory");
    let mut answers = Vec::new();
    let mut refusal = None;
    for _ in 0..12 {
        let made_up = uuid::Uuid::now_v7().simple();
        for (path, body) in [
            ("heartbeat", json!({"sessionId": "s"})),
            ("enter", json!({"admissionToken": "t"})),
            ("leave", json!({"sessionId": "s"})),
        ] {
            let res = room
                .app
                .http
                .post(format!("{}/v1/events/{made_up}/{path}", room.app.base))
                .bearer_auth(&mallory)
                .json(&body)
                .send()
                .await
                .expect("an answer");
            answers.push(res.status().as_u16());
            if res.status() == 429 && refusal.is_none() {
                let retry = res.headers().get("retry-after").cloned();
                let body: Value = res.json().await.expect("problem+json");
                refusal = Some((retry, body));
            }
        }
    }
    let first_refused = answers.iter().position(|s| *s == 429);
    assert!(
        first_refused.is_some_and(|i| i <= 6),
        "refused past the misses' burst of 5: {answers:?}"
    );
    assert!(
        answers[first_refused.unwrap_or(0)..]
            .iter()
            .all(|s| *s == 429),
        "and refused from then on: {answers:?}"
    );
    let (retry, body) = refusal.expect("a refusal");
    assert!(retry.is_some(), "Retry-After");
    assert_eq!(body["code"], "RATE_LIMITED", "{body}");
    // Another account joins and reads its place meanwhile.
    let ann = room.join(&event, "ann").await;
    let (status, v) = room.view(&event, "ann", &qt(&ann)).await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test]
async fn a_pre_queue_is_drawn_in_random_order_at_the_opening() {
    let db = TestDb::new().await.expect("db");
    let mut room = Room::start(&db, |_| {}).await.expect("room");
    let event = room.show(1, 2, 10, chrono::Duration::seconds(3)).await;
    let mut fans = Vec::new();
    for i in 0..30 {
        let fan = format!("early{i:02}");
        let j = room.join(&event, &fan).await;
        assert_eq!(j["status"], "PRE_QUEUE", "{j}");
        assert!(j["position"].is_null());
        fans.push((fan, qt(&j)));
    }
    // A browser's SSE stream: status events while it waits, then the admission.
    let sse = {
        let (http, base, token, qt) = (
            room.app.http.clone(),
            room.app.base.clone(),
            room.app.fan(&fans[0].0),
            fans[0].1.clone(),
        );
        let url = format!("{base}/v1/events/{event}/waiting-room");
        tokio::spawn(async move {
            let mut res = http
                .get(url)
                .bearer_auth(token)
                .header("x-onsale-queue-token", qt)
                .header("accept", "text/event-stream")
                .send()
                .await
                .expect("stream");
            let mut seen = String::new();
            while !seen.contains("event: admitted") {
                let chunk = tokio::time::timeout(Duration::from_secs(15), res.chunk())
                    .await
                    .expect("an event within 15 s")
                    .expect("read")
                    .expect("the stream stays open until the admission");
                seen.push_str(&String::from_utf8_lossy(&chunk));
            }
            seen
        })
    };
    room.start_admitter().await;
    // The stream runs until the fan is admitted (each event within 15 s).
    let seen = tokio::time::timeout(Duration::from_secs(60), sse)
        .await
        .expect("admitted within 60 s")
        .expect("sse");
    assert!(
        seen.contains("event: status") && seen.contains("PRE_QUEUE"),
        "{seen}"
    );
    assert!(seen.contains("admissionToken"), "{seen}");
    let mut order = Vec::new();
    for (fan, token) in &fans {
        let (_, v) = room.view(&event, fan, token).await;
        order.push(
            v["position"]
                .as_i64()
                .unwrap_or_else(|| panic!("{fan} drawn: {v}")),
        );
    }
    let drawn: BTreeSet<i64> = order.iter().copied().collect();
    assert_eq!(
        drawn,
        (1..=30).collect(),
        "the pre-queue takes positions 1..30"
    );
    assert_ne!(order, (1..=30).collect::<Vec<_>>(), "and not in join order");
    let late = room.join(&event, "late").await;
    assert_eq!(late["position"].as_i64(), Some(31), "{late}");
}

/// A join asks for its candidate position before the opening (none yet: 0) and runs its script
/// after another join's block opened the line: the fan still gets exactly one place, after the
/// pre-queue and outside every block handed out.
#[tokio::test]
async fn a_join_straddling_the_opening_still_gets_a_place_of_its_own() {
    use onsale_waiting_room::store::Store;
    let url = onsale_tests::waiting_room::redis_url()
        .await
        .expect("redis");
    let store = Store::connect(
        redis::Client::open(url.as_str()).expect("a Redis URL"),
        &tokio_util::sync::CancellationToken::new(),
    )
    .await
    .expect("store");
    let show = onsale_domain::ShowId::random();
    let now = chrono::Utc::now().timestamp_millis();
    let opens = now + 60_000;
    for (i, fan) in ["early-a", "early-b", "early-c"].iter().enumerate() {
        assert_eq!(
            store
                .join(show, fan, 0, i as u64, false)
                .await
                .expect("redis"),
            -1
        );
    }
    // The straddler asked before the opening: no block yet.
    assert_eq!(
        store.take_block(show, now, opens).await.expect("redis"),
        None
    );
    // Another process's join, after the opening, takes a block and so opens the line.
    let end = store
        .take_block(show, opens, opens)
        .await
        .expect("redis")
        .expect("a block after the opening");
    let block = end - onsale_waiting_room::store::BLOCK + 1..=end;
    assert!(
        *block.start() > 3,
        "blocks come after the pre-queue: {block:?}"
    );
    let p = store
        .join(show, "straddler", 0, 7, false)
        .await
        .expect("redis");
    assert!(
        p > 3 && !block.contains(&p),
        "a place of its own: {p}, block {block:?}"
    );
    assert_eq!(
        store
            .standing(show, "straddler")
            .await
            .expect("redis")
            .position,
        Some(p)
    );
    // Asking again keeps the place; the pre-queue is still drawn into 1..=3.
    assert_eq!(
        store
            .join(show, "straddler", 0, 7, false)
            .await
            .expect("redis"),
        p
    );
    let tick = store
        .tick(show, opens, opens, 10, 30_000, false)
        .await
        .expect("redis");
    assert_eq!(tick.drawn, 3);
    let mut early = Vec::new();
    for fan in ["early-a", "early-b", "early-c"] {
        early.push(
            store
                .standing(show, fan)
                .await
                .expect("redis")
                .position
                .expect("drawn"),
        );
    }
    early.sort_unstable();
    assert_eq!(early, vec![1, 2, 3]);
}

#[tokio::test]
async fn two_admitters_never_let_live_sessions_exceed_n_and_lapsed_leases_free_slots() {
    const N: i64 = 15;
    let db = TestDb::new().await.expect("db");
    let mut room = Room::start(&db, |c| {
        c.target = N as u64;
        c.tick_ms = 40;
        c.lease_secs = 1;
    })
    .await
    .expect("room");
    let event = room.show(1, 2, 10, chrono::Duration::seconds(-60)).await;
    let mut fans = Vec::new();
    for i in 0..120 {
        let fan = format!("fan{i}");
        let j = room.join(&event, &fan).await;
        fans.push((fan, qt(&j)));
    }
    room.start_admitter().await;
    room.start_admitter().await;
    let room = Arc::new(room);
    let peak = Arc::new(AtomicI64::new(0));
    let watcher = {
        let (room, peak, event) = (room.clone(), peak.clone(), event.clone());
        tokio::spawn(async move {
            loop {
                let live = room.live(&event).await;
                peak.fetch_max(live, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    // Every fan waits, enters, and walks away without a word: only the lease frees the slot.
    let mut tasks = Vec::new();
    for (fan, token) in fans {
        let (room, event) = (room.clone(), event.clone());
        tasks.push(tokio::spawn(async move {
            let admission = room.admitted(&event, &fan, &token, 60).await;
            let give_up = std::time::Instant::now() + Duration::from_secs(120);
            loop {
                let (status, body) = room.enter(&event, &fan, &admission).await;
                match status {
                    200 => break,
                    // Full this second, or Redis slow to answer: the admission stays good.
                    429 | 503 if std::time::Instant::now() < give_up => {
                        tokio::time::sleep(Duration::from_millis(100)).await
                    }
                    _ => panic!("{fan} could not enter: {status} {body}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("fan");
    }
    watcher.abort();
    let peak = peak.load(Ordering::Relaxed);
    assert!(peak <= N, "live sessions peaked at {peak} > N = {N}");
    assert!(peak >= N - 3, "the zone was kept full ({peak} of {N})");
}

#[tokio::test]
async fn replayed_expired_forged_and_foreign_tokens_and_sessions_are_refused() {
    let db = TestDb::new().await.expect("db");
    let mut room = Room::start(&db, |c| c.target = 5).await.expect("room");
    let event = room.show(1, 2, 10, chrono::Duration::seconds(-60)).await;
    let ann = room.join(&event, "ann").await;
    room.join(&event, "bob").await;
    room.start_admitter().await;
    let admission = room.admitted(&event, "ann", &qt(&ann), 10).await;
    // Someone else's admission is refused; so is a forged one.
    let (status, body) = room.enter(&event, "bob", &admission).await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!("INVALID_ADMISSION"))
    );
    let forged = Signer::new("not-the-secret").sign(&AdmissionClaims {
        aud: tokens::ADMISSION.into(),
        sub: "ann".into(),
        show: event.clone(),
        pos: 1,
        jti: "ann:1".into(),
        exp_ms: chrono::Utc::now().timestamp_millis() + 60_000,
        paused_ms: 0,
        exp: chrono::Utc::now().timestamp() + 3600,
        fallback: false,
    });
    assert_eq!(
        room.enter(&event, "ann", &forged).await.1["code"],
        "INVALID_ADMISSION"
    );
    // An admission whose grace window passed.
    let expired = room.room.signer.sign(&AdmissionClaims {
        aud: tokens::ADMISSION.into(),
        sub: "ann".into(),
        show: event.clone(),
        pos: 1,
        jti: "ann:old".into(),
        exp_ms: chrono::Utc::now().timestamp_millis() - 1_000,
        paused_ms: 0,
        exp: chrono::Utc::now().timestamp() + 3600,
        fallback: false,
    });
    assert_eq!(
        room.enter(&event, "ann", &expired).await.1["code"],
        "ADMISSION_EXPIRED"
    );
    // The real one: a retry (a lost answer) gets the same session, not a second slot.
    let (status, entry) = room.enter(&event, "ann", &admission).await;
    assert_eq!(status, 200, "{entry}");
    let (status, again) = room.enter(&event, "ann", &admission).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(room.live(&event).await, 1, "one session for one admission");
    let session = entry["sessionId"].as_str().expect("session").to_owned();
    // Holds need the caller's own live session; the seat rules still apply underneath.
    let (status, body) = room
        .hold(&event, "ann", None, json!({"seatIds": ["S1-R1-1"]}))
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!("ADMISSION_REQUIRED"))
    );
    let (status, body) = room
        .hold(
            &event,
            "bob",
            Some(&session),
            json!({"seatIds": ["S1-R1-1"]}),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!("ADMISSION_REQUIRED")),
        "a session replayed by another account"
    );
    let (status, hold) = room
        .hold(
            &event,
            "ann",
            Some(&session),
            json!({"seatIds": ["S1-R1-1"]}),
        )
        .await;
    assert_eq!(status, 201, "{hold}");
    let (status, body) = room
        .hold(&event, "ann", Some(&session), json!({"seatIds": ["S1-R1-2", "S1-R1-3", "S1-R1-4", "S1-R1-5", "S1-R1-6", "S1-R1-7", "S1-R1-8", "S1-R1-9"]}))
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (429, json!("HOLD_LIMIT")),
        "the cap holds inside a session"
    );
    // A heartbeat renews the lease; an order goes through with the session too.
    let (status, beat) = room.heartbeat(&event, "ann", &session).await;
    assert_eq!(status, 200, "{beat}");
    let renewed = beat["sessionId"].as_str().expect("session");
    let (status, order) = room
        .order("ann", renewed, &hold["holdId"], "wr-order-1")
        .await;
    assert_eq!(status, 202, "{order}");
    // Once the session ended, the admission is spent and the session opens nothing.
    let (status, _) = room
        .app
        .post(
            &format!("/v1/events/{event}/leave"),
            &room.app.fan("ann"),
            json!({"sessionId": session}),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, body) = room.heartbeat(&event, "ann", &session).await;
    assert_eq!(
        (status, body["code"].clone()),
        (410, json!("SESSION_EXPIRED")),
        "a heartbeat does not revive an ended session"
    );
    let (status, body) = room.enter(&event, "ann", &admission).await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!("ADMISSION_USED"))
    );
    let (status, body) = room
        .hold(
            &event,
            "ann",
            Some(&session),
            json!({"seatIds": ["S1-R2-1"]}),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!("ADMISSION_REQUIRED")),
        "a session that left"
    );
}

#[tokio::test]
async fn admission_pauses_when_the_hold_path_fails_resumes_after_and_extends_the_grace() {
    let db = TestDb::new().await.expect("db");
    let mut room = Room::start(&db, |c| {
        c.target = 3;
        c.grace_secs = 2;
        c.lease_secs = 60;
    })
    .await
    .expect("room");
    let event = room.show(1, 2, 10, chrono::Duration::seconds(-60)).await;
    let mut fans = Vec::new();
    for i in 0..10 {
        let j = room.join(&event, &format!("fan{i}")).await;
        fans.push(qt(&j));
    }
    room.start_admitter().await;
    // fan0 is admitted (its 2 s grace starts); then the event store goes away.
    let admission = room.admitted(&event, "fan0", &fans[0], 10).await;
    db.close().await.expect("close");
    // The controller sees the store away and pauses (the pause is published)...
    onsale_tests::wait_for("admission pauses", Duration::from_secs(10), || {
        let room = &room;
        let event = &event;
        async move { room.get_int(event, "paused").await > 0 }
    })
    .await;
    let before = room.get_int(&event, "admitted").await;
    // ...for longer than fan0's 2 s grace window, admitting nobody.
    onsale_tests::wait_for("a pause of 2.5 s", Duration::from_secs(15), || {
        let room = &room;
        let event = &event;
        async move { room.get_int(event, "paused").await >= 2_500 }
    })
    .await;
    assert_eq!(
        room.get_int(&event, "admitted").await,
        before,
        "nothing admitted while the store is away"
    );
    let paused = room.get_int(&event, "paused").await;
    assert!(paused >= 2_500, "the pause is published: {paused} ms");
    db.reopen().await.expect("reopen");
    // fan0's 2 s window passed during the 3 s pause, but the pause extends it.
    let (status, body) = room.enter(&event, "fan0", &admission).await;
    assert_eq!(status, 200, "the pause extended the grace window: {body}");
    // Admission resumes by itself once the store answers.
    onsale_tests::wait_for(
        "admission resumed after the store came back",
        Duration::from_secs(10),
        || async { room.get_int(&event, "admitted").await > before },
    )
    .await;
}

#[tokio::test]
async fn an_on_sale_of_thousands_of_fans_through_the_queue_sells_no_seat_twice() {
    const FANS: usize = 1_500;
    let db = TestDb::new().await.expect("db");
    let mut room = Room::start(&db, |c| {
        c.target = 150;
        c.tick_ms = 50;
    })
    .await
    .expect("room");
    let event = room.show(2, 10, 25, chrono::Duration::seconds(2)).await; // 500 seats
    let (room_, event_) = (&room, &event);
    let joined: Vec<(String, String)> = futures::future::join_all((0..FANS).map(|i| async move {
        let fan = format!("fan{i}");
        let j = room_.join(event_, &fan).await;
        (fan, qt(&j))
    }))
    .await;
    room.start_admitter().await;
    let room = Arc::new(room);
    let orders = Arc::new(tokio::sync::Mutex::new(Vec::<(String, String)>::new()));
    let mut tasks = Vec::new();
    for (i, (fan, token)) in joined.into_iter().enumerate() {
        let (room, event, orders) = (room.clone(), event.clone(), orders.clone());
        tasks.push(tokio::spawn(async move {
            let admission = room.admitted(&event, &fan, &token, 120).await;
            let give_up = std::time::Instant::now() + Duration::from_secs(120);
            let session = loop {
                let (status, body) = room.enter(&event, &fan, &admission).await;
                match status {
                    200 => break body["sessionId"].as_str().expect("session").to_owned(),
                    // Full this second, or Redis slow to answer: the admission stays good.
                    429 | 503 if std::time::Instant::now() < give_up => {
                        tokio::time::sleep(Duration::from_millis(100)).await
                    }
                    _ => panic!("{fan}: {status} {body}"),
                }
            };
            let want = if i % 3 == 0 {
                json!({"quantity": 2})
            } else {
                json!({"quantity": 1, "section": "S1"})
            };
            let (status, hold) = room.hold(&event, &fan, Some(&session), want).await;
            // Done or beaten to the seats: the fan leaves, and the next one gets the slot.
            let leave = || async {
                let path = format!("/v1/events/{event}/leave");
                let body = json!({"sessionId": session});
                let (status, _) = room.app.post(&path, &room.app.fan(&fan), body, None).await;
                assert_eq!(status, 204, "{fan} leaves");
            };
            if status != 201 {
                assert!(status == 409, "{fan}: {status} {hold}");
                leave().await;
                return;
            }
            // A 503 (the machine saturated by this crowd) is "not placed, try again": the
            // fan does, with the same key, as a client should.
            let started = std::time::Instant::now();
            let (status, o) = loop {
                let (status, o) = room
                    .order(&fan, &session, &hold["holdId"], &format!("o-{fan}"))
                    .await;
                if status != 503 || started.elapsed() > Duration::from_secs(30) {
                    break (status, o);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            assert_eq!(status, 202, "{fan}: {o}");
            leave().await;
            orders
                .lock()
                .await
                .push((fan, o["orderId"].as_str().expect("order").to_owned()));
        }));
    }
    for t in tasks {
        t.await.expect("fan");
    }
    // Every seat in at most one order, by a replay of the log.
    let replayed = room.app.replay(&event).await;
    let mut seen = BTreeSet::new();
    let mut ordered = 0;
    for (_, order) in replayed.show.orders() {
        for &s in &order.seats {
            assert!(seen.insert(s), "seat {s} in two orders");
        }
        ordered += 1;
    }
    assert_eq!(ordered, orders.lock().await.len());
    assert!(ordered > 100, "the sale sold: {ordered} orders");
}

#[tokio::test]
async fn redis_away_falls_back_to_a_slow_pace_not_an_open_gate_and_recovers() {
    // A port nobody answers on yet: the service starts anyway, in fallback.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
        l.local_addr().expect("addr").port()
    };
    let db = TestDb::new().await.expect("db");
    let room = Room::start(&db, |c| {
        c.redis_url = Some(format!("redis://127.0.0.1:{port}/"));
        c.fallback_per_sec = 20;
    })
    .await
    .expect("room starts with Redis away");
    let event = room.show(1, 2, 10, chrono::Duration::seconds(-60)).await;
    let joined = room.join(&event, "ann").await;
    assert_eq!(
        (joined["status"].clone(), joined["position"].clone()),
        (json!("FALLBACK"), Value::Null)
    );
    // Admissions come at the fixed pace, without positions; the gate stays shut without one.
    let admission = room.admitted(&event, "ann", &qt(&joined), 10).await;
    // One admission per account and show: asked again, the same one, no second place taken.
    for _ in 0..3 {
        let (_, again) = room.view(&event, "ann", &qt(&joined)).await;
        assert_eq!(again["admissionToken"], json!(admission), "{again}");
    }
    let (status, body) = room
        .hold(&event, "ann", None, json!({"seatIds": ["S1-R1-1"]}))
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!("ADMISSION_REQUIRED"))
    );
    let (status, entry) = room.enter(&event, "ann", &admission).await;
    assert_eq!(status, 200, "{entry}");
    let session = entry["sessionId"].as_str().expect("session");
    let (status, hold) = room
        .hold(
            &event,
            "ann",
            Some(session),
            json!({"seatIds": ["S1-R1-1"]}),
        )
        .await;
    assert_eq!(status, 201, "{hold}");
    // The fallback's admission enters once: a retry while its session lives is answered...
    let (status, again) = room.enter(&event, "ann", &admission).await;
    assert_eq!(status, 200, "{again}");
    // ...a heartbeat renews the session PostgreSQL knows...
    let (status, beat) = room.heartbeat(&event, "ann", session).await;
    assert_eq!(status, 200, "{beat}");
    // ...and once the fan leaves, the session is gone for the gate and the heartbeat, and the
    // admission cannot open another.
    let (status, left) = room
        .app
        .post(
            &format!("/v1/events/{event}/leave"),
            &room.app.fan("ann"),
            json!({"sessionId": session}),
            None,
        )
        .await;
    assert_eq!(status, 204, "{left}");
    let (status, body) = room
        .hold(
            &event,
            "ann",
            Some(session),
            json!({"seatIds": ["S1-R1-2"]}),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!("ADMISSION_REQUIRED"))
    );
    let (status, body) = room.heartbeat(&event, "ann", session).await;
    assert_eq!(
        (status, body["code"].clone()),
        (410, json!("SESSION_EXPIRED"))
    );
    let (status, body) = room.enter(&event, "ann", &admission).await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!("ADMISSION_USED"))
    );
    // Redis comes up: positions come back.
    let dir = std::env::temp_dir().join(format!("onsale-redis-{port}"));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut redis = std::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server");
    let position = onsale_tests::wait_for_value(
        "bob's join given a position once Redis answers",
        Duration::from_secs(10),
        || async {
            let j = room.join(&event, "bob").await;
            j["position"].is_i64().then(|| j["position"].clone())
        },
    )
    .await;
    let _ = redis.kill();
    let _ = redis.wait();
    assert!(position.is_i64(), "a position once Redis answers");
}

/// Once a show starts its sale is over: the admitter stops ticking its line and every key of
/// it expires (an hour later), so Redis does not keep the lines of every past show.
#[tokio::test]
async fn the_line_of_a_show_that_started_is_retired_and_its_keys_expire() {
    let db = TestDb::new().await.expect("db");
    let mut room = Room::start(&db, |_| {}).await.expect("room");
    let store = room.room.store.clone();
    let now = chrono::Utc::now().timestamp_millis();
    let (past, coming) = (
        onsale_domain::ShowId::random(),
        onsale_domain::ShowId::random(),
    );
    store
        .register(past, now - 120_000, now - 1_000)
        .await
        .expect("register");
    store
        .register(coming, now - 120_000, now + 3_600_000)
        .await
        .expect("register");
    let mut redis = room.redis.clone();
    for show in [past, coming] {
        let _: () = redis::cmd("HSET")
            .arg(onsale_waiting_room::store::key(show, "pos"))
            .arg("ann")
            .arg(1)
            .query_async(&mut redis)
            .await
            .expect("a place in line");
    }
    room.start_admitter().await;
    onsale_tests::wait_for(
        "the started show is retired",
        Duration::from_secs(10),
        || {
            let mut redis = room.redis.clone();
            async move {
                let member: bool = redis::cmd("SISMEMBER")
                    .arg("wr:shows")
                    .arg(past.to_string())
                    .query_async(&mut redis)
                    .await
                    .expect("sismember");
                !member
            }
        },
    )
    .await;
    let ttl = |show| {
        let mut redis = room.redis.clone();
        async move {
            let ms: i64 = redis::cmd("PTTL")
                .arg(onsale_waiting_room::store::key(show, "pos"))
                .query_async(&mut redis)
                .await
                .expect("pttl");
            ms
        }
    };
    let expires = ttl(past).await;
    assert!(
        expires > 0 && expires <= onsale_waiting_room::admitter::RETIRED_KEYS_KEEP_MS,
        "{expires}"
    );
    assert_eq!(ttl(coming).await, -1, "a show still to come keeps its line");
    let shows = store.shows().await.expect("shows");
    assert!(shows.iter().any(|(s, _, _)| *s == coming));
    room.kill_admitters();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_with_no_seat_left_holds_the_line_back_says_why_and_lets_it_move_when_seats_return()
{
    let db = TestDb::new().await.expect("db");
    let mut room = Room::start(&db, |c| {
        c.target = 10;
        c.lease_secs = 60;
    })
    .await
    .expect("room");
    // The line reads the sale from the read models.
    for part in [onsale_server::Part::Relay, onsale_server::Part::Projections] {
        room.app.server.start(part).await.expect("the read path");
    }
    let event = room.show(1, 1, 2, chrono::Duration::seconds(-60)).await;
    room.start_admitter().await;
    let session = room.enter_sale(&event, "ann").await;
    // Ann holds both seats: none left, but her hold may lapse.
    let (status, hold) = room
        .hold(&event, "ann", Some(&session), json!({"quantity": 2}))
        .await;
    assert_eq!(status, 201, "{hold}");
    // The line reads the sale from the seat map: Bob joins once it shows both seats held.
    onsale_tests::wait_for(
        "the seat map shows the hold",
        Duration::from_secs(20),
        || {
            let (room, event) = (&room, &event);
            async move {
                let (_, m) = room.app.get(&format!("/v1/events/{event}/seats"), "").await;
                m["sections"][0]["held"] == 2
            }
        },
    )
    .await;
    let bob = room.join(&event, "bob").await;
    let bob_token = qt(&bob);
    let place = bob["position"].as_i64().expect("position");
    onsale_tests::wait_for("bob is told seats may return", Duration::from_secs(20), || {
        let (room, event, token) = (&room, &event, &bob_token);
        async move { room.view(event, "bob", token).await.1["availability"] == "SEATS_MAY_RETURN" }
    })
    .await;
    // The line is held back (as a pause: it grows), and Bob is not let in meanwhile.
    let held_back = room.get_int(&event, "paused").await;
    onsale_tests::wait_for("the line is held back", Duration::from_secs(20), || {
        let (room, event) = (&room, &event);
        async move { room.get_int(event, "paused").await >= held_back + 500 }
    })
    .await;
    let (_, view) = room.view(&event, "bob", &bob_token).await;
    assert_eq!(view["status"], "WAITING", "{view}");
    assert!(
        view["admittedThrough"].as_i64().expect("admitted") < place,
        "{view}"
    );
    // Ann lets her seats go: the line moves again and Bob is let in.
    let (status, _) = room
        .app
        .delete(
            &format!("/v1/holds/{}", hold["holdId"].as_str().expect("hold")),
            &room.app.fan("ann"),
        )
        .await;
    assert_eq!(status, 204);
    let admission = room.admitted(&event, "bob", &bob_token, 20).await;
    let (status, entry) = room.enter(&event, "bob", &admission).await;
    assert_eq!(status, 200, "{entry}");
    let session = entry["sessionId"].as_str().expect("session").to_owned();
    // Bob orders both seats: they wait for a payment that could still fail, so Cat, behind
    // him, is told they may return (not sold out), and waits.
    let (status, hold) = room
        .hold(&event, "bob", Some(&session), json!({"quantity": 2}))
        .await;
    assert_eq!(status, 201, "{hold}");
    let (status, order) = room
        .order("bob", &session, &hold["holdId"], "sold-out-order")
        .await;
    assert_eq!(status, 202, "{order}");
    onsale_tests::wait_for("pending seats may return", Duration::from_secs(20), || {
        let (room, event) = (&room, &event);
        async move {
            let (_, m) = room.app.get(&format!("/v1/events/{event}/seats"), "").await;
            m["sections"][0]["sold"] == 2 && m["sections"][0]["held"] == 0
        }
    })
    .await;
    let cat = room.join(&event, "cat").await;
    let cat_token = qt(&cat);
    onsale_tests::wait_for("cat is told seats may return", Duration::from_secs(20), || {
        let (room, event, token) = (&room, &event, &cat_token);
        async move { room.view(event, "cat", token).await.1["availability"] == "SEATS_MAY_RETURN" }
    })
    .await;
    let (_, view) = room.view(&event, "cat", &cat_token).await;
    assert_eq!(view["status"], "WAITING", "{view}");
}

/// Waits (30 s at most) until the show's line admits toward `n`, as /metrics says.
async fn admits_toward(room: &Room, event: &str, n: f64) {
    onsale_tests::wait_for(
        &format!("the line admits toward N = {n}"),
        Duration::from_secs(30),
        || async move { target_of(room, event).await == Some(n) },
    )
    .await;
}

/// The admission target a show's line admits toward, as the process's /metrics says it.
async fn target_of(room: &Room, event: &str) -> Option<f64> {
    let page = room.app.metrics_page().await;
    let name = onsale_telemetry::metrics::ADMISSION_TARGET;
    page.lines().find_map(|l| {
        l.strip_prefix(&format!("{name}{{show=\"{event}\"}} "))
            .and_then(|v| v.trim().parse().ok())
    })
}

#[tokio::test]
async fn with_bounds_set_n_follows_the_sales_conversion_and_the_seats_left() {
    let db = TestDb::new().await.expect("db");
    // N is 3, and may follow the sale between 1 and 3.
    let mut room = Room::start(&db, |c| {
        c.target = 3;
        c.target_min = Some(1);
        c.target_max = Some(3);
        c.lease_secs = 60;
    })
    .await
    .expect("room");
    for part in [onsale_server::Part::Relay, onsale_server::Part::Projections] {
        room.app.server.start(part).await.expect("the read path");
    }
    let event = room
        .show_with(
            1,
            1,
            40,
            chrono::Duration::seconds(-60),
            json!({"maxSeatsPerAccount": 64}),
        )
        .await;
    room.start_admitter().await;
    let session = room.enter_sale(&event, "ann").await;
    // Before the sale has said anything: the configured N (the gauge is set as a tick ends).
    admits_toward(&room, &event, 3.0).await;
    // Ann buys eight times four seats: every hold converts, four seats a hold, eight seats left.
    for i in 0..8 {
        let (status, hold) = room
            .hold(&event, "ann", Some(&session), json!({"quantity": 4}))
            .await;
        assert_eq!(status, 201, "{hold}");
        let (status, order) = room
            .order("ann", &session, &hold["holdId"], &format!("order-{i}"))
            .await;
        assert_eq!(status, 202, "{order}");
    }
    // Eight seats left at four a fan who buys: two fans can still buy them; N follows.
    admits_toward(&room, &event, 2.0).await;
    // Within it: Bob is let in beside Ann.
    let bob = room.join(&event, "bob").await;
    room.admitted(&event, "bob", &qt(&bob), 20).await;
}

/// An account named like the fallback's old id prefix ("fb": its admission's id is "fb:1")
/// enters through the line like anyone: only the signed `fallback` claim makes a fallback
/// admission, so its session is a live one in Redis, counted against N.
#[tokio::test]
async fn an_account_name_cannot_pass_for_a_fallback_admission() {
    let db = TestDb::new().await.expect("db");
    let mut room = Room::start(&db, |_| {}).await.expect("room");
    room.start_admitter().await;
    let event = room.show(1, 1, 10, chrono::Duration::minutes(-1)).await;
    room.enter_sale(&event, "fb").await;
    assert_eq!(
        room.live(&event).await,
        1,
        "the session is the line's, in Redis"
    );
}

#[tokio::test]
async fn a_show_hammered_into_failing_pauses_its_own_line_and_no_other() {
    use onsale_edge::admission::{BookingHealth, WriteProbe};
    let db = TestDb::new().await.expect("db");
    let room = Room::start(&db, |c| c.target = 3).await.expect("room");
    let hammered = room.show(1, 2, 10, chrono::Duration::seconds(-60)).await;
    let quiet = room.show(1, 2, 10, chrono::Duration::seconds(-60)).await;
    for event in [&hammered, &quiet] {
        for i in 0..5 {
            room.join(event, &format!("fan{i}")).await;
        }
    }
    // One show's holds all fail and crawl (its owner flooded); the other's are fine.
    let health = Arc::new(BookingHealth::default());
    for _ in 0..50 {
        health.record(hammered.parse().expect("id"), 2.0, false);
        health.record(quiet.parse().expect("id"), 0.01, true);
    }
    let answers: WriteProbe = Arc::new(|| Box::pin(async { true }));
    let mut admitter = onsale_waiting_room::admitter::Admitter::new(
        room.room.clone(),
        health,
        answers.clone(),
        answers,
    );
    for _ in 0..3 {
        admitter
            .tick(Duration::from_millis(100))
            .await
            .expect("a tick");
    }
    assert!(
        room.get_int(&quiet, "admitted").await > 0,
        "the quiet show's line moves"
    );
    assert_eq!(
        room.get_int(&hammered, "admitted").await,
        0,
        "the hammered show's line waits"
    );
    assert!(
        room.get_int(&hammered, "paused").await > 0,
        "its pause is published"
    );
    assert_eq!(room.get_int(&quiet, "paused").await, 0);
}
