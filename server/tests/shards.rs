//! The operators' and auditors' commands on a sharded deployment (docs/adr/021): with shows on
//! two write clusters, `onsale audit verify`, `onsale export` and `onsale replay` read every
//! shard, and a row altered on shard 2 is named with its shard.

use std::sync::Arc;

use onsale_domain::SystemClock;
use onsale_tests::{settings, succeeded, TestApp, TestDb};
use serde_json::{json, Value};

fn onsale(main: &TestDb, shards: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_onsale"))
        .args(args)
        .env("DATABASE_URL", &main.url)
        .env("ONSALE_SHARD_URLS", shards)
        .env("ONSALE_DEV_MODE", "1")
        .env_remove("ONSALE_PSEUDONYM_KEY")
        .output()
        .expect("onsale runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_export_and_replay_read_every_shard() {
    let main = TestDb::new().await.expect("main database");
    let (one, two) = (
        TestDb::new().await.expect("shard 1"),
        TestDb::new().await.expect("shard 2"),
    );
    let mut s = settings(&main);
    s.database.shard_urls = vec![one.url.clone(), two.url.clone()];
    let app = TestApp::spawn_with(s, Arc::new(SystemClock))
        .await
        .expect("app");
    let sections =
        json!([{"section": "S1", "priceTier": "A", "rows": [{"row": "R1", "seats": 10}]}]);
    let a = app.event_at(sections.clone(), json!({"shard": 1})).await;
    let b = app.event_at(sections, json!({"shard": 2})).await;
    for (event, fan) in [(&a, "ann"), (&b, "bob"), (&b, "cat")] {
        let seat = if fan == "cat" { "S1-R1-2" } else { "S1-R1-1" };
        let (status, hold) = app
            .hold(event, &app.fan(fan), json!({"seatIds": [seat]}), None)
            .await;
        assert_eq!(status, 201, "{hold}");
    }
    let shards = format!("{},{}", one.url, two.url);

    // Two venues (on shard 1) and two shows: 2 + 2 schedules + 3 holds, every chain intact.
    let out = succeeded(&onsale(&main, &shards, &["audit", "verify"]));
    assert!(out.contains("ok: 7 events of 4 aggregates"), "{out}");
    let out = succeeded(&onsale(&main, &shards, &["audit", "verify", "--show", &b]));
    assert!(out.contains("ok: 3 events of 1 aggregates"), "{out}");

    // The export holds both shows' events, whatever shard each is on.
    let dir = tempfile::tempdir().expect("dir");
    let out_dir = dir.path().join("export");
    let out_arg = out_dir.to_string_lossy().into_owned();
    succeeded(&onsale(
        &main,
        &shards,
        &[
            "export",
            "--out",
            &out_arg,
            "--format",
            "ndjson",
            "--quiet",
            "--allow-development-pseudonym-key",
        ],
    ));
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("manifest.json")).expect("manifest"))
            .expect("json");
    assert_eq!(
        (&manifest["events"], &manifest["shows"]),
        (&json!(5), &json!(2))
    );

    // The map as it is, rebuilt from shard 2's log.
    let map: Value = serde_json::from_str(&succeeded(&onsale(
        &main,
        &shards,
        &["replay", "--show", &b],
    )))
    .expect("a map");
    assert_eq!(map["sections"][0]["held"], 2, "{map}");

    // A superuser edits a row of shard 2's show: named, with its shard.
    let pool = two.pool().await.expect("pool");
    let mut conn = pool.acquire().await.expect("connection");
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut *conn)
        .await
        .expect("triggers off");
    sqlx::query(
        "UPDATE events SET payload = replace(payload::text, 'S1-R1-2', 'S1-R1-9')::json
          WHERE aggregate_type = 'show' AND aggregate_id = $1 AND sequence = 3",
    )
    .bind(&b)
    .execute(&mut *conn)
    .await
    .expect("a superuser edits a row");
    drop(conn);
    let caught = onsale(&main, &shards, &["audit", "verify"]);
    let err = String::from_utf8_lossy(&caught.stderr);
    assert!(!caught.status.success(), "verify passed an altered log");
    assert!(
        err.contains("altered on shard 2") && err.contains(&format!("{b} breaks at sequence 3")),
        "{err}"
    );
}
