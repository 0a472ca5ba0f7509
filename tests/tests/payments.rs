//! Payments after the commit, against real PostgreSQL, the real broker and the processor
//! simulator, whose books are the witness: no order is ever captured twice.

use secrecy::ExposeSecret;
use std::time::Duration;

use onsale_edge::auth::Role;
use onsale_payments_store::{barcodes, tickets};
use onsale_tests::payments::PaymentPath;
use onsale_tests::wait_for;
use serde_json::{json, Value};

/// Every order of `orders` is captured at most once (the simulator's books).
fn at_most_one_capture(p: &PaymentPath) {
    for (order, n) in p.captures() {
        assert!(n <= 1, "order {order} captured {n} times");
    }
}

fn seat_status(map: &Value, seat: &str) -> String {
    map["seats"]
        .as_array()
        .and_then(|s| s.iter().find(|x| x["seatId"] == seat))
        .map(|x| x["status"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

/// A seat's full history (auditor), read a page of `page` entries at a time, once it holds
/// every type of `types` (the projection trails the log): the entries of all pages.
async fn history_with(
    p: &PaymentPath,
    event: &str,
    seat: &str,
    types: &[&str],
    page: usize,
) -> Vec<Value> {
    let auditor = p.rp.app.token("auditor-1", Role::Auditor);
    let path = format!("/v1/events/{event}/seats/{seat}/history");
    p.rp.eventually(&path, &auditor, |s, h| {
        s == 200
            && types.iter().all(|t| {
                h["entries"]
                    .as_array()
                    .is_some_and(|e| e.iter().any(|x| x["type"] == *t))
            })
    })
    .await;
    // The same entries, page by page. The history may still grow (the projection trails the
    // log), so the pages are compared with a whole read taken before and after them, once the
    // two agree.
    let whole = |body: Value| body["entries"].as_array().expect("entries").clone();
    let (paged, full) = onsale_tests::wait_until(
        &format!("{seat}'s history held still"),
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async {
            let before = whole(p.rp.app.get(&path, &auditor).await.1);
            let paged = pages(p, &path, &auditor, page).await;
            let after = whole(p.rp.app.get(&path, &auditor).await.1);
            if before == after && !after.is_empty() {
                Ok((paged, after))
            } else {
                Err(format!("{} entries, then {}", before.len(), after.len()))
            }
        },
    )
    .await;
    assert_eq!(paged, full, "the pages of {seat}'s history");
    // Every entry says who did it; what came through the relay says where it committed.
    for e in &full {
        assert!(e["actor"].is_string(), "{e}");
        if e["committedAt"].is_string() {
            assert!(e["lsn"].as_str().is_some_and(|l| l.contains('/')), "{e}");
        }
    }
    full
}

/// Every page of the history at `path`, `page` entries at a time.
async fn pages(p: &PaymentPath, path: &str, auditor: &str, page: usize) -> Vec<Value> {
    let mut paged = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, body) =
            p.rp.app
                .get(&format!("{path}?limit={page}{cursor}"), auditor)
                .await;
        assert_eq!(status, 200, "{body}");
        let entries = body["entries"].as_array().expect("entries");
        assert!(entries.len() <= page);
        paged.extend(entries.iter().cloned());
        match body["nextCursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return paged,
        }
    }
}

/// The entry of `kind` in a history.
fn entry<'a>(history: &'a [Value], kind: &str) -> &'a Value {
    history
        .iter()
        .find(|e| e["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {history:?}"))
}

#[tokio::test]
async fn every_payment_token_resolves_end_to_end() {
    let (_db, p) = PaymentPath::start(|_| {}).await.expect("payment path");
    let event = p.rp.show_on_map(1, 2, 10).await;
    let ok = p
        .buy(&event, "ann", &["S1-R1-1", "S1-R1-2"], "tok_ok")
        .await;
    let decline = p.buy(&event, "bob", &["S1-R1-3"], "tok_decline").await;
    let slow_ok = p
        .buy(&event, "cat", &["S1-R1-4"], "tok_timeout_then_ok")
        .await;
    let slow_fail = p
        .buy(&event, "dan", &["S1-R1-5"], "tok_timeout_then_fail")
        .await;

    // Tickets come from their own consumer of the log, after the order is confirmed.
    p.order_with_tickets(&ok, "ann", "CONFIRMED", 2, 20).await;
    let declined = p.order_becomes(&decline, "bob", "FAILED", 20).await;
    assert_eq!(declined["failureReason"], "CARD_DECLINED", "{declined}");
    // A timeout is not a failure: the order waits, then resolves to what the processor did.
    let confirmed = p.order_becomes(&slow_ok, "cat", "CONFIRMED", 20).await;
    assert!(confirmed["failureReason"].is_null(), "{confirmed}");
    let failed = p.order_becomes(&slow_fail, "dan", "FAILED", 20).await;
    assert_eq!(failed["failureReason"], "CARD_DECLINED", "{failed}");

    // A declined order's seat is on sale again, and the map says so (the seat map is its own
    // projection: it may trail the orders view, so it is waited for too).
    p.rp.eventually(
        &format!("/v1/events/{event}/seats?section=S1"),
        "",
        |s, m| {
            s == 200
                && seat_status(m, "S1-R1-3") == "AVAILABLE"
                && seat_status(m, "S1-R1-5") == "AVAILABLE"
                && seat_status(m, "S1-R1-1") == "SOLD"
                && seat_status(m, "S1-R1-4") == "SOLD"
        },
    )
    .await;
    let captures = p.captures();
    assert_eq!(captures.get(&ok), Some(&1));
    assert_eq!(captures.get(&slow_ok), Some(&1));
    assert_eq!(captures.get(&decline), None);
    assert_eq!(captures.get(&slow_fail), None);
    at_most_one_capture(&p);
    wait_for(
        "every payment is closed",
        Duration::from_secs(5),
        || async { p.open_payments().await == 0 },
    )
    .await;
    // No card token in the log (so none on the topic, in snapshots or exports): the tokens
    // waited in payment_tokens, moved into their payments, and were forgotten at the close.
    let in_log: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE payload::text LIKE '%tok\\_%' OR metadata::text LIKE '%tok\\_%'",
    )
    .fetch_one(&p.rp.pool)
    .await
    .expect("events");
    assert_eq!(in_log, 0, "a payment token is in the log");
    let kept: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM payment_tokens), (SELECT count(*) FROM payments WHERE token IS NOT NULL)",
    )
    .fetch_one(&p.rp.pool)
    .await
    .expect("tokens");
    assert_eq!(kept, (0, 0), "tokens kept after their payments closed");
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM payments")
        .fetch_one(&p.rp.pool)
        .await
        .expect("payments");
    assert_eq!(orders, 4, "each order's payment started with its token");
    // The auditor sees each seat's payment story: the ambiguity, then the outcome.
    let slow = history_with(
        &p,
        &event,
        "S1-R1-4",
        &[
            "SeatsHeld",
            "OrderPlaced",
            "PaymentAmbiguous",
            "PaymentSucceeded",
            "TicketIssued",
        ],
        2,
    )
    .await;
    assert_eq!(entry(&slow, "SeatsHeld")["actor"], "cat");
    assert_eq!(entry(&slow, "OrderPlaced")["orderId"], slow_ok.as_str());
    assert_eq!(entry(&slow, "PaymentSucceeded")["actor"], "processor");
    assert!(entry(&slow, "PaymentAmbiguous")["detail"]["reason"].is_string());
    assert!(entry(&slow, "TicketIssued")["ticketId"].is_string());
    let declined = history_with(&p, &event, "S1-R1-3", &["PaymentFailed"], 3).await;
    assert!(entry(&declined, "PaymentFailed")["detail"]["reason"]
        .as_str()
        .is_some_and(|r| !r.is_empty()));
    assert!(declined.iter().all(|e| e["type"] != "TicketIssued"));
    p.stop().await;
}

#[tokio::test]
async fn a_worker_killed_between_charge_and_record_charges_once() {
    let (_db, mut p) = PaymentPath::start(|c| c.charge_timeout_ms = 5_000)
        .await
        .expect("payment path");
    // Only the worker may resolve this order: no webhooks. The processor records the charge
    // and then takes 3 s to answer, and the worker dies in that window.
    p.sim.update(|s| {
        s.webhook_url = None;
        s.respond_delay_ms = 3_000;
    });
    let event = p.rp.show_on_map(1, 1, 5).await;
    let order = p.buy(&event, "ann", &["S1-R1-1"], "tok_ok").await;
    wait_for(
        "the processor records the charge",
        Duration::from_secs(5),
        || async { p.captures().contains_key(&order) },
    )
    .await;
    assert_eq!(
        p.captures().get(&order),
        Some(&1),
        "the charge reached the processor"
    );
    p.kill_worker();
    p.sim.update(|s| s.respond_delay_ms = 0);
    // Nothing recorded yet (the orders view is a projection: wait for it to have the order).
    p.order_becomes(&order, "ann", "PENDING_PAYMENT", 20).await;
    p.start_worker().await.expect("worker");
    // The claim's lease runs out, the new worker charges again with the same key and gets the
    // original charge back.
    p.order_becomes(&order, "ann", "CONFIRMED", 40).await;
    let ledger = p.sim.ledger();
    assert_eq!(ledger.charges().filter(|c| c.reference == order).count(), 1);
    at_most_one_capture(&p);
    p.stop().await;
}

/// A webhook body signed as the processor would (or with the wrong secret).
async fn post_webhook(p: &PaymentPath, event: &Value, secret: &str) -> (u16, Value) {
    let body = serde_json::to_vec(event).expect("json");
    let sig =
        onsale_processor_sim::signature::sign(&[secret], chrono::Utc::now().timestamp(), &body);
    let r =
        p.rp.app
            .http
            .post(format!("{}/v1/webhooks/processor", p.rp.app.base))
            .header(onsale_processor_sim::signature::HEADER, sig)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("answer");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn duplicate_forged_and_out_of_order_webhooks_change_nothing() {
    let (_db, mut p) = PaymentPath::start(|_| {}).await.expect("payment path");
    // Webhooks alone resolve this order: the worker charges, then dies before recording.
    p.sim.update(|s| {
        s.webhook_duplicates = 3;
        s.webhook_jitter_ms = 400;
    });
    let event = p.rp.show_on_map(1, 1, 5).await;
    let order = p
        .buy(&event, "ann", &["S1-R1-1", "S1-R1-2"], "tok_ok")
        .await;
    p.order_with_tickets(&order, "ann", "CONFIRMED", 2, 20)
        .await;
    // Every delivery of the one charge event (the original and its 3 duplicates) answered.
    wait_for(
        "every delivery of the charge event answered",
        Duration::from_secs(10),
        || async { p.sim.delivered() >= 4 },
    )
    .await;
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries")
        .fetch_one(&p.rp.pool)
        .await
        .expect("count");
    assert_eq!(applied, 1, "four deliveries of one event are one delivery");
    let confirmed = p.order_becomes(&order, "ann", "CONFIRMED", 20).await;
    assert_eq!(
        confirmed["tickets"].as_array().map(Vec::len),
        Some(2),
        "still two tickets after the duplicates"
    );
    p.kill_worker();

    let charge = p
        .sim
        .ledger()
        .charges()
        .find(|c| c.reference == order)
        .cloned()
        .expect("charge");
    let stale = json!({
        "id": "evt_stale_1", "type": "charge.failed", "created": chrono::Utc::now(),
        "chargeKey": charge.key, "chargeId": charge.charge_id, "reference": order,
        "status": "failed", "amountCents": charge.amount_cents,
    });
    // Forged: refused, nothing applied.
    let (status, body) = post_webhook(&p, &stale, "not-the-secret").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "INVALID_SIGNATURE");
    // Genuine but stale: acknowledged, and the confirmed order does not regress.
    let (status, _) = post_webhook(&p, &stale, p.config.webhook_secret.expose_secret()).await;
    assert_eq!(status, 200);
    let (status, again) = post_webhook(&p, &stale, p.config.webhook_secret.expose_secret()).await;
    assert_eq!((status, again["duplicate"].clone()), (200, json!(true)));
    // A GET reads the show as of the webhook's answer (own writes): no wait needed.
    let (_, now) =
        p.rp.app
            .get(&format!("/v1/orders/{order}"), &p.rp.app.fan("ann"))
            .await;
    assert_eq!(now["status"], "CONFIRMED", "{now}");
    let tickets: i64 = sqlx::query_scalar("SELECT count(*) FROM tickets WHERE order_id = $1")
        .bind(&order)
        .fetch_one(&p.rp.pool)
        .await
        .expect("count");
    assert_eq!(
        tickets, 2,
        "one ticket per seat, however often the success arrived"
    );
    p.stop().await;
}

#[tokio::test]
async fn a_signed_webhook_of_another_amount_confirms_nothing() {
    let (_db, mut p) = PaymentPath::start(|_| {}).await.expect("payment path");
    // No worker: only webhooks move this order.
    p.kill_worker();
    let event = p.rp.show_on_map(1, 1, 5).await;
    let order = p.buy(&event, "ann", &["S1-R1-1"], "tok_ok").await;
    let (_, placed) =
        p.rp.app
            .get(&format!("/v1/orders/{order}"), &p.rp.app.fan("ann"))
            .await;
    let total = placed["totalCents"].as_i64().expect("a total");
    let succeeded = |id: &str, amount: i64| {
        json!({
            "id": id, "type": "charge.succeeded", "created": chrono::Utc::now(),
            "chargeKey": format!("key-{id}"), "chargeId": format!("ch-{id}"), "reference": order,
            "status": "succeeded", "amountCents": amount,
        })
    };
    let secret = p.config.webhook_secret.expose_secret().to_owned();
    // A cent: signed, acknowledged (a redelivery cannot fix it), and the order stays unpaid.
    let (status, _) = post_webhook(&p, &succeeded("evt_cheap", 1), &secret).await;
    assert_eq!(status, 200);
    let (_, after) =
        p.rp.app
            .get(&format!("/v1/orders/{order}"), &p.rp.app.fan("ann"))
            .await;
    assert_eq!(after["status"], "PENDING_PAYMENT", "{after}");
    // The order's total: confirmed.
    let (status, _) = post_webhook(&p, &succeeded("evt_full", total), &secret).await;
    assert_eq!(status, 200);
    p.order_becomes(&order, "ann", "CONFIRMED", 10).await;
    p.stop().await;
}

#[tokio::test]
async fn a_processor_outage_keeps_orders_pending_and_they_resolve_after() {
    let (_db, p) = PaymentPath::start(|_| {}).await.expect("payment path");
    let event = p.rp.show_on_map(1, 1, 10).await;
    p.sim.update(|s| s.outage = true);
    let mut orders = Vec::new();
    for (i, fan) in ["ann", "bob", "cat"].iter().enumerate() {
        let seat = format!("S1-R1-{}", i + 1);
        orders.push((p.buy(&event, fan, &[seat.as_str()], "tok_ok").await, *fan));
    }
    // The worker tries the processor and is refused, again and again (each order at least
    // twice): still, no order fails.
    onsale_tests::wait_for(
        "the worker meets the outage",
        Duration::from_secs(20),
        || {
            let refused = p.sim.refused();
            async move { refused >= 6 }
        },
    )
    .await;
    for (order, fan) in &orders {
        let (_, o) =
            p.rp.app
                .get(&format!("/v1/orders/{order}"), &p.rp.app.fan(fan))
                .await;
        assert_eq!(
            o["status"], "PENDING_PAYMENT",
            "an outage is not a decline: {o}"
        );
    }
    assert!(p.captures().is_empty());
    p.sim.update(|s| s.outage = false);
    for (order, fan) in &orders {
        p.order_becomes(order, fan, "CONFIRMED", 30).await;
        assert_eq!(p.captures().get(order), Some(&1));
    }
    at_most_one_capture(&p);
    p.stop().await;
}

#[tokio::test]
async fn a_processor_silent_past_the_bound_fails_the_order_as_timed_out_and_frees_its_seat() {
    let (_db, p) = PaymentPath::start(|c| c.max_pending_secs = 2)
        .await
        .expect("payment path");
    let event = p.rp.show_on_map(1, 1, 10).await;
    p.sim.update(|s| s.outage = true);
    let order = p.buy(&event, "ann", &["S1-R1-1"], "tok_ok").await;
    let failed = p.order_becomes(&order, "ann", "FAILED", 30).await;
    assert_eq!(failed["failureReason"], "PAYMENT_TIMED_OUT", "{failed}");
    // The seat is on sale again at once, though the void is still owed.
    p.rp.eventually(
        &format!("/v1/events/{event}/seats?section=S1"),
        "",
        |s, m| s == 200 && seat_status(m, "S1-R1-1") == "AVAILABLE",
    )
    .await;
    let failure = history_with(&p, &event, "S1-R1-1", &["PaymentFailed"], 1).await;
    assert_eq!(
        entry(&failure, "PaymentFailed")["detail"]["code"],
        "PAYMENT_TIMED_OUT"
    );
    p.sim.update(|s| s.outage = false);
    assert!(
        p.captures().is_empty(),
        "nothing captured: {:?}",
        p.captures()
    );
    p.stop().await;
}

#[tokio::test]
async fn late_settlement_reinstates_a_free_seat_and_refunds_with_a_make_good_when_resold() {
    let (_db, p) = PaymentPath::start(|_| {}).await.expect("payment path");
    let event = p.rp.show_on_map(1, 1, 10).await;
    let resold = p.buy(&event, "ann", &["S1-R1-1"], "tok_late_settle").await;
    let free = p.buy(&event, "bob", &["S1-R1-2"], "tok_late_settle").await;
    p.order_becomes(&resold, "ann", "FAILED", 20).await;
    p.order_becomes(&free, "bob", "FAILED", 20).await;
    // Ann's seat goes to Cat, who pays.
    let cat = p.buy(&event, "cat", &["S1-R1-1"], "tok_ok").await;
    p.order_becomes(&cat, "cat", "CONFIRMED", 20).await;
    // The processor settles both "failed" charges after all (no webhook says so).
    wait_for(
        "the processor settles both charges",
        Duration::from_secs(5),
        || async {
            let c = p.captures();
            c.contains_key(&resold) && c.contains_key(&free)
        },
    )
    .await;
    let processor = p
        .config
        .processor(Duration::from_secs(5))
        .expect("processor");
    let report = onsale_payments::reconcile::reconcile(
        &p.rp.pool,
        p.rp.app.server.stores(),
        p.rp.app.shows(),
        processor.as_ref(),
        chrono::Utc::now().date_naive(),
    )
    .await
    .expect("reconcile");
    let kinds: Vec<(&str, &str)> = report
        .resolved
        .iter()
        .map(|f| (f.kind.as_str(), f.reference.as_str()))
        .collect();
    assert!(
        kinds.contains(&("late_capture_make_good", resold.as_str())),
        "{report:?}"
    );
    assert!(
        kinds.contains(&("late_capture_reinstated", free.as_str())),
        "{report:?}"
    );
    // Ann is refunded and owed a make-good; Cat keeps the seat; Bob gets his seat and tickets.
    let ann = p.order_becomes(&resold, "ann", "REFUNDED", 20).await;
    assert_eq!(ann["makeGood"], true);
    p.order_becomes(&cat, "cat", "CONFIRMED", 1).await;
    let bob = p.order_becomes(&free, "bob", "CONFIRMED", 20).await;
    wait_for(
        "bob's reinstated order has its ticket",
        Duration::from_secs(5),
        || async {
            let (_, b) =
                p.rp.app
                    .get(&format!("/v1/orders/{free}"), &p.rp.app.fan("bob"))
                    .await;
            b["tickets"].as_array().map(Vec::len) == Some(1)
        },
    )
    .await;
    let ledger = p.sim.ledger();
    assert_eq!(
        ledger.refunds().filter(|r| r.reference == resold).count(),
        1,
        "{bob}"
    );
    assert_eq!(
        ledger.refunds().count(),
        1,
        "only the make-good is refunded"
    );
    at_most_one_capture(&p);
    // A second run finds nothing new to resolve.
    let again = onsale_payments::reconcile::reconcile(
        &p.rp.pool,
        p.rp.app.server.stores(),
        p.rp.app.shows(),
        processor.as_ref(),
        chrono::Utc::now().date_naive(),
    )
    .await
    .expect("reconcile");
    assert!(again.resolved.is_empty(), "{again:?}");
    assert!(again.unresolved.is_empty(), "{again:?}");
    // The late captures are in the seats' histories.
    let resold_seat =
        history_with(&p, &event, "S1-R1-1", &["MakeGoodOwed", "OrderRefunded"], 4).await;
    let make_good = entry(&resold_seat, "MakeGoodOwed");
    assert_eq!(
        (
            make_good["orderId"].as_str(),
            make_good["detail"]["late"].as_bool()
        ),
        (Some(resold.as_str()), Some(true))
    );
    assert!(entry(&resold_seat, "OrderRefunded")["detail"]["refundId"].is_string());
    let free_seat = history_with(&p, &event, "S1-R1-2", &["OrderReinstated"], 4).await;
    assert_eq!(
        entry(&free_seat, "OrderReinstated")["orderId"],
        free.as_str()
    );
    p.stop().await;
}

async fn tickets_of(p: &PaymentPath, order: &str, fan: &str) -> Vec<Value> {
    onsale_tests::wait_for_value(
        &format!("the tickets of {order}"),
        Duration::from_secs(10),
        || async {
            let (_, o) =
                p.rp.app
                    .get(&format!("/v1/orders/{order}"), &p.rp.app.fan(fan))
                    .await;
            o["tickets"].as_array().filter(|t| !t.is_empty()).cloned()
        },
    )
    .await
}

async fn barcode(p: &PaymentPath, ticket: &Value, fan: &str) -> (u16, Value) {
    let id = ticket["ticketId"].as_str().expect("ticket id");
    p.rp.app
        .get(&format!("/v1/tickets/{id}/barcode"), &p.rp.app.fan(fan))
        .await
}

async fn cancel(p: &PaymentPath, order: &str, fan: &str) -> (u16, Value) {
    let path = format!("/v1/orders/{order}/cancel");
    p.rp.app
        .post(&path, &p.rp.app.fan(fan), json!({}), None)
        .await
}

async fn scan(p: &PaymentPath, event: &str, code: &str) -> (u16, Value) {
    let scanner = p.rp.app.scanner(
        "gate-7",
        &onsale_edge::auth::Gates::Shows(vec![event.to_owned()]),
    );
    p.rp.app
        .post(
            "/v1/scans",
            &scanner,
            json!({"eventId": event, "code": code}),
            None,
        )
        .await
}

#[tokio::test]
async fn tickets_scan_once_and_a_cancellation_revokes_refunds_and_returns_the_seats() {
    let (_db, p) = PaymentPath::start(|_| {}).await.expect("payment path");
    let event = p.rp.show_on_map(1, 1, 10).await;
    let used = p.buy(&event, "ann", &["S1-R1-1"], "tok_ok").await;
    p.order_becomes(&used, "ann", "CONFIRMED", 20).await;
    let ticket = tickets_of(&p, &used, "ann").await.remove(0);
    let (status, code) = barcode(&p, &ticket, "ann").await;
    assert_eq!(status, 200, "{code}");
    assert_eq!(
        barcode(&p, &ticket, "bob").await.0,
        404,
        "someone else's ticket"
    );
    let code = code["code"].as_str().expect("code").to_owned();

    // A scanner of another show's gates, or of another venue's, admits nothing here; one of
    // this show's venue does.
    let venue = p.rp.app.get(&format!("/v1/events/{event}"), "").await.1["venueId"]
        .as_str()
        .expect("venue")
        .to_owned();
    for (gates, admits) in [
        (
            onsale_edge::auth::Gates::Shows(vec!["another-show".into()]),
            false,
        ),
        (
            onsale_edge::auth::Gates::Venue("another-venue".into()),
            false,
        ),
        (onsale_edge::auth::Gates::Venue(venue), true),
    ] {
        let scanner = p.rp.app.scanner("gate-9", &gates);
        let (status, body) =
            p.rp.app
                .post(
                    "/v1/scans",
                    &scanner,
                    json!({"eventId": event, "code": "AAAAforged"}),
                    None,
                )
                .await;
        let expected = if admits {
            "INVALID_CODE"
        } else {
            "NOT_THIS_GATE"
        };
        assert_eq!(
            (status, body["code"].clone()),
            (403, json!(expected)),
            "{gates:?}"
        );
    }
    // A forged code and an old one (a screenshot) are refused; the real one admits once.
    let (status, body) = scan(&p, &event, "AAAAforged").await;
    assert_eq!((status, body["code"].clone()), (403, json!("INVALID_CODE")));
    let id: uuid::Uuid = ticket["ticketId"]
        .as_str()
        .expect("id")
        .parse()
        .expect("uuid");
    let secret: Vec<u8> = sqlx::query_scalar("SELECT secret FROM tickets WHERE ticket_id = $1")
        .bind(id)
        .fetch_one(&p.rp.pool)
        .await
        .expect("secret");
    let (old, _) = barcodes::barcode(
        &secret,
        id,
        chrono::Utc::now() - chrono::Duration::seconds(60),
    );
    let (status, body) = scan(&p, &event, &old).await;
    assert_eq!((status, body["code"].clone()), (403, json!("EXPIRED_CODE")));
    let (forged, _) = barcodes::barcode(b"a guessed secret", id, chrono::Utc::now());
    assert_eq!(scan(&p, &event, &forged).await.1["code"], "INVALID_CODE");
    let (status, admitted) = scan(&p, &event, &code).await;
    assert_eq!(status, 200, "{admitted}");
    assert_eq!(admitted["seatId"], "S1-R1-1");
    let (status, body) = scan(&p, &event, &code).await;
    assert_eq!(
        (status, body["code"].clone()),
        (409, json!("ALREADY_SCANNED"))
    );
    // A scanned ticket's order is not cancelled automatically.
    let (status, body) = cancel(&p, &used, "ann").await;
    assert_eq!(
        (status, body["code"].clone()),
        (409, json!("TICKET_USED")),
        "{body}"
    );

    // A second order: cancelled before the show.
    let order = p
        .buy(&event, "bob", &["S1-R1-2", "S1-R1-3"], "tok_ok")
        .await;
    p.order_becomes(&order, "bob", "CONFIRMED", 20).await;
    let bob_tickets = tickets_of(&p, &order, "bob").await;
    let (_, code) = barcode(&p, &bob_tickets[0], "bob").await;
    let code = code["code"].as_str().expect("code").to_owned();
    let (status, body) = cancel(&p, &order, "cat").await;
    assert_eq!(status, 404, "someone else's order: {body}");
    let (status, body) = cancel(&p, &order, "bob").await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = scan(&p, &event, &code).await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!("TICKET_REVOKED"))
    );
    let refunded = p.order_becomes(&order, "bob", "REFUNDED", 20).await;
    assert!(refunded["tickets"]
        .as_array()
        .expect("tickets")
        .iter()
        .all(|t| t["revoked"] == true));
    // Cancelling again is answered the same and refunds nothing more.
    let (status, _) = cancel(&p, &order, "bob").await;
    assert_eq!(status, 202);
    let ledger = p.sim.ledger();
    assert_eq!(ledger.refunds().filter(|r| r.reference == order).count(), 1);
    // The seats are on sale again.
    let (status, hold) =
        p.rp.app
            .post(
                &format!("/v1/events/{event}/holds"),
                &p.rp.app.fan("dan"),
                json!({"seatIds": ["S1-R1-2", "S1-R1-3"]}),
                None,
            )
            .await;
    assert_eq!(status, 201, "{hold}");
    // A pending order cannot be cancelled (its payment is in flight).
    p.sim.update(|s| s.outage = true);
    let pending = p.buy(&event, "eve", &["S1-R1-9"], "tok_ok").await;
    let (status, body) = cancel(&p, &pending, "eve").await;
    assert_eq!(
        (status, body["code"].clone()),
        (409, json!("ORDER_NOT_CANCELLABLE"))
    );
    p.sim.update(|s| s.outage = false);
    // The auditor's view: the scan and who made it; the cancellation, the revocation and the
    // refund with who asked; the seat sold again after.
    let scanned = history_with(&p, &event, "S1-R1-1", &["TicketIssued", "TicketScanned"], 2).await;
    assert_eq!(entry(&scanned, "TicketScanned")["actor"], "gate-7");
    assert_eq!(
        entry(&scanned, "TicketScanned")["ticketId"],
        ticket["ticketId"]
    );
    let cancelled = history_with(
        &p,
        &event,
        "S1-R1-2",
        &[
            "OrderCancelled",
            "TicketRevoked",
            "OrderRefunded",
            "TicketIssued",
        ],
        3,
    )
    .await;
    assert_eq!(entry(&cancelled, "OrderCancelled")["actor"], "bob");
    assert_eq!(entry(&cancelled, "TicketRevoked")["actor"], "bob");
    let kinds: Vec<&str> = cancelled
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    let at = |k: &str| kinds.iter().position(|x| *x == k).expect("kind");
    assert!(
        at("TicketIssued") < at("TicketRevoked") && at("OrderPlaced") < at("OrderCancelled"),
        "{kinds:?}"
    );
    p.stop().await;
}

#[tokio::test]
async fn the_invariant_monitor_alarms_on_a_seat_confirmed_twice() {
    let (_db, p) = PaymentPath::start(|_| {}).await.expect("payment path");
    let event = p.rp.show_on_map(1, 1, 5).await;
    let order = p.buy(&event, "ann", &["S1-R1-1"], "tok_ok").await;
    p.order_becomes(&order, "ann", "CONFIRMED", 20).await;
    wait_for(
        "a healthy show has no violation",
        Duration::from_secs(5),
        || async {
            onsale_payments::monitor::check(&p.rp.pool, p.rp.app.server.stores())
                .await
                .expect("check")
                .is_empty()
        },
    )
    .await;
    // Plant a second confirmed order for the same seat, as a bug elsewhere would.
    sqlx::query(
        "INSERT INTO orders_view (order_id, show_id, hold_id, account_id, status, seat_ids, total_cents,
                                  placed_at, updated_at, sequence)
         SELECT order_id || 'x', show_id, hold_id, 'mallory', 'CONFIRMED', seat_ids, total_cents,
                placed_at, updated_at, sequence FROM orders_view WHERE order_id = $1",
    )
    .bind(&order)
    .execute(&p.rp.pool)
    .await
    .expect("plant");
    let found = monitor_finds(&p, "seat_confirmed_twice", "S1-R1-1").await;
    assert!(
        found.iter().any(|v| v.check == "sold_seat_order_mismatch"),
        "{found:?}"
    );
    p.stop().await;
}

/// Runs the invariant monitor and asserts it raised `check` on `seat`; answers everything it
/// found.
async fn monitor_finds(
    p: &PaymentPath,
    check: &str,
    seat: &str,
) -> Vec<onsale_payments::monitor::Violation> {
    let found = onsale_payments::monitor::check(&p.rp.pool, p.rp.app.server.stores())
        .await
        .expect("check");
    assert!(
        found.iter().any(|v| v.check == check && v.seat_id == seat),
        "{found:?}"
    );
    found
}

/// A payment path with ann's order for S1-R1-1 confirmed and its ticket issued.
async fn confirmed_with_a_ticket() -> (onsale_tests::TestDb, PaymentPath, String, String) {
    let (db, p) = PaymentPath::start(|_| {}).await.expect("payment path");
    let event = p.rp.show_on_map(1, 1, 5).await;
    let order = p.buy(&event, "ann", &["S1-R1-1"], "tok_ok").await;
    p.order_with_tickets(&order, "ann", "CONFIRMED", 1, 20)
        .await;
    (db, p, event, order)
}

/// A scan that lands while a cancellation is deciding: the cancellation locks the order's
/// tickets first, so the scan either came first (the cancellation is refused, TICKET_USED) or
/// finds its ticket revoked. Never both admitted and refunded.
#[tokio::test]
async fn a_scan_racing_a_cancellation_is_never_admitted_and_refunded() {
    let (_db, p, _, order) = confirmed_with_a_ticket().await;
    let ticket: uuid::Uuid =
        sqlx::query_scalar("SELECT ticket_id FROM tickets WHERE order_id = $1")
            .bind(&order)
            .fetch_one(&p.rp.pool)
            .await
            .expect("ticket");
    // The gate's scan, caught between its update and its commit.
    let mut gate = p.rp.pool.begin().await.expect("tx");
    let admitted = sqlx::query(
        "UPDATE tickets SET scanned_at = now()
          WHERE ticket_id = $1 AND scanned_at IS NULL AND revoked_at IS NULL",
    )
    .bind(ticket)
    .execute(&mut *gate)
    .await
    .expect("scan")
    .rows_affected();
    assert_eq!(admitted, 1);
    let cancelling = {
        let p = p.rp.app.clone();
        let order = order.clone();
        tokio::spawn(async move {
            p.post(
                &format!("/v1/orders/{order}/cancel"),
                &p.fan("ann"),
                json!({}),
                None,
            )
            .await
        })
    };
    // The cancellation waits on the ticket's lock...
    onsale_tests::wait_for(
        "the cancellation waits for the gate",
        Duration::from_secs(10),
        || {
            let pool = p.rp.pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM pg_stat_activity
                  WHERE wait_event_type = 'Lock' AND datname = current_database()",
                )
                .fetch_one(&pool)
                .await
                .is_ok_and(|n| n > 0)
            }
        },
    )
    .await;
    // ...and sees the scan once it commits.
    gate.commit().await.expect("the scan commits");
    let (status, body) = cancelling.await.expect("answered");
    assert_eq!(
        (status, body["code"].clone()),
        (409, json!("TICKET_USED")),
        "{body}"
    );
    let (_, now) =
        p.rp.app
            .get(&format!("/v1/orders/{order}"), &p.rp.app.fan("ann"))
            .await;
    assert_eq!(now["status"], "CONFIRMED", "{now}");
    assert_eq!(
        p.sim
            .ledger()
            .refunds()
            .filter(|r| r.reference == order)
            .count(),
        0
    );
    p.stop().await;
}

/// A cancellation interrupted after its tickets were revoked (the process died, or the show's
/// command failed) is finished by the jobs: the order is cancelled and refunded, not left
/// confirmed with dead tickets.
#[tokio::test]
async fn an_interrupted_cancellation_is_finished_by_the_jobs() {
    let (_db, p, event, order) = confirmed_with_a_ticket().await;
    // Step one only, as the handler does before it dies.
    let revoked = tickets::revoke_for_cancel(&p.rp.pool, &order, &event, "ann")
        .await
        .expect("revoked");
    assert_eq!(revoked, tickets::Revocation::Revoked);
    let finished =
        onsale_payments::finish_cancellations(&p.rp.pool, p.rp.app.shows(), Duration::ZERO)
            .await
            .expect("jobs");
    assert_eq!(finished, 1);
    let refunded = p.order_becomes(&order, "ann", "REFUNDED", 20).await;
    assert!(refunded["tickets"]
        .as_array()
        .expect("tickets")
        .iter()
        .all(|t| t["revoked"] == true));
    // Nothing is left to finish, and the seat is on sale again.
    let again = onsale_payments::finish_cancellations(&p.rp.pool, p.rp.app.shows(), Duration::ZERO)
        .await
        .expect("jobs");
    assert_eq!(again, 0);
    let (status, hold) =
        p.rp.app
            .hold(
                &event,
                &p.rp.app.fan("bob"),
                json!({"seatIds": ["S1-R1-1"]}),
                None,
            )
            .await;
    assert_eq!(status, 201, "{hold}");
    p.stop().await;
}

#[tokio::test]
async fn the_invariant_monitor_alarms_on_a_confirmed_order_without_a_live_ticket() {
    let (_db, p, _, order) = confirmed_with_a_ticket().await;
    // Confirmed for longer than the window, with its ticket killed behind the show's back.
    sqlx::query(
        "UPDATE orders_view SET updated_at = now() - interval '10 minutes' WHERE order_id = $1",
    )
    .bind(&order)
    .execute(&p.rp.pool)
    .await
    .expect("backdate");
    let healthy = onsale_payments::monitor::check(&p.rp.pool, p.rp.app.server.stores())
        .await
        .expect("check");
    assert!(
        !healthy
            .iter()
            .any(|v| v.check == "confirmed_without_ticket"),
        "{healthy:?}"
    );
    sqlx::query("UPDATE tickets SET revoked_at = now() WHERE order_id = $1")
        .bind(&order)
        .execute(&p.rp.pool)
        .await
        .expect("revoke");
    monitor_finds(&p, "confirmed_without_ticket", "S1-R1-1").await;
    p.stop().await;
}

/// The lags the alerts watch come from the tables: nothing lags on a healthy sale; a hold left
/// active past its expiry, a confirmed seat without a live ticket, and a payment due that no
/// worker claimed each show by how long (written with the worker killed).
#[tokio::test]
async fn the_lags_the_alerts_watch_are_read_from_the_tables() {
    let (_db, mut p, event, order) = confirmed_with_a_ticket().await;
    let healthy = onsale_payments::monitor::lags(&p.rp.pool, p.rp.app.server.stores())
        .await
        .expect("lags");
    assert_eq!(
        healthy,
        onsale_payments::monitor::Lags {
            hold_expiry_secs: 0.0,
            ticket_issuance_secs: 0.0,
            payment_outbox_depth: 0,
            payment_oldest_unclaimed_secs: 0.0,
        }
    );
    // No worker to claim the rows written below (the orders projection and the issuer touch
    // none of them: made-up ids, and a ticket revoked behind the show's back).
    p.kill_worker();
    for statement in [
        "UPDATE orders_view SET updated_at = now() - interval '10 minutes' WHERE order_id = $2",
        "UPDATE tickets SET revoked_at = now() WHERE order_id = $2",
        "INSERT INTO holds_view (hold_id, show_id, account_id, seat_ids, expires_at, status, sequence)
         VALUES ('h-lapsed', $1, 'ann', '{S1-R1-2}', now() - interval '5 minutes', 'ACTIVE', 99),
                ('h-ended', $1, 'ann', '{S1-R1-3}', now() - interval '1 hour', 'EXPIRED', 98)",
        "INSERT INTO payments (order_id, show_id, amount_cents, state, placed_at, due_at, lease_until)
         VALUES ('o-waiting', $1, 100, 'charge', now() - interval '3 minutes', now() - interval '2 minutes', NULL),
                ('o-claimed', $1, 100, 'charge', now() - interval '1 hour', now() - interval '1 hour', now() + interval '1 minute')",
    ] {
        sqlx::query(statement)
            .bind(&event)
            .bind(&order)
            .execute(&p.rp.pool)
            .await
            .expect(statement);
    }
    let lags = onsale_payments::monitor::lags(&p.rp.pool, p.rp.app.server.stores())
        .await
        .expect("lags");
    assert!((299.0..400.0).contains(&lags.hold_expiry_secs), "{lags:?}");
    assert!(
        (599.0..700.0).contains(&lags.ticket_issuance_secs),
        "{lags:?}"
    );
    assert_eq!(lags.payment_outbox_depth, 2, "{lags:?}");
    assert!(
        (119.0..200.0).contains(&lags.payment_oldest_unclaimed_secs),
        "the claimed row is not waiting: {lags:?}"
    );
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processor_outage_pauses_the_waiting_room_and_it_resumes_when_payments_do() {
    let redis = onsale_tests::waiting_room::redis_url()
        .await
        .expect("redis");
    let (_db, p) = PaymentPath::start_with(
        |s| {
            s.waiting_room.redis_url = Some(redis);
            s.waiting_room.tick_ms = 100;
        },
        |_| {},
    )
    .await
    .expect("payments and the waiting room");
    p.rp.app
        .server
        .start(onsale_server::Part::Admitter)
        .await
        .expect("the admitter");
    let room = p.rp.app.server.room.clone().expect("the waiting room");
    // A show sold without a line, whose orders meet the outage, and one with a line, where a
    // fan waits: the pause is the whole waiting room's.
    let event = p.rp.show_on_map(1, 1, 10).await;
    let lined =
        p.rp.app
            .on_sale_event_with(1, 1, 10, serde_json::json!({"waitingRoom": true}))
            .await;
    let (status, joined) =
        p.rp.app
            .post(
                &format!("/v1/events/{lined}/waiting-room"),
                &p.rp.app.fan("zed"),
                serde_json::json!({}),
                None,
            )
            .await;
    assert_eq!(status, 201, "{joined}");
    let show: onsale_domain::ShowId = lined.parse().expect("show id");
    // The processor goes down; three orders are refused again and again.
    p.sim.update(|s| s.outage = true);
    let mut orders = Vec::new();
    for (i, fan) in ["ann", "bob", "cat"].iter().enumerate() {
        let seat = format!("S1-R1-{}", i + 1);
        orders.push((p.buy(&event, fan, &[seat.as_str()], "tok_ok").await, *fan));
    }
    // The admitter sees payments failing and pauses admission (the pause grows).
    let start = room.store.paused_ms(show).await.expect("redis");
    onsale_tests::wait_for("admission pauses", Duration::from_secs(30), || {
        let room = room.clone();
        async move { room.store.paused_ms(show).await.unwrap_or(0) >= start + 1_000 }
    })
    .await;
    // Yan joins the line during the pause and waits...
    let app = &p.rp.app;
    let (status, yan) = app
        .post(
            &format!("/v1/events/{lined}/waiting-room"),
            &app.fan("yan"),
            serde_json::json!({}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{yan}");
    let queue_token = yan["queueToken"].as_str().expect("queue token").to_owned();
    let view = || async {
        app.http
            .get(format!("{}/v1/events/{lined}/waiting-room", app.base))
            .bearer_auth(app.fan("yan"))
            .header("x-onsale-queue-token", &queue_token)
            .send()
            .await
            .expect("answer")
            .json::<Value>()
            .await
            .expect("json")
    };
    let waiting = view().await;
    assert_eq!(waiting["status"], "WAITING", "{waiting}");
    // ...until the processor is back, the payments resolve and admission resumes by itself.
    p.sim.update(|s| s.outage = false);
    for (order, fan) in &orders {
        p.order_becomes(order, fan, "CONFIRMED", 30).await;
    }
    onsale_tests::wait_for("admission resumes", Duration::from_secs(30), || async {
        view().await["status"] == "ADMITTED"
    })
    .await;
    p.stop().await;
}

/// Card testing (issue 29): hold -> order -> declined card, in a loop. After the show's
/// allowance of declines (2 here) the account's next order is refused 429
/// `PAYMENT_ATTEMPTS_EXCEEDED` with `Retry-After`, before any call to the processor; another
/// account orders as before.
#[tokio::test]
async fn a_card_tester_is_refused_after_the_shows_declines() {
    let (_db, p) = PaymentPath::start(|_| {}).await.expect("payment path");
    let app = &p.rp.app;
    let event = app
        .on_sale_event_with(1, 1, 10, json!({"maxFailedPayments": 2}))
        .await;
    let (status, page) = app.get(&format!("/v1/events/{event}"), &app.fan("x")).await;
    assert_eq!(status, 200);
    assert_eq!(page["policy"]["maxFailedPayments"], 2, "{page}");
    for _ in 0..2 {
        let order = p.buy(&event, "bot", &["S1-R1-1"], "tok_decline").await;
        p.order_becomes(&order, "bot", "FAILED", 20).await;
    }
    let bot = app.fan("bot");
    let (status, hold) = app
        .hold(&event, &bot, json!({"seatIds": ["S1-R1-1"]}), None)
        .await;
    assert_eq!(status, 201, "{hold}");
    let res = app
        .http
        .post(format!("{}/v1/orders", app.base))
        .bearer_auth(&bot)
        .header("Idempotency-Key", "third")
        .json(&json!({"holdId": hold["holdId"], "paymentToken": "tok_decline"}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(res.status(), 429);
    let retry: u64 = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .expect("Retry-After");
    assert!(retry > 23 * 3600 && retry <= 24 * 3600, "{retry}");
    let body: Value = res.json().await.expect("problem+json");
    assert_eq!(body["code"], "PAYMENT_ATTEMPTS_EXCEEDED", "{body}");
    // Nothing was sent to the processor for it: two charges, both declined.
    assert_eq!(p.sim.ledger().charges().count(), 2);
    // Another fan is not held back.
    let ok = p.buy(&event, "ann", &["S1-R1-2"], "tok_ok").await;
    p.order_becomes(&ok, "ann", "CONFIRMED", 20).await;
}
