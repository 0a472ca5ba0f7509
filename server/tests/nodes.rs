//! Many command nodes (issue 14, docs/adr/011), with real `onsale serve` processes on one
//! PostgreSQL: the ownership fence in the database; three nodes behind the HAProxy router
//! (with `onsale relay`, `onsale project` and the card simulator) with one SIGKILLed mid-sale
//! while payments are in flight (its shows answer from another node within 10 s, every
//! acknowledged hold and order is in the log, no seat is held twice, no order is charged twice
//! and every order is resolved); and an owner paused with
//! SIGSTOP past its TTL while another node takes its show, then resumed (what it decided on its
//! stale state is never acknowledged, and the seat it would have sold twice is sold once).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use onsale_domain::{ShowEvent, ShowId};
use onsale_eventlog::{Claim, EventLog, Node, PgEventLog, StoreError};
use onsale_tests::{free_port, free_ports, onsale_process, wait_for, Api, TestDb};
use serde_json::{json, Value};
use tokio::process::Child;

/// An `onsale` process of this build on the test's database (see [`onsale_process`]).
fn onsale(db: &TestDb, args: &[&str], env: &[(&str, String)]) -> Child {
    onsale_process(env!("CARGO_BIN_EXE_onsale"), db, args, env)
}

/// A node's internal listener (where other nodes forward commands): its HTTP port plus this.
const INTERNAL: u16 = 500;

/// `onsale serve` on its own ports (HTTP `http`, internal `http` + [`INTERNAL`]); `processor`:
/// the card processor's URL (none: orders stay pending, nothing is charged).
fn node(db: &TestDb, http: u16, grpc: u16, ttl_ms: Option<u64>, processor: Option<&str>) -> Child {
    let mut env = vec![
        ("ONSALE_LISTEN", format!("127.0.0.1:{http}")),
        (
            "ONSALE_INTERNAL_LISTEN",
            format!("127.0.0.1:{}", http + INTERNAL),
        ),
        ("ONSALE_GRPC_LISTEN", format!("127.0.0.1:{grpc}")),
        (
            "ONSALE_PROCESSOR_URL",
            processor.unwrap_or("http://127.0.0.1:9").to_owned(),
        ),
        ("ONSALE_CHARGE_TIMEOUT_MS", "500".to_owned()),
        ("ONSALE_PAYMENT_POLL_MS", "100".to_owned()),
    ];
    if let Some(ms) = ttl_ms {
        env.push(("ONSALE_NODE_TTL_MS", ms.to_string()));
    }
    onsale(db, &["serve"], &env)
}

fn signal(child: &Child, sig: &str) {
    let pid = child.id().expect("a pid").to_string();
    let ok = std::process::Command::new("kill")
        .args([format!("-{sig}"), pid])
        .status()
        .expect("kill runs");
    assert!(ok.success());
}

/// Every thread of `child` is stopped (state `T` in /proc). A SIGSTOP takes effect when the
/// thread that takes it is next scheduled: on a busy machine another thread of the process can
/// still answer a request for some milliseconds after `kill` returned.
fn stopped(child: &Child) -> bool {
    let tasks = format!("/proc/{}/task", child.id().expect("a pid"));
    let Ok(tasks) = std::fs::read_dir(tasks) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command name, which is in parentheses.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        })
    })
}

/// The HTTP port of the node that owns `show` (the nodes table has its internal address).
async fn owner_port(pool: &sqlx::PgPool, show: &str) -> Option<u16> {
    let addr: Option<String> = sqlx::query_scalar(
        "SELECT n.addr FROM show_owners o JOIN nodes n USING (node_id) WHERE o.show_id = $1",
    )
    .bind(show)
    .fetch_optional(pool)
    .await
    .expect("owner");
    addr.and_then(|a| a.rsplit(':').next()?.parse::<u16>().ok())
        .map(|internal| internal - INTERNAL)
}

/// One hold request with a key, retried with the same key while the answer is 503 or nothing
/// (bounded): what a client does. `Some(body)` once granted, `None` if refused (409).
async fn hold_until_answered(api: &Api, token: &str, event: &str, key: &str) -> Option<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let res = api
            .http
            .post(format!("{}/v1/events/{event}/holds", api.base))
            .bearer_auth(token)
            .header("Idempotency-Key", key)
            .json(&json!({"quantity": 1}))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        if let Ok(r) = res {
            match r.status().as_u16() {
                201 => return Some(r.json().await.expect("json")),
                409 | 429 => return None,
                503 => assert!(
                    r.headers().contains_key("retry-after"),
                    "503 without Retry-After"
                ),
                other => panic!("unexpected {other}: {}", r.text().await.unwrap_or_default()),
            }
        }
        assert!(Instant::now() < deadline, "{key}: no answer within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_append_with_an_epoch_another_node_claimed_since_writes_nothing() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool().await.expect("pool");
    let log = PgEventLog::new(pool.clone());
    onsale_eventlog::migrate(&pool).await.expect("migrations");
    let show = ShowId::random();
    let ttl = Duration::from_secs(5);
    let a = Node {
        id: uuid::Uuid::new_v4(),
        addr: "127.0.0.1:1".into(),
    };
    let b = Node {
        id: uuid::Uuid::new_v4(),
        addr: "127.0.0.1:2".into(),
    };
    let Claim::Owned { epoch: old } = log.claim(show, &a, ttl).await.expect("a claims") else {
        panic!("a free show is claimed");
    };
    assert_eq!(
        log.claim(show, &b, ttl).await.expect("b asks"),
        Claim::Elsewhere(a.clone())
    );
    // a stops renewing (paused): once its registration lapsed, b claims.
    sqlx::query("UPDATE nodes SET alive_until = now() - interval '1 second' WHERE node_id = $1")
        .bind(a.id)
        .execute(&pool)
        .await
        .expect("lapse");
    assert_eq!(log.orphans(10).await.expect("orphans"), [show]);
    let Claim::Owned { epoch } = log.claim(show, &b, ttl).await.expect("b claims") else {
        panic!("a lapsed node's show is claimed");
    };
    assert!(epoch > old);
    let e = [ShowEvent::HoldReleased {
        hold_id: onsale_domain::HoldId::new(show),
    }];
    assert!(matches!(
        log.append(show, old, 0, chrono::Utc::now(), &e, &[]).await,
        Err(StoreError::Fenced)
    ));
    log.append(show, epoch, 0, chrono::Utc::now(), &e, &[])
        .await
        .expect("the owner appends");
    assert_eq!(
        log.read_range(&show.to_string(), 0, 10, 10)
            .await
            .expect("rows")
            .len(),
        1
    );
    // a wakes: its heartbeat no longer lists the show.
    assert!(log.heartbeat(&a, ttl).await.expect("a beats").is_empty());
    assert_eq!(log.heartbeat(&b, ttl).await.expect("b beats"), [show]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_behind_the_router_lose_one_mid_sale_and_lose_nothing() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool().await.expect("pool");
    let (http_base, grpc_base) = (
        free_ports(&[1, 2, 3, INTERNAL + 1, INTERNAL + 2, INTERNAL + 3]),
        free_ports(&[1, 2, 3]),
    );
    // The card simulator, its webhooks to the router.
    let (sim, sim_url, _sim) = onsale_tests::payments::serve_sim(onsale_processor_sim::Settings {
        hang_ms: 1_500,
        settle_ms: 1_000,
        webhook_jitter_ms: 200,
        ..onsale_processor_sim::Settings::default()
    })
    .await
    .expect("the card processor");
    let mut nodes: Vec<Child> = (1..=3)
        .map(|i| node(&db, http_base + i, grpc_base + i, None, Some(&sim_url)))
        .collect();
    // The read path: the relay (the payment intake reads the log) and the projections.
    let _relay = onsale(&db, &["relay"], &[]);
    let _project = onsale(&db, &["project"], &[]);
    for i in 1..=3 {
        Api::new(&format!("http://127.0.0.1:{}", http_base + i))
            .serving()
            .await;
    }
    let dir = tempdir();
    let (listen, grpc) = (free_port(), free_port());
    let up =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/stack.sh"))
            .args([
                "router-up",
                &dir,
                &format!("127.0.0.1:{listen}"),
                &format!("127.0.0.1:{grpc}"),
                "3",
                &http_base.to_string(),
                &grpc_base.to_string(),
            ])
            .status()
            .expect("stack.sh runs");
    assert!(up.success(), "the router starts");
    let _router = Router(dir.clone());
    let api = Api::new(&format!("http://127.0.0.1:{listen}"));
    api.serving().await;
    sim.update(|s| s.webhook_url = Some(format!("{}/v1/webhooks/processor", api.base)));
    // The nodes' forwarding route is not reachable through the router.
    let res = api
        .http
        .post(format!(
            "{}/internal/v1/shows/{}/work",
            api.base,
            ShowId::random()
        ))
        .header("x-onsale-node-secret", "onsale-dev-node-secret")
        .body("{}")
        .send()
        .await
        .expect("an answer");
    assert_eq!(res.status(), 404);
    // Nor on a node's public listener: it is served on the internal one only, and wants a
    // signature there (bots.rs tests the signature's checks).
    let path = format!("/internal/v1/shows/{}/work", ShowId::random());
    let body = json!({"Ask": {"OrderState": onsale_domain::OrderId::new(ShowId::random())}});
    for (port, status) in [(http_base + 1, 404), (http_base + 1 + INTERNAL, 401)] {
        let res = api
            .http
            .post(format!("http://127.0.0.1:{port}{path}"))
            .header("x-onsale-node-secret", "onsale-dev-node-secret")
            .json(&body)
            .send()
            .await
            .expect("an answer");
        assert_eq!(res.status(), status, "port {port}");
    }

    let events: Vec<String> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(api.on_sale_event(2, 10, 50, None).await);
        }
        v
    };
    // The router sends each show's requests to one node: the show's owner.
    for e in &events {
        let (status, _) = api.get(&format!("/v1/events/{e}"), &api.fan("look")).await;
        assert_eq!(status, 200);
    }

    let acked: Arc<Mutex<Vec<(String, Value, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let granted = Arc::new(AtomicUsize::new(0));
    let mut fans = Vec::new();
    for f in 0..24usize {
        let (api, events, acked, stop, granted) = (
            api.clone(),
            events.clone(),
            acked.clone(),
            stop.clone(),
            granted.clone(),
        );
        fans.push(tokio::spawn(async move {
            for n in 0.. {
                if stop.load(Ordering::SeqCst) || n >= 6 {
                    return;
                }
                let event = &events[(f + n) % events.len()];
                // One hold per fan name; the per-account cap is not what this test is about.
                let fan = format!("fan-{f}-{n}");
                let token = api.fan(&fan);
                if let Some(hold) =
                    hold_until_answered(&api, &token, event, &format!("k-{f}-{n}")).await
                {
                    granted.fetch_add(1, Ordering::SeqCst);
                    acked
                        .lock()
                        .expect("acked")
                        .push((event.clone(), hold, fan));
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        }));
    }
    wait_for("holds flow", Duration::from_secs(60), || {
        let n = granted.load(Ordering::SeqCst);
        async move { n >= 30 }
    })
    .await;
    // Orders before the kill: their payments are in flight on the nodes when one dies.
    let mut orders: HashMap<String, String> = HashMap::new();
    let place = |n: usize, hold: Value, fan: String| {
        let api = api.clone();
        async move {
            let token = api.fan(&fan);
            let mut ids = Vec::new();
            for _ in 0..2 {
                let (status, body) = api.order(&hold["holdId"], &token, &format!("o-{n}")).await;
                assert_eq!(status, 202, "{body}");
                ids.push(body["orderId"].as_str().expect("order id").to_owned());
            }
            assert_eq!(
                ids[0], ids[1],
                "the retry with the same key answers the same order"
            );
            (
                hold["holdId"].as_str().expect("hold").to_owned(),
                ids.remove(0),
                fan,
            )
        }
    };
    let early: Vec<(String, Value, String)> = acked
        .lock()
        .expect("acked")
        .iter()
        .take(10)
        .cloned()
        .collect();
    let mut buyers = Vec::new();
    for (n, (_, hold, fan)) in early.into_iter().enumerate() {
        let (hold_id, order, fan) = place(n, hold, fan).await;
        orders.insert(hold_id, order.clone());
        buyers.push((order, fan));
    }
    let victim = owner_port(&pool, &events[0])
        .await
        .expect("show 0 has an owner");
    let i = usize::from(victim - http_base) - 1;
    nodes[i].start_kill().expect("SIGKILL");
    let killed = Instant::now();
    // The dead node's show answers from another node within 10 s.
    let probe = api.fan("probe");
    let back = hold_until_answered(&api, &probe, &events[0], "probe-after-kill").await;
    assert!(back.is_some(), "the probe's hold is granted");
    let outage = killed.elapsed();
    assert!(
        outage < Duration::from_secs(10),
        "show 0 answered again after {outage:?}"
    );
    let new_owner = owner_port(&pool, &events[0]).await.expect("an owner");
    assert_ne!(new_owner, victim, "another node owns the dead node's show");
    eprintln!("show 0 answered again {outage:?} after its node was killed");
    for f in fans {
        f.await.expect("fan");
    }
    stop.store(true, Ordering::SeqCst);

    // More orders after the kill, through the router (the body's holdId routes them), each sent
    // twice with its key.
    let acked = acked.lock().expect("acked").clone();
    for (n, (_, hold, fan)) in acked.iter().enumerate().skip(10).take(10) {
        let (hold_id, order, fan) = place(n, hold.clone(), fan.clone()).await;
        orders.insert(hold_id, order.clone());
        buyers.push((order, fan));
    }
    // Every order is resolved (paid or failed), and no order was charged twice: the
    // simulator's books are the witness.
    for (order, fan) in &buyers {
        let token = api.fan(fan);
        wait_for("the order is resolved", Duration::from_secs(90), || {
            let (api, token, order) = (api.clone(), token.clone(), order.clone());
            async move {
                let (status, body) = api.get(&format!("/v1/orders/{order}"), &token).await;
                status == 200 && body["status"] != "PENDING_PAYMENT"
            }
        })
        .await;
    }
    let captures = sim.ledger().captures_per_reference();
    assert!(
        captures.values().all(|&n| n <= 1),
        "an order charged twice: {captures:?}"
    );
    eprintln!(
        "{} orders resolved, {} captured, none twice",
        buyers.len(),
        captures.len()
    );

    // The log is the witness: every acknowledged hold is there, no seat in two of them, one
    // order per hold ordered.
    let log = PgEventLog::new(pool.clone());
    let mut seats = HashSet::new();
    for event in &events {
        let show: ShowId = event.parse().expect("show");
        let replayed = log.replay(show).await.expect("replay").show;
        let placed = log
            .events(show)
            .await
            .expect("events")
            .into_iter()
            .filter(|e| e.event_type == "OrderPlaced")
            .count();
        let ordered_here = orders
            .keys()
            .filter(|h| h.parse::<onsale_domain::HoldId>().expect("hold id").show() == show)
            .count();
        assert_eq!(placed, ordered_here, "one OrderPlaced per ordered hold");
        for (e, hold, _) in acked.iter().filter(|(e, _, _)| e == event) {
            in_log(&replayed, hold);
            for seat in hold["seatIds"].as_array().expect("seats") {
                assert!(
                    seats.insert(format!("{e}/{seat}")),
                    "{seat} of {e} held twice"
                );
            }
        }
    }
    eprintln!("{} holds acknowledged, all in the log", acked.len());
    // Only the nodes that serve the API are nodes: the relay and the projections (which build
    // the same composition root) never register, so never take a dead node's show that no one
    // could forward to.
    let unaddressed: i64 = sqlx::query_scalar("SELECT count(*) FROM nodes WHERE addr = ''")
        .fetch_one(&pool)
        .await
        .expect("nodes");
    assert_eq!(
        unaddressed, 0,
        "a process without an API registered as a node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_owner_wakes_to_find_its_show_moved_and_sells_nothing_twice() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool().await.expect("pool");
    let (pa, pb) = (free_ports(&[0, INTERNAL]), free_ports(&[0, INTERNAL]));
    let a = node(&db, pa, free_port(), Some(2_000), None);
    let _b = node(&db, pb, free_port(), Some(2_000), None);
    let (api_a, api_b) = (
        Api::new(&format!("http://127.0.0.1:{pa}")),
        Api::new(&format!("http://127.0.0.1:{pb}")),
    );
    api_a.serving().await;
    api_b.serving().await;
    let event = api_a.on_sale_event(1, 1, 20, None).await;
    let hold = |api: &Api, fan: &str, seat: &str| {
        let (api, token, event, seat, fan) = (
            api.clone(),
            api.fan(fan),
            event.clone(),
            seat.to_owned(),
            fan.to_owned(),
        );
        async move {
            let res = api
                .http
                .post(format!("{}/v1/events/{event}/holds", api.base))
                .bearer_auth(&token)
                // One key per fan and seat: a retry after a 503 gets the first attempt's answer
                // if it committed after all.
                .header("Idempotency-Key", format!("{fan}-{seat}"))
                .json(&json!({"seatIds": [seat]}))
                .timeout(Duration::from_secs(30))
                .send()
                .await
                .expect("an answer");
            let status = res.status().as_u16();
            (status, res.json::<Value>().await.unwrap_or_default())
        }
    };
    let (status, first) = hold(&api_a, "ann", "S1-R1-1").await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(owner_port(&pool, &event).await, Some(pa), "a owns the show");

    // a is paused; a request for seat 2 waits in its socket.
    signal(&a, "STOP");
    let paused = Instant::now();
    wait_for("a is stopped", Duration::from_secs(5), || {
        std::future::ready(stopped(&a))
    })
    .await;
    let queued = tokio::spawn(hold(&api_a, "cat", "S1-R1-2"));
    // b takes the show once a's registration lapsed, and sells seat 2 to bob.
    let bob = granted("b decides the show", || hold(&api_b, "bob", "S1-R1-2")).await;
    assert_eq!(owner_port(&pool, &event).await, Some(pb), "b owns the show");
    eprintln!("b took the show {:?} after a was paused", paused.elapsed());
    // a wakes, its stale state and the queued request in hand.
    signal(&a, "CONT");
    let (status, body) = queued.await.expect("the queued request");
    assert_ne!(
        status, 201,
        "a decided on its stale state: that must not be acknowledged ({body})"
    );
    assert!(status == 409 || status == 503, "{status}: {body}");
    // a forwards what it gets for the show to b once it has learnt the show moved (until its
    // heartbeat tells it, its owner proves no lease and answers 503, which a client retries).
    let dan = granted("a forwards to b", || hold(&api_a, "dan", "S1-R1-3")).await;

    let log = PgEventLog::new(pool);
    let show: ShowId = event.parse().expect("show");
    let replayed = log.replay(show).await.expect("replay").show;
    let holders: Vec<String> = replayed
        .holds()
        .filter(|(_, h)| h.seats.len() == 1)
        .map(|(_, h)| h.account.to_string())
        .collect();
    assert_eq!(holders.len(), 3, "ann, bob and dan: {holders:?}");
    assert!(!holders.iter().any(|h| h == "cat"), "{holders:?}");
    for body in [first, bob, dan] {
        in_log(&replayed, &body);
    }
}

/// Tries `attempt` again while it answers 503 (20 s at most) until it answers 201: its body.
async fn granted<F, Fut>(what: &str, attempt: F) -> Value
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = (u16, Value)>,
{
    let got: Arc<Mutex<Option<Value>>> = Arc::default();
    wait_for(what, Duration::from_secs(20), || {
        let (attempt, got) = (attempt(), got.clone());
        async move {
            let (status, body) = attempt.await;
            match status {
                201 => {
                    *got.lock().expect("got") = Some(body);
                    true
                }
                503 => false,
                other => panic!("{what}: answered {other}: {body}"),
            }
        }
    })
    .await;
    let body = got.lock().expect("got").take().expect("a 201");
    body
}

/// The hold a 201 answered with is in the replayed show.
fn in_log(replayed: &onsale_domain::Show, hold: &Value) {
    let id = hold["holdId"]
        .as_str()
        .expect("hold")
        .parse()
        .expect("hold id");
    assert!(
        replayed.hold(&id).is_some(),
        "acknowledged hold {id} is in the log"
    );
}

fn tempdir() -> String {
    let dir = std::env::temp_dir().join(format!("onsale-router-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    dir.to_string_lossy().into_owned()
}

/// Stops the router when the test ends, however it ends.
struct Router(String);

impl Drop for Router {
    fn drop(&mut self) {
        let _ =
            std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/stack.sh"))
                .args(["router-down", &self.0])
                .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
