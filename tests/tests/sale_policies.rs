//! The on-sale policies on the real stack (issue 18, parts 2, 3 and 5): the on-sale hold TTL,
//! best-available only, the per-show cap, set at scheduling and changed by the admin.

use chrono::{DateTime, Utc};
use onsale_tests::read_path::ReadPath;
use serde_json::{json, Value};

/// Seconds from now to the hold's `expiresAt`.
fn ttl_of(hold: &Value) -> i64 {
    let expires: DateTime<Utc> = hold["expiresAt"]
        .as_str()
        .expect("expiresAt")
        .parse()
        .expect("a time");
    (expires - Utc::now()).num_seconds()
}

#[tokio::test]
async fn the_admin_sets_a_shows_on_sale_policies_and_holds_follow_them() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let app = &rp.app;
    // On sale for a minute, in a one-hour on-sale window: 2-minute holds, best available only,
    // at most 4 seats an account.
    let event = app
        .on_sale_event_with(
            2,
            2,
            5,
            json!({"onSaleHoldTtlSeconds": 120, "onSaleWindowSeconds": 3600,
                   "bestAvailableOnly": "ON_SALE_WINDOW", "maxSeatsPerAccount": 4}),
        )
        .await;
    let ann = app.fan("ann");
    let (status, body) = app
        .hold(&event, &ann, json!({"seatIds": ["S1-R1-1"]}), None)
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (409, json!("BEST_AVAILABLE_ONLY")),
        "{body}"
    );
    let (status, first) = app
        .hold(&event, &ann, json!({"quantity": 2, "section": "S1"}), None)
        .await;
    assert_eq!(status, 201, "{first}");
    assert!((100..=121).contains(&ttl_of(&first)), "{first}");
    let (status, body) = app.hold(&event, &ann, json!({"quantity": 3}), None).await;
    assert_eq!(
        (status, body["code"].clone(), body["limit"].clone()),
        (429, json!("HOLD_LIMIT"), json!(4)),
        "{body}"
    );
    // Only the admin sets a policy, and a bad one changes nothing.
    let path = format!("/v1/events/{event}/policy");
    let (status, _) = app.put(&path, &ann, json!({"holdTtlSeconds": 300})).await;
    assert_eq!(status, 403);
    for bad in [
        json!({"maxSeatsPerAccount": 0}),
        json!({"onSaleHoldTtlSeconds": 3601}),
        json!({"bestAvailableOnly": "SOMETIMES"}),
        json!({"holdTtlSeconds": 1.5}),
        json!({"maxSeats": 4}),
    ] {
        let (status, body) = app.put(&path, &app.admin(), bad.clone()).await;
        assert_eq!(status, 422, "{bad}: {body}");
    }
    let (status, body) = app
        .put(
            &format!("/v1/events/{}/policy", uuid::Uuid::new_v4()),
            &app.admin(),
            json!({}),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (404, json!("EVENT_NOT_FOUND"))
    );
    // The window closed early: picks are taken again, with the show's 5-minute holds.
    let (status, policy) = app
        .put(&path, &app.admin(), json!({"holdTtlSeconds": 300}))
        .await;
    assert_eq!(status, 200, "{policy}");
    assert_eq!(
        policy,
        json!({"holdTtlSeconds": 300, "onSaleHoldTtlSeconds": null, "onSaleWindowSeconds": 0,
               "bestAvailableOnly": "NEVER", "maxSeatsPerAccount": 8,
               "requireVerifiedAccount": false, "joinChallengeBits": 0, "maxFailedPayments": 5})
    );
    let (status, picked) = app
        .hold(&event, &ann, json!({"seatIds": ["S2-R1-1"]}), None)
        .await;
    assert_eq!(status, 201, "{picked}");
    assert!((280..=301).contains(&ttl_of(&picked)), "{picked}");
    // The first hold kept its expiry; the event page says what is in force now.
    let (_, again) = app
        .get(
            &format!("/v1/holds/{}", first["holdId"].as_str().expect("id")),
            &ann,
        )
        .await;
    assert_eq!(again["expiresAt"], first["expiresAt"]);
    // The admin reads the change back at once (the page reads the policy from the log).
    let (status, doc) = app.get(&format!("/v1/events/{event}"), "").await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["policy"], policy, "{doc}");
    assert_eq!(doc["holdTtlSeconds"], 300, "{doc}");
    // The refused requests changed nothing: the first hold's two seats in S1, the pick in S2.
    rp.eventually(&format!("/v1/events/{event}/seats"), "", |s, map| {
        s == 200
            && map["sections"][0]["held"] == 2
            && map["sections"][1]["held"] == 1
            && map["sections"][0]["available"] == 8
    })
    .await;
    rp.stop().await;
}
