//! General admission on the real stack (issue 18, part 1): a show with a floor sold by
//! quantity beside reserved seats; holds, orders, payments, tickets (one per place, no seat),
//! cancellation, the seat map's counts and the history cover it.

use onsale_tests::payments::PaymentPath;
use serde_json::{json, Value};

/// A venue of a 5-place floor FLOOR (tier B) and a reserved section S1 of 1 row of 4 (tier A),
/// and a show on sale now.
async fn floor_show(p: &PaymentPath) -> String {
    let app = &p.rp.app;
    let admin = app.admin();
    let (status, venue) = app
        .post(
            "/v1/venues",
            &admin,
            json!({"name": "Club", "city": "Oslo", "sections": [
                {"section": "S1", "priceTier": "A", "rows": [{"row": "R1", "seats": 4}]},
                {"section": "FLOOR", "priceTier": "B", "capacity": 5}]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{venue}");
    let id = venue["venueId"].as_str().expect("venue id");
    let (_, doc) = app.get(&format!("/v1/venues/{id}"), "").await;
    assert_eq!(
        doc["sections"][1],
        json!({"section": "FLOOR", "priceTier": "B", "seats": 5, "generalAdmission": true, "rows": []})
    );
    let now = chrono::Utc::now();
    let (status, event) = app
        .post(
            "/v1/events",
            &admin,
            json!({"name": "Night", "performer": "Band", "venueId": id,
                   "startsAt": now + chrono::Duration::days(30),
                   "onSaleAt": now - chrono::Duration::minutes(1),
                   "prices": {"A": 12000, "B": 4000}}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{event}");
    event["eventId"].as_str().expect("event id").to_owned()
}

fn floor(map: &Value) -> &Value {
    map["sections"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["section"] == "FLOOR"))
        .expect("the floor's counts")
}

#[tokio::test]
async fn a_floor_is_sold_by_quantity_with_a_ticket_per_place_and_never_beyond_its_capacity() {
    let (_db, p) = PaymentPath::start(|_| {}).await.expect("payment path");
    let app = &p.rp.app;
    let event = floor_show(&p).await;
    let (_, doc) = app.get(&format!("/v1/events/{event}"), "").await;
    assert_eq!(doc["sections"][1]["generalAdmission"], true, "{doc}");
    assert_eq!(doc["seatCount"], 9);

    // A place is not a seat to pick; the best available seats are not places.
    let (status, body) = app
        .hold(
            &event,
            &app.fan("zed"),
            json!({"seatIds": ["FLOOR-GA1-1"]}),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (422, json!("GENERAL_ADMISSION")),
        "{body}"
    );
    let (status, best) = app
        .hold(&event, &app.fan("zed"), json!({"quantity": 4}), None)
        .await;
    assert_eq!(status, 201, "{best}");
    assert!(best["seatIds"]
        .as_array()
        .expect("seats")
        .iter()
        .all(|s| s.as_str().is_some_and(|s| s.starts_with("S1-"))));

    // Ann buys three places, Bob two: the floor is sold out, a sixth is refused.
    let ann = p
        .buy_with(
            &event,
            "ann",
            json!({"quantity": 3, "section": "FLOOR"}),
            "tok_ok",
        )
        .await;
    let bob = p
        .buy_with(
            &event,
            "bob",
            json!({"quantity": 2, "section": "FLOOR"}),
            "tok_ok",
        )
        .await;
    let (status, body) = app
        .hold(
            &event,
            &app.fan("cat"),
            json!({"quantity": 1, "section": "FLOOR"}),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (409, json!("SEAT_UNAVAILABLE")),
        "{body}"
    );
    let order = p.order_with_tickets(&ann, "ann", "CONFIRMED", 3, 30).await;
    assert_eq!(order["totalCents"], 12_000);
    for t in order["tickets"].as_array().expect("tickets") {
        assert_eq!(t["generalAdmission"], true, "{t}");
        assert!(t["seatId"]
            .as_str()
            .is_some_and(|s| s.starts_with("FLOOR-GA1-")));
    }
    p.order_with_tickets(&bob, "bob", "CONFIRMED", 2, 30).await;
    p.rp.eventually(&format!("/v1/events/{event}/seats"), "", |s, map| {
        let f = floor(map);
        s == 200 && f["sold"] == 5 && f["available"] == 0 && f["generalAdmission"] == true
    })
    .await;

    // Bob cancels: his two places go back on sale, and Cat gets them.
    let (status, body) = app
        .post(
            &format!("/v1/orders/{bob}/cancel"),
            &app.fan("bob"),
            json!({}),
            None,
        )
        .await;
    assert_eq!(status, 202, "{body}");
    p.rp.eventually(&format!("/v1/events/{event}/seats"), "", |s, map| {
        s == 200 && floor(map)["available"] == 2
    })
    .await;
    let (status, hold) = app
        .hold(
            &event,
            &app.fan("cat"),
            json!({"quantity": 2, "section": "FLOOR"}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{hold}");

    // An auditor follows one place: sold to Bob, cancelled, held by Cat.
    let unit = hold["seatIds"][0].as_str().expect("a place");
    let auditor = app.token("auditor-1", onsale_edge::auth::Role::Auditor);
    p.rp.eventually(
        &format!("/v1/events/{event}/seats/{unit}/history"),
        &auditor,
        |s, h| {
            // Bob's refund is recorded when the processor answers: before or after Cat's hold.
            let entries = h["entries"].as_array().cloned().unwrap_or_default();
            let cancelled = entries.iter().position(|e| e["type"] == "OrderCancelled");
            let held_by_cat = entries
                .iter()
                .rposition(|e| e["type"] == "SeatsHeld" && e["accountId"] == "cat");
            s == 200 && matches!((cancelled, held_by_cat), (Some(c), Some(h)) if h > c)
        },
    )
    .await;
    p.stop().await;
}
