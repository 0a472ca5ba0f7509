//! The example of docs/running.md, run as a newcomer runs it: its lines from the token to the
//! stream of a show's deltas, as written and in order, in bash, against real `onsale serve`,
//! `relay` and `project` processes. Only where they are is put in: the test's port for :8080
//! and this build's binary for `cargo run ... --bin onsale --`.

use std::process::Stdio;
use std::time::Duration;

use onsale_tests::{free_port, onsale_process, serve_env, Api, TestDb, SECRET};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The lines of docs/running.md's first `sh` block from `TOKEN=` to the `curl -N` of the
/// show's deltas, with their continuations.
fn example() -> String {
    let doc = include_str!("../../docs/running.md");
    let block = doc
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("docs/running.md opens with an sh block");
    let from = block.find("TOKEN=").expect("the example mints a token");
    let to = from
        + block[from..]
            .find("curl -N")
            .expect("the example streams a show's deltas");
    let end = to + block[to..].find('\n').unwrap_or(block.len() - to);
    block[from..end].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_example_creates_a_venue_and_a_show_and_streams_its_deltas() {
    let db = TestDb::new().await.expect("db");
    let (http, bin) = (free_port(), env!("CARGO_BIN_EXE_onsale"));
    let _serve = onsale_process(bin, &db, &["serve"], &serve_env(http, free_port()));
    let _relay = onsale_process(bin, &db, &["relay"], &[]);
    let _project = onsale_process(bin, &db, &["project"], &[]);
    Api::new(&format!("http://127.0.0.1:{http}"))
        .serving()
        .await;

    let script = example()
        .replace("cargo run -q -p onsale-server --bin onsale --", bin)
        .replace("http://127.0.0.1:8080", &format!("http://127.0.0.1:{http}"));
    assert!(
        !script.contains("8080") && !script.contains("cargo run"),
        "{script}"
    );
    let mut shell = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("ONSALE_JWT_SECRET", SECRET)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("bash runs");
    let mut lines = BufReader::new(shell.stdout.take().expect("stdout")).lines();
    let mut printed = Vec::new();
    let streamed = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("a line") {
            if line.starts_with(':')
                && line.trim_start_matches(':').trim() == "onsale seat-map deltas"
            {
                return true;
            }
            printed.push(line);
        }
        false
    })
    .await;
    assert_eq!(
        streamed,
        Ok(true),
        "the example did not reach the show's stream; it printed {printed:?}:\n{script}"
    );
}
