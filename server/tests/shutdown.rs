//! SIGTERM during a burst of holds, against the real `onsale serve` binary and PostgreSQL: the
//! process exits 0 within its bound, every hold it answered 201 is in the log, every other
//! answer is a 503 with `Retry-After` that committed nothing, and a request that got no answer
//! at all committed nothing either (no answer is lost silently).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use onsale_domain::{AccountId, HoldId, IdempotencyKey, ShowId};
use onsale_edge::auth::Role;
use onsale_eventlog::{EventLog, PgEventLog};
use onsale_tests::{free_port, onsale_process, wait_for, Api, TestDb, SECRET};
use serde_json::json;

/// What one hold request got.
#[derive(Debug)]
enum Outcome {
    Answered {
        status: u16,
        retry_after: bool,
        hold: Option<String>,
        code: Option<String>,
    },
    NoAnswer(String),
}

#[derive(Debug)]
struct Attempt {
    fan: String,
    key: String,
    outcome: Outcome,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_during_a_burst_of_holds_loses_no_answer_and_exits_zero() {
    let db = TestDb::new().await.expect("db");
    let port = free_port();
    // No processor and no Redis: the worker and the jobs find nothing to do, and this show
    // has no waiting room.
    let mut child = onsale_process(
        env!("CARGO_BIN_EXE_onsale"),
        &db,
        &["serve"],
        &[
            ("ONSALE_LISTEN", format!("127.0.0.1:{port}")),
            ("ONSALE_GRPC_LISTEN", format!("127.0.0.1:{}", free_port())),
            ("ONSALE_PROCESSOR_URL", "http://127.0.0.1:9".to_owned()),
            ("ONSALE_SHUTDOWN_TIMEOUT_SECS", "10".to_owned()),
        ],
    );
    let api = Api::new(&format!("http://127.0.0.1:{port}"));
    api.serving().await;
    let event = api.on_sale_event(4, 50, 50, None).await;

    let attempts = Arc::new(Mutex::new(Vec::<Attempt>::new()));
    let granted = Arc::new(AtomicUsize::new(0));
    let next_seat = Arc::new(AtomicUsize::new(0));
    let refused_at_door = Arc::new(AtomicBool::new(false));
    let mut fans = Vec::new();
    for f in 0..48u32 {
        let (api, event, attempts, granted, door, next_seat) = (
            api.clone(),
            event.clone(),
            attempts.clone(),
            granted.clone(),
            refused_at_door.clone(),
            next_seat.clone(),
        );
        fans.push(tokio::spawn(async move {
            // One fresh fan per hold (the per-account cap is not what this test is about), and
            // a seat nobody else asks for: every hold is granted or honestly refused. The
            // burst runs until the server stops answering.
            for n in 0u32.. {
                let i = next_seat.fetch_add(1, Ordering::Relaxed);
                if i >= 10_000 {
                    return;
                }
                let seat = format!("S{}-R{}-{}", i / 2_500 + 1, i % 2_500 / 50 + 1, i % 50 + 1);
                let fan = format!("fan-{f}-{n}");
                let key = format!("key-{f}-{n}");
                let token =
                    onsale_edge::auth::mint(SECRET, &fan, Role::Fan, 3600).expect("a token signs");
                let res = api
                    .http
                    .post(format!("{}/v1/events/{event}/holds", api.base))
                    .bearer_auth(&token)
                    .header("Idempotency-Key", &key)
                    .json(&json!({ "seatIds": [seat] }))
                    .send()
                    .await;
                let outcome = match res {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let retry_after = r.headers().contains_key("retry-after");
                        let body: serde_json::Value = r.json().await.unwrap_or_default();
                        if status == 201 {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                        Outcome::Answered {
                            status,
                            retry_after,
                            hold: body["holdId"].as_str().map(str::to_owned),
                            code: body["code"].as_str().map(str::to_owned),
                        }
                    }
                    Err(e) => Outcome::NoAnswer(e.to_string()),
                };
                let stop = matches!(outcome, Outcome::NoAnswer(_))
                    || matches!(outcome, Outcome::Answered { status: 503, .. });
                attempts
                    .lock()
                    .expect("attempts")
                    .push(Attempt { fan, key, outcome });
                if stop {
                    door.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }));
    }

    // SIGTERM in the middle of the burst.
    wait_for("holds flow", Duration::from_secs(30), || {
        let n = granted.load(Ordering::Relaxed);
        async move { n >= 300 }
    })
    .await;
    let pid = child.id().expect("a pid");
    let sent = Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("onsale exits within its shutdown bound")
        .expect("exit status");
    assert!(status.success(), "onsale exits 0 on SIGTERM, got {status}");
    assert!(
        sent.elapsed() < Duration::from_secs(11),
        "{:?}",
        sent.elapsed()
    );
    for f in fans {
        f.await.expect("fan task");
    }
    assert!(
        refused_at_door.load(Ordering::Relaxed),
        "the burst was still running when the process stopped"
    );

    // The log is the witness.
    let show: ShowId = event.parse().expect("show id");
    let pool = db.pool().await.expect("pool");
    let replayed = PgEventLog::new(pool)
        .replay(show)
        .await
        .expect("the log replays")
        .show;
    let attempts = attempts.lock().expect("attempts");
    let count = |f: &dyn Fn(&Outcome) -> bool| attempts.iter().filter(|a| f(&a.outcome)).count();
    eprintln!(
        "{} attempts: {} answered 201, {} answered 503, {} without an answer",
        attempts.len(),
        count(&|o| matches!(o, Outcome::Answered { status: 201, .. })),
        count(&|o| matches!(o, Outcome::Answered { status: 503, .. })),
        count(&|o| matches!(o, Outcome::NoAnswer(_))),
    );
    let mut answered_201 = 0;
    for a in attempts.iter() {
        let account = AccountId::parse(&a.fan).expect("account");
        let key = IdempotencyKey::parse(&a.key).expect("key");
        let in_log = replayed.hold_for_key(&account, &key);
        match &a.outcome {
            Outcome::Answered {
                status: 201,
                hold: Some(hold),
                ..
            } => {
                answered_201 += 1;
                let id: HoldId = hold.parse().expect("hold id");
                assert_eq!(in_log, Some(id), "{a:?}: answered 201 but not in the log");
            }
            Outcome::Answered {
                status: 503,
                retry_after,
                code,
                ..
            } => {
                assert!(retry_after, "{a:?}: a 503 without Retry-After");
                assert_eq!(code.as_deref(), Some("SHUTTING_DOWN"), "{a:?}");
                assert_eq!(in_log, None, "{a:?}: refused, yet committed");
            }
            Outcome::Answered { .. } => panic!("{a:?}: an answer that is neither 201 nor 503"),
            Outcome::NoAnswer(why) => {
                assert_eq!(in_log, None, "{why}: committed but never answered");
            }
        }
    }
    assert_eq!(
        replayed.holds().count(),
        answered_201,
        "the log holds exactly the holds that were answered 201"
    );
    assert!(answered_201 >= 300);
}

/// The allocator's setting as the process runs with it: `MIMALLOC_PURGE_DELAY` in its
/// environment (mimalloc reads it there at start).
fn purge_delay_of(child: &tokio::process::Child) -> Option<String> {
    let pid = child.id().expect("running");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("its environment");
    environ
        .split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix("MIMALLOC_PURGE_DELAY="))
        .map(str::to_owned)
}

/// docs/adr/027: a process keeps the memory it freed (it starts itself again, same pid, with
/// mimalloc's purge off) unless the operator chose a purge delay, which it keeps.
#[tokio::test]
async fn a_process_keeps_the_memory_it_frees_unless_the_operator_set_a_purge_delay() {
    assert!(
        std::env::var_os("MIMALLOC_PURGE_DELAY").is_none(),
        "the test needs an environment without MIMALLOC_PURGE_DELAY"
    );
    let db = TestDb::new().await.expect("db");
    for (given, runs_with) in [(None, "-1"), (Some("500"), "500")] {
        let port = free_port();
        let mut env = vec![
            ("ONSALE_LISTEN", format!("127.0.0.1:{port}")),
            ("ONSALE_GRPC_LISTEN", format!("127.0.0.1:{}", free_port())),
            ("ONSALE_PROCESSOR_URL", "http://127.0.0.1:9".to_owned()),
        ];
        if let Some(delay) = given {
            env.push(("MIMALLOC_PURGE_DELAY", delay.to_owned()));
        }
        let child = onsale_process(env!("CARGO_BIN_EXE_onsale"), &db, &["serve"], &env);
        Api::new(&format!("http://127.0.0.1:{port}"))
            .serving()
            .await;
        assert_eq!(
            purge_delay_of(&child).as_deref(),
            Some(runs_with),
            "given {given:?}"
        );
    }
}
