//! Apache Kafka as operators run it: the topic's configuration, and a three-broker cluster
//! (formatted, started and killed by `scripts/stack.sh`, the operator's drill) losing a
//! partition leader under load, losing every broker for 20 s, and losing the topic itself.
//! Each time: the relay resumes, the topic ends up holding every event of the store, and every
//! projection ends equal to a replay of the store with each event applied once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use onsale_kafka::{KafkaConfig, Misconfigured, Relay};
use onsale_tests::read_path::{
    projections_at_head, read_models, shared_brokers, topic_contents, topic_holds_every_event,
    KafkaCluster, ReadPath,
};
use onsale_tests::TestDb;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use serde_json::{json, Value};

fn admin(brokers: &str) -> AdminClient<DefaultClientContext> {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("an admin client")
}

#[tokio::test]
async fn the_events_topic_keeps_everything_and_a_topic_configured_otherwise_is_refused() {
    let brokers = shared_brokers().expect("brokers");
    let id = uuid::Uuid::new_v4().simple().to_string();
    let kafka = KafkaConfig::plaintext(&brokers, &format!("onsale.events.cfg{id}"), 3, 1);
    kafka
        .ensure_topic()
        .await
        .expect("onsale creates its topic");
    let described = admin(&brokers)
        .describe_configs(
            [&ResourceSpecifier::Topic(&kafka.events_topic)],
            &AdminOptions::new(),
        )
        .await
        .expect("describes")
        .remove(0)
        .expect("the topic");
    for (name, want) in [
        ("retention.ms", "-1"),
        ("retention.bytes", "-1"),
        ("cleanup.policy", "delete"),
        ("unclean.leader.election.enable", "false"),
    ] {
        assert_eq!(
            described.get(name).and_then(|e| e.value.as_deref()),
            Some(want),
            "{name}"
        );
    }
    // Checked again at every start: still fine.
    assert_eq!(kafka.ensure_topic().await.expect("the same topic"), 3);

    // A topic someone made with a week's retention and compaction would lose the history.
    let other = KafkaConfig {
        events_topic: format!("onsale.events.week{id}"),
        ..kafka.clone()
    };
    admin(&brokers)
        .create_topics(
            [
                &NewTopic::new(&other.events_topic, 3, TopicReplication::Fixed(1))
                    .set("retention.ms", "604800000")
                    .set("cleanup.policy", "compact"),
            ],
            &AdminOptions::new(),
        )
        .await
        .expect("created by hand")
        .remove(0)
        .expect("created");
    let started = Instant::now();
    let err = other
        .ensure_topic()
        .await
        .expect_err("onsale refuses the topic");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused at once, not retried"
    );
    let wrong = err
        .downcast_ref::<Misconfigured>()
        .expect("a Misconfigured");
    let text = err.to_string();
    assert!(
        text.contains("retention.ms is 604800000 (onsale needs -1)")
            && text.contains("cleanup.policy is compact (onsale needs delete)"),
        "{text}"
    );
    assert_eq!(wrong.wrong.len(), 2, "{text}");
    // The relay does not start on it either.
    let db = TestDb::new().await.expect("db");
    let pool = sqlx::PgPool::connect(&db.url).await.expect("pool");
    let relay = Relay::start(pool, other.clone(), onsale_tests::settings(&db).relay).await;
    assert!(relay.is_err_and(|e| e.is::<Misconfigured>()));
}

/// Fans holding and releasing seats until `stop`: the load keeps the relay publishing. Counts
/// the holds granted.
fn hold_load(rp: &ReadPath, event: &str, fans: usize, stop: Arc<AtomicBool>) -> Load {
    let granted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..fans {
        let (http, base, event) = (rp.app.http.clone(), rp.app.base.clone(), event.to_owned());
        let token = rp.app.fan(&format!("fan{i}"));
        let (stop, granted) = (stop.clone(), granted.clone());
        tasks.push(tokio::spawn(async move {
            let mut round = 0usize;
            while !stop.load(Ordering::SeqCst) {
                round += 1;
                let Ok(res) = http
                    .post(format!("{base}/v1/events/{event}/holds"))
                    .bearer_auth(&token)
                    .json(&json!({"quantity": 1 + (i + round) % 2}))
                    .send()
                    .await
                else {
                    continue;
                };
                if res.status() != 201 {
                    continue;
                }
                granted.fetch_add(1, Ordering::SeqCst);
                let hold: Value = res.json().await.expect("json");
                if let Some(id) = hold["holdId"].as_str() {
                    let _ = http
                        .delete(format!("{base}/v1/holds/{id}"))
                        .bearer_auth(&token)
                        .send()
                        .await;
                }
            }
        }));
    }
    Load {
        stop,
        granted,
        tasks,
    }
}

struct Load {
    stop: Arc<AtomicBool>,
    granted: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn granted(&self) -> usize {
        self.granted.load(Ordering::SeqCst)
    }

    /// Waits until `n` more holds were granted (bounded at 60 s).
    async fn until_more(&self, n: usize) {
        let target = self.granted() + n;
        onsale_tests::wait_until(
            &format!("{n} more holds granted"),
            Duration::from_secs(60),
            Duration::from_millis(20),
            || async {
                let granted = self.granted();
                if granted >= target {
                    Ok(())
                } else {
                    Err(format!("the load stalled at {granted}"))
                }
            },
        )
        .await;
    }

    async fn finish(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await.expect("a fan finishes");
        }
        self.granted.load(Ordering::SeqCst)
    }
}

/// The whole read path on `cluster`, the topic replicated three times.
async fn read_path_on(cluster: &KafkaCluster) -> (TestDb, ReadPath) {
    let db = TestDb::new().await.expect("db");
    let rp = ReadPath::spawn_parts(
        &db,
        &cluster.bootstrap(),
        |s| {
            s.kafka.replication = 3;
            s.kafka.partitions = 6;
        },
        &[],
    )
    .await
    .expect("read path");
    (db, rp)
}

/// The whole read path on `cluster` with a show on sale and `fans` holding and releasing,
/// returned once `granted` holds went through and the relay published.
async fn under_load(
    cluster: &KafkaCluster,
    fans: usize,
    granted: usize,
) -> (TestDb, ReadPath, String, Load) {
    let (db, rp) = read_path_on(cluster).await;
    let event = rp.app.on_sale_event(2, 10, 10, None).await;
    let load = hold_load(&rp, &event, fans, Arc::new(AtomicBool::new(false)));
    load.until_more(granted).await;
    first_published(&rp, &cluster.bootstrap(), &event).await;
    (db, rp, event, load)
}

/// The end state every scenario must reach: the topic holds every event of the store, and the
/// projections stand at the head, each event applied once, equal to a replay.
async fn converges(rp: &ReadPath, brokers: &str, event: &str) {
    let head: i64 = sqlx::query_scalar("SELECT max(sequence) FROM events WHERE aggregate_id = $1")
        .bind(event)
        .fetch_one(&rp.pool)
        .await
        .expect("head");
    // The relay publishes everything it committed (it may repeat some: at least once).
    topic_holds_every_event(brokers, &rp.kafka.events_topic, event, head).await;
    projections_at_head(&rp.pool)
        .await
        .expect("the projections catch up");
    rp.applied_once(event, head).await;
    rp.seat_map_matches_replay(event).await;
}

/// The partition (and its leader) the show's events go to.
async fn show_partition_leader(brokers: &str, topic: &str) -> (i32, i32) {
    let (brokers, topic) = (brokers.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let c: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .create()
            .expect("client");
        let md = c
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .expect("metadata");
        // One show on the topic: the partition that has messages is its partition.
        for p in md.topics()[0].partitions() {
            let (_, high) = c
                .fetch_watermarks(&topic, p.id(), Duration::from_secs(10))
                .expect("watermarks");
            if high > 0 {
                return (p.id(), p.leader());
            }
        }
        panic!("nothing on the topic yet")
    })
    .await
    .expect("metadata task")
}

/// Waits until the relay has put something on the topic.
async fn first_published(rp: &ReadPath, brokers: &str, event: &str) {
    onsale_tests::wait_until(
        "something published",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            // A read may fail while the topic is being created: retried.
            let seen = topic_contents(brokers, &rp.kafka.events_topic).await;
            if seen
                .as_ref()
                .is_ok_and(|seen| seen.keys().any(|(show, _)| show == event))
            {
                return Ok(());
            }
            Err(format!(
                "{:?}",
                seen.map(|s| s.len()).map_err(|e| format!("{e:#}"))
            ))
        },
    )
    .await;
}

async fn leader_killed_under_load(cluster: &KafkaCluster) {
    let (_db, rp, event, load) = under_load(cluster, 16, 200).await;
    let brokers = cluster.bootstrap();
    let (partition, leader) = show_partition_leader(&brokers, &rp.kafka.events_topic).await;
    assert!(leader >= 1, "partition {partition} has a leader");
    cluster
        .kill(leader as u16)
        .await
        .expect("SIGKILL of the leader");
    // The relay keeps publishing through the new leader while fans keep holding.
    load.until_more(500).await;
    let granted = load.finish().await;
    converges(&rp, &brokers, &event).await;
    let (_, new_leader) = show_partition_leader(&brokers, &rp.kafka.events_topic).await;
    assert_ne!(new_leader, leader, "another broker leads the partition");
    cluster
        .start_broker(leader as u16)
        .await
        .expect("the killed broker comes back");
    assert!(granted >= 700);
    rp.stop().await;
}

async fn every_broker_down_for_20_s(cluster: &KafkaCluster) {
    let (_db, rp, event, load) = under_load(cluster, 8, 100).await;
    let brokers = cluster.bootstrap();
    for i in 1..=cluster.brokers {
        cluster.kill(i).await.expect("SIGKILL");
    }
    let (before, outage_ends) = (load.granted(), Instant::now() + Duration::from_secs(20));
    // The write path does not depend on the broker: fans keep getting holds (waited for, with
    // a bound), and the brokers stay down for the scenario's 20 s in all.
    load.until_more(100).await;
    tokio::time::sleep_until(outage_ends.into()).await;
    let during = load.granted() - before;
    assert!(
        during >= 100,
        "only {during} holds were granted while the brokers were down"
    );
    // Nothing acknowledged them to the relay, so its slot stands behind what was committed:
    // had it advanced anyway, those events would be a hole in the topic that `converges` finds.
    let unpublished: i64 = sqlx::query_scalar(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
           FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(&rp.relay_config.slot)
    .fetch_one(&rp.pool)
    .await
    .expect("the slot");
    assert!(unpublished > 0, "the slot moved while no broker was up");
    cluster.start_all().await.expect("the brokers come back");
    load.until_more(100).await;
    load.finish().await;
    converges(&rp, &brokers, &event).await;
    rp.stop().await;
}

async fn topic_deleted_and_recreated(cluster: &KafkaCluster) {
    let (_db, mut rp, event, load) = under_load(cluster, 8, 100).await;
    let brokers = cluster.bootstrap();
    admin(&brokers)
        .delete_topics(&[&rp.kafka.events_topic], &AdminOptions::new())
        .await
        .expect("deleted")
        .remove(0)
        .expect("the topic is deleted");
    // Fans keep holding; the relay re-creates the topic and publishes what is new.
    load.until_more(300).await;
    load.finish().await;
    // What went with the old topic comes back from the table.
    let relay = Relay::start(rp.pool.clone(), rp.kafka.clone(), rp.relay_config.clone())
        .await
        .expect("a relay for the backfill");
    let backfilled = relay.backfill(None).await.expect("the backfill");
    assert!(backfilled > 0);
    converges(&rp, &brokers, &event).await;
    // A rebuild from zero ends equal.
    let before = read_models(&rp.pool).await;
    rp.rebuild_projections().await.expect("a rebuild");
    converges(&rp, &brokers, &event).await;
    assert_eq!(read_models(&rp.pool).await, before);
    rp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_broker_cluster_loses_a_leader_every_broker_and_the_topic_and_nothing_is_lost() {
    let started = Instant::now();
    let cluster = KafkaCluster::start(3).await.expect("three brokers");
    eprintln!("cluster up after {:?}", started.elapsed());
    leader_killed_under_load(&cluster).await;
    eprintln!("leader killed: done after {:?}", started.elapsed());
    every_broker_down_for_20_s(&cluster).await;
    eprintln!("every broker down: done after {:?}", started.elapsed());
    topic_deleted_and_recreated(&cluster).await;
    eprintln!("topic deleted: done after {:?}", started.elapsed());
}

/// Two projection processes share the partitions through the consumer groups (the second
/// joins while fans hold on four shows, so both fill shows from the table at start and the
/// group moves partitions under load): every show ends with each event applied once by each
/// projection, equal to a replay.
/// Two processes of the relay and of the projections (`make up NODES=3` runs them so): one
/// relay publishes while the other stands by; the active relay is killed mid-load and the
/// standby takes over; a projection process is killed and the other takes its partitions.
/// Every event reaches the topic and is applied once, and the seat maps match a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_relay_and_a_second_projection_process_take_over_from_killed_ones() {
    let db = TestDb::new().await.expect("db");
    let brokers = shared_brokers().expect("brokers");
    let mut rp = ReadPath::spawn_parts(&db, &brokers, |s| s.kafka.partitions = 6, &[])
        .await
        .expect("read path");
    let mut events = Vec::new();
    let mut loads = Vec::new();
    for _ in 0..4 {
        let event = rp.app.on_sale_event(1, 10, 10, None).await;
        loads.push(hold_load(&rp, &event, 4, Arc::new(AtomicBool::new(false))));
        events.push(event);
    }
    for load in &loads {
        load.until_more(50).await;
    }
    let mut settings = onsale_tests::settings(&db);
    settings.kafka.brokers = brokers.clone();
    settings.kafka.partitions = 6;
    let second = onsale_server::Server::build(
        settings,
        &[onsale_server::Part::Relay, onsale_server::Part::Projections],
    )
    .await
    .expect("a second relay and projection process");
    // The backend holding the relay's lock (one at most: an advisory lock is exclusive).
    let holder = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND ((classid::bigint << 32) | objid::bigint) = $1",
        )
        .bind(onsale_kafka::leader::keys::RELAY)
        .fetch_optional(&pool)
        .await
        .expect("locks")
    };
    let first = holder(rp.pool.clone())
        .await
        .expect("one relay holds the lock");
    for load in &loads {
        load.until_more(100).await;
    }
    // The active relay (the first one started) dies; the standby takes the lock (another
    // backend: the dead relay's lock went with its connection) and publishes from here on.
    rp.kill_relay();
    onsale_tests::wait_for(
        "the standby takes the relay's lock",
        Duration::from_secs(15),
        || {
            let pool = rp.pool.clone();
            async move { holder(pool).await.is_some_and(|pid| pid != first) }
        },
    )
    .await;
    for load in &loads {
        load.until_more(100).await;
    }
    // The second process's projections die without leaving the group: after the session
    // timeout their partitions go to the first process's.
    second.kill(onsale_server::Part::Projections);
    for load in &loads {
        load.until_more(100).await;
    }
    for load in loads {
        load.finish().await;
    }
    projections_at_head(&rp.pool)
        .await
        .expect("the projections catch up");
    // What the relays left, for the captured output if the topic falls short below: the
    // slot's position against the log's end, who holds the relay's lock, what the relays ran
    // last, and every session busy or in a transaction.
    let state: Vec<(String, String)> = sqlx::query_as(
        "SELECT 'slot', concat_ws(' ', slot_name, 'active', active, 'pid', active_pid,
                 'confirmed', confirmed_flush_lsn, 'restart', restart_lsn,
                 'wal end', pg_current_wal_flush_lsn())
           FROM pg_replication_slots WHERE database = current_database()
         UNION ALL
         SELECT 'lock', concat_ws(' ', l.pid, a.state, a.wait_event, left(a.query, 120))
           FROM pg_locks l JOIN pg_stat_activity a USING (pid)
          WHERE l.locktype = 'advisory' AND l.granted
         UNION ALL
         SELECT 'relay', concat_ws(' ', pid, state, wait_event, left(query, 120))
           FROM pg_stat_activity WHERE query LIKE '%logical_slot%' AND pid <> pg_backend_pid()
         UNION ALL
         SELECT 'busy', concat_ws(' ', pid, state, wait_event_type, wait_event, 'xid', backend_xid,
                 'since', xact_start, left(query, 100))
           FROM pg_stat_activity
          WHERE datname = current_database() AND state <> 'idle' AND pid <> pg_backend_pid()",
    )
    .fetch_all(&rp.pool)
    .await
    .expect("the relay's state");
    eprintln!("after the load: {state:#?}");
    for event in &events {
        let head: i64 =
            sqlx::query_scalar("SELECT max(sequence) FROM events WHERE aggregate_id = $1")
                .bind(event)
                .fetch_one(&rp.pool)
                .await
                .expect("head");
        topic_holds_every_event(&brokers, &rp.kafka.events_topic, event, head).await;
        rp.applied_once(event, head).await;
        rp.seat_map_matches_replay(event).await;
    }
    second.shutdown().await.expect("the second process stops");
    rp.stop().await;
}
