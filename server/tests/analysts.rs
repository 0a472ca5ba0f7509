//! What an analyst gets: `onsale export` writes the log as Parquet (or NDJSON) that DuckDB
//! reads, with the same events and seats sold per show as the projections hold, account ids
//! pseudonymized unless an admin asks otherwise and no card token anywhere; and the sample
//! consumer reads the topic's history as documented.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use onsale_tests::payments::PaymentPath;
use onsale_tests::read_path::projections_at_head;
use onsale_tests::wait_until;
use serde_json::{json, Value};

fn python() -> String {
    std::env::var("ONSALE_TEST_PYTHON").expect("ONSALE_TEST_PYTHON: run with `make test`")
}

fn repo(path: &str) -> String {
    format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))
}

fn export(db_url: &str, out: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_onsale"))
        .arg("export")
        .arg("--out")
        .arg(out)
        .args(["--quiet", "--allow-development-pseudonym-key"])
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("ONSALE_DEV_MODE", "1")
        .env_remove("ONSALE_PSEUDONYM_KEY")
        .output()
        .expect("onsale runs")
}

fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Per show, what DuckDB reads from an export: events, the last sequence, seats sold.
fn duckdb(dir: &Path) -> BTreeMap<String, Value> {
    let out = std::process::Command::new(python())
        .arg(repo("export/examples/seats_sold.py"))
        .arg(dir)
        .output()
        .expect("python runs");
    serde_json::from_str(&ok(out)).expect("the script prints JSON")
}

/// Everything in a directory's files, as text.
fn all_text(dir: &Path) -> String {
    let mut text = String::new();
    for e in std::fs::read_dir(dir).expect("dir") {
        let bytes = std::fs::read(e.expect("entry").path()).expect("read");
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duckdb_reads_from_the_export_what_the_projections_hold_and_the_sample_consumer_reads_the_topic(
) {
    let (db, p) = PaymentPath::start(|_| {}).await.expect("payment path");
    let (a, b) = (
        p.rp.show_on_map(1, 2, 10).await,
        p.rp.show_on_map(1, 2, 10).await,
    );
    let paid = p.buy(&a, "ann-q7", &["S1-R1-1", "S1-R1-2"], "tok_ok").await;
    let declined = p.buy(&a, "bob-q7", &["S1-R1-3"], "tok_decline").await;
    let dan = p
        .buy(&b, "dan-q7", &["S1-R2-1", "S1-R2-2", "S1-R2-3"], "tok_ok")
        .await;
    // A hold released, and one left to expire later.
    let cat = p.rp.app.fan("cat-q7");
    let (status, hold) =
        p.rp.app
            .hold(&a, &cat, json!({ "seatIds": ["S1-R2-9"] }), None)
            .await;
    assert_eq!(status, 201, "{hold}");
    let id = hold["holdId"].as_str().expect("hold id");
    let (status, _) = p.rp.app.delete(&format!("/v1/holds/{id}"), &cat).await;
    assert_eq!(status, 204);
    let (status, hold) =
        p.rp.app
            .hold(
                &b,
                &p.rp.app.fan("eve-q7"),
                json!({ "seatIds": ["S1-R1-1"] }),
                None,
            )
            .await;
    assert_eq!(status, 201, "{hold}");
    p.order_becomes(&paid, "ann-q7", "CONFIRMED", 20).await;
    p.order_becomes(&declined, "bob-q7", "FAILED", 20).await;
    p.order_becomes(&dan, "dan-q7", "CONFIRMED", 20).await;
    projections_at_head(&p.rp.pool)
        .await
        .expect("the projections catch up");

    // What the projections hold, per show: the events applied and the seats sold.
    let mut projected = BTreeMap::new();
    for show in [&a, &b] {
        let (events, sold): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT last_sequence FROM projection_positions
                      WHERE projection = 'seat_map' AND show_id = $1),
                    (SELECT sum(sold)::bigint FROM seat_map_sections WHERE show_id = $1)",
        )
        .bind(show)
        .fetch_one(&p.rp.pool)
        .await
        .expect("projections");
        projected.insert(
            show.clone(),
            json!({ "events": events, "head": events, "sold": sold }),
        );
    }
    assert_eq!(projected[&a]["sold"], 2);
    assert_eq!(projected[&b]["sold"], 3);

    let dir = tempfile_dir();
    let parquet = dir.join("parquet");
    let printed = ok(export(&db.url, &parquet, &[]));
    assert!(printed.contains("pseudonymized"), "{printed}");
    assert_eq!(duckdb(&parquet), projected, "DuckDB on the Parquet export");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(parquet.join("manifest.json")).expect("manifest"))
            .expect("json");
    assert_eq!(manifest["format"], "parquet");
    assert_eq!(manifest["shows"], 2);
    // Which key made the pseudonyms, and that it was the development one, say so.
    assert_eq!(manifest["developmentPseudonymKey"], true, "{manifest}");
    assert_eq!(
        manifest["pseudonymKeyId"].as_str().map(str::len),
        Some(16),
        "{manifest}"
    );
    let text = all_text(&parquet);
    for clear in ["ann-q7", "bob-q7", "dan-q7", "eve-q7", "cat-q7", "tok_"] {
        assert!(!text.contains(clear), "{clear} is in the Parquet export");
    }

    // One show as NDJSON, up to a sequence, the account ids as they are (an admin's choice).
    let ndjson = dir.join("ndjson");
    ok(export(
        &db.url,
        &ndjson,
        &[
            "--show",
            &a,
            "--until",
            "4",
            "--format",
            "ndjson",
            "--raw-account-ids",
            "--file-rows",
            "3",
        ],
    ));
    let rows: Vec<Value> = std::fs::read_dir(&ndjson)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|f| f.extension().is_some_and(|x| x == "ndjson"))
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .expect("read")
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut sequences: Vec<i64> = rows
        .iter()
        .map(|r| r["sequence"].as_i64().expect("seq"))
        .collect();
    sequences.sort_unstable();
    assert_eq!(sequences, [1, 2, 3, 4]);
    assert!(rows.iter().all(|r| r["show_id"] == a.as_str()));
    assert!(rows.iter().any(|r| r["account_id"] == "ann-q7"), "{rows:?}");
    assert_eq!(duckdb(&ndjson)[&a]["events"], 4);
    // An export never lands on another.
    let again = export(&db.url, &ndjson, &[]);
    assert!(!again.status.success());
    // Nothing to export is an empty, valid export.
    let later = dir.join("later");
    ok(export(&db.url, &later, &["--from", "2999-01-01T00:00:00Z"]));
    assert_eq!(duckdb(&later), BTreeMap::new());
    // Outside development mode the pseudonyms' key is required.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_onsale"))
        .args(["export", "--quiet", "--out"])
        .arg(dir.join("refused"))
        .env("DATABASE_URL", &db.url)
        .env_remove("ONSALE_DEV_MODE")
        .env_remove("ONSALE_PSEUDONYM_KEY")
        .output()
        .expect("onsale runs");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("ONSALE_PSEUDONYM_KEY"));
    // In development mode too, unless the development key is asked for by name.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_onsale"))
        .args(["export", "--quiet", "--out"])
        .arg(dir.join("refused-dev"))
        .env("DATABASE_URL", &db.url)
        .env("ONSALE_DEV_MODE", "1")
        .env_remove("ONSALE_PSEUDONYM_KEY")
        .output()
        .expect("onsale runs");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--allow-development-pseudonym-key"));

    // The sample consumer prints show a's history from the topic, each event once.
    let head = projected[&a]["events"].as_i64().expect("head");
    let printed = wait_until(
        "the sample consumer prints the show's whole history",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let out = std::process::Command::new(python())
                .arg(repo("kafka/examples/consume_topic.py"))
                .args([
                    "--brokers",
                    &p.rp.kafka.brokers,
                    "--topic",
                    &p.rp.kafka.events_topic,
                ])
                .args(["--show", &a, "--idle-secs", "3"])
                .output()
                .expect("python runs");
            let printed = ok(out)
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
                .collect::<Vec<_>>();
            if printed.len() as i64 >= head {
                Ok(printed)
            } else {
                Err(format!("{} of {head} events printed", printed.len()))
            }
        },
    )
    .await;
    let seqs: Vec<i64> = printed
        .iter()
        .map(|e| e["sequence"].as_i64().expect("seq"))
        .collect();
    assert_eq!(seqs, (1..=head).collect::<Vec<_>>());
    assert_eq!(printed[0]["type"], "ShowScheduled");
    assert!(printed.iter().all(|e| e["commitLsn"].is_string()));
    std::fs::remove_dir_all(&dir).expect("clean up");
    p.stop().await;
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("onsale-export-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}
