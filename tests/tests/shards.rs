//! Shows sharded over write clusters (docs/adr/021) on the real PostgreSQL and Kafka `make test`
//! started: placement, each shard holding only its own shows' log, a shard's outage failing
//! only its own shows, and the read path (relay per shard, projections, seat map, holds,
//! search, a seat's history) whatever shard a show is on. Each shard is a database of its own;
//! an outage of one is its database refusing connections (`TestDb::close`).

use std::sync::Arc;
use std::time::Duration;

use onsale_domain::SystemClock;
use onsale_edge::auth::Role;
use onsale_tests::payments::PaymentPath;
use onsale_tests::read_path::{shared_brokers, ReadPath};
use onsale_tests::{settings, wait_for, Api, TestApp, TestDb};
use serde_json::{json, Value};

/// The main database (directory, read models) and two shards.
async fn databases() -> (TestDb, TestDb, TestDb) {
    (
        TestDb::new().await.expect("main database"),
        TestDb::new().await.expect("shard 1"),
        TestDb::new().await.expect("shard 2"),
    )
}

fn sharded(main: &TestDb, shards: [&TestDb; 2]) -> onsale_server::Settings {
    let mut s = settings(main);
    s.database.shard_urls = shards.iter().map(|db| db.url.clone()).collect();
    s
}

/// A venue of one section of 2 rows of 20 seats.
async fn venue(api: &Api) -> Value {
    let sections = json!([{"section": "S1", "priceTier": "A",
        "rows": [{"row": "R1", "seats": 20}, {"row": "R2", "seats": 20}]}]);
    let (status, venue) = api
        .post(
            "/v1/venues",
            &api.admin(),
            json!({"name": "Arena", "city": "Bergen", "sections": sections}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{venue}");
    venue["venueId"].clone()
}

/// `POST /v1/events` at `venue`, on sale now, with `more` fields.
async fn schedule(api: &Api, venue: &Value, name: &str, more: Value) -> (u16, Value) {
    let now = chrono::Utc::now();
    let mut body = json!({
        "name": name,
        "performer": "Fjord Echo",
        "venueId": venue,
        "startsAt": now + chrono::Duration::days(30),
        "onSaleAt": now - chrono::Duration::minutes(1),
        "prices": {"A": 9000},
    });
    if let (Some(b), Value::Object(more)) = (body.as_object_mut(), more) {
        b.extend(more);
    }
    api.post("/v1/events", &api.admin(), body, None).await
}

/// Scheduled and placed: the event's id and its shard.
async fn show(api: &Api, venue: &Value, name: &str, more: Value) -> (String, u64) {
    let (status, event) = schedule(api, venue, name, more).await;
    assert_eq!(status, 201, "{event}");
    (
        event["eventId"].as_str().expect("event id").to_owned(),
        event["shard"].as_u64().expect("shard"),
    )
}

async fn count(db: &TestDb, sql: &str, show: &str) -> i64 {
    let pool = db.pool().await.expect("pool");
    let n = sqlx::query_scalar(sql)
        .bind(show)
        .fetch_one(&pool)
        .await
        .expect("count");
    pool.close().await;
    n
}

/// The API, a relay per shard and the projections on the test run's broker.
async fn read_path(main: &TestDb, shards: [&TestDb; 2]) -> ReadPath {
    let urls: Vec<String> = shards.iter().map(|db| db.url.clone()).collect();
    ReadPath::spawn_parts(
        main,
        &shared_brokers().expect("brokers"),
        |s| s.database.shard_urls = urls,
        &[],
    )
    .await
    .expect("read path")
}

const EVENTS: &str =
    "SELECT count(*) FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1";

#[tokio::test]
async fn shows_are_placed_once_and_each_shard_holds_only_its_own() {
    let (main, one, two) = databases().await;
    let app = TestApp::spawn_with(sharded(&main, [&one, &two]), Arc::new(SystemClock))
        .await
        .expect("app");
    let venue = venue(&app).await;
    // The emptiest shard each time, then the one an admin names.
    let (a, shard_a) = show(&app, &venue, "First", json!({})).await;
    let (b, shard_b) = show(&app, &venue, "Second", json!({})).await;
    let (c, shard_c) = show(&app, &venue, "Third", json!({"shard": 2})).await;
    assert_eq!((shard_a, shard_b, shard_c), (1, 2, 2));
    // A shard the deployment does not have: refused, nothing scheduled or placed.
    for bad in [json!(3), json!(0), json!("two")] {
        let (status, problem) = schedule(&app, &venue, "Nowhere", json!({"shard": bad})).await;
        assert_eq!(status, 422, "{problem}");
    }

    let fan = app.fan("ann");
    for (event, seat) in [(&a, "S1-R1-1"), (&b, "S1-R1-1"), (&c, "S1-R1-2")] {
        let (status, hold) = app
            .hold(event, &fan, json!({"seatIds": [seat]}), None)
            .await;
        assert_eq!(status, 201, "{hold}");
        // The event page reads the show's schedule from its own shard.
        let (status, page) = app.get(&format!("/v1/events/{event}"), &fan).await;
        assert_eq!(status, 200, "{page}");
    }

    // Each log on its shard only (a schedule and a hold each); the main database holds the
    // directory, no show's log.
    for (db, event, n) in [(&one, &a, 2), (&two, &b, 2), (&two, &c, 2)] {
        assert_eq!(count(db, EVENTS, event).await, n, "{event} on its shard");
    }
    for (db, event) in [(&two, &a), (&one, &b), (&one, &c), (&main, &a), (&main, &b)] {
        assert_eq!(count(db, EVENTS, event).await, 0, "{event} elsewhere");
    }
    let placed: Vec<(String, i16)> = {
        let pool = main.pool().await.expect("pool");
        sqlx::query_as("SELECT show_id, shard FROM show_shards ORDER BY placed_at")
            .fetch_all(&pool)
            .await
            .expect("directory")
    };
    assert_eq!(placed, [(a.clone(), 1), (b.clone(), 2), (c.clone(), 2)]);
    // Ownership and the fence live with the log.
    let owners = "SELECT count(*) FROM show_owners WHERE show_id = $1";
    assert_eq!(
        (count(&two, owners, &b).await, count(&one, owners, &b).await),
        (1, 0)
    );
}

#[tokio::test]
async fn a_shard_down_fails_only_its_own_shows_and_they_resume_when_it_returns() {
    let (main, one, two) = databases().await;
    let app = TestApp::spawn_with(sharded(&main, [&one, &two]), Arc::new(SystemClock))
        .await
        .expect("app");
    let venue = venue(&app).await;
    let (a, _) = show(&app, &venue, "On one", json!({"shard": 1})).await;
    let (b, _) = show(&app, &venue, "On two", json!({"shard": 2})).await;
    let fan = app.fan("ann");
    let seat = |n: u32| json!({"seatIds": [format!("S1-R{}-{}", 1 + n / 20, 1 + n % 20)]});
    for event in [&a, &b] {
        let (status, hold) = app.hold(event, &fan, seat(0), None).await;
        assert_eq!(status, 201, "{hold}");
    }

    one.close().await.expect("shard 1 down");
    // Shard 2's show sells on, without one error; shard 1's answers 503 with Retry-After.
    let mut acknowledged = 1;
    for n in 1..20 {
        let (status, hold) = app
            .hold(&b, &app.fan(&format!("fan-{n}")), seat(n), None)
            .await;
        assert_eq!(status, 201, "shard 2's show while shard 1 is down: {hold}");
        acknowledged += 1;
    }
    let res = app
        .http
        .post(format!("{}/v1/events/{a}/holds", app.base))
        .bearer_auth(&fan)
        .json(&seat(1))
        .send()
        .await
        .expect("an answer");
    assert_eq!(res.status(), 503);
    assert!(res.headers().contains_key("retry-after"));
    let (status, _) = app.get("/healthz", &fan).await;
    assert_eq!(status, 200, "a dead shard does not take the node down");

    one.reopen().await.expect("shard 1 back");
    wait_for(
        "shard 1's show sells again",
        Duration::from_secs(30),
        || {
            let app = app.api.clone();
            let (a, fan) = (a.clone(), fan.clone());
            async move { app.hold(&a, &fan, seat(2), None).await.0 == 201 }
        },
    )
    .await;
    // Every acknowledged hold of shard 2's show is in its log.
    let held = "SELECT count(*) FROM events WHERE aggregate_id = $1 AND event_type = 'SeatsHeld'";
    assert_eq!(count(&two, held, &b).await, acknowledged);
    assert_eq!(count(&one, held, &a).await, 2);
}

#[tokio::test]
async fn reads_search_and_history_follow_a_show_on_any_shard() {
    let (main, one, two) = databases().await;
    let rp = read_path(&main, [&one, &two]).await;
    let api = &rp.app.api;
    let venue = venue(api).await;
    let (a, _) = show(api, &venue, "Aurora", json!({"shard": 1})).await;
    let (b, _) = show(api, &venue, "Borealis", json!({"shard": 2})).await;
    let ann = api.fan("ann");
    let mut holds = Vec::new();
    for event in [&a, &b] {
        let (status, hold) = api
            .hold(event, &ann, json!({"seatIds": ["S1-R1-1"]}), None)
            .await;
        assert_eq!(status, 201, "{hold}");
        holds.push(hold["holdId"].as_str().expect("hold id").to_owned());
    }
    let auditor = api.token("audit", Role::Auditor);
    for (event, hold) in [&a, &b].into_iter().zip(&holds) {
        // Each shard's relay publishes into the one topic; the projections fold both.
        rp.eventually(&format!("/v1/events/{event}/seats"), &ann, |s, m| {
            s == 200 && m["sections"][0]["held"] == 1
        })
        .await;
        // A fan reads their own hold: the show's head read on its shard.
        let got = rp
            .eventually(&format!("/v1/holds/{hold}"), &ann, |s, _| s == 200)
            .await;
        assert_eq!(got["seatIds"], json!(["S1-R1-1"]));
        rp.eventually(
            &format!("/v1/events/{event}/seats/S1-R1-1/history"),
            &auditor,
            |s, h| s == 200 && h["entries"].as_array().is_some_and(|e| e.len() == 2),
        )
        .await;
        // The map of the past (for auditors), rebuilt from the show's own shard.
        let (status, past) = api
            .get(&format!("/v1/events/{event}/seats?atSequence=1"), &auditor)
            .await;
        assert_eq!((status, &past["sections"][0]["held"]), (200, &json!(0)));
    }
    // Search finds both, whatever shard each is on.
    let found = rp
        .eventually("/v1/events?city=Bergen", &ann, |s, v| {
            s == 200 && v["events"].as_array().is_some_and(|e| e.len() == 2)
        })
        .await;
    let mut names: Vec<&str> = found["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["Aurora", "Borealis"]);
    rp.stop().await;
}

/// `onsale shard move` while fans hold seats (docs/adr/022): holds in flight get 201, or 503
/// and are tried again, never another answer; afterwards every acknowledged hold is in the
/// show's log on its new shard, whose hash chain verifies, nothing of it is left on the old
/// one, and the projections applied each event once although the new shard's relay published
/// the copied rows again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_show_moves_to_another_shard_while_it_sells() {
    let (main, one, two) = databases().await;
    let rp = read_path(&main, [&one, &two]).await;
    let api = rp.app.api.clone();
    let venue = venue(&api).await;
    let (event, shard) = show(&api, &venue, "Moving", json!({"shard": 1})).await;
    assert_eq!(shard, 1);
    let show_id: onsale_domain::ShowId = event.parse().expect("show id");

    // A fan after another holds the next seat, trying again on 503 (40 seats in all).
    let acked = Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
    let seller = {
        let (api, event, acked) = (api.clone(), event.clone(), acked.clone());
        tokio::spawn(async move {
            let mut refused = 0;
            for n in 0..40u32 {
                let seat = format!("S1-R{}-{}", 1 + n / 20, 1 + n % 20);
                let fan = api.fan(&format!("fan-{n}"));
                let started = std::time::Instant::now();
                loop {
                    let (status, hold) = api
                        .hold(&event, &fan, json!({"seatIds": [&seat]}), None)
                        .await;
                    match status {
                        201 => {
                            let id = hold["holdId"].as_str().expect("hold id").to_owned();
                            acked.lock().expect("acked").push((id, seat));
                            break;
                        }
                        // Fenced mid-move (SHOW_MOVING), or an append that met the fence.
                        503 if ["SHOW_MOVING", "UNAVAILABLE"]
                            .contains(&hold["code"].as_str().unwrap_or_default()) =>
                        {
                            refused += 1
                        }
                        other => panic!("a hold during the move answered {other}: {hold}"),
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "{seat} never held"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            refused
        })
    };
    let held = |n: usize| {
        let acked = acked.clone();
        move || {
            let acked = acked.clone();
            async move { acked.lock().expect("acked").len() >= n }
        }
    };
    wait_for(
        "ten holds before the move",
        Duration::from_secs(30),
        held(10),
    )
    .await;
    let settings = sharded(&main, [&one, &two]);
    let moved = onsale_server::move_show(&settings.database, show_id, 2)
        .await
        .expect("moved");
    assert_eq!((moved.from.get(), moved.to.get()), (1, 2));
    let refused = seller.await.expect("the seller");
    let acked = acked.lock().expect("acked").clone();
    assert_eq!(
        acked.len(),
        40,
        "every seat held once ({refused} answers were 503)"
    );

    // Every acknowledged hold is in the log on shard 2; none of it is left on shard 1.
    let pool = two.pool().await.expect("pool");
    let held_ids: Vec<String> = sqlx::query_scalar(
        "SELECT payload->'SeatsHeld'->>'hold_id' FROM events
          WHERE aggregate_id = $1 AND event_type = 'SeatsHeld'",
    )
    .bind(&event)
    .fetch_all(&pool)
    .await
    .expect("holds");
    for (id, seat) in &acked {
        assert!(
            held_ids.contains(id),
            "acknowledged hold {id} of {seat} is in the log"
        );
    }
    assert_eq!(held_ids.len(), 40, "and nothing else was held");
    assert_eq!(count(&one, EVENTS, &event).await, 0, "the old copy is gone");
    let verified = onsale_eventlog::chain::verify(&pool, Some(&event), 7)
        .await
        .expect("verify");
    assert_eq!(verified.broken, None, "the chain verifies on its new shard");
    let head = count(&two, EVENTS, &event).await;
    assert_eq!(verified.events, u64::try_from(head).expect("a count"));

    // The seat map has every seat held, and each projection applied each event once.
    rp.eventually(
        &format!("/v1/events/{event}/seats"),
        &api.fan("ann"),
        |s, m| s == 200 && m["sections"][0]["held"] == 40,
    )
    .await;
    wait_for("every projection at the head", Duration::from_secs(30), || {
        let (pool, event) = (rp.pool.clone(), event.clone());
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM projection_positions WHERE show_id = $1 AND last_sequence = $2",
            )
            .bind(event)
            .bind(head)
            .fetch_one(&pool)
            .await
            .is_ok_and(|n| n == 4)
        }
    })
    .await;
    rp.applied_once(&event, head).await;
    // Holds go on being answered from the new shard (a node that has not yet seen the move
    // end answers 503 SHOW_MOVING with Retry-After, and the fan retries).
    let (status, hold) = onsale_tests::wait_until(
        "a hold answered from the new shard",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async {
            let (status, hold) = api
                .hold(
                    &event,
                    &api.fan("late"),
                    json!({"seatIds": ["S1-R1-1"]}),
                    None,
                )
                .await;
            if status == 503 && hold["code"] == "SHOW_MOVING" {
                Err(format!("{status} {hold}"))
            } else {
                Ok((status, hold))
            }
        },
    )
    .await;
    assert_eq!(status, 409, "{hold}");
    rp.stop().await;
}

/// Runs `sql` on `db` (as its owner).
async fn exec(db: &TestDb, sql: &str) {
    let pool = db.pool().await.expect("pool");
    sqlx::raw_sql(sql).execute(&pool).await.expect(sql);
    pool.close().await;
}

/// A move that stops part way is finished by running it again: one whose directory switch
/// failed (the main database refused it) leaves the show fenced on shard 1 with a whole copy on
/// shard 2, and the second run takes that copy as it is; one whose removal of the old rows
/// failed leaves them fenced on shard 1, and the second run removes them. In between nothing is
/// acknowledged that the log lacks, and afterwards the show sells on shard 2 with one log.
#[tokio::test]
async fn an_interrupted_move_is_finished_by_running_it_again() {
    let (main, one, two) = databases().await;
    let settings = sharded(&main, [&one, &two]);
    let app = TestApp::spawn_with(settings.clone(), Arc::new(SystemClock))
        .await
        .expect("app");
    let venue = venue(&app).await;
    let seat = |n: u32| json!({"seatIds": [format!("S1-R{}-{}", 1 + n / 20, 1 + n % 20)]});
    let hold = |event: String, n: u32| {
        let app = &app;
        async move {
            app.hold(&event, &app.fan(&format!("fan-{n}")), seat(n), None)
                .await
        }
    };
    let refuse = |what: &str, table: &str, on: &str| {
        format!(
            "CREATE FUNCTION refuse_{what}() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'refused for the test'; END $$;
             CREATE TRIGGER refuse_{what} BEFORE {on} ON {table}
               FOR EACH STATEMENT EXECUTE FUNCTION refuse_{what}();"
        )
    };

    // The switch fails: the copy is on shard 2, the directory still names shard 1.
    let (a, _) = show(&app, &venue, "Switch fails", json!({"shard": 1})).await;
    for n in 0..5 {
        assert_eq!(hold(a.clone(), n).await.0, 201);
    }
    exec(&main, &refuse("switch", "show_shards", "INSERT OR UPDATE")).await;
    let show_a: onsale_domain::ShowId = a.parse().expect("show id");
    let failed = onsale_server::move_show(&settings.database, show_a, 2).await;
    assert!(failed.is_err(), "the switch was refused: {failed:?}");
    let copied = count(&two, EVENTS, &a).await;
    assert_eq!(copied, count(&one, EVENTS, &a).await, "a whole copy");
    let (status, answer) = hold(a.clone(), 5).await;
    assert_eq!(
        status, 503,
        "fenced mid-move, nothing acknowledged: {answer}"
    );
    exec(&main, "DROP TRIGGER refuse_switch ON show_shards").await;
    let moved = onsale_server::move_show(&settings.database, show_a, 2)
        .await
        .expect("the move finished");
    assert!(moved.resumed, "{moved:?}");
    assert_eq!((moved.events, moved.to.get()), (copied, 2));
    assert_eq!(count(&one, EVENTS, &a).await, 0, "the old copy is gone");
    let status = wait_for_hold(&app, &a, 5).await;
    assert_eq!(status, 201);

    // The removal fails: the show is on shard 2, its old rows fenced on shard 1.
    let (b, _) = show(&app, &venue, "Removal fails", json!({"shard": 1})).await;
    for n in 0..5 {
        assert_eq!(hold(b.clone(), n).await.0, 201);
    }
    exec(&one, &refuse("removal", "events", "DELETE")).await;
    let show_b: onsale_domain::ShowId = b.parse().expect("show id");
    let failed = onsale_server::move_show(&settings.database, show_b, 2).await;
    assert!(failed.is_err(), "the removal was refused: {failed:?}");
    let left = count(&one, EVENTS, &b).await;
    assert!(left > 0 && left == count(&two, EVENTS, &b).await);
    assert_eq!(wait_for_hold(&app, &b, 5).await, 201, "it sells on shard 2");
    exec(&one, "DROP TRIGGER refuse_removal ON events").await;
    let moved = onsale_server::move_show(&settings.database, show_b, 2)
        .await
        .expect("the leftovers removed");
    assert_eq!(
        (moved.leftovers, moved.events, moved.resumed),
        (left, 0, false)
    );
    assert_eq!(count(&one, EVENTS, &b).await, 0);
    let again = onsale_server::move_show(&settings.database, show_b, 2).await;
    assert!(again.is_err(), "nothing left to do: {again:?}");
    for (db, event) in [(&two, &a), (&two, &b)] {
        let pool = db.pool().await.expect("pool");
        let verified = onsale_eventlog::chain::verify(&pool, Some(event), 100)
            .await
            .expect("verify");
        assert_eq!(verified.broken, None, "{event}'s chain on shard 2");
        pool.close().await;
    }
}

/// Holds seat `n` of `event` for a fan of its own, trying again while the show answers 503
/// (its owner meets the fence and finds the show's new shard): the final status.
async fn wait_for_hold(app: &TestApp, event: &str, n: u32) -> u16 {
    let seat = json!({"seatIds": [format!("S1-R{}-{}", 1 + n / 20, 1 + n % 20)]});
    let fan = app.fan(&format!("fan-{n}"));
    let status = std::cell::Cell::new(0);
    wait_for("a hold answered", Duration::from_secs(30), || {
        let (seat, fan, status) = (seat.clone(), fan.clone(), &status);
        async move {
            status.set(app.hold(event, &fan, seat, None).await.0);
            status.get() != 503
        }
    })
    .await;
    status.get()
}

/// The payment path (worker, intake, issuer, the processor simulator) over a main database and
/// two shards.
async fn payments_on_two_shards() -> (TestDb, TestDb, TestDb, PaymentPath) {
    let (one, two) = (
        TestDb::new().await.expect("shard 1"),
        TestDb::new().await.expect("shard 2"),
    );
    let urls = vec![one.url.clone(), two.url.clone()];
    let (main, p) = PaymentPath::start_with(|s| s.database.shard_urls = urls, |_| {})
        .await
        .expect("payment path");
    (main, one, two, p)
}

/// The processor's books: `orders` orders captured, each once.
fn captured_once_each(p: &PaymentPath, orders: usize) {
    let captures = p.captures();
    for (order, n) in &captures {
        assert_eq!(*n, 1, "order {order} captured {n} times");
    }
    assert_eq!(captures.len(), orders, "every order captured");
}

/// A show of one row of 10 seats on sale, placed on `shard`.
async fn on_shard(p: &PaymentPath, shard: u16) -> String {
    let sections =
        json!([{"section": "S1", "priceTier": "A", "rows": [{"row": "R1", "seats": 10}]}]);
    p.rp.app.event_at(sections, json!({"shard": shard})).await
}

/// A show's payments, tickets and cancellations live on its shard (docs/adr/021) and move with
/// it (docs/adr/022): an order on shard 2's show is paid and ticketed there and nowhere else;
/// moved to shard 1 with a payment still open, its rows go along, its old shard refuses any
/// write of them, and the payment, the barcode and a cancellation's refund all go on from the
/// new shard, each charge and refund once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_and_tickets_live_on_the_shows_shard_and_move_with_it() {
    let (main, one, two, mut p) = payments_on_two_shards().await;
    let event = on_shard(&p, 2).await;
    const PAYMENTS: &str = "SELECT count(*) FROM payments WHERE show_id = $1";
    const TICKETS: &str = "SELECT count(*) FROM tickets WHERE show_id = $1";

    let paid = p.buy(&event, "ann", &["S1-R1-1"], "tok_ok").await;
    p.order_with_tickets(&paid, "ann", "CONFIRMED", 1, 30).await;
    for (db, n, which) in [
        (&two, 1, "shard 2"),
        (&one, 0, "shard 1"),
        (&main, 0, "main"),
    ] {
        assert_eq!(count(db, PAYMENTS, &event).await, n, "payments on {which}");
        assert_eq!(count(db, TICKETS, &event).await, n, "tickets on {which}");
    }

    // An order whose payment is still open when the show moves (no worker runs).
    p.kill_worker();
    let open = p.buy(&event, "bob", &["S1-R1-2"], "tok_ok").await;
    wait_for(
        "bob's payment due on shard 2",
        Duration::from_secs(30),
        || {
            let (two, open) = (&two, open.clone());
            async move {
                count(
                    two,
                    "SELECT count(*) FROM payments WHERE order_id = $1 AND state <> 'done'",
                    &open,
                )
                .await
                    == 1
            }
        },
    )
    .await;
    let settings = sharded(&main, [&one, &two]);
    let moved = onsale_server::move_show(&settings.database, event.parse().expect("show"), 1)
        .await
        .expect("moved");
    assert_eq!((moved.from.get(), moved.to.get()), (2, 1));
    for (db, n, which) in [(&one, 2, "the new shard"), (&two, 0, "the old shard")] {
        assert_eq!(count(db, PAYMENTS, &event).await, n, "payments on {which}");
        assert_eq!(
            count(db, TICKETS, &event).await,
            1.min(n),
            "tickets on {which}"
        );
    }
    // Whatever still believes the show is on shard 2 cannot write its rows there.
    let old = two.pool().await.expect("pool");
    let refused = sqlx::query(
        "INSERT INTO refunds (order_id, show_id, amount_cents, reason, state, due_at, created_at)
         VALUES ('o-stale', $1, 100, 'cancelled', 'due', now(), now())",
    )
    .bind(&event)
    .execute(&old)
    .await
    .expect_err("the old shard is fenced");
    assert!(onsale_eventlog::moving::is_moved(&refused), "{refused}");
    old.close().await;

    // The open payment closes from the new shard; ann's ticket and her cancellation too.
    p.start_worker().await.expect("worker");
    p.order_with_tickets(&open, "bob", "CONFIRMED", 1, 30).await;
    let order = p.order_becomes(&paid, "ann", "CONFIRMED", 5).await;
    let ticket = order["tickets"][0]["ticketId"].as_str().expect("ticket");
    let (status, code) =
        p.rp.app
            .get(
                &format!("/v1/tickets/{ticket}/barcode"),
                &p.rp.app.fan("ann"),
            )
            .await;
    assert_eq!(status, 200, "{code}");
    let (status, body) =
        p.rp.app
            .post(
                &format!("/v1/orders/{paid}/cancel"),
                &p.rp.app.fan("ann"),
                json!({}),
                None,
            )
            .await;
    assert_eq!(status, 202, "{body}");
    p.order_becomes(&paid, "ann", "REFUNDED", 30).await;
    assert_eq!(
        count(
            &one,
            "SELECT count(*) FROM refunds WHERE show_id = $1 AND state = 'done'",
            &event
        )
        .await,
        1
    );
    let ledger = p.sim.ledger();
    assert_eq!(ledger.refunds().filter(|r| r.reference == paid).count(), 1);
    captured_once_each(&p, 2);
    p.stop().await;
}

/// Payments and tickets fail alone too: the payment intake and the ticket issuer (like every
/// consumer) read every shard's events off the one topic, and a show whose log cannot be read
/// (shard 1 down) is left to the gap check while shard 2's orders are paid and ticketed; once
/// shard 1 answers, its order is paid and ticketed too, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_down_holds_back_no_other_shards_payments_and_tickets() {
    let (_main, one, _two, p) = payments_on_two_shards().await;
    let (a, b) = (on_shard(&p, 1).await, on_shard(&p, 2).await);

    // Both orders are on the topic, neither taken in by the payment consumers yet; they start
    // again while shard 1 is down.
    p.rp.app.server.kill(onsale_server::Part::PaymentConsumers);
    let on_one = p.buy(&a, "ann", &["S1-R1-1"], "tok_ok").await;
    let on_two = p.buy(&b, "bob", &["S1-R1-1"], "tok_ok").await;
    p.order_becomes(&on_one, "ann", "PENDING_PAYMENT", 30).await;
    p.order_becomes(&on_two, "bob", "PENDING_PAYMENT", 30).await;
    one.close().await.expect("shard 1 down");
    p.rp.app
        .server
        .start(onsale_server::Part::PaymentConsumers)
        .await
        .expect("consumers");

    p.order_with_tickets(&on_two, "bob", "CONFIRMED", 1, 30)
        .await;
    assert!(
        !p.captures().contains_key(&on_one),
        "shard 1's order is not paid while shard 1 is down"
    );
    one.reopen().await.expect("shard 1 back");
    p.order_with_tickets(&on_one, "ann", "CONFIRMED", 1, 60)
        .await;
    assert_eq!(
        count(&one, "SELECT count(*) FROM tickets WHERE show_id = $1", &a).await,
        1
    );
    captured_once_each(&p, 2);
    p.stop().await;
}

/// A payment or ticket write in flight when a move fences its show is in the copy: the fence
/// waits for it, and a write after the fence is refused with the moved code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_flight_when_a_move_fences_its_show_moves_with_it() {
    let (main, one, two) = databases().await;
    let app = TestApp::spawn_with(sharded(&main, [&one, &two]), Arc::new(SystemClock))
        .await
        .expect("app");
    let venue = venue(&app).await;
    let (event, _) = show(&app, &venue, "Fenced", json!({"shard": 1})).await;
    let (status, hold) = app
        .hold(
            &event,
            &app.fan("ann"),
            json!({"seatIds": ["S1-R1-1"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{hold}");

    // A refund being written on shard 1, its transaction still open.
    let old = one.pool().await.expect("pool");
    let refund = |order: &str| {
        format!(
            "INSERT INTO refunds (order_id, show_id, amount_cents, reason, state, due_at, created_at)
             VALUES ('{order}', $1, 100, 'cancelled', 'due', now(), now())"
        )
    };
    let mut writing = old.begin().await.expect("tx");
    sqlx::query(&refund("o-in-flight"))
        .bind(&event)
        .execute(&mut *writing)
        .await
        .expect("written");
    let settings = sharded(&main, [&one, &two]);
    let show: onsale_domain::ShowId = event.parse().expect("show");
    let mover =
        tokio::spawn(async move { onsale_server::move_show(&settings.database, show, 2).await });
    wait_for(
        "the move's fence waits for the write",
        Duration::from_secs(30),
        || {
            let old = old.clone();
            async move {
                sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND wait_event_type = 'Lock'",
                )
                .fetch_one(&old)
                .await
                .is_ok_and(|n| n >= 1)
            }
        },
    )
    .await;
    assert!(
        !mover.is_finished(),
        "the move went on past a write in flight"
    );
    writing.commit().await.expect("committed");
    let moved = mover.await.expect("the mover").expect("moved");
    assert_eq!(moved.to.get(), 2);
    const REFUNDS: &str = "SELECT count(*) FROM refunds WHERE show_id = $1";
    assert_eq!(
        count(&two, REFUNDS, &event).await,
        1,
        "the write moved with the show"
    );
    assert_eq!(count(&one, REFUNDS, &event).await, 0);

    // A write after the fence is refused on the old shard.
    let refused = sqlx::query(&refund("o-late"))
        .bind(&event)
        .execute(&old)
        .await
        .expect_err("the old shard is fenced");
    assert!(onsale_eventlog::moving::is_moved(&refused), "{refused}");
    old.close().await;
}
