//! The fan app in a real browser (issue 17): Debian's Chromium driven by playwright-core
//! (web/e2e/*.mjs, run by node) against the whole stack on a real PostgreSQL, Kafka and Redis
//! (the waiting room), the card processor's simulator, the page served by `onsale serve
//! --web-dir` from the build `make test` made.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use onsale_tests::read_path::{shared_brokers, ReadPath};
use onsale_tests::TestDb;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is unset: run the tests with `make test`, which builds the front end and installs Chromium")
    })
}

/// The browser tests share the machine's two cores; the chart's performance test measures, so
/// it runs alone (a write lock) while the others run side by side (read locks).
static LANE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Runs `web/e2e/<script>` in node with `vars`; its output is the test's on failure.
async fn run_e2e(script: &str, vars: &[(&str, &str)]) {
    let _lane = LANE.read().await;
    run_e2e_in_lane(script, vars).await;
}

async fn run_e2e_in_lane(script: &str, vars: &[(&str, &str)]) {
    let web = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web");
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(web.join("e2e").join(script))
        .current_dir(&web)
        .env("CHROMIUM", env("ONSALE_TEST_CHROMIUM"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Ok(dir) = std::env::var("ONSALE_SCREENSHOTS") {
        cmd.env("SCREENSHOTS", dir);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("the browser run ends within 2 minutes")
        .expect("node runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    println!("{stdout}");
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
}

/// The whole stack on the shared broker, serving the built front end, with a show of 2
/// sections of 2 rows of 5 seats on the seat map and in the catalog; and the page's base URL.
async fn serving_a_show(db: &TestDb) -> (ReadPath, String, String) {
    let web = PathBuf::from(env("ONSALE_TEST_WEB_DIR"));
    let rp = ReadPath::spawn_parts(
        db,
        &shared_brokers().expect("brokers"),
        |s| s.web.web_dir = Some(web),
        &[],
    )
    .await
    .expect("the stack");
    let event = rp.show_on_map(2, 2, 5).await;
    listed(&rp, &event).await;
    let base = rp.app.base.trim_end_matches('/').to_owned();
    (rp, event, base)
}

/// The whole stack on the shared broker with a waiting room (its admitter running, ticking
/// every 100 ms) and the built front end; `tweak` changes its settings.
async fn with_a_line(db: &TestDb, tweak: impl FnOnce(&mut onsale_server::Settings)) -> ReadPath {
    let web = PathBuf::from(env("ONSALE_TEST_WEB_DIR"));
    let redis = onsale_tests::waiting_room::redis_url()
        .await
        .expect("redis");
    let rp = ReadPath::spawn_parts(
        db,
        &shared_brokers().expect("brokers"),
        |s| {
            s.web.web_dir = Some(web);
            s.waiting_room.redis_url = Some(redis);
            s.waiting_room.tick_ms = 100;
            tweak(s);
        },
        &[],
    )
    .await
    .expect("the stack");
    rp.app
        .server
        .start(onsale_server::Part::Admitter)
        .await
        .expect("the admitter");
    rp
}

/// Waits until the catalog projection lists the show, before a page looks for it.
async fn listed(rp: &ReadPath, event: &str) {
    rp.eventually("/v1/events?limit=100", "", |s, v| {
        s == 200 && v.to_string().contains(event)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_signs_in_finds_a_show_and_sees_a_seat_go_within_two_seconds() {
    let db = TestDb::new().await.expect("db");
    let (rp, event, base) = serving_a_show(&db).await;
    run_e2e("fan.mjs", &[("BASE", &base), ("EVENT", &event)]).await;
    rp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fans_pass_the_line_buy_two_seats_on_the_map_get_rotating_tickets_and_a_declined_card_gives_seats_back(
) {
    let web = PathBuf::from(env("ONSALE_TEST_WEB_DIR"));
    let redis = onsale_tests::waiting_room::redis_url()
        .await
        .expect("redis");
    let (_db, p) = onsale_tests::payments::PaymentPath::start_with(
        |s| {
            s.web.web_dir = Some(web);
            s.waiting_room.redis_url = Some(redis);
            s.waiting_room.tick_ms = 100;
            // Two fans in the sale at once: a third waits.
            s.waiting_room.target = 2;
        },
        |_| {},
    )
    .await
    .expect("the stack with payments and the waiting room");
    p.rp.app
        .server
        .start(onsale_server::Part::Admitter)
        .await
        .expect("the admitter");
    let event =
        p.rp.app
            .on_sale_event_with(2, 2, 5, serde_json::json!({"waitingRoom": true}))
            .await;
    p.rp.eventually(&format!("/v1/events/{event}/seats"), "", |s, _| s == 200)
        .await;
    listed(&p.rp, &event).await;
    let base = p.rp.app.base.trim_end_matches('/').to_owned();
    run_e2e("buy.mjs", &[("BASE", &base), ("EVENT", &event)]).await;
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unverified_fan_is_told_why_a_verified_one_solves_the_challenge_in_the_page_and_takes_floor_places_and_a_line_with_nothing_left_is_told_so(
) {
    let db = TestDb::new().await.expect("db");
    let rp = with_a_line(&db, |_| {}).await;
    // Two reserved seats and a floor of three places; verified accounts only, a 16-bit
    // challenge.
    let event = rp
        .app
        .event_at(
            serde_json::json!([
                {"section": "S1", "priceTier": "A", "rows": [{"row": "R1", "seats": 2}]},
                {"section": "FLOOR", "priceTier": "A", "capacity": 3}]),
            serde_json::json!({"waitingRoom": true, "requireVerifiedAccount": true, "joinChallengeBits": 16}),
        )
        .await;
    rp.eventually(&format!("/v1/events/{event}/seats"), "", |s, _| s == 200)
        .await;
    listed(&rp, &event).await;
    let base = rp.app.base.trim_end_matches('/').to_owned();
    run_e2e("line.mjs", &[("BASE", &base), ("EVENT", &event)]).await;
    rp.stop().await;
}

/// Issue 53, item 2: every waiting-room stream refused (no slot for them), the fan app asks
/// for its standing instead and the fan still passes the line and enters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_whose_line_stream_is_refused_asks_for_her_standing_and_still_enters() {
    let db = TestDb::new().await.expect("db");
    let rp = with_a_line(&db, |s| s.limits.max_queue_streams = 0).await;
    let event = rp
        .app
        .on_sale_event_with(2, 2, 5, serde_json::json!({"waitingRoom": true}))
        .await;
    rp.eventually(&format!("/v1/events/{event}/seats"), "", |s, _| s == 200)
        .await;
    listed(&rp, &event).await;
    let base = rp.app.base.trim_end_matches('/').to_owned();
    run_e2e("line-polled.mjs", &[("BASE", &base), ("EVENT", &event)]).await;
    rp.stop().await;
}

/// A Prometheus (scripts/stack.sh prom-up) scraping `target` every second with the alerting
/// rules loaded, under the run's directory (reaped by `make test` if the test dies).
struct Prometheus {
    dir: PathBuf,
}

impl Prometheus {
    async fn start(port: u16, target: &str) -> Self {
        let dir = std::env::var_os("ONSALE_TEST_DIR")
            .map_or_else(std::env::temp_dir, PathBuf::from)
            .join(format!("prom-{}", uuid::Uuid::new_v4().simple()));
        let me = Self { dir };
        me.script(&["prom-up", &port.to_string(), target, "1"])
            .await;
        me
    }

    async fn script(&self, args: &[&str]) {
        let stack = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/stack.sh");
        let dir = self.dir.to_string_lossy().into_owned();
        let mut all = vec![args[0], dir.as_str()];
        all.extend(&args[1..]);
        let out = tokio::process::Command::new(stack)
            .args(&all)
            .output()
            .await
            .expect("stack.sh runs");
        assert!(
            out.status.success(),
            "stack.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    async fn stop(self) {
        self.script(&["prom-down"]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ops_console_shows_a_running_load_its_firing_alerts_and_a_seats_history() {
    let db = TestDb::new().await.expect("db");
    let web = PathBuf::from(env("ONSALE_TEST_WEB_DIR"));
    let prom_port = onsale_tests::free_port();
    let rp = ReadPath::spawn_parts(
        &db,
        &shared_brokers().expect("brokers"),
        |s| {
            s.web.web_dir = Some(web);
            s.web.prometheus_url = Some(format!("http://127.0.0.1:{prom_port}"));
        },
        &[],
    )
    .await
    .expect("the stack");
    let event = rp.show_on_map(2, 2, 5).await;
    let base = rp.app.base.trim_end_matches('/').to_owned();
    // Prometheus scrapes the operators' listener, as deployed (the public one serves no
    // `/metrics`); the console reads the process's metrics through `GET /v1/ops/metrics`.
    let operator = rp
        .app
        .server
        .metrics_addr()
        .expect("an operators' listener")
        .to_string();
    let prometheus = Prometheus::start(prom_port, &operator).await;
    // An invariant broken behind the show's back (two live tickets for one seat), found by
    // the monitor: the console's tile goes red and Prometheus fires the alert.
    for order in ["o-planted-1", "o-planted-2"] {
        sqlx::query(
            "INSERT INTO tickets (ticket_id, order_id, show_id, seat_id, account_id, secret, issued_at)
             VALUES ($1, $2, $3, 'S2-R2-5', 'mallory', '\\x00', now())",
        )
        .bind(uuid::Uuid::new_v4())
        .bind(order)
        .bind(&event)
        .execute(&rp.pool)
        .await
        .expect("a planted ticket");
    }
    let found = onsale_payments::monitor::check(&rp.pool, rp.app.server.stores())
        .await
        .expect("the monitor runs");
    assert!(
        found.iter().any(|v| v.check == "seat_ticketed_twice"),
        "{found:?}"
    );
    run_e2e("ops.mjs", &[("BASE", &base), ("EVENT", &event)]).await;
    prometheus.stop().await;
    rp.stop().await;
}

/// Issue 29: the fan app on another origin (a listed CORS origin) buys through a waiting
/// room: the line's and the session's headers pass Chromium's preflights.
#[tokio::test]
async fn a_page_on_another_origin_buys_through_the_waiting_room() {
    let db = TestDb::new().await.expect("db");
    let port = onsale_tests::free_port();
    let origin = format!("http://127.0.0.1:{port}");
    let mut s = onsale_tests::settings(&db);
    s.waiting_room.redis_url = Some(
        onsale_tests::waiting_room::redis_url()
            .await
            .expect("redis"),
    );
    s.waiting_room.tick_ms = 100;
    s.cors.cors_origins = vec![origin.clone()];
    let app = onsale_tests::TestApp::start(
        s,
        &[onsale_server::Part::Api, onsale_server::Part::Admitter],
        std::sync::Arc::new(onsale_domain::SystemClock),
    )
    .await
    .expect("the API");
    let event = app
        .on_sale_event_with(1, 1, 10, serde_json::json!({"waitingRoom": true}))
        .await;
    run_e2e(
        "cross-origin.mjs",
        &[("BASE", &app.base), ("EVENT", &event), ("ORIGIN", &origin)],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_reference_at_docs_draws_the_servers_openapi_document_from_the_build_alone() {
    let db = TestDb::new().await.expect("db");
    let (rp, event, base) = serving_a_show(&db).await;
    run_e2e("docs.mjs", &[("BASE", &base), ("EVENT", &event)]).await;
    rp.stop().await;
}

/// The venue chart (issue 34): a venue without a chart draws from the generated one, a venue
/// with its own from that; zoom and pan by keyboard, a seat picked on the chart and held, a
/// best-available hold shown where it landed, a seat another fan bought repainted sold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_venue_chart_draws_a_generated_and_a_given_layout_picks_and_holds_and_repaints_a_sold_seat(
) {
    let db = TestDb::new().await.expect("db");
    let (rp, event, base) = serving_a_show(&db).await;
    let given = rp
        .app
        .event_in(
            serde_json::json!({
                "name": "Hall", "city": "Bergen",
                "sections": [
                    {"section": "A", "priceTier": "A", "rows": [{"row": "1", "seats": 4}, {"row": "2", "seats": 6}]},
                    {"section": "F", "priceTier": "B", "capacity": 100},
                ],
                "chart": {
                    "stage": {"x": 3000, "y": 1000, "width": 4000, "height": 800},
                    "sections": [
                        {"section": "A", "outline": [[900, 2900], [5100, 2900], [5100, 3900], [900, 3900]],
                         "rows": [{"row": "1", "from": [1000, 3000], "to": [5000, 3000]},
                                  {"row": "2", "from": [1000, 3400], "to": [5000, 3400], "bend": -350}]},
                        {"section": "F", "outline": [[6000, 3000], [8000, 3000], [8000, 4000], [6000, 4000]]},
                    ],
                },
            }),
            serde_json::json!({"currency": "EUR"}),
        )
        .await;
    listed(&rp, &given).await;
    run_e2e(
        "chart.mjs",
        &[("BASE", &base), ("EVENT", &event), ("GIVEN", &given)],
    )
    .await;
    rp.stop().await;
}

/// The chart at scale: a 50,000-seat show drawn whole after its snapshot, then 1,000 seat
/// changes a second, every delta repainted and every changed seat shown sold, the draw, the
/// frames (p95) and the repaints within bounds ten times issue 34's goals (what `make
/// bench-chart` measures against the goals themselves, figures in BENCHMARKS.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_50000_seat_chart_draws_and_repaints_every_delta_at_1000_seat_changes_a_second() {
    let db = TestDb::new().await.expect("db");
    let web = PathBuf::from(env("ONSALE_TEST_WEB_DIR"));
    let rp = ReadPath::spawn_parts(
        &db,
        &shared_brokers().expect("brokers"),
        |s| s.web.web_dir = Some(web),
        &[],
    )
    .await
    .expect("the stack");
    let (sections, rows, seats) = (50, 25, 40);
    let event = rp.show_on_map(sections, rows, seats).await;
    listed(&rp, &event).await;
    let base = rp.app.base.trim_end_matches('/').to_owned();
    // Alone: no other browser run shares the cores while it measures.
    let _alone = LANE.write().await;
    run_e2e_in_lane(
        "chart-perf.mjs",
        &[
            ("BASE", &base),
            ("EVENT", &event),
            ("SECTIONS", &sections.to_string()),
            ("ROWS", &rows.to_string()),
            ("SEATS", &seats.to_string()),
        ],
    )
    .await;
    rp.stop().await;
}
