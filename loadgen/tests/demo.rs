//! `make demo`, short: the demo's fans (the load generator's typed client) through a whole
//! process on the test stack (the API with the waiting room on Redis and its admitter, the
//! relay into Kafka, the projections, the payment worker and consumers, the processor
//! simulator). Every fan joins the line (solving the show's proof of work), enters, holds
//! seats or places on the floor, pays, releases or walks away, and leaves; then the demo's own
//! checks run: every payment resolved, every order read back, the log replayed, the seat map
//! agreeing, at most one charge per order. It exits non-zero on any unexpected answer or
//! broken invariant.

use std::time::Duration;

use onsale_server::Part;

use crate::run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_an_on_sale_through_the_whole_process_and_its_checks_pass() {
    let redis = onsale_tests::waiting_room::redis_url()
        .await
        .expect("redis");
    let (db, path) = onsale_tests::payments::PaymentPath::start_with(
        |s| {
            s.waiting_room.redis_url = Some(redis);
            s.waiting_room.target = 8;
            s.waiting_room.tick_ms = 100;
        },
        |_| {},
    )
    .await
    .expect("the payment path");
    path.rp
        .app
        .server
        .start(Part::Admitter)
        .await
        .expect("the admitter");
    let processor = path.sim_url.clone();
    let stdout = run::loadgen(
        &[
            "demo",
            "--base",
            &path.rp.app.base,
            "--database-url",
            &db.url,
            "--processor",
            &processor,
            "--fans",
            "40",
            "--concurrency",
            "8",
            "--ga-floor",
            "50",
            "--join-challenge-bits",
            "4",
        ],
        Duration::from_secs(300),
    )
    .await;
    println!("{stdout}");
    for line in [
        "unexpected answers        0",
        "seats sold twice: 0; API vs log mismatches: 0",
        "orders still pending: 0",
    ] {
        assert!(stdout.contains(line), "no `{line}` in:\n{stdout}");
    }
    path.stop().await;
}
