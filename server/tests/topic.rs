//! A topic that cannot lie (issue 53 item 7), on real processes and the test run's secure pair
//! (`scripts/stack.sh secure-up`): `onsale serve`, `onsale relay` and `onsale project` reach
//! Kafka only over TLS with SCRAM users and Redis only over TLS with a password; the brokers'
//! ACLs let the relay's user write the events topic and not read it, the others read it and
//! not write it; and a message that does not chain from the show's log, put on the topic with
//! the relay's stolen credentials, changes nothing.

use std::time::Duration;

use onsale_kafka::KafkaConfig;
use onsale_tests::secure::{Secure, NODE_USER, RELAY_USER};
use onsale_tests::{free_port, onsale_process, wait_for, wait_for_value, Api, TestDb};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{json, Value};

/// Seats held in section S1 of the seat map (seats are public only as available or sold).
fn held(map: &Value) -> i64 {
    map["sections"]
        .as_array()
        .and_then(|s| s.iter().find(|x| x["section"] == "S1"))
        .and_then(|x| x["held"].as_i64())
        .unwrap_or_default()
}

/// The seat map once `ok` holds of it (30 s at most).
async fn seat_map_where(api: &Api, event: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let fan = api.fan("watcher");
    wait_for_value(what, Duration::from_secs(30), || {
        let (api, fan, path) = (
            api.clone(),
            fan.clone(),
            format!("/v1/events/{event}/seats"),
        );
        let ok = &ok;
        async move {
            let (status, map) = api.get(&path, &fan).await;
            (status == 200 && ok(&map)).then_some(map)
        }
    })
    .await
}

/// The seats the seat-history projection has a hold of.
async fn seats_in_history(pool: &sqlx::PgPool, event: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT DISTINCT seat_id FROM seat_history WHERE show_id = $1 AND hold_id IS NOT NULL ORDER BY 1")
        .bind(event)
        .fetch_all(pool)
        .await
        .unwrap_or_default()
}

/// Messages the projection process refused as not chaining from the log, by projection (each
/// projection the process runs counts each refusal), from its metrics.
async fn unchained(http: &reqwest::Client, metrics: &str) -> Vec<f64> {
    let Ok(page) = http.get(format!("{metrics}/metrics")).send().await else {
        return Vec::new();
    };
    page.text()
        .await
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("onsale_projection_unchained_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_tls_and_scram_the_stack_sells_and_a_forged_event_on_the_topic_changes_nothing() {
    let db = TestDb::new().await.expect("db");
    let secure = Secure::of_the_run();
    let redis = secure.redis_url().await.expect("the secure Redis");
    let (port, metrics_port) = (free_port(), free_port());
    let mut serve_env = secure.kafka_env(NODE_USER);
    serve_env.extend(onsale_tests::serve_env(port, free_port()));
    serve_env.extend([
        ("ONSALE_REDIS_URL", redis.clone()),
        ("ONSALE_REDIS_CA_FILE", secure.ca_file.display().to_string()),
    ]);
    let mut project_env = secure.kafka_env(NODE_USER);
    project_env.push(("ONSALE_METRICS_LISTEN", format!("127.0.0.1:{metrics_port}")));
    let bin = env!("CARGO_BIN_EXE_onsale");
    let _serve = onsale_process(bin, &db, &["serve"], &serve_env);
    let _relay = onsale_process(bin, &db, &["relay"], &secure.kafka_env(RELAY_USER));
    let _project = onsale_process(bin, &db, &["project"], &project_env);
    let api = Api::new(&format!("http://127.0.0.1:{port}"));
    api.serving().await;

    // A show with a waiting room (its line in the TLS Redis), and one without.
    let queued = api
        .on_sale_event_with(1, 1, 4, json!({"waitingRoom": true}))
        .await;
    let (status, joined) = api
        .post(
            &format!("/v1/events/{queued}/waiting-room"),
            &api.fan("queued-fan"),
            json!({}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{joined}");
    // Its place is in Redis: the line answers the fan's standing.
    let token = joined["queueToken"].as_str().expect("a queue token");
    let standing = api
        .http
        .get(format!("{}/v1/events/{queued}/waiting-room", api.base))
        .bearer_auth(api.fan("queued-fan"))
        .header("x-onsale-queue-token", token)
        .send()
        .await
        .expect("an answer");
    assert_eq!(standing.status(), 200);
    let event = api.on_sale_event(1, 2, 5, None).await;
    let (status, hold) = api
        .hold(
            &event,
            &api.fan("fan-1"),
            json!({"seatIds": ["S1-R1-1"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{hold}");
    // The projections read it from the topic (their consumer group stores its offsets with
    // the rows), not only from the table.
    let pool = db.pool().await.expect("pool");
    wait_for(
        "the projections read the topic",
        Duration::from_secs(60),
        || {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>("SELECT count(*) FROM projection_offsets")
                    .fetch_one(&pool)
                    .await
                    .is_ok_and(|n| n > 0)
            }
        },
    )
    .await;
    seat_map_where(&api, &event, "the hold on the seat map", |m| held(m) == 1).await;

    let topic = format!("onsale.events.{}", db.name);
    let plain = KafkaConfig::plaintext(&secure.brokers, &topic, 3, 1);
    // Nobody reaches the brokers in the clear, or with a wrong password.
    let mut wrong = secure.kafka(plain.clone(), NODE_USER);
    wrong.sasl_password = Some("not-the-password".to_owned().into());
    for (who, config) in [("in the clear", plain.clone()), ("a wrong password", wrong)] {
        let consumer: BaseConsumer = config
            .client()
            .set("group.id", "onsale.events.stranger")
            .create()
            .expect("a client");
        let answer = tokio::task::spawn_blocking(move || {
            consumer
                .fetch_metadata(None, Duration::from_secs(5))
                .map(|_| ())
        })
        .await
        .expect("joined");
        assert!(answer.is_err(), "{who}: the broker answered");
    }
    // Nor the Redis: in the clear, or without its password.
    for url in [
        redis.replace("rediss://", "redis://"),
        redis.replace("rediss://onsale:", "rediss://onsale:x"),
    ] {
        let ca = (!url.starts_with("redis://")).then_some(secure.ca_file.as_path());
        let client = onsale_edge::redis_tls::client(&url, ca).expect("a client");
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            client.get_multiplexed_async_connection(),
        )
        .await;
        assert!(
            !matches!(answer, Ok(Ok(_))),
            "Redis took {}",
            onsale_telemetry::redact_url(&url)
        );
    }

    // What a forger would put on the topic: the show's next event, holding S1-R1-2.
    let (sequence, payload, metadata): (i64, String, String) = sqlx::query_as(
        "SELECT sequence, payload::text, metadata::text FROM events
          WHERE aggregate_type = 'show' AND aggregate_id = $1 AND event_type = 'SeatsHeld'",
    )
    .bind(&event)
    .fetch_one(&pool)
    .await
    .expect("the hold's event");
    let mut row = onsale_eventlog::LogRow {
        aggregate_type: "show".into(),
        aggregate_id: event.clone(),
        sequence: sequence + 1,
        event_type: "SeatsHeld".into(),
        event_version: "1".into(),
        payload: payload.replace("S1-R1-1", "S1-R1-2"),
        metadata,
        hash: [0; 32],
    };
    // The forger cannot read the topic (nor the log), so it cannot know the show's last hash.
    row.hash = row.chain_from(&[0; 32]);
    let forged = serde_json::to_vec(&onsale_kafka::envelope::RawEnvelope {
        op: "c",
        before: None,
        after: onsale_kafka::envelope::RawEventRow::try_from(row).expect("JSON"),
        source: onsale_kafka::Source {
            connector: "onsale-relay".into(),
            db: "onsale".into(),
            shard: 1,
            schema: "public".into(),
            table: "events".into(),
            lsn: "0/0".into(),
            commit_lsn: "0/0".into(),
            tx_id: None,
            ts_ms: chrono::Utc::now().timestamp_millis(),
            snapshot: "false".into(),
        },
        ts_ms: chrono::Utc::now().timestamp_millis(),
    })
    .expect("JSON");
    let send = |user: &'static str| {
        let producer: FutureProducer = secure
            .kafka(plain.clone(), user)
            .client()
            .set("message.timeout.ms", "10000")
            .create()
            .expect("a producer");
        let (topic, key, body) = (topic.clone(), event.clone(), forged.clone());
        async move {
            producer
                .send(
                    FutureRecord::to(&topic).key(&key).payload(&body),
                    Duration::from_secs(10),
                )
                .await
                .map(|_| ())
                .map_err(|(e, _)| e)
        }
    };
    // A process that reads the log cannot write it.
    let refused = send(NODE_USER).await;
    assert!(
        matches!(&refused, Err(e) if e.to_string().contains("uthoriz")),
        "{refused:?}"
    );
    // The relay's user cannot read it.
    let reader: BaseConsumer = secure
        .kafka(plain.clone(), RELAY_USER)
        .client()
        .set("group.id", format!("{topic}.forger"))
        .create()
        .expect("a consumer");
    let mut whole = rdkafka::TopicPartitionList::new();
    whole.add_partition_range(&topic, 0, 2);
    whole
        .set_all_offsets(rdkafka::Offset::Beginning)
        .expect("offsets");
    reader.assign(&whole).expect("assign");
    let read = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while std::time::Instant::now() < deadline {
            match reader.poll(Duration::from_millis(500)) {
                Some(Ok(_)) => return Ok(()),
                Some(Err(e)) => return Err(e),
                None => {}
            }
        }
        Ok(())
    })
    .await
    .expect("joined");
    assert!(
        matches!(&read, Err(e) if e.to_string().contains("uthoriz")),
        "the relay's user read the topic: {read:?}"
    );
    // With the relay's stolen credentials the message is on the topic, and refused.
    send(RELAY_USER).await.expect("the relay's user writes");
    let http = reqwest::Client::new();
    let metrics = format!("http://127.0.0.1:{metrics_port}");
    wait_for(
        "the forged message refused",
        Duration::from_secs(30),
        || {
            let (http, metrics) = (http.clone(), metrics.clone());
            async move { !unchained(&http, &metrics).await.is_empty() }
        },
    )
    .await;
    // The show's real next event is folded in its place, and the forged seat never held.
    let (status, hold) = api
        .hold(
            &event,
            &api.fan("fan-2"),
            json!({"seatIds": ["S1-R1-3"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{hold}");
    wait_for(
        "the next hold in the seats' history",
        Duration::from_secs(30),
        || {
            let (pool, event) = (pool.clone(), event.clone());
            async move {
                seats_in_history(&pool, &event)
                    .await
                    .contains(&"S1-R1-3".to_owned())
            }
        },
    )
    .await;
    assert_eq!(
        seats_in_history(&pool, &event).await,
        ["S1-R1-1", "S1-R1-3"]
    );
    seat_map_where(&api, &event, "both real holds on the seat map", |m| {
        held(m) == 2
    })
    .await;
    let counted = unchained(&http, &metrics).await;
    assert!(counted.iter().all(|n| *n == 1.0), "{counted:?}");
}
