//! Who may join a line (issue 18, part 6), against the real Redis and PostgreSQL: a show may
//! admit verified accounts only, and ask each join for a solved proof of work, checked with one
//! hash and spent once.

use std::time::Duration;

use onsale_tests::waiting_room::Room;
use onsale_tests::{wait_for, TestDb};
use onsale_waiting_room::challenge::{solve, solves};
use serde_json::{json, Value};

/// `GET .../waiting-room/challenge` as `token`: the status, the body and its Cache-Control.
async fn challenge(room: &Room, event: &str, token: &str) -> (u16, Value, Option<String>) {
    let r = room
        .app
        .http
        .get(format!(
            "{}/v1/events/{event}/waiting-room/challenge",
            room.app.base
        ))
        .bearer_auth(token)
        .send()
        .await
        .expect("the challenge route answers");
    let status = r.status().as_u16();
    let cache = r
        .headers()
        .get("cache-control")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, r.json().await.unwrap_or(Value::Null), cache)
}

async fn join(room: &Room, event: &str, token: &str, body: Value) -> (u16, Value) {
    room.app
        .post(
            &format!("/v1/events/{event}/waiting-room"),
            token,
            body,
            None,
        )
        .await
}

/// A join that must be refused with `status` and `code`.
async fn refused(room: &Room, event: &str, token: &str, body: Value, status: u16, code: &str) {
    let (got, answer) = join(room, event, token, body).await;
    assert_eq!(
        (got, answer["code"].as_str()),
        (status, Some(code)),
        "{answer}"
    );
}

/// A challenge for `token`, solved.
async fn solved(room: &Room, event: &str, token: &str) -> (String, String, u8) {
    let (status, c, _) = challenge(room, event, token).await;
    assert_eq!(status, 200, "{c}");
    let text = c["challenge"].as_str().expect("challenge").to_owned();
    let bits = c["bits"].as_u64().expect("bits") as u8;
    let (answer, _) = solve(&text, bits);
    (text, answer, bits)
}

#[tokio::test]
async fn a_show_may_admit_verified_accounts_only_each_with_a_solved_challenge_used_once() {
    let db = TestDb::new().await.expect("db");
    let room = Room::start(&db, |_| {}).await.expect("room");
    // Given a show whose line is for verified accounts, each join a 10-bit proof of work.
    let event = room
        .show_with(
            1,
            2,
            10,
            chrono::Duration::seconds(-60),
            json!({"requireVerifiedAccount": true, "joinChallengeBits": 10}),
        )
        .await;
    let (ann, bob) = (room.app.verified_fan("ann"), room.app.verified_fan("bob"));

    // An account the identity provider does not vouch for is turned away, whatever it sends,
    // and is given no work to do.
    let (status, body, _) = challenge(&room, &event, &room.app.fan("mallory")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("VERIFIED_ACCOUNT_REQUIRED")),
        "{body}"
    );
    refused(
        &room,
        &event,
        &room.app.fan("mallory"),
        json!({}),
        403,
        "VERIFIED_ACCOUNT_REQUIRED",
    )
    .await;

    // A verified fan without a challenge is told to solve one.
    refused(&room, &event, &ann, json!({}), 428, "CHALLENGE_REQUIRED").await;

    // The challenge: this event's size, never cached, ten minutes to answer.
    let (status, c, cache) = challenge(&room, &event, &ann).await;
    assert_eq!(status, 200, "{c}");
    assert_eq!(c["bits"], 10);
    assert_eq!(cache.as_deref(), Some("no-store"));
    let text = c["challenge"].as_str().expect("challenge").to_owned();
    let (answer, _) = solve(&text, 10);

    // A wrong answer, half an answer, someone else's challenge, a forged one: refused, and no
    // place is given.
    let wrong = (0u64..)
        .map(|n| format!("x{n}"))
        .find(|s| !solves(&text, s, 10))
        .expect("most words do not solve it");
    refused(
        &room,
        &event,
        &ann,
        json!({"challenge": text, "solution": wrong}),
        403,
        "CHALLENGE_NOT_SOLVED",
    )
    .await;
    refused(
        &room,
        &event,
        &ann,
        json!({"challenge": text}),
        422,
        "INVALID_REQUEST",
    )
    .await;
    refused(
        &room,
        &event,
        &bob,
        json!({"challenge": text, "solution": answer}),
        403,
        "CHALLENGE_INVALID",
    )
    .await;
    let forged = format!("{}x", &text[..text.len() - 1]);
    refused(
        &room,
        &event,
        &ann,
        json!({"challenge": forged, "solution": answer}),
        403,
        "CHALLENGE_INVALID",
    )
    .await;
    refused(
        &room,
        &event,
        &ann,
        json!({"challenge": text, "solution": "1:2"}),
        403,
        "CHALLENGE_NOT_SOLVED",
    )
    .await;

    // The right answer: a place in line.
    let (status, body) = join(
        &room,
        &event,
        &ann,
        json!({"challenge": text, "solution": answer}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let place = body["position"].as_i64().expect("a position");

    // The same solved challenge again is spent.
    refused(
        &room,
        &event,
        &ann,
        json!({"challenge": text, "solution": answer}),
        409,
        "CHALLENGE_REUSED",
    )
    .await;

    // Joining again with a fresh one answers the same place (one per account).
    let (text, answer, _) = solved(&room, &event, &ann).await;
    let (status, body) = join(
        &room,
        &event,
        &ann,
        json!({"challenge": text, "solution": answer}),
    )
    .await;
    assert_eq!(
        (status, body["position"].as_i64()),
        (201, Some(place)),
        "{body}"
    );
    // A fan in line who reloads the page joins again without working again: the same place.
    let (status, body) = join(&room, &event, &ann, json!({})).await;
    assert_eq!(
        (status, body["position"].as_i64()),
        (201, Some(place)),
        "{body}"
    );
    // Bob, not in line, still has to.
    refused(&room, &event, &bob, json!({}), 428, "CHALLENGE_REQUIRED").await;

    // An admin tests the line without either.
    let (status, body) = join(&room, &event, &room.app.admin(), json!({})).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn the_admin_sizes_the_challenge_and_a_smaller_one_stops_counting() {
    let db = TestDb::new().await.expect("db");
    let room = Room::start(&db, |_| {}).await.expect("room");
    let event = room
        .show_with(
            1,
            2,
            10,
            chrono::Duration::seconds(-60),
            json!({"joinChallengeBits": 4}),
        )
        .await;
    let cat = room.app.fan("cat");
    // Cat solves a 4-bit challenge; before she sends it, the admin makes it 12 bits.
    let (old, old_answer, bits) = solved(&room, &event, &cat).await;
    assert_eq!(bits, 4);
    let admin = room.app.admin();
    let (status, body) = room
        .app
        .put(
            &format!("/v1/events/{event}/policy"),
            &admin,
            json!({"joinChallengeBits": 12}),
        )
        .await;
    assert_eq!(
        (status, body["joinChallengeBits"].clone()),
        (200, json!(12)),
        "{body}"
    );
    // Out of bounds: refused, nothing changed.
    let (status, body) = room
        .app
        .put(
            &format!("/v1/events/{event}/policy"),
            &admin,
            json!({"joinChallengeBits": 29}),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (422, json!("INVALID_REQUEST")),
        "{body}"
    );

    // Once the change reaches the line's rules (the catalog projection, then a 2 s cache), new
    // challenges are 12 bits, and the 4-bit one is too small.
    wait_for(
        "the larger challenge is asked",
        Duration::from_secs(30),
        || async { challenge(&room, &event, &cat).await.1["bits"] == 12 },
    )
    .await;
    refused(
        &room,
        &event,
        &cat,
        json!({"challenge": old, "solution": old_answer}),
        403,
        "CHALLENGE_INVALID",
    )
    .await;
    let (text, answer, bits) = solved(&room, &event, &cat).await;
    assert_eq!(bits, 12);
    let (status, body) = join(
        &room,
        &event,
        &cat,
        json!({"challenge": text, "solution": answer}),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // Switched off: no challenge to ask, and a join needs none.
    let (status, _) = room
        .app
        .put(&format!("/v1/events/{event}/policy"), &admin, json!({}))
        .await;
    assert_eq!(status, 200);
    wait_for(
        "the challenge is switched off",
        Duration::from_secs(30),
        || async { challenge(&room, &event, &cat).await.1["code"] == "NO_CHALLENGE" },
    )
    .await;
    let (status, body) = join(&room, &event, &room.app.fan("dan"), json!({})).await;
    assert_eq!(status, 201, "{body}");
}
