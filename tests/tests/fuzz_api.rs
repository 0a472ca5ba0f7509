//! The API fuzzed against its own OpenAPI document (issue 15, item 8): schemathesis with every
//! check, a token for each role, a fixed seed and a few examples per operation, against a real
//! onsale with its waiting room. Zero failures: no 5xx, no undocumented status, content type or
//! header, no schema-valid request refused and no invalid one accepted. `make fuzz-api` runs
//! the long version against the local stack. The contract is checked on the secure pair
//! (issue 53 item 7): Kafka over TLS with a SCRAM user, Redis over TLS with a password.

use std::process::Command;

use onsale_edge::auth::Role;
use onsale_server::Part;
use onsale_tests::secure::{Secure, ADMIN_USER};
use onsale_tests::waiting_room::Room;
use onsale_tests::TestDb;

/// The fuzzing configuration with real ids for the operations that take one (as
/// `make fuzz-api` writes it).
fn seeded_config(event: &str, hold: &str, order: &str) -> String {
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/fuzz/schemathesis.toml"
    ))
    .expect("the fuzzing configuration");
    let seeds = r#"
[[operations]]
include-path-regex = "^/v1/events/\\{id\\}"
parameters = { "path.id" = "EVENT" }

[[operations]]
include-path = "/v1/holds/{id}"
parameters = { "path.id" = "HOLD" }

[[operations]]
include-path-regex = "^/v1/orders/\\{id\\}"
parameters = { "path.id" = "ORDER" }
"#;
    base + &seeds
        .replace("EVENT", event)
        .replace("HOLD", hold)
        .replace("ORDER", order)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_as_its_openapi_document_says() {
    let schemathesis = std::env::var("ONSALE_TEST_SCHEMATHESIS")
        .expect("ONSALE_TEST_SCHEMATHESIS is not set: run the tests with `make test`");
    let db = TestDb::new().await.expect("db");
    let secure = Secure::of_the_run();
    let redis = secure.redis_url().await.expect("the secure Redis");
    let room = Room::start_with(&db, |s| {
        s.waiting_room.redis_url = Some(redis);
        s.waiting_room.redis_ca_file = Some(secure.ca_file.clone());
        // Every part in one process: the relay's writes and the projections' reads under one
        // user (the processes of a deployment each log in as a user with its own rights).
        s.kafka = secure.kafka(s.kafka.clone(), ADMIN_USER);
    })
    .await
    .expect("the API starts");
    // The whole read path: a hold or an order is read once its projection has it.
    for part in [Part::Relay, Part::Projections] {
        room.app
            .server
            .start(part)
            .await
            .expect("the read path starts");
    }
    let app = &room.app;
    // A show on sale, a hold and an order of the fan the fan's run signs as.
    let fan = app.token("fuzz-Fan", Role::Fan);
    let event = app.on_sale_event(1, 2, 10, None).await;
    let (status, hold) = app
        .hold(
            &event,
            &fan,
            serde_json::json!({"seatIds": ["S1-R1-1"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{hold}");
    let (_, paid) = app
        .hold(
            &event,
            &fan,
            serde_json::json!({"seatIds": ["S1-R1-2"]}),
            None,
        )
        .await;
    let (status, order) = app.order(&paid["holdId"], &fan, "fuzz-order").await;
    assert_eq!(status, 202, "{order}");
    let dir = std::env::temp_dir().join(format!("onsale-fuzz-{}", db.name));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("schemathesis.toml").display().to_string();
    let seeded = seeded_config(
        &event,
        hold["holdId"].as_str().expect("hold id"),
        order["orderId"].as_str().expect("order id"),
    );
    std::fs::write(&config, seeded).expect("config written");
    let url = format!("{}/openapi.json", app.base);
    for role in [Role::Admin, Role::Fan, Role::Scanner, Role::Auditor] {
        let token = match role {
            Role::Scanner => app.scanner(
                "fuzz-scanner",
                &onsale_edge::auth::Gates::Shows(vec![event.clone()]),
            ),
            role => app.token(&format!("fuzz-{role:?}"), role),
        };
        let (schemathesis, config, url) = (schemathesis.clone(), config.clone(), url.clone());
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
    let _ = std::fs::remove_dir_all(&dir);
}

/// One status and body from the API, for the properties below.
async fn answer(req: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    let r = req.send().await.expect("an answer");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

/// A refusal is a 4xx problem with a code; nothing is ever a 5xx.
fn refused_with_a_code(what: &str, status: u16, body: &serde_json::Value) {
    assert!((400..500).contains(&status), "{what}: {status} {body}");
    assert!(
        body["code"].as_str().is_some_and(|c| !c.is_empty()),
        "{what}: {status} without a code: {body}"
    );
}

/// Properties over what a client sends: venue layouts, ids in paths, `Last-Event-ID` and
/// webhook bodies (signed and not). Whatever they are: no panic, no 5xx, and a refusal is a
/// 4xx with a code.
#[test]
fn any_input_is_answered_or_refused_with_a_code() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    use serde_json::json;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (_db, app) = rt.block_on(async {
        let db = TestDb::new().await.expect("db");
        let app = onsale_tests::TestApp::spawn(&db)
            .await
            .expect("the API starts");
        (db, app)
    });
    let event = rt.block_on(app.on_sale_event(1, 1, 4, None));
    let admin = app.admin();
    let mut runner = TestRunner::new(Config {
        cases: 96,
        failure_persistence: None,
        ..Config::default()
    });
    let label = prop_oneof![
        "[A-Za-z0-9]{1,16}",
        ".{0,20}",
        Just(String::new()),
        "[A-Z]{17,40}"
    ];
    let row = (
        label.clone(),
        prop_oneof![
            Just(json!(0)),
            (0u64..2_000).prop_map(|n| json!(n)),
            Just(json!(-1)),
            Just(json!(1.5)),
            Just(json!("10"))
        ],
    );
    let section = (
        label.clone(),
        label.clone(),
        prop::collection::vec(row, 0..4),
    );
    let venue = prop::collection::vec(section, 0..4);
    runner
        .run(&venue, |sections| {
            let body = json!({"name": "Hall", "city": "Oslo", "sections": sections.iter().map(|(s, t, rows)| json!({
                "section": s, "priceTier": t,
                "rows": rows.iter().map(|(r, n)| json!({"row": r, "seats": n})).collect::<Vec<_>>()})).collect::<Vec<_>>()});
            let (status, answer_body) = rt.block_on(answer(
                app.http.post(format!("{}/v1/venues", app.base)).bearer_auth(&admin).json(&body),
            ));
            if status != 201 {
                refused_with_a_code("a venue", status, &answer_body);
            }
            Ok(())
        })
        .expect("venues");
    let id = prop_oneof![
        ".{0,120}",
        "[hoe]_[0-9a-f]{32}_[0-9a-f]{32}",
        "[0-9a-fA-F-]{30,40}",
        "%[0-9A-F]{2}[a-z]{0,8}"
    ];
    runner
        .run(&id, |id| {
            let id = id.replace(['/', '?', '#'], "x");
            for path in [
                format!("/v1/holds/{id}"),
                format!("/v1/orders/{id}"),
                format!("/v1/events/{id}/seats"),
            ] {
                let url = format!("{}{path}", app.base);
                let Ok(url) = reqwest::Url::parse(&url) else {
                    continue;
                };
                let (status, body) =
                    rt.block_on(answer(app.http.get(url).bearer_auth(app.fan("ann"))));
                refused_with_a_code(&path, status, &body);
            }
            Ok(())
        })
        .expect("ids");
    let last_event_id = prop_oneof!["[ -~]{0,40}", "-?[0-9]{1,30}", Just(" 7 ".to_owned())];
    runner
        .run(&last_event_id, |v| {
            let req = app
                .http
                .get(format!("{}/v1/events/{event}/updates", app.base))
                .header("last-event-id", v.as_str());
            let r = rt.block_on(req.send()).expect("an answer");
            let status = r.status().as_u16();
            // A seq resumes (or the show's map is not there yet: 404 with a code); anything
            // else is a 400 with a code.
            if status != 200 {
                let body = rt
                    .block_on(r.json::<serde_json::Value>())
                    .unwrap_or_default();
                refused_with_a_code("Last-Event-ID", status, &body);
            }
            Ok(())
        })
        .expect("Last-Event-ID");
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300),
        ".{0,200}".prop_map(String::into_bytes),
        (".{0,40}", ".{0,40}", any::<i64>()).prop_map(|(kind, reference, amount)| {
            serde_json::to_vec(
                &json!({"id": "evt", "type": kind, "created": "2026-12-01T00:00:00Z",
                "chargeKey": "k", "chargeId": "c", "reference": reference, "status": "succeeded",
                "amountCents": amount}),
            )
            .expect("json")
        })
    ];
    let secret = app.server.settings().payments.webhook_secret.clone();
    runner
        .run(&(body, any::<bool>()), |(body, signed)| {
            let key = if signed {
                secrecy::ExposeSecret::expose_secret(&secret).to_owned()
            } else {
                "a-guess".to_owned()
            };
            let sig = onsale_processor_sim::signature::sign(
                &[key.as_str()],
                chrono::Utc::now().timestamp(),
                &body,
            );
            let (status, answer_body) = rt.block_on(answer(
                app.http
                    .post(format!("{}/v1/webhooks/processor", app.base))
                    .header(onsale_processor_sim::signature::HEADER, sig)
                    .header("content-type", "application/json")
                    .body(body),
            ));
            if status != 200 {
                refused_with_a_code("a webhook", status, &answer_body);
            }
            Ok(())
        })
        .expect("webhooks");
}
