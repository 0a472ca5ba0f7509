//! `make drill-bots`, short (issue 29): the drill's loadgen against an in-process API with its
//! production limits (per account, per address behind a trusted proxy, reads; kept in Redis)
//! and the admitter. Honest fans keep their pace, get no 5xx and no 429, and admission never
//! pauses, while the bots' made-up ids and reads are refused. Card testing is left to the full
//! drill (it needs the processor, the worker and the payment intake on Kafka: too much for a
//! debug build on two cores beside the flood) and to `payments.rs`'s own test.
//!
//! The throughput and p99 goals (>= 90% and <= 2x of calm) are the full drill's, on a release
//! build (BENCHMARKS.md); here debug builds of the service, the fans and the bots share two
//! cores with whatever else the suite runs, so the bots' refusals cost the fans CPU: the bounds
//! are 70% of calm's throughput and no stall (a storm p99 under a second; a p99 ratio is a
//! benchmark's to measure, and a timed bound of 2x + 150 ms failed on a busy machine with the
//! storm's p99 at 242 ms).

use std::time::Duration;

use onsale_server::Part;
use serde_json::Value;

use crate::run;

/// The API and the admitter with their production limits, on a database of their own.
async fn service() -> onsale_tests::TestApp {
    let db = onsale_tests::TestDb::new().await.expect("db");
    let mut s = onsale_tests::settings(&db);
    s.limits.rate_account_per_sec = 10;
    s.limits.rate_account_burst = 20;
    s.limits.rate_address_per_sec = 200;
    s.limits.rate_address_burst = 400;
    s.limits.rate_read_address_per_sec = 10;
    s.limits.rate_read_address_burst = 20;
    s.limits.rate_read_account_per_sec = 10;
    s.limits.rate_read_account_burst = 20;
    s.limits.rate_misses_per_sec = 1;
    s.limits.rate_misses_burst = 20;
    s.limits.trusted_proxies = vec!["127.0.0.1/32".parse().expect("a block")];
    s.waiting_room.redis_url = Some(
        onsale_tests::waiting_room::redis_url()
            .await
            .expect("redis"),
    );
    onsale_tests::TestApp::start(
        s,
        &[Part::Api, Part::Admitter],
        std::sync::Arc::new(onsale_domain::SystemClock),
    )
    .await
    .expect("the service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_cannot_stall_an_on_sale_short() {
    // The timed bounds compare a storm with the calm before it, which means something only
    // when the calm itself ran on a quiet machine (alone, a debug calm's p99 is 8-16 ms; while
    // the suite's broker was still warming up it read 365-477 ms, and the admission controller
    // rightly eased off). Up to three drills, each on a service of its own (the admission
    // controller remembers a busy drill): the refusals are checked on each, the timed bounds on
    // the first whose calm was quiet.
    for attempt in 1..=3 {
        let app = service().await;
        let stdout = run::loadgen(
            &[
                "drill-bots",
                "--base",
                &app.base,
                "--metrics-base",
                &app.operator_base(),
                "--fans",
                "16",
                "--bots",
                "2",
                "--loops",
                "6",
                "--seconds",
                "5",
                "--card-testing",
                "false",
                "--json",
            ],
            Duration::from_secs(120),
        )
        .await;
        let r: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("a report");
        println!("{r:#}");
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        assert_eq!(r["fan_5xx"], 0, "{r}");
        assert_eq!(
            r["fan_429"], 0,
            "fans behind the bots' address are not throttled: {r}"
        );
        assert!(f("bot_429_share") >= 0.8, "{r}");
        if f("calm_p99_ms") >= 250.0 {
            eprintln!("drill {attempt}: the calm phase ran on a busy machine; again");
            app.server.shutdown().await.expect("shuts down");
            continue;
        }
        // Debug builds of the service, the fans and the bots share two cores here, so every
        // refusal's cost shows, and the bots flood a few thousand requests, not tens: the
        // release drill holds the strict goals (>= 90% of calm, <= 2x calm, >= 90% of bots
        // refused).
        assert!(
            f("storm_holds_per_sec") >= 0.7 * f("calm_holds_per_sec"),
            "{r}"
        );
        assert!(
            f("storm_p99_ms") < 1_000.0,
            "the bots stalled the fans: {r}"
        );
        assert!(
            r["lowest_admission_factor"]
                .as_f64()
                .is_some_and(|x| x >= 1.0),
            "the admission factor read through the storm, and no pause: {r}"
        );
        return;
    }
    panic!("three drills, and the machine was busy during each calm phase: nothing timed could be compared");
}
