//! The log is tamper-evident: every row chains to its show's previous one by hash, computed as
//! it is appended; the processes' role cannot change the log, and a trigger refuses changes
//! from anyone; a row a superuser changes anyway is named by `onsale audit verify`.

use std::collections::{BTreeMap, HashMap};

use onsale_tests::{TestApp, TestDb};
use serde_json::{json, Value};
use sqlx::Connection;

fn audit_verify(db: &TestDb, show: Option<&str>) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_onsale"));
    cmd.args(["audit", "verify"]).env("DATABASE_URL", &db.url);
    if let Some(show) = show {
        cmd.args(["--show", show]);
    }
    cmd.output().expect("onsale runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_changed_after_the_fact_is_named_by_verify_and_nobody_changes_it_by_accident() {
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let event = app.on_sale_event(1, 4, 10, None).await;
    // Holds from several fans at once: the owner appends them in multi-row batches.
    let holds = (0..12).map(|i| {
        let app = &app;
        let event = &event;
        async move {
            let token = app.fan(&format!("fan-{i}"));
            let seat = format!("S1-R{}-{}", 1 + i / 10, 1 + i % 10);
            let (status, body) = app
                .hold(event, &token, json!({ "seatIds": [seat] }), None)
                .await;
            assert_eq!(status, 201, "{body}");
            if i % 3 == 0 {
                let id = body["holdId"].as_str().expect("id");
                let (status, body) = app.delete(&format!("/v1/holds/{id}"), &token).await;
                assert_eq!(status, 204, "{body}");
            }
        }
    });
    futures::future::join_all(holds).await;
    let pool = db.pool().await.expect("pool");
    let head: i64 = sqlx::query_scalar(
        "SELECT max(sequence) FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1",
    )
    .bind(&event)
    .fetch_one(&pool)
    .await
    .expect("head");
    assert!(head >= 17, "a schedule, 12 holds and 4 releases: {head}");

    let ok = audit_verify(&db, None);
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(out.contains(&format!("ok: {} events", head + 1)), "{out}");
    let verified = onsale_eventlog::chain::verify(&pool, Some(&event), 5)
        .await
        .expect("verify in pages of 5");
    assert_eq!((verified.events, verified.broken), (head as u64, None));

    // The processes act as onsale_app: it may append, never change or remove.
    let mut app_conn = pool.acquire().await.expect("connection");
    sqlx::query("SET ROLE onsale_app")
        .execute(&mut *app_conn)
        .await
        .expect("set role");
    for sql in [
        "UPDATE events SET payload = '{}' WHERE aggregate_id = $1 AND sequence = 2",
        "DELETE FROM events WHERE aggregate_id = $1 AND sequence = 2",
    ] {
        let err = sqlx::query(sql)
            .bind(&event)
            .execute(&mut *app_conn)
            .await
            .expect_err("refused to the application's role");
        assert!(
            err.to_string().contains("permission denied"),
            "{sql}: {err}"
        );
    }
    // Even the owner is refused by the trigger.
    for sql in [
        "UPDATE events SET payload = '{}' WHERE aggregate_id = $1 AND sequence = 2",
        "DELETE FROM events WHERE aggregate_id = $1 AND sequence = 2",
        "TRUNCATE events",
    ] {
        let q = sqlx::query(sql);
        let q = if sql.contains("$1") {
            q.bind(&event)
        } else {
            q
        };
        let err = q.execute(&pool).await.expect_err("refused to the owner");
        assert!(err.to_string().contains("append-only"), "{sql}: {err}");
    }

    // A superuser who switches the triggers off and edits a row (a hold's seat, say) is caught.
    let altered: i64 = sqlx::query_scalar(
        "SELECT max(sequence) FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1
            AND sequence > 1 AND payload::text LIKE '%S1-R%'",
    )
    .bind(&event)
    .fetch_one(&pool)
    .await
    .expect("a hold's row");
    let mut conn = pool.acquire().await.expect("connection");
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut *conn)
        .await
        .expect("triggers off");
    sqlx::query(
        "UPDATE events SET payload = replace(payload::text, 'S1-R', 'S9-R')::json
          WHERE aggregate_type = 'show' AND aggregate_id = $1 AND sequence = $2",
    )
    .bind(&event)
    .bind(altered)
    .execute(&mut *conn)
    .await
    .expect("a superuser edits a row");
    drop(conn);
    let caught = audit_verify(&db, Some(&event));
    let err = String::from_utf8_lossy(&caught.stderr);
    assert!(!caught.status.success(), "verify passed an altered log");
    assert!(
        err.contains(&format!("{event} breaks at sequence {altered}")),
        "the first broken sequence is named: {err}"
    );
    // Removing a row is caught too, where the gap is.
    let mut conn = pool.acquire().await.expect("connection");
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut *conn)
        .await
        .expect("triggers off");
    sqlx::query(
        "DELETE FROM events WHERE aggregate_type = 'show' AND aggregate_id = $1 AND sequence = 2",
    )
    .bind(&event)
    .execute(&mut *conn)
    .await
    .expect("a superuser removes a row");
    drop(conn);
    let gap = onsale_eventlog::chain::verify(&pool, Some(&event), 100)
        .await
        .expect("verify");
    let b = gap.broken.expect("a removed row is found");
    assert_eq!(b.sequence, 3, "{b}");
    app.server.shutdown().await.expect("stops");
}

/// Issue 53, item 6: a process logs in as a member of onsale_app and nothing more, so its
/// credentials, taken by an attacker, cannot undo its role (`RESET ROLE`), switch the log's
/// triggers off, change or remove the log, promote a region, make themselves more, or migrate;
/// and `onsale serve` outside development mode refuses the owner's login.
#[tokio::test]
async fn a_nodes_login_cannot_undo_its_role_nor_change_the_log_nor_do_the_owners_jobs() {
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let event = app.on_sale_event(1, 1, 4, None).await;
    let (status, body) = app
        .hold(
            &event,
            &app.fan("ann"),
            json!({"seatIds": ["S1-R1-1"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "the node appends as itself: {body}");
    let node = app.server.settings().database.clone();
    assert_ne!(
        node.database_url, db.url,
        "the process logs in as the owner"
    );
    let mut conn = sqlx::PgConnection::connect(&node.database_url)
        .await
        .expect("the node's login");
    sqlx::query("RESET ROLE")
        .execute(&mut conn)
        .await
        .expect("reset role");
    for sql in [
        "DELETE FROM events WHERE aggregate_id = $1",
        "UPDATE events SET payload = '{}' WHERE aggregate_id = $1",
        "ALTER TABLE events DISABLE TRIGGER events_append_only",
        "DROP TRIGGER events_chain ON events",
        "SET session_replication_role = replica",
        "SET ROLE onsale",
        "ALTER ROLE onsale_node SUPERUSER",
        "GRANT onsale TO onsale_node",
        "CREATE ROLE intruder LOGIN",
        "INSERT INTO regions (region, writer, epoch) VALUES ('x', true, 99)",
        "UPDATE regions SET epoch = epoch + 1",
        "UPDATE show_shards SET shard = 2",
        "DELETE FROM _sqlx_migrations",
    ] {
        let q = sqlx::query(sql);
        let q = if sql.contains("$1") {
            q.bind(&event)
        } else {
            q
        };
        let err = q
            .execute(&mut conn)
            .await
            .expect_err("refused to a node's login");
        let err = err.to_string();
        assert!(
            ["permission denied", "must be owner", "must be superuser"]
                .iter()
                .any(|refused| err.contains(refused)),
            "{sql}: {err}"
        );
    }
    let migrated = onsale_server::migrate(&node, &app.server.settings().region, &[]).await;
    assert!(migrated.is_err(), "a node's login migrated the schema");
    // The log is as the node wrote it.
    let out = audit_verify(&db, Some(&event));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Outside development mode the owner's login is refused, naming why, before anything runs.
    let mut serve = tokio::process::Command::new(env!("CARGO_BIN_EXE_onsale"));
    serve.arg("serve");
    for (k, _) in std::env::vars() {
        if k.starts_with("ONSALE_") {
            serve.env_remove(k);
        }
    }
    serve.env("ONSALE_JWKS_URL", "https://id.example/jwks");
    for secret in [
        "ONSALE_WEBHOOK_SECRET",
        "ONSALE_ADMISSION_SECRET",
        "ONSALE_NODE_SECRET",
    ] {
        serve.env(secret, "0123456789abcdef0123456789abcdef-strong");
    }
    let refused = serve
        .env("DATABASE_URL", &db.url)
        .kill_on_drop(true)
        .output()
        .await
        .expect("onsale runs");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "served with the owner's login: {err}"
    );
    assert!(
        err.contains("the login role onsale is a superuser"),
        "{err}"
    );
    app.server.shutdown().await.expect("stops");
}

fn onsale(args: &[&str], db: &TestDb) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_onsale"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env_remove("ONSALE_SHARD_URLS")
        .env_remove("ONSALE_CHECKPOINT_PUBLIC_KEY")
        .output()
        .expect("onsale runs")
}

/// Issue 53, item 6: the schema's owner can rewrite a row and every hash after it, and the
/// chain holds again; a checkpoint of the heads signed with a key the owner does not hold,
/// kept outside the database, catches it. A checkpoint changed after signing, or checked under
/// another key, is refused.
#[tokio::test]
async fn an_owner_who_rewrites_the_log_and_its_chain_is_caught_by_a_signed_checkpoint() {
    let db = TestDb::new().await.expect("db");
    let app = TestApp::spawn(&db).await.expect("app");
    let event = app.on_sale_event(1, 1, 10, None).await;
    for (fan, seat) in [("ann", "S1-R1-1"), ("bob", "S1-R1-2"), ("cat", "S1-R1-3")] {
        let (status, body) = app
            .hold(&event, &app.fan(fan), json!({"seatIds": [seat]}), None)
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let dir = tempfile::tempdir().expect("dir");
    let key = dir.path().join("signing.p8");
    let cp = dir.path().join("checkpoint-1.json");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_owned();
    let public = onsale_tests::succeeded(&onsale(&["audit", "keygen", "--out", &path(&key)], &db));
    let public = public.trim().to_owned();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key).expect("key").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the signing key is its owner's alone");
    let taken = onsale_tests::succeeded(&onsale(
        &[
            "audit",
            "checkpoint",
            "--key",
            &path(&key),
            "--out",
            &path(&cp),
        ],
        &db,
    ));
    let pool = db.pool().await.expect("pool");
    let aggregates: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT (aggregate_type, aggregate_id)) FROM events")
            .fetch_one(&pool)
            .await
            .expect("aggregates");
    assert!(aggregates >= 2, "the show and its venue: {aggregates}");
    assert!(
        taken.contains(&format!("checkpoint of {aggregates} heads")),
        "{taken}"
    );
    // The log grows past the checkpoint: it still holds.
    let (status, body) = app
        .hold(
            &event,
            &app.fan("dan"),
            json!({"seatIds": ["S1-R1-4"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let verify = |cp: &std::path::Path, public: &str| {
        onsale(
            &[
                "audit",
                "verify",
                "--checkpoint",
                &path(cp),
                "--public-key",
                public,
            ],
            &db,
        )
    };
    let ok = onsale_tests::succeeded(&verify(&cp, &public));
    assert!(
        ok.contains(&format!(
            "{aggregates} signed heads of 1 checkpoints as signed"
        )),
        "{ok}"
    );

    // The owner rewrites a hold's seat and every hash after it, triggers off.
    let mut conn = pool.acquire().await.expect("connection");
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut *conn)
        .await
        .expect("triggers off");
    sqlx::query(
        "UPDATE events SET payload = replace(payload::text, 'S1-R1-1', 'S1-R1-9')::json
          WHERE aggregate_type = 'show' AND aggregate_id = $1 AND sequence = 2",
    )
    .bind(&event)
    .execute(&mut *conn)
    .await
    .expect("a row rewritten");
    let rows: Vec<(i64, String, String, String, String)> = sqlx::query_as(
        "SELECT sequence, event_type, event_version, payload::text, metadata::text FROM events
          WHERE aggregate_type = 'show' AND aggregate_id = $1 ORDER BY sequence",
    )
    .bind(&event)
    .fetch_all(&mut *conn)
    .await
    .expect("rows");
    let mut prev = onsale_eventlog::chain::GENESIS;
    for (sequence, event_type, version, payload, metadata) in rows {
        let hash = onsale_eventlog::chain::row_hash(
            &prev,
            "show",
            &event,
            sequence,
            &event_type,
            &version,
            &payload,
            &metadata,
        );
        sqlx::query(
            "UPDATE events SET hash = $3 WHERE aggregate_type = 'show' AND aggregate_id = $1
                AND sequence = $2",
        )
        .bind(&event)
        .bind(sequence)
        .bind(hash.to_vec())
        .execute(&mut *conn)
        .await
        .expect("a hash recomputed");
        prev = hash;
    }
    drop(conn);
    let chained = onsale_tests::succeeded(&onsale(&["audit", "verify"], &db));
    assert!(
        chained.contains("every hash chain intact"),
        "the chain alone passes: {chained}"
    );
    let caught = verify(&cp, &public);
    let err = String::from_utf8_lossy(&caught.stderr);
    assert!(
        !caught.status.success(),
        "a rewritten log passed its checkpoint"
    );
    assert!(
        err.contains("rewritten since checkpoint")
            && err.contains(&format!("show {event} at sequence 4")),
        "{err}"
    );

    // The checkpoint changed to match, or checked under another key, is refused.
    let forged = dir.path().join("checkpoint-forged.json");
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&cp).expect("read")).expect("json");
    doc["heads"][0]["sequence"] = json!(5);
    std::fs::write(&forged, doc.to_string()).expect("write");
    let other = dir.path().join("other.p8");
    let other_public =
        onsale_tests::succeeded(&onsale(&["audit", "keygen", "--out", &path(&other)], &db));
    for (file, key) in [(&forged, public.as_str()), (&cp, other_public.trim())] {
        let refused = verify(file, key);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{err}");
        assert!(err.contains("signature does not hold"), "{err}");
    }
    app.server.shutdown().await.expect("stops");
}

/// The jobs' process signs a checkpoint at intervals, each a file of its own, and `audit
/// verify` holds the log to all of them.
#[tokio::test]
async fn the_jobs_sign_a_checkpoint_at_intervals_that_verify_holds_the_log_to() {
    let db = TestDb::new().await.expect("db");
    let dir = tempfile::tempdir().expect("dir");
    let key = dir.path().join("signing.p8");
    let public = onsale_server::audit::keygen(&key).expect("key");
    let kept = dir.path().join("checkpoints");
    let mut settings = onsale_tests::settings(&db);
    settings.checkpoints.dir = Some(kept.clone());
    settings.checkpoints.key_file = Some(key);
    settings.checkpoints.every_secs = 1;
    let app = TestApp::start(
        settings,
        &[onsale_server::Part::Api, onsale_server::Part::Jobs],
        std::sync::Arc::new(onsale_domain::SystemClock),
    )
    .await
    .expect("app");
    let event = app.on_sale_event(1, 1, 4, None).await;
    let (status, body) = app
        .hold(
            &event,
            &app.fan("ann"),
            json!({"seatIds": ["S1-R1-1"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let files = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&kept)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    };
    // Two taken after the hold: the first may have been taken before the show existed.
    onsale_tests::wait_for(
        "three checkpoints taken",
        std::time::Duration::from_secs(30),
        || async { files().len() >= 3 },
    )
    .await;
    let mut args = vec!["audit".to_owned(), "verify".to_owned()];
    for f in files() {
        args.push("--checkpoint".into());
        args.push(f.to_str().expect("utf-8").to_owned());
    }
    args.extend(["--public-key".into(), public]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ok = onsale_tests::succeeded(&onsale(&args, &db));
    assert!(ok.contains("signed heads of"), "{ok}");
    let newest = files().into_iter().max().expect("a checkpoint");
    let cp: Value =
        serde_json::from_str(&std::fs::read_to_string(newest).expect("read")).expect("json");
    assert!(
        cp["heads"]
            .as_array()
            .expect("heads")
            .iter()
            .any(|h| h["aggregateId"] == json!(event) && h["sequence"].as_i64() >= Some(2)),
        "the show's head after its hold: {cp}"
    );
    app.server.shutdown().await.expect("stops");
}

/// The seat statuses after events 1..=k of a show, folded here from the rows' JSON without the
/// domain's code: what the map of the past is checked against.
fn independent_fold(rows: &[(i64, Value)], k: i64) -> BTreeMap<String, &'static str> {
    let mut status: BTreeMap<String, &'static str> = BTreeMap::new();
    let mut holds: HashMap<String, Vec<String>> = HashMap::new();
    let mut orders: HashMap<String, Vec<String>> = HashMap::new();
    let seats = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("seat ids")
            .iter()
            .map(|s| s.as_str().expect("seat id").to_owned())
            .collect()
    };
    for (_, e) in rows.iter().filter(|(s, _)| *s <= k) {
        let (kind, body) = e
            .as_object()
            .expect("an event")
            .iter()
            .next()
            .expect("one key");
        let id = |f: &str| body[f].as_str().expect("an id").to_owned();
        match kind.as_str() {
            "ShowScheduled" => {
                for section in body["layout"].as_array().expect("sections") {
                    for row in section["rows"].as_array().expect("rows") {
                        for n in 1..=row["seats"].as_u64().expect("seats") {
                            let seat = format!(
                                "{}-{}-{n}",
                                section["section"].as_str().expect("section"),
                                row["row"].as_str().expect("row")
                            );
                            status.insert(seat, "available");
                        }
                    }
                }
            }
            "SeatsHeld" => {
                let s = seats(&body["seat_ids"]);
                for seat in &s {
                    status.insert(seat.clone(), "held");
                }
                holds.insert(id("hold_id"), s);
            }
            "HoldReleased" | "HoldExpired" => {
                for seat in holds.remove(&id("hold_id")).unwrap_or_default() {
                    if status[&seat] == "held" {
                        status.insert(seat, "available");
                    }
                }
            }
            "OrderPlaced" => {
                let s = seats(&body["seat_ids"]);
                holds.remove(&id("hold_id"));
                for seat in &s {
                    status.insert(seat.clone(), "sold");
                }
                orders.insert(id("order_id"), s);
            }
            "PaymentFailed" | "OrderCompensated" | "OrderCancelled" => {
                for seat in orders.get(&id("order_id")).cloned().unwrap_or_default() {
                    status.insert(seat, "available");
                }
            }
            _ => {}
        }
    }
    status
}

async fn past(app: &TestApp, event: &str, query: &str, token: &str) -> (u16, Value) {
    app.get(&format!("/v1/events/{event}/seats?{query}"), token)
        .await
}

/// A map of the past (`?atSequence=`, `?at=`, `onsale replay`) equals an independent fold of
/// the log up to that point, at every sequence of a show that took snapshots on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seat_map_of_any_past_moment_equals_an_independent_fold_of_the_log() {
    let db = TestDb::new().await.expect("db");
    let mut settings = onsale_tests::settings(&db);
    settings.owners.snapshot_every = 3;
    let app = TestApp::spawn_with(settings, std::sync::Arc::new(onsale_domain::SystemClock))
        .await
        .expect("app");
    let event = app.on_sale_event(2, 2, 5, None).await;
    for i in 0..8 {
        let token = app.fan(&format!("fan-{i}"));
        let seats = json!([
            format!("S1-R{}-{}", 1 + i / 5, 1 + i % 5),
            format!("S2-R1-{}", 1 + i % 5)
        ]);
        let (status, hold) = app
            .hold(&event, &token, json!({ "seatIds": seats }), None)
            .await;
        if status != 201 {
            // The second section's seats repeat: the fold must agree on refusals too.
            assert_eq!(status, 409, "{hold}");
            continue;
        }
        match i % 3 {
            0 => {
                let (s, b) = app
                    .delete(
                        &format!("/v1/holds/{}", hold["holdId"].as_str().expect("id")),
                        &token,
                    )
                    .await;
                assert_eq!(s, 204, "{b}");
            }
            1 => {
                let (s, b) = app.order(&hold["holdId"], &token, &format!("k-{i}")).await;
                assert_eq!(s, 202, "{b}");
            }
            _ => {}
        }
    }
    let pool = db.pool().await.expect("pool");
    let rows: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT sequence, payload::text, metadata->>'at' FROM events
          WHERE aggregate_type = 'show' AND aggregate_id = $1 ORDER BY sequence",
    )
    .bind(&event)
    .fetch_all(&pool)
    .await
    .expect("the log");
    let head = rows.len() as i64;
    let snapshots: i64 =
        sqlx::query_scalar("SELECT count(*) FROM snapshots WHERE aggregate_id = $1")
            .bind(&event)
            .fetch_one(&pool)
            .await
            .expect("snapshots");
    assert!(
        head >= 10 && snapshots >= 1,
        "{head} events, {snapshots} snapshots"
    );
    let json_rows: Vec<(i64, Value)> = rows
        .iter()
        .map(|(s, p, _)| (*s, serde_json::from_str(p).expect("json")))
        .collect();
    let auditor = app.token("auditor-1", onsale_edge::auth::Role::Auditor);
    for k in 1..=head {
        let expect = independent_fold(&json_rows, k);
        let (status, map) = past(
            &app,
            &event,
            &format!("atSequence={k}&section=S1"),
            &auditor,
        )
        .await;
        assert_eq!(status, 200, "{map}");
        assert_eq!(map["seq"], k);
        assert_eq!(map["eventId"], event.as_str());
        let seats = onsale_tests::seat_statuses(&map);
        for (seat, shown) in &seats {
            let public = if expect[seat] == "sold" {
                "SOLD"
            } else {
                "AVAILABLE"
            };
            assert_eq!(shown, public, "{seat} after event {k}");
        }
        for section in map["sections"].as_array().expect("sections") {
            let name = section["section"].as_str().expect("name");
            let count = |st: &str| {
                expect
                    .iter()
                    .filter(|(seat, s)| seat.starts_with(&format!("{name}-")) && **s == st)
                    .count() as i64
            };
            assert_eq!(
                (
                    section["available"].as_i64(),
                    section["held"].as_i64(),
                    section["sold"].as_i64()
                ),
                (
                    Some(count("available")),
                    Some(count("held")),
                    Some(count("sold"))
                ),
                "{name} after event {k}"
            );
        }
        // The instant an event was decided gives the map after it (the events decided in
        // the same instant with it too).
        let at = &rows[(k - 1) as usize].2;
        let last_at_that_instant = rows
            .iter()
            .filter(|r| &r.2 <= at)
            .map(|r| r.0)
            .max()
            .expect("k");
        let (status, by_time) = past(
            &app,
            &event,
            &format!("at={}&section=S1", urlencode(at)),
            &auditor,
        )
        .await;
        assert_eq!(status, 200, "{by_time}");
        assert_eq!(by_time["seq"], last_at_that_instant, "at {at}");
    }
    // `onsale replay` prints the same map.
    let k = head / 2;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_onsale"))
        .args([
            "replay",
            "--show",
            &event,
            "--until",
            &k.to_string(),
            "--section",
            "S1",
        ])
        .env("DATABASE_URL", &db.url)
        .output()
        .expect("onsale runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).expect("a map");
    let (_, api) = past(
        &app,
        &event,
        &format!("atSequence={k}&section=S1"),
        &auditor,
    )
    .await;
    assert_eq!(printed, api);
    // Who may ask, and what is refused.
    let (status, body) = past(&app, &event, "atSequence=1", &app.fan("fan-1")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("FORBIDDEN")),
        "{body}"
    );
    let (status, body) = past(&app, &event, &format!("atSequence={}", head + 1), &auditor).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("BEYOND_THE_LOG")),
        "{body}"
    );
    let (status, body) = past(&app, &event, "at=2000-01-01T00:00:00Z", &app.admin()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("NOT_SCHEDULED_YET")),
        "{body}"
    );
    for bad in [
        "at=yesterday",
        "atSequence=0",
        "atSequence=1&at=2000-01-01T00:00:00Z",
    ] {
        let (status, body) = past(&app, &event, bad, &auditor).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    app.server.shutdown().await.expect("stops");
}

fn urlencode(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}
