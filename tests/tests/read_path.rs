//! The read path end to end on the real PostgreSQL and the real broker: commands in, seat map,
//! SSE and gRPC out; crashes and restarts of every part; resume and resync.

use std::collections::BTreeMap;
use std::time::Duration;

use onsale_edge::auth::Role;
use onsale_kafka::envelope::parse_lsn;
use onsale_proto::v1 as pb;
use onsale_tests::read_path::{read_models, KafkaCluster, ReadPath};
use onsale_tests::TestDb;
use serde_json::{json, Value};

/// One server-sent event.
#[derive(Debug, Clone)]
struct Sse {
    id: Option<i64>,
    event: String,
    data: Value,
    /// The reconnection delay the server asks for, in milliseconds.
    retry: Option<u64>,
}

/// Reads SSE events from a streaming response.
struct SseReader {
    res: reqwest::Response,
    buf: String,
}

impl SseReader {
    async fn open(rp: &ReadPath, path: &str, last_event_id: Option<i64>) -> Self {
        let mut req = rp.app.http.get(format!("{}{path}", rp.app.base));
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let res = req.send().await.expect("the stream opens");
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        Self {
            res,
            buf: String::new(),
        }
    }

    async fn next(&mut self) -> Sse {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (None, String::from("message"), String::new());
                let mut retry = None;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("retry: ") {
                        retry = v.parse().ok();
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        id = v.parse().ok();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if data.is_empty() {
                    continue; // the hello comment and keep-alives
                }
                return Sse {
                    id,
                    event,
                    data: serde_json::from_str(&data).expect("json data"),
                    retry,
                };
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.res.chunk())
                .await
                .expect("an event within 20 s")
                .expect("the stream reads")
                .expect("the stream stays open");
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Whether the server ends the stream within 20 s (after what is still buffered).
    async fn ends(&mut self) -> bool {
        loop {
            match tokio::time::timeout(Duration::from_secs(20), self.res.chunk()).await {
                Ok(Ok(Some(chunk))) => self.buf.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(Ok(None)) => return true,
                Ok(Err(_)) | Err(_) => return false,
            }
        }
    }

    /// Deltas until `f` holds on one; checks `seq` strictly increasing and `lsn` never back.
    async fn until(&mut self, last: &mut (i64, u64), f: impl Fn(&Value) -> bool) -> Sse {
        loop {
            let e = self.next().await;
            assert_eq!(e.event, "delta", "{e:?}");
            let seq = e.id.expect("a delta has an id");
            assert_eq!(seq, e.data["seq"].as_i64().expect("seq"));
            assert!(seq > last.0, "seq went from {} to {seq}", last.0);
            let lsn = parse_lsn(e.data["lsn"].as_str().expect("lsn")).expect("an lsn");
            assert!(lsn >= last.1, "lsn went back");
            *last = (seq, lsn);
            if f(&e.data) {
                return e;
            }
        }
    }
}

fn section<'a>(map: &'a Value, name: &str) -> &'a Value {
    map["sections"]
        .as_array()
        .expect("sections")
        .iter()
        .find(|s| s["section"] == name)
        .expect("the section")
}

async fn grpc_client(
    rp: &ReadPath,
) -> pb::seat_maps_client::SeatMapsClient<tonic::transport::Channel> {
    pb::seat_maps_client::SeatMapsClient::connect(rp.grpc.clone())
        .await
        .expect("gRPC connects")
}

#[tokio::test]
async fn a_shutdown_ends_sse_and_grpc_streams_with_a_retry_hint() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.show_on_map(1, 1, 10).await;
    let mut sse = SseReader::open(&rp, &format!("/v1/events/{event}/updates"), None).await;
    let mut grpc = grpc_client(&rp)
        .await
        .stream_deltas(pb::StreamDeltasRequest {
            event_id: event.clone(),
            section: String::new(),
            all_seats: false,
            after_seq: 0,
        })
        .await
        .expect("stream")
        .into_inner();
    // As SIGTERM would: the process shuts down with both streams open.
    let stopped = tokio::spawn(rp.stop());
    let closing = sse.next().await;
    assert_eq!(closing.event, "closing", "{closing:?}");
    assert!(
        closing.retry.is_some(),
        "the client is told when to reconnect"
    );
    assert!(
        sse.ends().await,
        "the SSE stream ends after its closing event"
    );
    let status = tokio::time::timeout(Duration::from_secs(20), grpc.message())
        .await
        .expect("the gRPC stream answers in time")
        .expect_err("the gRPC stream ends with a status");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(
        status
            .metadata()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    tokio::time::timeout(Duration::from_secs(20), stopped)
        .await
        .expect("the server stops within its bound")
        .expect("stop");
}

#[tokio::test]
async fn commands_reach_the_seat_map_the_sse_stream_and_the_grpc_stream() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.app.on_sale_event(2, 2, 10, None).await;
    let map = rp
        .eventually(&format!("/v1/events/{event}/seats"), "", |s, _| s == 200)
        .await;
    assert_eq!(section(&map, "S1")["total"], 20);
    assert_eq!(section(&map, "S1")["available"], 20);

    let mut sse =
        SseReader::open(&rp, &format!("/v1/events/{event}/updates?section=S1"), None).await;
    let mut grpc = grpc_client(&rp)
        .await
        .stream_deltas(pb::StreamDeltasRequest {
            event_id: event.clone(),
            section: "S1".into(),
            all_seats: false,
            after_seq: 0,
        })
        .await
        .expect("stream")
        .into_inner();

    let ann = rp.app.fan("ann");
    let (status, hold) = rp
        .app
        .hold(
            &event,
            &ann,
            json!({"seatIds": ["S1-R1-1", "S1-R1-2"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{hold}");
    let mut last = (0, 0);
    let held = sse
        .until(&mut last, |d| {
            d["sections"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["held"] == 2))
        })
        .await;
    // Holds are not published per seat, only as the section's count.
    assert!(held.data["seats"].as_array().expect("seats").is_empty());

    let (status, order) = rp.app.order(&hold["holdId"], &ann, "o-1").await;
    assert_eq!(status, 202, "{order}");
    let sold = sse
        .until(&mut last, |d| {
            !d["seats"].as_array().expect("seats").is_empty()
        })
        .await;
    let seats = onsale_tests::seat_statuses(&sold.data);
    assert_eq!(
        seats,
        BTreeMap::from([
            ("S1-R1-1".into(), "SOLD".into()),
            ("S1-R1-2".into(), "SOLD".into())
        ])
    );

    // The gRPC stream saw the same deltas in the same order.
    let mut grpc_last = 0;
    loop {
        let u = tokio::time::timeout(Duration::from_secs(20), grpc.message())
            .await
            .expect("in time")
            .expect("ok")
            .expect("open");
        let Some(pb::seat_map_update::Update::Delta(d)) = u.update else {
            panic!("unexpected {u:?}")
        };
        assert!(d.seq as i64 > grpc_last);
        grpc_last = d.seq as i64;
        if !d.seats.is_empty() {
            assert_eq!(d.seq as i64, sold.id.expect("id"));
            break;
        }
    }

    // The snapshot, per seat, counts and watermark.
    let map = rp
        .eventually(
            &format!("/v1/events/{event}/seats?section=S1"),
            "",
            |_, m| m["seq"].as_i64() >= sold.id,
        )
        .await;
    assert_eq!(section(&map, "S1")["sold"], 2);
    assert_eq!(section(&map, "S1")["available"], 18);
    let first = &map["seats"][0];
    assert_eq!(
        (first["seatId"].as_str(), first["status"].as_str()),
        (Some("S1-R1-1"), Some("SOLD"))
    );

    // The order from the orders projection; another fan gets 404.
    let order_id = order["orderId"].as_str().expect("order id");
    let got = rp
        .eventually(&format!("/v1/orders/{order_id}"), &ann, |s, _| s == 200)
        .await;
    assert_eq!(got["status"], "PENDING_PAYMENT");
    assert_eq!(got["seatIds"], json!(["S1-R1-1", "S1-R1-2"]));
    let (status, _) = rp
        .app
        .get(&format!("/v1/orders/{order_id}"), &rp.app.fan("bob"))
        .await;
    assert_eq!(status, 404);

    // The seat's history for auditors, not for fans.
    let auditor = rp.app.token("audit", Role::Auditor);
    // The history is a projection of its own: it may trail the seat map.
    let history = rp
        .eventually(
            &format!("/v1/events/{event}/seats/S1-R1-1/history"),
            &auditor,
            |s, h| s == 200 && h["entries"].as_array().is_some_and(|e| e.len() >= 3),
        )
        .await;
    let kinds: Vec<&str> = history["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    assert_eq!(kinds, ["ShowScheduled", "SeatsHeld", "OrderPlaced"]);
    assert_eq!(history["entries"][1]["accountId"], "ann");
    // The same over gRPC (Audit), a page of two, then the rest.
    let mut audit = pb::audit_client::AuditClient::connect(rp.grpc.clone())
        .await
        .expect("grpc");
    let ask = |cursor: String| {
        let mut req = tonic::Request::new(pb::GetSeatHistoryRequest {
            event_id: event.clone(),
            seat_id: "S1-R1-1".into(),
            limit: 2,
            cursor,
        });
        req.metadata_mut().insert(
            "authorization",
            format!("Bearer {auditor}").parse().expect("header"),
        );
        req
    };
    let first = audit
        .get_seat_history(ask(String::new()))
        .await
        .expect("a page")
        .into_inner();
    assert_eq!(first.entries.len(), 2);
    assert!(!first.next_cursor.is_empty());
    let rest = audit
        .get_seat_history(ask(first.next_cursor.clone()))
        .await
        .expect("the last page")
        .into_inner();
    assert!(rest.next_cursor.is_empty());
    let grpc_entries: Vec<(i64, String, String)> = first
        .entries
        .iter()
        .chain(&rest.entries)
        .map(|e| (e.sequence, e.r#type.clone(), e.actor.clone()))
        .collect();
    let rest_entries: Vec<(i64, String, String)> = history["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["sequence"].as_i64().expect("sequence"),
                e["type"].as_str().expect("type").to_owned(),
                e["actor"].as_str().expect("actor").to_owned(),
            )
        })
        .collect();
    assert_eq!(grpc_entries, rest_entries);
    assert_eq!(rest_entries[1].2, "ann", "who held it");
    let (status, _) = rp
        .app
        .get(&format!("/v1/events/{event}/seats/S1-R1-1/history"), &ann)
        .await;
    assert_eq!(status, 403);
    let (status, body) = rp
        .app
        .get(
            &format!("/v1/events/{event}/seats/S9-R1-1/history"),
            &auditor,
        )
        .await;
    assert_eq!((status, body["code"].as_str()), (404, Some("UNKNOWN_SEAT")));
    rp.stop().await;
}

/// Waits (30 s at most) until `event`'s log holds `by` more events than `seen`; answers its
/// head then.
async fn log_grew(pool: &sqlx::PgPool, event: &str, seen: i64, by: i64) -> i64 {
    onsale_tests::wait_for_value(
        &format!("the log of {event} growing by {by} events past {seen}"),
        Duration::from_secs(30),
        || async {
            let head: i64 = sqlx::query_scalar(
                "SELECT coalesce(max(sequence), 0) FROM events WHERE aggregate_id = $1",
            )
            .bind(event)
            .fetch_one(pool)
            .await
            .expect("head");
            (head >= seen + by).then_some(head)
        },
    )
    .await
}

#[tokio::test]
async fn no_event_is_lost_or_applied_twice_across_relay_broker_and_projection_restarts() {
    let db = TestDb::new().await.expect("db");
    let broker = KafkaCluster::start(1).await.expect("a broker of our own");
    let mut rp = ReadPath::spawn(&db, &broker.bootstrap())
        .await
        .expect("read path");
    // Room for the churn: orders (in the first rounds only) never sell the show out.
    let event = rp.app.on_sale_event(4, 10, 10, None).await;

    // Fans hold, release and order while the parts are killed and restarted under them.
    let app = std::sync::Arc::new(rp.app.http.clone());
    let base = rp.app.base.clone();
    let tokens: Vec<String> = (0..40).map(|i| rp.app.fan(&format!("fan{i}"))).collect();
    // The load runs until every fault has landed on it (told to stop then).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = tokio::spawn({
        let event = event.clone();
        let stop = stop.clone();
        async move {
            let mut handles = Vec::new();
            for (i, t) in tokens.into_iter().enumerate() {
                let (http, base, event, stop) =
                    (app.clone(), base.clone(), event.clone(), stop.clone());
                handles.push(tokio::spawn(async move {
                    let mut round = 0;
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        round += 1;
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        let hold: Value = http
                            .post(format!("{base}/v1/events/{event}/holds"))
                            .bearer_auth(&t)
                            .json(&json!({"quantity": 1 + (i + round) % 2}))
                            .send()
                            .await
                            .expect("answers")
                            .json()
                            .await
                            .expect("json");
                        let Some(id) = hold["holdId"].as_str() else {
                            continue;
                        };
                        // Past the first rounds every hold is released: the account's cap
                        // never fills, the load keeps writing.
                        if (i + round) % 3 == 0 || round > 6 {
                            http.delete(format!("{base}/v1/holds/{id}"))
                                .bearer_auth(&t)
                                .send()
                                .await
                                .expect("answers");
                        } else if (i + round) % 3 == 1 && round <= 6 {
                            http.post(format!("{base}/v1/orders"))
                                .bearer_auth(&t)
                                .header("Idempotency-Key", format!("k-{i}-{round}"))
                                .json(&json!({"holdId": id, "paymentToken": "tok_ok"}))
                                .send()
                                .await
                                .expect("answers");
                        }
                    }
                }));
            }
            for h in handles {
                h.await.expect("a fan finishes");
            }
        }
    });
    // Each fault lands while the load writes: after the log grew by 20 events since the last.
    let mut seen = 0;
    seen = log_grew(&rp.pool, &event, seen, 20).await;
    rp.kill_relay();
    seen = log_grew(&rp.pool, &event, seen, 20).await;
    rp.start_relay().await.expect("the relay restarts");
    seen = log_grew(&rp.pool, &event, seen, 20).await;
    broker.kill(1).await.expect("SIGKILL of the broker");
    broker.start_broker(1).await.expect("the broker comes back");
    seen = log_grew(&rp.pool, &event, seen, 20).await;
    rp.kill_projections();
    seen = log_grew(&rp.pool, &event, seen, 20).await;
    rp.start_projections().await.expect("projections");
    log_grew(&rp.pool, &event, seen, 20).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    load.await.expect("the load ran");

    // Every projection reaches the head of the log...
    let head: i64 = sqlx::query_scalar("SELECT max(sequence) FROM events WHERE aggregate_id = $1")
        .bind(&event)
        .fetch_one(&rp.pool)
        .await
        .expect("head");
    assert!(head > 100, "the load wrote {head} events");
    rp.at_head(&event, head).await;
    // ...having applied each event exactly once.
    rp.applied_once(&event, head).await;

    // The read models equal the log's own verdict, seat by seat...
    rp.seat_map_matches_replay(&event).await;
    let show = rp.app.replay(&event).await.show;
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders_view WHERE show_id = $1")
        .bind(&event)
        .fetch_one(&rp.pool)
        .await
        .expect("orders");
    assert_eq!(orders as usize, show.orders().count());

    // ...and a rebuild from zero.
    let before = read_models(&rp.pool).await;
    rp.rebuild_projections().await.expect("a rebuild");
    onsale_tests::wait_until(
        "a rebuild from zero equal to the read models before it",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async {
            let after = read_models(&rp.pool).await;
            if after == before {
                Ok(())
            } else {
                Err(format!(
                    "a rebuild from zero differs: {after} against {before}"
                ))
            }
        },
    )
    .await;
    rp.stop().await;
}

#[tokio::test]
async fn an_old_seq_gets_the_missing_deltas_or_a_resync_never_a_silent_gap() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.show_on_map(1, 1, 20).await;
    // Five holds, each in its own tick: deltas 1..=5.
    for i in 1..=5 {
        let fan = rp.app.fan(&format!("f{i}"));
        let (status, _) = rp
            .app
            .hold(
                &event,
                &fan,
                json!({"seatIds": [format!("S1-R1-{i}")]}),
                None,
            )
            .await;
        assert_eq!(status, 201);
        rp.eventually(&format!("/v1/events/{event}/seats"), "", |_, m| {
            m["seq"].as_i64() >= Some(i)
        })
        .await;
    }

    // Resume after 2: deltas 3, 4, 5 in order, from the table.
    let mut sse = SseReader::open(&rp, &format!("/v1/events/{event}/updates"), Some(2)).await;
    for want in 3..=5 {
        let e = sse.next().await;
        assert_eq!((e.event.as_str(), e.id), ("delta", Some(want)));
    }
    let mut grpc = grpc_client(&rp).await;
    let mut stream = grpc
        .stream_deltas(pb::StreamDeltasRequest {
            event_id: event.clone(),
            section: String::new(),
            all_seats: false,
            after_seq: 2,
        })
        .await
        .expect("stream")
        .into_inner();
    for want in 3..=5u64 {
        let u = stream.message().await.expect("ok").expect("open");
        let Some(pb::seat_map_update::Update::Delta(d)) = u.update else {
            panic!("{u:?}")
        };
        assert_eq!(d.seq, want);
    }

    // Deltas 1..=3 are no longer kept: resuming after 1 is a resync, not a jump to 4.
    sqlx::query("DELETE FROM seat_map_deltas WHERE show_id = $1 AND seq <= 3")
        .bind(&event)
        .execute(&rp.pool)
        .await
        .expect("prune");
    let mut sse = SseReader::open(&rp, &format!("/v1/events/{event}/updates"), Some(1)).await;
    let e = sse.next().await;
    assert_eq!(e.event, "resync", "{e:?}");
    assert_eq!(e.data["seq"], 5);
    let mut stream = grpc
        .stream_deltas(pb::StreamDeltasRequest {
            event_id: event.clone(),
            section: String::new(),
            all_seats: false,
            after_seq: 1,
        })
        .await
        .expect("stream")
        .into_inner();
    let u = stream.message().await.expect("ok").expect("open");
    assert!(
        matches!(
            u.update,
            Some(pb::seat_map_update::Update::Resync(pb::Resync {
                seq: 5,
                ..
            }))
        ),
        "{u:?}"
    );

    // After a resync the stream goes on with the next delta.
    let fan = rp.app.fan("late");
    rp.app
        .hold(&event, &fan, json!({"seatIds": ["S1-R1-9"]}), None)
        .await;
    let e = sse.next().await;
    assert_eq!((e.event.as_str(), e.id), ("delta", Some(6)));

    // Bad input changes nothing and says why.
    let res = rp
        .app
        .http
        .get(format!("{}/v1/events/{event}/updates", rp.app.base))
        .header("Last-Event-ID", "x")
        .send()
        .await
        .expect("answers");
    assert_eq!(res.status(), 400);
    let (status, body) = rp
        .app
        .get(&format!("/v1/events/{event}/seats?section=S9"), "")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("UNKNOWN_SECTION"))
    );
    let (status, body) = rp.app.get("/v1/events/nope/seats", "").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("INVALID_REQUEST")),
        "a bad id, as on the command side"
    );
    rp.stop().await;
}

#[tokio::test]
async fn a_thousand_cold_misses_share_one_rebuild_and_etags_spare_the_body() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.show_on_map(4, 10, 25).await;
    // Let the cache entry lapse, then miss it a thousand times at once.
    cache_lapses(&rp).await;
    let before = rp.reads.snapshots.rebuilds();
    let show: onsale_domain::ShowId = event.parse().expect("show id");
    let reads: Vec<_> = (0..1_000)
        .map(|_| {
            let s = rp.reads.snapshots.clone();
            tokio::spawn(async move {
                matches!(
                    s.get(show, &onsale_query::seats::Seats::None).await,
                    onsale_query::snapshots::Read::Fresh(_)
                )
            })
        })
        .collect();
    for r in reads {
        assert!(r.await.expect("joins"));
    }
    assert_eq!(
        rp.reads.snapshots.rebuilds() - before,
        1,
        "one rebuild for a thousand misses"
    );

    let res = rp
        .app
        .http
        .get(format!("{}/v1/events/{event}/seats", rp.app.base))
        .send()
        .await
        .expect("answers");
    assert_eq!(res.headers()["cache-control"], "public, max-age=1");
    let etag = res.headers()["etag"].clone();
    let res = rp
        .app
        .http
        .get(format!("{}/v1/events/{event}/seats", rp.app.base))
        .header("If-None-Match", etag)
        .send()
        .await
        .expect("answers");
    assert_eq!(res.status(), 304);
    rp.stop().await;
}

#[tokio::test]
async fn readyz_reports_a_projection_that_stopped_and_recovers_with_it() {
    let (_db, mut rp) = ReadPath::on_shared_broker().await.expect("read path");
    rp.eventually("/readyz", "", |s, _| s == 200).await;
    rp.kill_projections();
    let body = rp.eventually("/readyz", "", |s, _| s == 503).await;
    assert_eq!(body["code"], "NOT_READY");
    assert!(
        body["detail"].as_str().expect("detail").contains("silent"),
        "{body}"
    );
    rp.start_projections().await.expect("projections");
    rp.eventually("/readyz", "", |s, _| s == 200).await;
    rp.stop().await;
}

/// Issue 53, item 10: a node whose lease lapsed (its heartbeat cannot renew it) cannot prove
/// its shows are still its own and answers their writes 503: `/readyz` says so until the
/// lease is renewed.
#[tokio::test]
async fn readyz_says_not_ready_while_the_nodes_lease_is_lapsed() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    rp.eventually("/readyz", "", |s, _| s == 200).await;
    // The heartbeat's upsert waits behind this lock (reads of the table do not).
    let mut blocker = rp.pool.begin().await.expect("begin");
    sqlx::query("LOCK TABLE nodes IN EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .expect("lock");
    let body = rp.eventually("/readyz", "", |s, _| s == 503).await;
    assert_eq!(body["code"], "NOT_READY");
    assert!(
        body["detail"]
            .as_str()
            .expect("detail")
            .contains("lease is lapsed on shard 1"),
        "{body}"
    );
    blocker.rollback().await.expect("rollback");
    rp.eventually("/readyz", "", |s, _| s == 200).await;
    rp.stop().await;
}

/// Issue 53, item 10: every background loop of the API process runs under a supervisor: one
/// that dies is named by `/readyz` and started again, and the process is ready once more.
#[tokio::test]
async fn every_background_loop_that_dies_is_named_and_started_again() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    rp.eventually("/readyz", "", |s, _| s == 200).await;
    let loops = rp.app.server.loops();
    for name in [
        "node lease",
        "region watch",
        "seat-map listener",
        "seat-map poll",
        "read-path check",
        "readiness",
        "rate-limit pruning",
    ] {
        assert!(loops.contains(&name), "{name} is not supervised: {loops:?}");
    }
    for name in &loops {
        assert!(rp.app.server.crash_loop(name), "{name}");
    }
    let body = rp
        .eventually("/readyz", "", |s, body| {
            let detail = body["detail"].as_str().unwrap_or_default();
            s == 503 && loops.iter().all(|name| detail.contains(name))
        })
        .await;
    assert_eq!(body["code"], "NOT_READY");
    rp.eventually("/readyz", "", |s, _| s == 200).await;
    rp.stop().await;
}

#[tokio::test]
async fn a_python_client_generated_from_proto_calls_grpc_and_grpc_web() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.app.on_sale_event(1, 1, 10, None).await;
    let ann = rp.app.fan("ann");
    let (_, hold) = rp
        .app
        .hold(&event, &ann, json!({"seatIds": ["S1-R1-1"]}), None)
        .await;
    let (_, order) = rp.app.order(&hold["holdId"], &ann, "k").await;
    let order_id = order["orderId"].as_str().expect("order").to_owned();
    rp.eventually(&format!("/v1/orders/{order_id}"), &ann, |s, _| s == 200)
        .await;
    rp.eventually(&format!("/v1/events/{event}/seats"), "", |s, m| {
        s == 200 && section(m, "S1")["sold"] == 1
    })
    .await;

    let python =
        std::env::var("ONSALE_TEST_PYTHON").expect("ONSALE_TEST_PYTHON: run with `make test`");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = tokio::process::Command::new(python)
        .arg(format!("{root}/tests/clients/read_client.py"))
        .arg(format!("{root}/proto"))
        .arg(rp.grpc.trim_start_matches("http://"))
        .arg(&event)
        .arg(&order_id)
        .arg(&ann)
        .output()
        .await
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(got["grpc_map"]["sold_s1"], 1);
    assert_eq!(got["grpc_map"]["seats"], 10);
    assert_eq!(got["grpc_order"]["status"], "PENDING_PAYMENT");
    assert_eq!(got["grpc_order"]["seats"], json!(["S1-R1-1"]));
    assert_eq!(got["grpc_unauthenticated"], "UNAUTHENTICATED");
    assert_eq!(got["grpc_bad_id"], "INVALID_ARGUMENT");
    assert_eq!(got["web_map"]["status"], "0");
    assert_eq!(got["web_map"]["sections"], 1);
    rp.stop().await;
}

/// Every partition of the events topic, from its beginning (a reader outside any group).
fn whole_topic(kafka: &onsale_kafka::KafkaConfig) -> rdkafka::TopicPartitionList {
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..kafka.partitions {
        tpl.add_partition_offset(&kafka.events_topic, p, rdkafka::Offset::Beginning)
            .expect("a partition");
    }
    tpl
}

#[tokio::test]
async fn the_relay_backfills_a_topic_from_the_events_table_in_debeziums_envelope() {
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::Message;

    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.app.on_sale_event(1, 1, 10, None).await;
    let fan = rp.app.fan("ann");
    rp.app
        .hold(&event, &fan, json!({"seatIds": ["S1-R1-1"]}), None)
        .await;
    rp.eventually(&format!("/v1/events/{event}/seats"), "", |s, m| {
        s == 200 && section(m, "S1")["held"] == 1
    })
    .await;

    // A new topic, as after a broker lost its data: the backfill fills it from the table.
    let mut kafka = rp.kafka.clone();
    kafka.events_topic = format!("{}.backfill", kafka.events_topic);
    let relay = onsale_kafka::Relay::start(
        rp.pool.clone(),
        kafka.clone(),
        onsale_kafka::RelayConfig {
            slot: format!("{}_b", rp.relay_config.slot),
            ..rp.relay_config.clone()
        },
    )
    .await
    .expect("relay");
    let published = relay.backfill(Some(&event)).await.expect("backfill");
    assert_eq!(published, 2, "ShowScheduled and SeatsHeld");
    let consumer: StreamConsumer = kafka
        .client()
        .set("group.id", "backfill-check")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("consumer");
    consumer.assign(&whole_topic(&kafka)).expect("assign");
    // A new slot fills its gap from the table when it starts (every aggregate: the venue too),
    // and the backfill asked for publishes the show again: the show's events arrive, each at
    // least once, as reads ("r"), each keyed by its aggregate.
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 2 {
        let m = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
            .await
            .expect("in time")
            .expect("a message");
        let e: onsale_kafka::Envelope =
            serde_json::from_slice(m.payload().expect("payload")).expect("an envelope");
        assert_eq!(
            m.key(),
            Some(e.after.aggregate_id.as_bytes()),
            "keyed by its aggregate"
        );
        assert_eq!(
            (
                e.op.as_str(),
                e.source.snapshot.as_str(),
                e.source.table.as_str()
            ),
            ("r", "true", "events")
        );
        if e.after.aggregate_id == event {
            seen.insert((e.after.sequence, e.after.event_type));
        }
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        [(1, "ShowScheduled".to_owned()), (2, "SeatsHeld".to_owned())]
    );

    // The live topic carries the same rows as changes ("c") with their transaction and LSN.
    let live: StreamConsumer = rp
        .kafka
        .client()
        .set("group.id", "live-check")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("consumer");
    live.assign(&whole_topic(&rp.kafka)).expect("assign");
    let mut lsns = Vec::new();
    while lsns.len() < 2 {
        let m = tokio::time::timeout(Duration::from_secs(20), live.recv())
            .await
            .expect("in time")
            .expect("a message");
        let e: onsale_kafka::Envelope =
            serde_json::from_slice(m.payload().expect("payload")).expect("an envelope");
        assert_eq!((e.op.as_str(), e.source.snapshot.as_str()), ("c", "false"));
        assert!(e.source.tx_id.is_some(), "{e:?}");
        assert!(
            parse_lsn(&e.source.lsn) <= parse_lsn(&e.source.commit_lsn),
            "{e:?}"
        );
        lsns.push((
            e.after.sequence,
            parse_lsn(&e.source.commit_lsn).expect("lsn"),
        ));
    }
    lsns.sort();
    assert!(lsns[0].1 < lsns[1].1, "two commits, in order: {lsns:?}");
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(format!("{}_b", rp.relay_config.slot))
        .execute(&rp.pool)
        .await
        .expect("drop the slot");
    rp.stop().await;
}

#[tokio::test]
async fn the_relay_streams_its_slot_and_confirms_what_it_published() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.app.on_sale_event(1, 2, 10, None).await;
    // One replication session holds the slot: a walsender decodes each change once and
    // streams it (no SQL decoding function that decodes again from the restart point).
    let application = format!("onsale-relay {}", rp.relay_config.slot);
    onsale_tests::wait_for(
        "the relay's walsender streams the slot",
        Duration::from_secs(10),
        || async {
            let streaming: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_replication_slots s
                                  JOIN pg_stat_replication r ON r.pid = s.active_pid
                                 WHERE s.slot_name = $1 AND s.plugin = 'pgoutput'
                                   AND r.application_name = $2 AND r.state = 'streaming')",
            )
            .bind(&rp.relay_config.slot)
            .bind(&application)
            .fetch_one(&rp.pool)
            .await
            .expect("the slot");
            streaming
        },
    )
    .await;
    for i in 1..=10 {
        let fan = rp.app.fan(&format!("f{i}"));
        rp.app
            .hold(
                &event,
                &fan,
                json!({"seatIds": [format!("S1-R1-{i}")]}),
                None,
            )
            .await;
    }
    let written: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&rp.pool)
        .await
        .expect("the WAL position");
    rp.eventually(&format!("/v1/events/{event}/seats"), "", |s, m| {
        s == 200 && section(m, "S1")["held"] == 10
    })
    .await;
    // What was published is confirmed to PostgreSQL, and so is what the publication does not
    // carry (the read models' writes): the slot keeps no WAL the relay is done with.
    onsale_tests::wait_for(
        &format!("the slot confirms past {written}"),
        Duration::from_secs(10),
        || async {
            let confirmed: String = sqlx::query_scalar(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            )
            .bind(&rp.relay_config.slot)
            .fetch_one(&rp.pool)
            .await
            .expect("the slot");
            parse_lsn(&confirmed) >= parse_lsn(&written)
        },
    )
    .await;
    rp.stop().await;
}

#[tokio::test]
async fn the_relay_loses_nothing_across_a_postgresql_restart() {
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::Message;

    let cluster = onsale_tests::read_path::PrivateCluster::start().expect("a cluster of our own");
    let db = cluster.db();
    let rp = ReadPath::spawn(
        &db,
        &onsale_tests::read_path::shared_brokers().expect("broker"),
    )
    .await
    .expect("read path");
    let event = rp.show_on_map(1, 2, 10).await;
    let hold = |i: u32| {
        let (app, event) = (&rp.app, event.clone());
        async move {
            let fan = app.fan(&format!("f{i}"));
            // An outage answers 503: the fan retries until the hold is committed.
            onsale_tests::wait_until(
                &format!("hold {i} committed"),
                Duration::from_secs(10),
                Duration::from_millis(100),
                || async {
                    let (status, body) = app
                        .hold(
                            &event,
                            &fan,
                            json!({"seatIds": [format!("S1-R1-{i}")]}),
                            None,
                        )
                        .await;
                    if status == 201 {
                        Ok(())
                    } else {
                        Err(format!("{status} {body}"))
                    }
                },
            )
            .await;
        }
    };
    for i in 1..=5 {
        hold(i).await;
    }
    let restarting = std::time::Instant::now();
    cluster.restart().await.expect("PostgreSQL restarts");
    // Its shutdown waited for the relay's walsender, whose client (the relay) confirmed what
    // it had been sent: not for the walsender's timeout (60 s).
    assert!(
        restarting.elapsed() < Duration::from_secs(30),
        "the restart took {:?}",
        restarting.elapsed()
    );
    for i in 6..=10 {
        hold(i).await;
    }
    // Every event of the show reaches the topic (at least once) and the seat map.
    let head: i64 = sqlx::query_scalar("SELECT max(sequence) FROM events WHERE aggregate_id = $1")
        .bind(&event)
        .fetch_one(&db.pool().await.expect("pool"))
        .await
        .expect("head");
    assert_eq!(head, 11, "ShowScheduled and ten holds");
    let consumer: StreamConsumer = rp
        .kafka
        .client()
        .set("group.id", "restart-check")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("consumer");
    consumer.assign(&whole_topic(&rp.kafka)).expect("assign");
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < head as usize {
        let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("every event within 30 s")
            .expect("a message");
        let e: onsale_kafka::Envelope =
            serde_json::from_slice(m.payload().expect("payload")).expect("an envelope");
        if e.after.aggregate_id == event {
            seen.insert(e.after.sequence);
        }
    }
    assert_eq!(seen, (1..=head).collect());
    rp.eventually(&format!("/v1/events/{event}/seats"), "", |_, m| {
        section(m, "S1")["held"] == 10
    })
    .await;
    rp.stop().await;
}

#[tokio::test]
async fn with_postgresql_away_the_last_good_map_is_served_stale_or_503_never_a_guess() {
    let (db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.show_on_map(2, 1, 10).await;
    let url = format!("{}/v1/events/{event}/seats", rp.app.base);
    let good: Value = rp
        .app
        .http
        .get(&url)
        .send()
        .await
        .expect("answers")
        .json()
        .await
        .expect("json");

    db.close().await.expect("close");
    // Past the cache's TTL, a read needs PostgreSQL: the last good map, marked stale, with the
    // asOf it was read at.
    cache_lapses(&rp).await;
    let res = rp.app.http.get(&url).send().await.expect("answers");
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["warning"], "110 - \"Response is Stale\"");
    assert_eq!(res.headers()["cache-control"], "no-cache");
    let stale: Value = res.json().await.expect("json");
    assert_eq!(
        stale["asOf"], good["asOf"],
        "staleness is declared, not hidden"
    );
    assert_eq!(stale["sections"], good["sections"]);
    // A map never read before has nothing to fall back on: 503 with Retry-After.
    let res = rp
        .app
        .http
        .get(format!("{url}?section=S2"))
        .send()
        .await
        .expect("answers");
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    // Over gRPC the same: UNAVAILABLE with Retry-After, and nothing of the database's own words
    // (issue 53, item 11: its error text was the status's message).
    let refused = grpc_client(&rp)
        .await
        .stream_deltas(pb::StreamDeltasRequest {
            event_id: event.clone(),
            section: String::new(),
            all_seats: false,
            after_seq: 0,
        })
        .await
        .expect_err("no stream while the read models are away");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(
        refused.message(),
        "UNAVAILABLE: the read models are unreachable; retry shortly"
    );
    assert_eq!(
        refused
            .metadata()
            .get("retry-after")
            .map(|v| v.to_str().ok()),
        Some(Some("1"))
    );

    db.reopen().await.expect("reopen");
    rp.eventually(
        &format!("/v1/events/{event}/seats?section=S2"),
        "",
        |s, _| s == 200,
    )
    .await;
    rp.stop().await;
}

/// Reads never go through a show's owner, yet a caller reads its own writes: a hold and an
/// order are read back the moment they were acknowledged (the read waits, bounded, for the
/// projection to reach the show's head), a hold's status follows release and order, another
/// fan's hold is "not found", and the event page is served without an owner (for a show no node
/// owns at that moment, too).
#[tokio::test]
async fn holds_orders_and_the_event_page_are_read_from_projections_and_caches_with_own_writes() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let app = &rp.app;
    let event = app.on_sale_event(1, 1, 10, None).await;
    let (ann, bob) = (app.fan("ann"), app.fan("bob"));
    for n in 0..5 {
        let (status, hold) = app
            .hold(
                &event,
                &ann,
                json!({"seatIds": [format!("S1-R1-{}", n + 1)]}),
                None,
            )
            .await;
        assert_eq!(status, 201, "{hold}");
        let id = hold["holdId"].as_str().expect("id").to_owned();
        let (status, read) = app.get(&format!("/v1/holds/{id}"), &ann).await;
        assert_eq!(status, 200, "read your own hold at once: {read}");
        assert_eq!(read["status"], "ACTIVE");
        assert_eq!(read["seatIds"], hold["seatIds"]);
        let (status, _) = app.get(&format!("/v1/holds/{id}"), &bob).await;
        assert_eq!(status, 404, "another fan's hold is not found");
        if n % 2 == 0 {
            let (status, _) = app.delete(&format!("/v1/holds/{id}"), &ann).await;
            assert_eq!(status, 204);
            let (_, read) = app.get(&format!("/v1/holds/{id}"), &ann).await;
            assert_eq!(read["status"], "RELEASED");
        } else {
            let (status, order) = app.order(&json!(id), &ann, &format!("k{n}")).await;
            assert_eq!(status, 202, "{order}");
            let order_id = order["orderId"].as_str().expect("order");
            let (status, read) = app.get(&format!("/v1/orders/{order_id}"), &ann).await;
            assert_eq!(status, 200, "read your own order at once: {read}");
            let (_, read) = app.get(&format!("/v1/holds/{id}"), &ann).await;
            assert_eq!(read["status"], "ORDERED");
        }
    }
    let missing = onsale_domain::HoldId::new(event.parse().expect("show")).to_string();
    let (status, body) = app.get(&format!("/v1/holds/{missing}"), &ann).await;
    assert_eq!(status, 404, "{body}");
    // The event page comes from the show's first event, not from its owner: the show's claim
    // is gone (as after its node died) and the page still answers, and no owner is started.
    sqlx::query("DELETE FROM show_owners")
        .execute(&rp.pool)
        .await
        .expect("claims");
    let (status, page) = app.get(&format!("/v1/events/{event}"), &ann).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["seatCount"], 10);
    let owners: i64 = sqlx::query_scalar("SELECT count(*) FROM show_owners")
        .fetch_one(&rp.pool)
        .await
        .expect("count");
    assert_eq!(owners, 0, "a read claimed no show");
    let (status, _) = app
        .get(&format!("/v1/events/{}", uuid::Uuid::now_v7()), &ann)
        .await;
    assert_eq!(status, 404);
    rp.stop().await;
}

/// gRPC checks a requested section as REST does: a string that is no section label is refused
/// (INVALID_ARGUMENT) before it reaches the seat-map cache or the hub.
#[tokio::test]
async fn grpc_refuses_a_section_that_is_no_label() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.show_on_map(1, 1, 10).await;
    let mut client = grpc_client(&rp).await;
    for section in ["x".repeat(100_000), "S1 R1".to_owned()] {
        let status = client
            .get_seat_map(pb::GetSeatMapRequest {
                event_id: event.clone(),
                section: section.clone(),
                all_seats: false,
            })
            .await
            .expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().len() < 300,
            "the input is not echoed whole"
        );
        let status = client
            .stream_deltas(pb::StreamDeltasRequest {
                event_id: event.clone(),
                section,
                all_seats: false,
                after_seq: 0,
            })
            .await
            .expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    }
    let map = client
        .get_seat_map(pb::GetSeatMapRequest {
            event_id: event.clone(),
            section: "S1".into(),
            all_seats: false,
        })
        .await
        .expect("a real section is served");
    assert!(!map.into_inner().sections.is_empty());
    rp.stop().await;
}

/// Seat maps of made-up shows and sections are answered 404 and never enter the seat-map
/// cache, so they cannot push real maps out of it.
#[tokio::test]
async fn unknown_shows_never_enter_the_seat_map_cache() {
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.show_on_map(1, 1, 10).await;
    let fan = rp.app.fan("ann");
    let before = rp.reads.snapshots.cached().await;
    for i in 0..300 {
        let made_up = onsale_domain::ShowId::random().to_string();
        let (status, body) = rp
            .app
            .get(&format!("/v1/events/{made_up}/seats"), &fan)
            .await;
        assert_eq!(status, 404, "{i}: {body}");
        let (status, _) = rp
            .app
            .get(&format!("/v1/events/{event}/seats?section=Z{i}"), &fan)
            .await;
        assert_eq!(status, 404);
    }
    assert!(
        rp.reads.snapshots.cached().await <= before + 1,
        "made-up ids are not cached"
    );
    let (status, _) = rp.app.get(&format!("/v1/events/{event}/seats"), &fan).await;
    assert_eq!(status, 200);
    rp.stop().await;
}

/// Waits (10 s at most) until the seat-map cache holds nothing: its entries lapsed.
async fn cache_lapses(rp: &ReadPath) {
    onsale_tests::wait_for(
        "the map's cache entry lapses",
        Duration::from_secs(10),
        || {
            let s = rp.reads.snapshots.clone();
            async move { s.cached().await == 0 }
        },
    )
    .await;
}

/// Bit `i` of a map's `soldSeats` (base64, least significant bit first).
fn sold_bit(bytes: &[u8], i: usize) -> bool {
    bytes.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1)
}

/// Every seat of a show for the venue chart (issue 34): `seats=all` (REST, SSE) and
/// `all_seats` (gRPC) carry every reserved seat as a sold bitmap in the layout's order
/// (a general-admission floor left out), and every changed seat of every section in the
/// deltas; a map of the past has it too; a section named beside it is moot but checked.
#[tokio::test]
async fn every_seat_of_a_show_comes_as_a_bitmap_in_the_layouts_order_and_every_change_in_the_deltas(
) {
    use base64::Engine;
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp
        .app
        .event_at(
            json!([
                {"section": "S1", "priceTier": "A", "rows": [{"row": "R1", "seats": 5}, {"row": "R2", "seats": 5}]},
                {"section": "FLOOR", "priceTier": "B", "capacity": 30},
                {"section": "S2", "priceTier": "B", "rows": [{"row": "R1", "seats": 6}]},
            ]),
            json!({}),
        )
        .await;
    let mut sse =
        SseReader::open(&rp, &format!("/v1/events/{event}/updates?seats=all"), None).await;
    let ann = rp.app.fan("ann");
    // A seat of each reserved section sold: S1-R2-1 (seat 5 of the order), S2-R1-6 (seat 15).
    let (status, hold) = rp
        .app
        .hold(
            &event,
            &ann,
            json!({"seatIds": ["S1-R2-1", "S2-R1-6"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{hold}");
    let (status, order) = rp.app.order(&hold["holdId"], &ann, "all-1").await;
    assert_eq!(status, 202, "{order}");
    let mut last = (0, 0);
    let sold = sse
        .until(&mut last, |d| {
            d["seats"].as_array().is_some_and(|s| s.len() == 2)
        })
        .await;
    assert_eq!(
        onsale_tests::seat_statuses(&sold.data),
        BTreeMap::from([
            ("S1-R2-1".into(), "SOLD".into()),
            ("S2-R1-6".into(), "SOLD".into())
        ]),
        "both sections' seats in one stream"
    );
    let map = rp
        .eventually(
            &format!("/v1/events/{event}/seats?seats=all"),
            "",
            |_, m| m["seq"].as_i64() >= sold.id,
        )
        .await;
    let bits = base64::engine::general_purpose::STANDARD
        .decode(map["soldSeats"].as_str().expect("soldSeats"))
        .expect("base64");
    assert_eq!(bits.len(), 2, "16 reserved seats, the floor left out");
    let set: Vec<usize> = (0..16).filter(|&i| sold_bit(&bits, i)).collect();
    assert_eq!(set, vec![5, 15]);
    assert!(map.get("seats").is_none());
    // gRPC: the same bitmap; its stream has every changed seat too.
    let mut client = grpc_client(&rp).await;
    let got = client
        .get_seat_map(pb::GetSeatMapRequest {
            event_id: event.clone(),
            section: String::new(),
            all_seats: true,
        })
        .await
        .expect("the map")
        .into_inner();
    assert_eq!(got.sold_seats, bits);
    // The map of the past, as an auditor asks it: before the order, nothing sold.
    let auditor = rp.app.token("audit", Role::Auditor);
    let (status, past) = rp
        .app
        .get(
            &format!("/v1/events/{event}/seats?seats=all&atSequence=1"),
            &auditor,
        )
        .await;
    assert_eq!(status, 200, "{past}");
    let before = base64::engine::general_purpose::STANDARD
        .decode(past["soldSeats"].as_str().expect("soldSeats"))
        .expect("base64");
    assert_eq!(before, vec![0, 0]);
    // A section named beside every seat is moot (every seat includes it), but checked.
    let (status, both) = rp
        .app
        .get(
            &format!("/v1/events/{event}/seats?seats=all&section=S1"),
            "",
        )
        .await;
    assert_eq!(status, 200, "{both}");
    assert_eq!(both["soldSeats"], map["soldSeats"]);
    let (status, refused) = rp
        .app
        .get(
            &format!("/v1/events/{event}/seats?seats=all&section=S-1"),
            "",
        )
        .await;
    assert_eq!((status, &refused["code"]), (400, &json!("INVALID_REQUEST")));
    let status = client
        .stream_deltas(pb::StreamDeltasRequest {
            event_id: event.clone(),
            section: "S 1".into(),
            all_seats: true,
            after_seq: 0,
        })
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
}

/// The four projections share one consumer, one parse and one fold (docs/adr/025), each
/// keeping its own positions: one rebuilt alone folds the show again from its first event
/// beside the others, which apply nothing twice, and every read model ends as a rebuild of
/// all four leaves it.
#[tokio::test]
async fn a_projection_rebuilt_alone_catches_up_beside_the_others_and_nothing_is_applied_twice() {
    let (_db, mut rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.app.on_sale_event(2, 5, 10, None).await;
    two_seats_each(&rp.app, &event, 0..6).await;
    let head = log_grew(&rp.pool, &event, 0, 7).await;
    rp.at_head(&event, head).await;
    rp.applied_once(&event, head).await;

    // The seat history alone is deleted; the others keep their rows and positions. Its
    // offsets are set where the others stand (as separate runners of old could leave a
    // projection: behind on a show, yet past its messages), so nothing is delivered again:
    // with no new event it catches up all the same.
    rp.reset_alone::<onsale_projections::SeatHistory>()
        .await
        .expect("the history reset");
    sqlx::query(
        "INSERT INTO projection_offsets (projection, topic, partition, next_offset)
         SELECT 'seat_history', topic, partition, next_offset FROM projection_offsets
          WHERE projection = 'seat_map'",
    )
    .execute(&rp.pool)
    .await
    .expect("the history's offsets");
    rp.start_projections().await.expect("projections");
    rp.at_head(&event, head).await;
    rp.applied_once(&event, head).await;
    // And again with events arriving while it catches up.
    rp.reset_alone::<onsale_projections::SeatHistory>()
        .await
        .expect("the history reset");
    two_seats_each(&rp.app, &event, 6..10).await;
    rp.start_projections().await.expect("projections");
    let head = log_grew(&rp.pool, &event, head, 4).await;
    rp.at_head(&event, head).await;
    rp.applied_once(&event, head).await;
    rp.seat_map_matches_replay(&event).await;

    let folded = read_models(&rp.pool).await;
    assert_eq!(
        folded["history"].as_array().map(Vec::len),
        Some(100 + 20),
        "each seat's scheduling and each held seat's hold, the ones before the reset too"
    );
    rp.rebuild_projections().await.expect("a rebuild");
    onsale_tests::wait_for(
        "a rebuild of all four equals the fold",
        Duration::from_secs(30),
        || async { read_models(&rp.pool).await == folded },
    )
    .await;
    rp.stop().await;
}

/// The tables the read models' runner writes in each batch's transaction (rows, positions,
/// topic offsets, status), kept or put back as a unit.
const READ_MODEL_TABLES: [&str; 11] = [
    "seat_map_shows",
    "seat_map_sections",
    "seat_map_seats",
    "seat_map_deltas",
    "orders_view",
    "holds_view",
    "seat_history",
    "catalog_events",
    "projection_positions",
    "projection_offsets",
    "projection_status",
];

/// The read models commit their batches asynchronously (`Runner::commit_asynchronously`): a
/// crash or a failover can lose the last transactions they committed. What is left is the
/// database as it stood at an earlier commit: the rows, the positions and the topic offsets of
/// the lost batches gone together. Here that is made to happen exactly (the tables put back as
/// a copy taken earlier left them, the projections killed meanwhile): the lost tail is read
/// again and folded once, never skipped.
#[tokio::test]
async fn a_lost_tail_of_the_read_models_is_read_again_never_skipped() {
    let (_db, mut rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.app.on_sale_event(2, 5, 10, None).await;
    two_seats_each(&rp.app, &event, 0..4).await;
    let kept_at = log_grew(&rp.pool, &event, 0, 5).await;
    rp.at_head(&event, kept_at).await;
    // The copy the crash will go back to (the payment consumers' positions are not theirs).
    let mut kept = Vec::new();
    for t in READ_MODEL_TABLES {
        let rows: Option<Value> = sqlx::query_scalar(&format!("SELECT json_agg(t) FROM {t} t"))
            .fetch_one(&rp.pool)
            .await
            .expect("a copy");
        kept.push(rows.unwrap_or_else(|| json!([])));
    }
    two_seats_each(&rp.app, &event, 4..10).await;
    let head = log_grew(&rp.pool, &event, kept_at, 6).await;
    rp.at_head(&event, head).await;
    rp.applied_once(&event, head).await;
    let folded = read_models(&rp.pool).await;

    rp.kill_projections();
    let mut tx = rp.pool.begin().await.expect("tx");
    for (t, rows) in READ_MODEL_TABLES.iter().zip(&kept) {
        let scope = if t.starts_with("projection_") {
            "WHERE projection = ANY($1)"
        } else {
            "WHERE cardinality($1::text[]) > 0"
        };
        sqlx::query(&format!("DELETE FROM {t} {scope}"))
            .bind(onsale_query::health::PROJECTIONS)
            .execute(&mut *tx)
            .await
            .expect("the tail lost");
        // Every column but the generated ones (the catalog's search vector).
        let columns: String = sqlx::query_scalar(
            "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
              WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''",
        )
        .bind(t)
        .fetch_one(&mut *tx)
        .await
        .expect("columns");
        sqlx::query(&format!(
            "INSERT INTO {t} ({columns}) SELECT {columns} FROM jsonb_populate_recordset(NULL::{t}, $2) {scope}"
        ))
        .bind(onsale_query::health::PROJECTIONS)
        .bind(rows)
        .execute(&mut *tx)
        .await
        .expect("the tables as they stood");
    }
    tx.commit().await.expect("commit");
    assert_eq!(
        read_model_positions(&rp.pool, &event)
            .await
            .into_values()
            .max(),
        Some(kept_at),
        "the positions went back with the rows"
    );

    rp.start_projections().await.expect("projections");
    rp.at_head(&event, head).await;
    rp.applied_once(&event, head).await;
    rp.seat_map_matches_replay(&event).await;
    assert_eq!(
        read_models(&rp.pool).await,
        folded,
        "the tail folded again, once"
    );
    // And what comes next is folded on top.
    two_seats_each(&rp.app, &event, 10..12).await;
    let head = log_grew(&rp.pool, &event, head, 2).await;
    rp.at_head(&event, head).await;
    rp.applied_once(&event, head).await;
    rp.seat_map_matches_replay(&event).await;
    rp.stop().await;
}

/// A seat's change committed by a projection that died before its next delta (or by another
/// process, before a partition moved) is published once a projection loads the show again:
/// what is pending is found in the table, not only in the memory of the process that wrote
/// it (a design keeping the pending seats in memory must look at the table after every load;
/// BENCHMARKS.md, "Pending seats without their index").
#[tokio::test]
async fn a_change_left_unpublished_by_a_projection_that_died_is_published_after_a_load() {
    let (_db, mut rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.show_on_map(1, 2, 5).await;
    let (api, pool) = (rp.app.clone(), rp.pool.clone());
    // A seat leaves the public map (SOLD) once ordered: a hold alone moves only the counts.
    let buy = |fan: &'static str, seat: &'static str| {
        let (app, event) = (api.clone(), event.clone());
        async move {
            let token = app.fan(fan);
            let (status, hold) = app
                .hold(&event, &token, json!({"seatIds": [seat]}), None)
                .await;
            assert_eq!(status, 201, "{hold}");
            let (status, order) = app
                .post(
                    "/v1/orders",
                    &token,
                    json!({"holdId": hold["holdId"], "paymentToken": "tok_ok"}),
                    Some(&format!("buy-{fan}")),
                )
                .await;
            assert_eq!(status, 202, "{order}");
        }
    };
    let in_a_delta_after = |seat: &'static str, after: i64| {
        let (pool, event) = (pool.clone(), event.clone());
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM seat_map_deltas WHERE show_id = $1 AND seq > $2
                   AND body->'seats' @> jsonb_build_array(jsonb_build_object('seatId', $3::text))",
            )
            .bind(&event)
            .bind(after)
            .bind(seat)
            .fetch_one(&pool)
            .await
            .expect("deltas")
                > 0
        }
    };
    buy("ann", "S1-R1-1").await;
    onsale_tests::wait_for("ann's seat in a delta", Duration::from_secs(20), || {
        in_a_delta_after("S1-R1-1", 0)
    })
    .await;
    rp.kill_projections();
    // As a batch that committed before its delta left it: changed, pending.
    sqlx::query(
        "UPDATE seat_map_seats SET delta_seq = NULL WHERE show_id = $1 AND seat_id = 'S1-R1-1'",
    )
    .bind(&event)
    .execute(&rp.pool)
    .await
    .expect("pending again");
    let before: i64 = sqlx::query_scalar("SELECT seq FROM seat_map_shows WHERE show_id = $1")
        .bind(&event)
        .fetch_one(&rp.pool)
        .await
        .expect("the map's seq");
    rp.start_projections().await.expect("projections");
    buy("bob", "S1-R1-2").await;
    onsale_tests::wait_for(
        "bob's seat and the seat left pending, each in a delta",
        Duration::from_secs(20),
        || async {
            in_a_delta_after("S1-R1-2", before).await && in_a_delta_after("S1-R1-1", before).await
        },
    )
    .await;
    let pending: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM seat_map_seats WHERE show_id = $1 AND delta_seq IS NULL",
    )
    .bind(&event)
    .fetch_one(&rp.pool)
    .await
    .expect("pending seats");
    assert_eq!(pending, 0, "nothing left pending");
    rp.stop().await;
}

/// Fans `fan{i}` for each i in `fans` hold two seats each of `event`.
async fn two_seats_each(app: &onsale_tests::TestApp, event: &str, fans: std::ops::Range<u32>) {
    for i in fans {
        let (status, body) = app
            .hold(
                event,
                &app.fan(&format!("fan{i}")),
                json!({"quantity": 2}),
                None,
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
}

/// The four read models' positions on `event`, by projection.
async fn read_model_positions(pool: &sqlx::PgPool, event: &str) -> BTreeMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>(
        "SELECT projection, last_sequence FROM projection_positions
          WHERE show_id = $1 AND projection = ANY($2)",
    )
    .bind(event)
    .bind(onsale_query::health::PROJECTIONS)
    .fetch_all(pool)
    .await
    .expect("positions")
    .into_iter()
    .collect()
}

#[tokio::test]
async fn a_projection_process_folds_the_shows_that_move_and_drops_idle_ones() {
    let (_db, mut rp) = ReadPath::on_shared_broker().await.expect("read path");
    let (busy, quiet) = (
        rp.app.on_sale_event(2, 5, 10, None).await,
        rp.app.on_sale_event(2, 5, 10, None).await,
    );
    let fans = std::sync::atomic::AtomicU32::new(0);
    let app = rp.app.clone();
    let hold = |event: &str| {
        let fan = app.fan(&format!(
            "fan{}",
            fans.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let (app, event) = (app.clone(), event.to_owned());
        async move {
            let (status, body) = app.hold(&event, &fan, json!({"quantity": 1}), None).await;
            assert_eq!(status, 201, "{body}");
        }
    };
    hold(&busy).await;
    hold(&quiet).await;
    let busy_head = log_grew(&rp.pool, &busy, 0, 2).await;
    let quiet_head = log_grew(&rp.pool, &quiet, 0, 2).await;
    rp.at_head(&busy, busy_head).await;
    rp.at_head(&quiet, quiet_head).await;
    // The projections the server runs stop; a runner of the same four is driven by hand.
    rp.kill_projections();
    let log: std::sync::Arc<dyn onsale_eventlog::EventLog> =
        std::sync::Arc::new(onsale_eventlog::PgEventLog::new(rp.pool.clone()));
    let mut runner =
        onsale_projections::read_models(rp.pool.clone(), log, rp.kafka.clone(), rp.runner.clone());

    // Started over a log whose shows are all folded, it loads none of them.
    runner.check_table(true).await.expect("a table check");
    runner.finish_loads().await.expect("the folds loaded");
    assert_eq!(runner.folds(), 0, "no show is behind: none is loaded");

    // One show moves: that one is loaded and filled, the other stays out.
    hold(&busy).await;
    let busy_head = log_grew(&rp.pool, &busy, busy_head, 1).await;
    runner.check_table(true).await.expect("a table check");
    runner.finish_loads().await.expect("the folds loaded");
    assert_eq!(runner.folds(), 1, "only the show that moved is loaded");
    let at = read_model_positions(&rp.pool, &busy).await;
    assert_eq!(at.len(), 4, "{at:?}");
    assert!(
        at.values().all(|p| *p == busy_head),
        "{at:?} at {busy_head}"
    );

    // Idle for less than the bound it is kept; past it, dropped.
    assert_eq!(runner.drop_idle(Duration::from_secs(3_600)), 0);
    assert_eq!(runner.folds(), 1);
    assert_eq!(
        runner.drop_idle(Duration::ZERO),
        1,
        "the idle fold is dropped"
    );
    assert_eq!(runner.folds(), 0);

    // Its next event loads it again from the log, and the read models go on from where they
    // stood: each event applied once, the map and the catalog as a replay says.
    hold(&busy).await;
    let busy_head = log_grew(&rp.pool, &busy, busy_head, 1).await;
    runner.check_table(true).await.expect("a table check");
    runner.finish_loads().await.expect("the folds loaded");
    assert_eq!(runner.folds(), 1);
    rp.applied_once(&busy, busy_head).await;
    rp.seat_map_matches_replay(&busy).await;
    let quiet_at = read_model_positions(&rp.pool, &quiet).await;
    assert!(quiet_at.values().all(|p| *p == quiet_head), "{quiet_at:?}");
    rp.stop().await;
}

/// ADR 025 decision 8: a show whose fold takes long to read (a big show woken after its fold
/// was dropped, or loaded again after a restart) does not hold back the other shows' read
/// models; its own events are filled from the table once the fold is in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_show_whose_fold_loads_slowly_holds_back_no_other_show() {
    let (_db, mut rp) = ReadPath::on_shared_broker().await.expect("read path");
    let slow = rp.app.on_sale_event(2, 5, 10, None).await;
    let other = rp.app.on_sale_event(2, 5, 10, None).await;
    let app = rp.app.clone();
    let hold = |event: &str, fan: &str| {
        let (app, event, fan) = (app.clone(), event.to_owned(), app.fan(fan));
        async move {
            let (status, body) = app.hold(&event, &fan, json!({"quantity": 1}), None).await;
            assert_eq!(status, 201, "{body}");
        }
    };
    hold(&slow, "s0").await;
    hold(&other, "o0").await;
    let slow_head = log_grew(&rp.pool, &slow, 0, 2).await;
    let other_head = log_grew(&rp.pool, &other, 0, 2).await;
    rp.at_head(&slow, slow_head).await;
    rp.at_head(&other, other_head).await;
    // The slow show moves while no projection runs: the runner that starts next must load its
    // fold, and that load is held at a gate.
    rp.kill_projections();
    hold(&slow, "s1").await;
    let slow_head = log_grew(&rp.pool, &slow, slow_head, 1).await;
    let pg: std::sync::Arc<dyn onsale_eventlog::EventLog> =
        std::sync::Arc::new(onsale_eventlog::PgEventLog::new(rp.pool.clone()));
    let gated = onsale_tests::gated_log::GatedLog::new(pg, slow.parse().expect("show id"));
    let runner = onsale_projections::read_models(
        rp.pool.clone(),
        std::sync::Arc::new(gated.clone()),
        rp.kafka.clone(),
        rp.runner.clone(),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(runner.run(async move {
        let _ = stopped.await;
    }));

    // While the slow show's load waits, the other show's events are folded.
    onsale_tests::wait_for(
        "the runner loads the slow show",
        Duration::from_secs(30),
        || async { gated.holding() },
    )
    .await;
    hold(&other, "o1").await;
    let other_head = log_grew(&rp.pool, &other, other_head, 1).await;
    rp.at_head(&other, other_head).await;
    let slow_at = read_model_positions(&rp.pool, &slow).await;
    assert!(
        slow_at.values().all(|p| *p < slow_head),
        "the slow show's fold was held, yet {slow_at:?} reached {slow_head}"
    );

    // Once its fold is in, the slow show catches up from the table: each event applied once.
    gated.open();
    rp.at_head(&slow, slow_head).await;
    rp.applied_once(&slow, slow_head).await;
    rp.applied_once(&other, other_head).await;
    rp.seat_map_matches_replay(&slow).await;
    let _ = stop.send(());
    running.await.expect("the runner stops");
    rp.stop().await;
}

#[tokio::test]
async fn a_projection_loads_a_show_from_its_snapshot_at_its_position_not_from_zero() {
    use onsale_eventlog::EventLog;
    let (_db, mut rp) = ReadPath::on_shared_broker().await.expect("read path");
    let event = rp.app.on_sale_event(2, 5, 10, None).await;
    let show: onsale_domain::ShowId = event.parse().expect("show id");
    let fans = std::sync::atomic::AtomicU32::new(0);
    let app = rp.app.clone();
    let holds = |n: u32| {
        let (app, event) = (app.clone(), event.clone());
        let first = fans.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        async move {
            for f in first..first + n {
                let fan = app.fan(&format!("fan{f}"));
                let (status, body) = app.hold(&event, &fan, json!({"quantity": 1}), None).await;
                assert_eq!(status, 201, "{body}");
            }
        }
    };
    holds(6).await;
    let folded = log_grew(&rp.pool, &event, 0, 7).await;
    rp.at_head(&event, folded).await;
    rp.kill_projections();
    let log = onsale_eventlog::PgEventLog::new(rp.pool.clone());
    // Snapshots as the owner writes them: one at the projections' position, and one past it
    // (a state they have not reached: loading from it would skip events).
    let snapshot = |log: &onsale_eventlog::PgEventLog| {
        let log = log.clone();
        async move {
            let now = log.replay(show).await.expect("a replay");
            let json = now.show.snapshot_copy().to_json().expect("a snapshot");
            log.save_snapshot(show, now.version, &json)
                .await
                .expect("a snapshot saved");
            now.version
        }
    };
    assert_eq!(snapshot(&log).await, folded);
    holds(3).await;
    let past = log_grew(&rp.pool, &event, folded, 3).await;
    assert_eq!(snapshot(&log).await, past);
    holds(2).await;
    let head = log_grew(&rp.pool, &event, past, 2).await;

    let mut runner = onsale_projections::read_models(
        rp.pool.clone(),
        std::sync::Arc::new(log),
        rp.kafka.clone(),
        rp.runner.clone(),
    );
    runner.check_table(true).await.expect("a table check");
    runner.finish_loads().await.expect("the folds loaded");
    assert_eq!(
        runner.loaded_events(),
        0,
        "the fold starts from the snapshot at the projections' position ({folded}), reading none of the events before it"
    );
    // From there every read model goes on to the head, each event applied once, the map as a
    // replay says.
    rp.applied_once(&event, head).await;
    rp.seat_map_matches_replay(&event).await;
    rp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_placed_before_the_card_vault_is_relayed_without_its_token_and_still_chains() {
    use onsale_domain::show::messages::Idempotency;
    use onsale_domain::{AccountId, HoldId, IdempotencyKey, OrderId, ShowEvent, ShowId};
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::Message;
    let (_db, rp) = ReadPath::on_shared_broker().await.expect("read path");
    // A show's log as an onsale from before issue 16 wrote it: its order carried the token.
    let show = ShowId::random();
    let placed = ShowEvent::OrderPlaced {
        order_id: OrderId::new(show),
        hold_id: HoldId::new(show),
        account_id: AccountId::parse("old-fan").expect("an account"),
        seat_ids: vec!["S1-R1-1".parse().expect("a seat")],
        total_cents: 5_000,
        placed_at: chrono::Utc::now(),
        idempotency: Idempotency {
            key: IdempotencyKey::parse("old-order").expect("a key"),
            fingerprint: "f".repeat(64),
        },
    };
    let mut payload = serde_json::to_value(&placed).expect("JSON");
    payload["OrderPlaced"]["payment_token"] = "tok_4242424242".into();
    let released = ShowEvent::HoldReleased {
        hold_id: HoldId::new(show),
    };
    for (sequence, event, payload) in [
        (
            1,
            "HoldReleased",
            serde_json::to_value(&released).expect("JSON"),
        ),
        (2, "OrderPlaced", payload),
    ] {
        sqlx::query(
            "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
             VALUES ('show', $1, $2, $3, '1', $4::text::json, '{}')",
        )
        .bind(show.to_string())
        .bind(sequence)
        .bind(event)
        .bind(payload.to_string())
        .execute(&rp.pool)
        .await
        .expect("an old row");
    }
    let mut kafka = rp.kafka.clone();
    kafka.events_topic = format!("{}.scrubbed", kafka.events_topic);
    let relay = onsale_kafka::Relay::start(
        rp.pool.clone(),
        kafka.clone(),
        onsale_kafka::RelayConfig {
            slot: format!("{}_s", rp.relay_config.slot),
            ..rp.relay_config.clone()
        },
    )
    .await
    .expect("relay");
    relay
        .backfill(Some(&show.to_string()))
        .await
        .expect("backfill");
    let consumer: StreamConsumer = kafka
        .client()
        .set("group.id", "scrub-check")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("consumer");
    consumer.assign(&whole_topic(&kafka)).expect("assign");
    let mut messages = BTreeMap::new();
    while messages.len() < 2 {
        let m = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
            .await
            .expect("in time")
            .expect("a message");
        let body = m.payload().expect("payload").to_vec();
        let e: onsale_kafka::Envelope = serde_json::from_slice(&body).expect("an envelope");
        if e.after.aggregate_id == show.to_string() {
            messages.insert(e.after.sequence, body);
        }
    }
    let order = String::from_utf8_lossy(&messages[&2]).into_owned();
    assert!(!order.contains("tok_4242424242"), "{order}");
    assert!(order.contains("\"scrubbed\""), "{order}");
    // A consumer takes both: the first chains from the start, the scrubbed one by its proof.
    let first = onsale_projections::LogEvent::from_message(&messages[&1])
        .expect("parses")
        .expect("a show's");
    assert!(first.chains_from(&onsale_eventlog::chain::GENESIS));
    let second = onsale_projections::LogEvent::from_message(&messages[&2])
        .expect("parses")
        .expect("a show's");
    assert!(second.chains_from(&first.hash));
    // The log itself is untouched: the chain still verifies, the token is still in the row.
    let verified = onsale_eventlog::chain::verify(&rp.pool, Some(&show.to_string()), 100)
        .await
        .expect("verified");
    assert_eq!((verified.events, verified.broken), (2, None));
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(format!("{}_s", rp.relay_config.slot))
        .execute(&rp.pool)
        .await
        .expect("drop the slot");
    rp.stop().await;
}
