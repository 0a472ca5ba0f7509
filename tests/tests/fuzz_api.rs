//! The API fuzzed against its own OpenAPI document (issue 15, item 8): schemathesis with every
//! check, a token for each role, a fixed seed and a few examples per operation, against a real
//! onsale with its waiting room. Zero failures: no 5xx, no undocumented status, content type or
//! header, no schema-valid request refused and no invalid one accepted. `make fuzz-api` runs
//! the long version against the local stack.

use std::process::Command;

use onsale_edge::auth::Role;
use onsale_tests::waiting_room::Room;
use onsale_tests::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_as_its_openapi_document_says() {
    let schemathesis = std::env::var("ONSALE_TEST_SCHEMATHESIS")
        .expect("ONSALE_TEST_SCHEMATHESIS is not set: run the tests with `make test`");
    let db = TestDb::new().await.expect("db");
    let room = Room::start(&db, |_| {}).await.expect("the API starts");
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/fuzz/schemathesis.toml"
    );
    let url = format!("{}/openapi.json", room.app.base);
    for role in [Role::Admin, Role::Fan, Role::Scanner, Role::Auditor] {
        let token = room.app.token(&format!("fuzz-{role:?}"), role);
        let (schemathesis, config, url) = (schemathesis.clone(), config.to_owned(), url.clone());
        let out = tokio::task::spawn_blocking(move || {
            Command::new(schemathesis)
                .args(["--config-file", &config, "run", &url, "--checks", "all"])
                .args([
                    "--workers",
                    "1",
                    "--max-examples",
                    "6",
                    "--seed",
                    "20261201",
                ])
                .args(["-H", &format!("Authorization: Bearer {token}")])
                .env("NO_COLOR", "1")
                .output()
        })
        .await
        .expect("joined")
        .expect("schemathesis runs");
        let log = String::from_utf8_lossy(&out.stdout);
        let failures: String = log
            .lines()
            .skip_while(|l| !l.contains("FAILURES") && !l.contains("ERRORS"))
            .map(|l| l.chars().take(300).collect::<String>() + "\n")
            .take(120)
            .collect();
        assert!(
            out.status.success(),
            "schemathesis as {role:?} found failures:\n{failures}"
        );
        assert!(log.contains(" generated"), "schemathesis ran: {log:.2000}");
    }
}
