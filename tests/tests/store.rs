//! The event store under stress: two processes writing one show, outages, snapshots.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use onsale_domain::ShowId;
use onsale_domain::SystemClock;
use onsale_tests::{settings, wait_for, TestApp, TestDb};
use serde_json::json;

/// Retries a request after a 503 with the same Idempotency-Key, as a client would.
async fn hold_with_retries(
    app: &TestApp,
    event: &str,
    token: &str,
    body: serde_json::Value,
    key: &str,
) -> (u16, serde_json::Value) {
    // A 503 is the store away for a moment (the test kills it): asked again, within a bound.
    onsale_tests::wait_until(
        "a hold answered other than 503",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || async {
            let (status, answer) = app.hold(event, token, body.clone(), Some(key)).await;
            if status == 503 {
                return Err(format!("503 {answer}"));
            }
            Ok((status, answer))
        },
    )
    .await
}

/// One fan's hold on one seat, without an Idempotency-Key.
async fn hold_seat(app: &TestApp, event: &str, fan: &str, seat: &str) -> (u16, serde_json::Value) {
    app.hold(event, &app.fan(fan), json!({"seatIds": [seat]}), None)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_of_one_show_are_fenced_by_the_version_check_and_lose_nothing() {
    let db = TestDb::new().await.expect("db");
    let a = Arc::new(TestApp::spawn(&db).await.expect("app a"));
    let b = Arc::new(TestApp::spawn(&db).await.expect("app b"));
    let event = a.on_sale_event(1, 10, 20, None).await;
    let mut tasks = Vec::new();
    for client in 0..120u32 {
        let app = if client % 2 == 0 {
            a.clone()
        } else {
            b.clone()
        };
        let event = event.clone();
        tasks.push(tokio::spawn(async move {
            let token = app.fan(&format!("fan{client}"));
            // Half the clients want a seat of their own, half fight over ten seats.
            let seat = if client < 60 {
                format!("S1-R{}-{}", 1 + client / 20, 1 + client % 20)
            } else {
                format!("S1-R10-{}", 1 + client % 10)
            };
            let (status, body) = hold_with_retries(
                &app,
                &event,
                &token,
                json!({"seatIds": [seat]}),
                &format!("k{client}"),
            )
            .await;
            (client, status, body)
        }));
    }
    let mut acknowledged = Vec::new();
    let mut seats = HashSet::new();
    for t in tasks {
        let (client, status, body) = t.await.expect("client");
        match status {
            201 => {
                let seat = body["seatIds"][0].as_str().expect("seat").to_owned();
                assert!(
                    seats.insert(seat.clone()),
                    "{seat} acknowledged twice across processes"
                );
                acknowledged.push(body["holdId"].as_str().expect("hold").to_owned());
            }
            409 => assert!(
                client >= 60,
                "client {client} wanted a seat nobody else wanted"
            ),
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!(
        acknowledged.len(),
        70,
        "60 uncontested seats and 10 contested ones"
    );
    let replayed = a.replay(&event).await;
    for hold in &acknowledged {
        let hold = replayed
            .show
            .hold(&hold.parse().expect("hold id"))
            .expect("an acknowledged hold is in the log");
        assert_eq!(hold.state, onsale_domain::HoldStatus::Active);
    }
}

/// A process whose cached show is stale (another process appended since) must not answer from
/// it: its append conflicts, and the command is decided again on the reloaded show and answered
/// from that, without the caller seeing the conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_decides_again_after_a_conflict_and_answers_from_the_log() {
    let db = TestDb::new().await.expect("db");
    let a = TestApp::spawn(&db).await.expect("app a");
    let b = TestApp::spawn(&db).await.expect("app b");
    let event = a.on_sale_event(1, 1, 10, None).await;
    // b writes the show behind a's back; a's cached show is now one event behind.
    assert_eq!(hold_seat(&b, &event, "bea", "S1-R1-1").await.0, 201);
    let (status, body) = hold_seat(&a, &event, "ann", "S1-R1-2").await;
    assert_eq!(
        status, 201,
        "a free seat, decided again after the conflict: {body}"
    );
    // Again behind a's back, then a asks for the very seat b took: a's stale state says it is
    // free, but that decision never commits; decided again, it is refused.
    assert_eq!(hold_seat(&b, &event, "bob", "S1-R1-3").await.0, 201);
    let (status, body) = hold_seat(&a, &event, "amy", "S1-R1-3").await;
    assert_eq!(status, 409, "a seat another process holds: {body}");
    let holds = a.replay(&event).await.show.holds().count();
    assert_eq!(holds, 3);
}

#[tokio::test]
async fn an_outage_answers_503_with_retry_after_and_acknowledges_nothing() {
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let event = app.on_sale_event(1, 1, 10, None).await;
    let ann = app.fan("ann");
    let (status, _) = app
        .hold(&event, &ann, json!({"seatIds": ["S1-R1-1"]}), None)
        .await;
    assert_eq!(status, 201);

    db.close().await.expect("close");
    let res = app
        .http
        .post(format!("{}/v1/events/{event}/holds", app.base))
        .bearer_auth(&ann)
        .header("Idempotency-Key", "during-outage")
        .json(&json!({"seatIds": ["S1-R1-2"]}))
        .send()
        .await
        .expect("answer");
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    let problem: serde_json::Value = res.json().await.expect("json");
    assert_eq!(problem["code"], "UNAVAILABLE");
    // Readiness is refreshed in the background (every 500 ms): not ready within seconds.
    onsale_tests::wait_for(
        "/readyz says not ready",
        std::time::Duration::from_secs(10),
        || async { app.get("/readyz", "").await.0 == 503 },
    )
    .await;

    db.reopen().await.expect("reopen");
    // The retry after recovery is a fresh attempt (nothing committed) and succeeds once.
    let (status, hold) = hold_with_retries(
        &app,
        &event,
        &ann,
        json!({"seatIds": ["S1-R1-2"]}),
        "during-outage",
    )
    .await;
    assert_eq!(status, 201, "{hold}");
    let (status, again) = app
        .hold(
            &event,
            &ann,
            json!({"seatIds": ["S1-R1-2"]}),
            Some("during-outage"),
        )
        .await;
    assert_eq!((status, &again["holdId"]), (201, &hold["holdId"]));
    let replayed = app.replay(&event).await;
    assert_eq!(
        replayed.show.holds().count(),
        2,
        "the first hold and the retried one, nothing else"
    );
}

#[tokio::test]
async fn snapshots_plus_tail_equal_a_full_replay_and_a_restart_resumes_from_them() {
    let db = TestDb::new().await.expect("db");
    let mut cfg = settings(&db);
    cfg.owners.snapshot_every = 10;
    let app = TestApp::spawn_with(cfg.clone(), Arc::new(SystemClock))
        .await
        .expect("app");
    let event = app.on_sale_event(1, 5, 10, None).await;
    for n in 0..35u32 {
        let token = app.fan(&format!("fan{n}"));
        let (status, hold) = app
            .hold(
                &event,
                &token,
                json!({"seatIds": [format!("S1-R{}-{}", 1 + n / 10, 1 + n % 10)]}),
                None,
            )
            .await;
        assert_eq!(status, 201);
        if n % 3 == 0 {
            let (status, _) = app
                .delete(
                    &format!("/v1/holds/{}", hold["holdId"].as_str().expect("id")),
                    &token,
                )
                .await;
            assert_eq!(status, 204);
        }
    }
    let show: ShowId = event.parse().expect("id");
    let store = app.shows().log().clone();
    wait_for("snapshots were written", Duration::from_secs(5), || async {
        let row: (i64,) = sqlx::query_as("SELECT count(*) FROM snapshots")
            .fetch_one(&app.server.pool)
            .await
            .expect("count");
        row.0 >= 1
    })
    .await;
    let loaded = store.load(show).await.expect("load");
    let replayed = store.replay(show).await.expect("replay");
    assert!(
        loaded.snapshot_version > 0,
        "the load started from a snapshot"
    );
    assert_eq!(loaded.version, replayed.version);
    assert_eq!(
        serde_json::to_value(&loaded.show).expect("json"),
        serde_json::to_value(&replayed.show).expect("json")
    );

    // A second process starts from the snapshot and knows who holds what.
    let restarted = TestApp::spawn_with(cfg, Arc::new(SystemClock))
        .await
        .expect("restart");
    let (status, lost) = restarted
        .hold(
            &event,
            &restarted.fan("late"),
            json!({"seatIds": ["S1-R1-2"]}),
            None,
        )
        .await;
    assert_eq!(status, 409, "{lost}");
    let (status, _) = restarted
        .hold(
            &event,
            &restarted.fan("late"),
            json!({"seatIds": ["S1-R1-1"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "seat 1 was released before the restart");
}

#[tokio::test]
async fn postgres_es_reads_the_log_onsale_writes() {
    use cqrs_es::persist::PersistedEventRepository;
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let event = app.on_sale_event(1, 1, 5, None).await;
    let (status, _) = app
        .hold(&event, &app.fan("ann"), json!({"quantity": 2}), None)
        .await;
    assert_eq!(status, 201);
    let repo = postgres_es::PostgresEventRepository::new(db.pool().await.expect("pool"));
    let events = repo
        .get_events::<onsale_domain::Show>(&event)
        .await
        .expect("postgres-es reads the events");
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].event_type, "SeatsHeld");
}

#[tokio::test]
async fn the_sweeper_expires_a_lapsed_hold_by_its_identity() {
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let event = app.on_sale_event(1, 1, 4, Some(1)).await;
    let ann = app.fan("ann");
    let (status, hold) = app
        .hold(&event, &ann, json!({"seatIds": ["S1-R1-1"]}), None)
        .await;
    assert_eq!(status, 201);
    let hold_id: onsale_domain::HoldId = hold["holdId"]
        .as_str()
        .expect("id")
        .parse()
        .expect("hold id");
    let show: ShowId = event.parse().expect("id");
    let store = app.shows().log().clone();
    // No command touches the show again: only the sweeper can end the hold.
    wait_for(
        "the sweeper wrote HoldExpired for the lapsed hold",
        Duration::from_secs(4),
        || async {
            let replayed = store.replay(show).await.expect("replay");
            replayed.show.hold(&hold_id).map(|h| h.state)
                == Some(onsale_domain::HoldStatus::Expired)
        },
    )
    .await;
    let (status, _) = app.order(&json!(hold_id.to_string()), &ann, "late").await;
    assert_eq!(status, 409, "an order on an expired hold is refused");
}

/// A show is folded from a binary `COPY` on a connection of the pool, with the planner's scans
/// off for it: a fold stopped by a corrupt row must not hand the connection back with the rest
/// of the copy still coming, and a fold that ends must hand it back as it found it.
#[tokio::test]
async fn a_fold_stopped_by_a_corrupt_row_leaves_its_pool_as_it_found_it() {
    use onsale_eventlog::{DatabaseSettings, EventLog, PgEventLog, StoreError};
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let good = app.on_sale_event(1, 2, 10, None).await;
    let broken = app.on_sale_event(1, 2, 10, None).await;
    for (n, seat) in ["S1-R1-1", "S1-R1-2", "S1-R2-1"].iter().enumerate() {
        for event in [&good, &broken] {
            let (status, _) = hold_seat(&app, event, &format!("fan{n}"), seat).await;
            assert_eq!(status, 201);
        }
    }
    // Past the holds, a row that is no event (written by the owner role, as an intruder
    // could): nothing appends to the show after it.
    let owner = db.pool().await.expect("owner pool");
    sqlx::query(
        "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
         SELECT 'show', $1, max(sequence) + 1, 'Nope', '1', '{\"Nope\": {}}', '{}'
           FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1",
    )
    .bind(&broken)
    .execute(&owner)
    .await
    .expect("a broken row");

    // One connection, so the fold after the broken one gets the very same one, or a new one.
    let pool = DatabaseSettings {
        database_url: db.url.clone(),
        pool_size: 1,
        database_role: onsale_eventlog::APP_ROLE.into(),
        idle_in_transaction_secs: 30,
        shard_urls: Vec::new(),
    }
    .pool(1, false)
    .expect("pool");
    let log = PgEventLog::new(pool.clone());
    let broken: ShowId = broken.parse().expect("id");
    match log.replay(broken).await {
        Err(StoreError::Corrupt(why)) => assert!(why.contains("@5"), "{why}"),
        other => panic!("the broken row is refused: {:?}", other.map(|l| l.version)),
    }
    let good: ShowId = good.parse().expect("id");
    for _ in 0..3 {
        let loaded = log
            .replay(good)
            .await
            .expect("the next fold reads its show");
        assert_eq!(loaded.version, 4);
        assert_eq!(loaded.show.holds().count(), 3);
        let load = log.load(good).await.expect("load");
        assert_eq!(load.version, 4);
    }
    let scans: Vec<String> = sqlx::query_scalar(
        "SELECT setting FROM pg_settings WHERE name IN ('enable_seqscan', 'enable_bitmapscan')",
    )
    .fetch_all(&pool)
    .await
    .expect("settings");
    assert_eq!(scans, ["on", "on"], "the planner is back as it was");
}

/// A connection of onsale's pools left inside a transaction (a statement's future dropped at
/// the wrong moment, sqlx #4393) does not hold its locks for ever: PostgreSQL ends the session
/// after `idle_in_transaction_secs`, and the pool goes on with a fresh connection.
#[tokio::test]
async fn a_session_left_inside_a_transaction_is_ended_and_its_locks_freed() {
    let db = TestDb::new().await.expect("db");
    let pool = onsale_eventlog::DatabaseSettings {
        database_url: db.url.clone(),
        pool_size: 1,
        database_role: onsale_eventlog::APP_ROLE.into(),
        idle_in_transaction_secs: 1,
        shard_urls: Vec::new(),
    }
    .pool(1, true)
    .expect("pool");
    // A transaction begun and never ended, holding a lock, as a dropped future leaves one.
    let mut stuck = pool.acquire().await.expect("a connection");
    sqlx::raw_sql("BEGIN; SELECT pg_advisory_xact_lock(4242)")
        .execute(&mut *stuck)
        .await
        .expect("begin");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *stuck)
        .await
        .expect("pid");
    drop(stuck);
    let owner = db.pool().await.expect("owner pool");
    onsale_tests::wait_for(
        "the session left in a transaction is ended",
        std::time::Duration::from_secs(15),
        || {
            let owner = owner.clone();
            async move {
                sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
                    .bind(pid)
                    .fetch_one(&owner)
                    .await
                    .expect("activity")
                    == 0
            }
        },
    )
    .await;
    // Its lock is free, and the pool serves again.
    let free: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(4242)")
        .fetch_one(&owner)
        .await
        .expect("lock");
    assert!(free, "the ended session's lock was released");
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&pool)
        .await
        .expect("the pool serves with a fresh connection");
    assert_eq!(one, 1);
}

/// Loading a show with a long log must not hold the caller's worker: the fold runs on a
/// blocking thread and the worker only forwards the copy, giving its turn back every
/// [`onsale_eventlog::FOLD_YIELD_EVERY`] chunks, so one show's load (a million events: seconds)
/// does not stall every other show's commands on it. On one thread, a task that only takes
/// turns measures it: the longest it waits for a turn while a 40,000-event show loads is a
/// small part of the load, not most of it.
#[tokio::test(flavor = "current_thread")]
async fn loading_a_long_show_gives_its_worker_back_to_other_shows() {
    use onsale_eventlog::{EventLog, PgEventLog};
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let event = app.on_sale_event(1, 2, 10, None).await;
    let (status, held) = hold_seat(&app, &event, "fan", "S1-R1-1").await;
    assert_eq!(status, 201, "{held}");
    let hold_id = held["holdId"].as_str().expect("hold id").to_owned();
    let (status, _) = app
        .delete(&format!("/v1/holds/{hold_id}"), &app.fan("fan"))
        .await;
    assert_eq!(status, 204);
    // The hold and its release, again and again under new hold ids: 20,000 pairs appended as
    // the owner role (the chain's trigger links them).
    let owner = db.pool().await.expect("owner pool");
    let (last, held, released): (i64, String, String) = sqlx::query_as(
        "SELECT max(sequence),
                (array_agg(payload::text ORDER BY sequence) FILTER (WHERE event_type = 'SeatsHeld'))[1],
                (array_agg(payload::text ORDER BY sequence DESC))[1]
           FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1",
    )
    .bind(&event)
    .fetch_one(&owner)
    .await
    .expect("the pair");
    assert!(released.contains(&hold_id), "{released}");
    let (prefix, _) = hold_id.rsplit_once('_').expect("a hold id names its show");
    sqlx::query(
        "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
         SELECT 'show', $1, $2 + 2 * (g - 1) + k + 1, t, '1',
                replace(CASE k WHEN 0 THEN $3 ELSE $4 END, $5, $6 || '_' || md5(g::text))::json, '{}'
           FROM generate_series(1, 20000) g,
                (VALUES (0, 'SeatsHeld'), (1, (SELECT event_type FROM events
                   WHERE aggregate_type = 'show' AND aggregate_id = $1 ORDER BY sequence DESC LIMIT 1))) v(k, t)
          ORDER BY 3",
    )
    .bind(&event)
    .bind(last)
    .bind(&held)
    .bind(&released)
    .bind(&hold_id)
    .bind(prefix)
    .execute(&owner)
    .await
    .expect("a long log");

    let log = PgEventLog::new(db.pool().await.expect("pool"));
    let show: ShowId = event.parse().expect("id");
    let turns = Arc::new(std::sync::Mutex::new(Vec::new()));
    let ticker = tokio::spawn({
        let turns = turns.clone();
        async move {
            loop {
                turns.lock().expect("turns").push(std::time::Instant::now());
                tokio::task::yield_now().await;
            }
        }
    });
    tokio::task::yield_now().await;
    let started = std::time::Instant::now();
    let loaded = log.load(show).await.expect("load");
    let took = started.elapsed();
    ticker.abort();
    assert_eq!(loaded.version, last + 40_000);
    let turns = turns.lock().expect("turns").clone();
    let longest = turns
        .windows(2)
        .filter(|w| w[0] >= started)
        .map(|w| w[1] - w[0])
        .max()
        .expect("turns during the load");
    assert!(
        longest * 4 < took,
        "the load took {took:?} and another task waited up to {longest:?} for a turn"
    );
}

/// The relay's gap fill reads the log past a mark per aggregate (`scan::PastMarks`): exactly
/// the rows past each aggregate's mark, every row of an aggregate without one, in key order
/// and in pages; a second scan on the pool sees its own marks only (the first one's are gone
/// with it, though the connection and its temporary table return to the pool).
#[tokio::test]
async fn a_scan_past_marks_reads_exactly_the_rows_past_each_aggregates_mark_in_pages() {
    use onsale_eventlog::scan::{Mark, PastMarks};
    use onsale_eventlog::{EventLog, PgEventLog};
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let a = app.on_sale_event(1, 2, 5, None).await;
    let b = app.on_sale_event(1, 2, 5, None).await;
    for (event, fan) in [(&a, "ann"), (&a, "bob"), (&b, "cy")] {
        let seat = if fan == "bob" { "S1-R1-2" } else { "S1-R1-1" };
        let (status, answer) = hold_seat(&app, event, fan, seat).await;
        assert_eq!(status, 201, "{answer}");
    }
    let pool = app.server.pool.clone();
    let all = PgEventLog::new(pool.clone())
        .scan(&(String::new(), String::new(), 0), None, 1_000)
        .await
        .expect("the whole log");
    let key = |r: &onsale_eventlog::LogRow| {
        (r.aggregate_type.clone(), r.aggregate_id.clone(), r.sequence)
    };
    let of = |id: &str| all.iter().filter(|r| r.aggregate_id == id).count() as i64;
    assert!(of(&a) >= 3 && of(&b) >= 2, "both shows have events");
    let venue = all
        .iter()
        .find(|r| r.aggregate_id != a && r.aggregate_id != b)
        .map(key)
        .expect("a venue's event");
    let read = |marks: Vec<Mark>| {
        let pool = pool.clone();
        async move {
            let mut past = PastMarks::open(&pool, &marks).await.expect("open");
            let mut rows = Vec::new();
            loop {
                let page = past.next(2).await.expect("a page");
                assert!(page.len() <= 2, "a page holds at most its limit");
                if page.is_empty() {
                    return rows;
                }
                rows.extend(page.iter().map(key));
            }
        }
    };
    // Show a marked at 1, its venue at its last event, show b not at all.
    let marks = vec![
        ("show".to_owned(), a.clone(), 1),
        (venue.0.clone(), venue.1.clone(), i64::MAX),
    ];
    let want: Vec<_> = all
        .iter()
        .map(key)
        .filter(|(t, id, seq)| {
            let mark = marks
                .iter()
                .find(|m| &m.0 == t && &m.1 == id)
                .map_or(0, |m| m.2);
            *seq > mark
        })
        .collect();
    assert!(want.iter().any(|k| k.1 == a) && want.iter().any(|k| k.1 == b));
    let got = read(marks).await;
    assert_eq!(got, want, "the rows past their marks, in key order");
    // Again on the same pool with no marks: everything, nothing of the first scan's marks.
    let got = read(Vec::new()).await;
    assert_eq!(got, all.iter().map(key).collect::<Vec<_>>());
}
