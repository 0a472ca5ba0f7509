//! Regions (issue 35, docs/adr/024), with real `onsale` processes on two PostgreSQL clusters:
//! region a writes and region b's cluster is its synchronous standby. Region b serves reads
//! and refuses every write naming a; a promotion is refused while a's cluster answers as a
//! primary and goes through once a is cut off; b's process starts again as the writer and
//! sells; every hold a acknowledged is in b's log; a, brought back as the primary it was, can
//! acknowledge nothing, and once it rejoins as b's standby its process stands by. A payment
//! a left unresolved when it went dark is settled by b against the same card processor, once.

use std::time::Duration;

use onsale_eventlog::{Claim, EventLog, Node, PgEventLog};
use onsale_tests::regions::Regions;
use onsale_tests::{free_ports, onsale_process, succeeded, wait_for, Api};
use serde_json::{json, Value};
use tokio::process::Child;

const BIN: &str = env!("CARGO_BIN_EXE_onsale");

/// `onsale serve` of `region` on its own ports (HTTP `base`, gRPC `base + 1`, internal
/// `base + 2`), its card processor at `processor`.
fn serve(regions: &Regions, region: &str, base: u16, processor: &str) -> Child {
    process(
        regions,
        region,
        "serve",
        &[
            ("ONSALE_LISTEN", format!("127.0.0.1:{base}")),
            ("ONSALE_GRPC_LISTEN", format!("127.0.0.1:{}", base + 1)),
            ("ONSALE_INTERNAL_LISTEN", format!("127.0.0.1:{}", base + 2)),
            ("ONSALE_PROCESSOR_URL", processor.to_owned()),
            ("ONSALE_CHARGE_TIMEOUT_MS", "500".to_owned()),
            ("ONSALE_PAYMENT_POLL_MS", "100".to_owned()),
            // A commit that waits for a standby that no longer follows is answered 503 soon.
            ("ONSALE_COMMIT_TIMEOUT_MS", "1500".to_owned()),
            ("ONSALE_REQUEST_TIMEOUT_MS", "2500".to_owned()),
        ],
    )
}

/// `onsale COMMAND` (serve, relay, project) of `region`: each region publishes into a topic
/// of its own, as each has a Kafka cluster of its own.
fn process(regions: &Regions, region: &str, command: &str, env: &[(&str, String)]) -> Child {
    let mut env = env.to_vec();
    env.push(("ONSALE_REGION", region.to_owned()));
    env.push((
        "ONSALE_EVENTS_TOPIC",
        format!("onsale.events.{}.{region}", regions.name),
    ));
    onsale_process(BIN, &regions.db(region), &[command], &env)
}

/// A hold of one seat, answered with its status, its body and its `Onsale-Region` header.
async fn hold(api: &Api, show: &str, fan: &str, seat: &str) -> (u16, Value, String) {
    let res = api
        .http
        .post(format!("{}/v1/events/{show}/holds", api.base))
        .bearer_auth(api.fan(fan))
        .json(&json!({"seatIds": [seat]}))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    match res {
        Ok(r) => {
            let status = r.status().as_u16();
            let region = r
                .headers()
                .get("onsale-region")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let retry = r.headers().contains_key("retry-after");
            let mut body: Value = r.json().await.unwrap_or(Value::Null);
            body["_retryAfter"] = json!(retry);
            (status, body, region)
        }
        Err(e) => (0, json!({"error": e.to_string()}), String::new()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_region_reads_refuses_writes_takes_over_when_promoted_and_fences_the_old_writer()
{
    let regions = Regions::start().await.expect("two regions");
    let base = free_ports(&[0, 1, 2, 10, 11, 12]);
    let _a = serve(&regions, "a", base, "http://127.0.0.1:9");
    let mut b = serve(&regions, "b", base + 10, "http://127.0.0.1:9");
    let api_a = Api::new(&format!("http://127.0.0.1:{base}"));
    let api_b = Api::new(&format!("http://127.0.0.1:{}", base + 10));
    api_a.serving().await;
    api_b.serving().await;

    // Region a writes: a show and a hold, acknowledged once b flushed them.
    let show = api_a.on_sale_event(1, 1, 10, Some(3600)).await;
    let (status, first, region) = hold(&api_a, &show, "ann", "S1-R1-1").await;
    assert_eq!((status, region.as_str()), (201, "a"), "{first}");
    // And a hold of a second show that lapses during the outage (its expiry is absolute).
    let brief = api_a.on_sale_event(1, 1, 10, Some(1)).await;
    let (status, lapsing, _) = hold(&api_a, &brief, "ann", "S1-R1-1").await;
    assert_eq!(status, 201, "{lapsing}");

    // Region b reads a's show from its copy, and refuses a write naming a.
    let (status, page) = api_b
        .get(&format!("/v1/events/{show}"), &api_b.fan("bob"))
        .await;
    assert_eq!(status, 200, "{page}");
    let (status, refused, region) = hold(&api_b, &show, "bob", "S1-R1-2").await;
    assert_eq!((status, region.as_str()), (503, "b"), "{refused}");
    assert_eq!(refused["code"], "OTHER_REGION", "{refused}");
    assert_eq!(refused["writeRegion"], "a", "{refused}");
    assert_eq!(refused["_retryAfter"], true, "{refused}");

    // No promotion while a's cluster answers as a primary: it would make two writers.
    let out = regions
        .onsale(
            BIN,
            "b",
            &["region", "promote", "--region", "b", "--wait-secs", "5"],
        )
        .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("still answers as a primary"),
        "{err}"
    );

    // Region a goes dark; b is promoted under the next epoch.
    regions.stop("a", true).await.expect("a stops");
    let out = succeeded(
        &regions
            .onsale(BIN, "b", &["region", "promote", "--region", "b"])
            .await,
    );
    let promoted: Value = serde_json::from_str(out.trim()).expect("a report");
    assert_eq!(promoted["epoch"], 2, "{promoted}");

    // b's process notices and starts again as the writer: the sale goes on in b, and the
    // seat a acknowledged is held there (it is in b's log).
    wait_for("b sells", Duration::from_secs(30), || {
        let api_b = api_b.clone();
        let show = show.clone();
        async move { hold(&api_b, &show, "bob", "S1-R1-2").await.0 == 201 }
    })
    .await;
    let (status, taken, _) = hold(&api_b, &show, "cat", "S1-R1-1").await;
    assert_eq!(status, 409, "a's acknowledged hold lost in b: {taken}");
    let log = succeeded(&regions.onsale(BIN, "b", &["log", "--show", &show]).await);
    assert!(
        log.contains(first["holdId"].as_str().expect("a hold id")),
        "{log}"
    );
    // The hold that lapsed while a was dark is gone in b: its seat sells, no fresh TTL.
    let (status, retaken, _) = hold(&api_b, &brief, "bob", "S1-R1-1").await;
    assert_eq!(
        status, 201,
        "a lapsed hold outlived the failover: {retaken}"
    );

    // Region a comes back as the primary it was (its process never stopped): its writes wait
    // for a standby that no longer follows it, and none is acknowledged.
    regions.start_again("a").await.expect("a starts");
    let (status, stale, _) = hold(&api_a, &show, "dan", "S1-R1-3").await;
    assert_ne!(status, 201, "the old region acknowledged a write: {stale}");

    // b may not be rewound onto a (an older writer); a may follow b, and rejoins as its
    // standby. a's process then stands by, naming b.
    let a_url = regions.db("a").url;
    let out = regions
        .onsale(
            BIN,
            "b",
            &["region", "follow-check", "--writer-url", &a_url],
        )
        .await;
    assert!(!out.status.success(), "b would follow the old writer");
    let b_url = regions.db("b").url;
    succeeded(
        &regions
            .onsale(
                BIN,
                "a",
                &["region", "follow-check", "--writer-url", &b_url],
            )
            .await,
    );
    regions.rejoin("a", "b").await.expect("a rejoins");
    wait_for("a stands by, naming b", Duration::from_secs(30), || {
        let api_a = api_a.clone();
        let show = show.clone();
        async move {
            let (status, body, _) = hold(&api_a, &show, "dan", "S1-R1-3").await;
            status == 503 && body["writeRegion"] == "b"
        }
    })
    .await;
    // What a decided while it was cut off is gone with its timeline: b's log has no hold of dan.
    let log = succeeded(&regions.onsale(BIN, "b", &["log", "--show", &show]).await);
    assert!(!log.contains("\"dan\""), "{log}");

    // And a node of region a that reaches b's cluster cannot claim a show there.
    let pool = sqlx::PgPool::connect(&b_url).await.expect("b's database");
    let node = Node {
        id: uuid::Uuid::new_v4(),
        addr: "127.0.0.1:9".into(),
    };
    let claim = PgEventLog::new(pool)
        .in_region(&"a".parse().expect("a region"))
        .claim(
            show.parse().expect("a show id"),
            &node,
            Duration::from_secs(5),
        )
        .await
        .expect("the claim answers");
    assert!(
        matches!(claim, Claim::OtherRegion(ref r) if r == "b"),
        "{claim:?}"
    );

    // b still sells (with a as its synchronous standby again).
    let (status, body, _) = hold(&api_b, &show, "eve", "S1-R1-4").await;
    assert_eq!(status, 201, "{body}");
    b.kill().await.expect("b stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_left_unresolved_by_the_region_that_went_dark_is_settled_once_in_the_promoted_one(
) {
    let regions = Regions::start().await.expect("two regions");
    // One card processor for both regions, as a real one is: it records the charge and then
    // takes a minute to answer, so region a never learns how its charge went.
    let (sim, processor, _sim) =
        onsale_tests::payments::serve_sim(onsale_processor_sim::Settings {
            respond_delay_ms: 60_000,
            settle_ms: 200,
            webhook_url: None,
            ..onsale_processor_sim::Settings::default()
        })
        .await
        .expect("the card processor");
    let base = free_ports(&[0, 1, 2, 10, 11, 12]);
    let mut a = vec![serve(&regions, "a", base, &processor)];
    let _b = [
        serve(&regions, "b", base + 10, &processor),
        process(&regions, "b", "relay", &[]),
        process(&regions, "b", "project", &[]),
    ];
    a.push(process(&regions, "a", "relay", &[]));
    a.push(process(&regions, "a", "project", &[]));
    let api_a = Api::new(&format!("http://127.0.0.1:{base}"));
    let api_b = Api::new(&format!("http://127.0.0.1:{}", base + 10));
    api_a.serving().await;
    api_b.serving().await;

    let show = api_a.on_sale_event(1, 1, 10, Some(3600)).await;
    let fan = api_a.fan("ann");
    let (status, held, _) = hold(&api_a, &show, "ann", "S1-R1-1").await;
    assert_eq!(status, 201, "{held}");
    let (status, order) = api_a.order(&held["holdId"], &fan, "order-1").await;
    assert_eq!(status, 202, "{order}");
    let order_id = order["orderId"].as_str().expect("an order id").to_owned();
    // Region a's worker sent the charge; the processor made it; no answer came back.
    wait_for("a charge at the processor", Duration::from_secs(30), || {
        let sim = sim.clone();
        async move { sim.ledger().charges().count() == 1 }
    })
    .await;

    // Region a goes dark with the payment unresolved; b is promoted; the processor answers
    // promptly again.
    regions.stop("a", true).await.expect("a stops");
    drop(a);
    succeeded(
        &regions
            .onsale(BIN, "b", &["region", "promote", "--region", "b"])
            .await,
    );
    sim.update(|s| s.respond_delay_ms = 0);

    // b's worker asks the processor under the same idempotency key and settles the order.
    let path = format!("/v1/orders/{order_id}");
    wait_for("the order confirmed in b", Duration::from_secs(60), || {
        let (api_b, path, fan) = (api_b.clone(), path.clone(), fan.clone());
        async move {
            // b's process starts again as the writer meanwhile: refused connections are waited.
            let res = api_b
                .http
                .get(format!("{}{path}", api_b.base))
                .bearer_auth(fan)
                .send()
                .await;
            match res {
                Ok(r) if r.status() == 200 => r
                    .json::<Value>()
                    .await
                    .is_ok_and(|o| o["status"] == "CONFIRMED"),
                _ => false,
            }
        }
    })
    .await;
    // Charged once, whichever region asked.
    let charges = sim.ledger().captures_per_reference();
    assert_eq!(
        charges.values().copied().collect::<Vec<_>>(),
        vec![1],
        "{charges:?}"
    );
}
