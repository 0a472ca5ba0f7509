//! Many clients fighting over the same seats through HTTP: exactly one winner per seat.

use std::collections::HashMap;
use std::sync::Arc;

use onsale_tests::{TestApp, TestDb};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_get_exactly_one_winner_per_seat() {
    let db = TestDb::new().await.expect("db");
    let app = Arc::new(TestApp::spawn(&db).await.expect("app"));
    let event = app.on_sale_event(1, 1, 12, None).await;
    let mut tasks = Vec::new();
    for client in 0..200u32 {
        let app = app.clone();
        let event = event.clone();
        tasks.push(tokio::spawn(async move {
            let token = app.fan(&format!("fan{client}"));
            // Overlapping picks of one to three seats among twelve.
            let seats: Vec<String> = (0..1 + client % 3)
                .map(|k| format!("S1-R1-{}", 1 + (client * 7 + k * 5) % 12))
                .collect();
            let (status, body) = app
                .hold(&event, &token, json!({"seatIds": seats}), None)
                .await;
            (status, body, token)
        }));
    }
    let mut winners: HashMap<String, String> = HashMap::new();
    let mut won = Vec::new();
    for task in tasks {
        let (status, body, token) = task.await.expect("client finished");
        match status {
            201 => {
                for seat in body["seatIds"].as_array().expect("seats") {
                    let seat = seat.as_str().expect("seat").to_owned();
                    let hold = body["holdId"].as_str().expect("hold").to_owned();
                    assert!(
                        winners.insert(seat.clone(), hold).is_none(),
                        "{seat} was held twice"
                    );
                }
                won.push((
                    body["holdId"].as_str().expect("hold").to_owned(),
                    body["seatIds"].clone(),
                    token,
                ));
            }
            409 => assert_eq!(body["code"], "SEAT_UNAVAILABLE"),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert!(!winners.is_empty());
    // Every winner orders; no seat ends up in two orders.
    let mut ordered: HashMap<String, String> = HashMap::new();
    for (i, (hold, seats, token)) in won.iter().enumerate() {
        let (status, order) = app.order(&json!(hold), token, &format!("o{i}")).await;
        assert_eq!(status, 202, "{order}");
        // The order's seats are its hold's (holds and orders are read from the projection,
        // which this test does not run).
        for seat in seats.as_array().expect("seats") {
            assert!(ordered
                .insert(seat.as_str().expect("seat").to_owned(), hold.clone())
                .is_none());
        }
    }
    // The log agrees: replaying it from zero gives the same owners.
    let replayed = app.replay(&event).await;
    for (seat, state) in replayed.show.seats() {
        match state {
            onsale_domain::show::Seat::PendingPayment(_) => assert!(ordered.contains_key(seat)),
            onsale_domain::show::Seat::Available => assert!(!ordered.contains_key(seat)),
            other => panic!("{seat} is {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_sheds_with_503_and_acknowledges_only_what_committed() {
    let db = TestDb::new().await.expect("db");
    let mut settings = onsale_tests::settings(&db);
    settings.owners.max_queue = 2;
    let app = Arc::new(
        TestApp::spawn_with(settings, Arc::new(onsale_domain::SystemClock))
            .await
            .expect("app"),
    );
    let event = app.on_sale_event(4, 10, 20, None).await;
    let mut tasks = Vec::new();
    for client in 0..300u32 {
        let (app, event) = (app.clone(), event.clone());
        tasks.push(tokio::spawn(async move {
            let token = app.fan(&format!("fan{client}"));
            let seat = format!(
                "S{}-R{}-{}",
                1 + client / 200,
                1 + (client % 200) / 20,
                1 + client % 20
            );
            let (status, body) = app
                .hold(&event, &token, json!({"seatIds": [seat]}), None)
                .await;
            (status, body)
        }));
    }
    let (mut held, mut shed) = (Vec::new(), 0);
    for task in tasks {
        let (status, body) = task.await.expect("client");
        match status {
            201 => held.push(body["holdId"].as_str().expect("id").to_owned()),
            503 => {
                assert_eq!(body["code"], "OVERLOADED");
                shed += 1;
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert!(
        shed > 0,
        "a queue of two sheds some of 300 simultaneous holds"
    );
    let replayed = app.replay(&event).await;
    assert_eq!(
        replayed.show.holds().count(),
        held.len(),
        "exactly the acknowledged holds are in the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_keeps_expiring_holds_under_a_steady_rush() {
    let db = TestDb::new().await.expect("db");
    let app = Arc::new(TestApp::spawn(&db).await.expect("app"));
    let event = app.on_sale_event(1, 1, 12, Some(1)).await;
    let (status, lone) = app
        .hold(
            &event,
            &app.fan("lone"),
            json!({"seatIds": ["S1-R1-1"]}),
            None,
        )
        .await;
    assert_eq!(status, 201);
    let lone = lone["holdId"].as_str().expect("hold id").to_owned();
    // A rush on the other seats keeps the owner busy without ever touching seat 1: only the
    // sweeper can end the lone hold.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut rush = Vec::new();
    for client in 0..32u32 {
        let (app, event, stop) = (app.clone(), event.clone(), stop.clone());
        rush.push(tokio::spawn(async move {
            let token = app.fan(&format!("rush{client}"));
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let seat = format!("S1-R1-{}", 2 + (client + n) % 11);
                app.hold(&event, &token, json!({"seatIds": [seat]}), None)
                    .await;
                n += 1;
            }
        }));
    }
    let lone: onsale_domain::HoldId = lone.parse().expect("hold id");
    onsale_tests::wait_for(
        "the lone hold swept under a steady rush",
        std::time::Duration::from_secs(4),
        || async {
            app.replay(&event)
                .await
                .show
                .hold_view(&lone)
                .is_some_and(|h| h.state == onsale_domain::HoldStatus::Expired)
        },
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in rush {
        r.await.expect("a rushing client stops");
    }
}
