//! `make bench-replay`: how fast the log folds back into shows, for a log of `shows` x
//! `events` events (200 x 50,000 by default: ten million).
//!
//! Three readings of the same rows, side by side in one run:
//! - **store**: `EventLog::replay` of every show, `concurrency` at once: what an owner does
//!   when it loads a show without a snapshot (read the show's rows, decode, apply);
//! - **topic**: the events topic read from offset 0 to its end and folded per show, as a
//!   consumer rebuilding from Kafka does (the envelope decoded, then the event);
//! - **COPY**: the same rows read raw (`COPY … TO STDOUT`), nothing decoded: the limit of
//!   what PostgreSQL hands a reader;
//! - and what an analyst waits for: `onsale export` of the whole log to Parquet.
//!
//! The log is generated once (COPY into `events`, the hash-chain trigger off for the load:
//! the chain is not what is measured) and published to the topic once (the relay's gap fill
//! on its first start); a second run on the same database reuses both.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{TimeZone, Utc};
use cqrs_es::Aggregate;
use futures::{StreamExt, TryStreamExt};
use onsale_domain::{
    AccountId, HoldId, Idempotency, IdempotencyKey, OrderId, RowLayout, SeatId, SectionLayout,
    Show, ShowEvent, ShowId, ShowInfo, VenueId, VenueLayout,
};
use onsale_eventlog::{EventLog, PgEventLog};
use onsale_kafka::{Envelope, KafkaConfig, Relay, RelayConfig};
use sqlx::PgPool;

const SECTIONS: u32 = 20;
const ROWS: u32 = 20;
const SEATS: u32 = 30;

/// One figure of the run.
struct Figure {
    name: &'static str,
    events: u64,
    secs: f64,
}

pub(crate) async fn run(
    pool: PgPool,
    brokers: String,
    shows: u32,
    events: u32,
    repeat: u32,
    concurrency: usize,
) -> anyhow::Result<()> {
    let total = generate(&pool, shows, events).await?;
    let kafka = KafkaConfig::plaintext(&brokers, "onsale.events.bench-replay", 6, 1);
    publish(&pool, &kafka, total).await?;
    for _ in 0..repeat {
        for f in [
            copy_raw(&pool).await?,
            from_store(&pool, concurrency).await?,
            from_topic(&kafka).await?,
            export(&pool).await?,
        ] {
            anyhow::ensure!(
                f.events == total,
                "{} read {} of {total} events",
                f.name,
                f.events
            );
            println!(
                "| {} | {} | {:.2} | {:.0} |",
                f.name,
                f.events,
                f.secs,
                f.events as f64 / f.secs
            );
        }
    }
    Ok(())
}

fn show_id(i: u32) -> ShowId {
    ShowId::new(uuid::Uuid::from_u128(
        0xbe7c_0000_0000_0000_0000_0000_0000_0000 + u128::from(i),
    ))
}

fn layout() -> anyhow::Result<VenueLayout> {
    Ok(VenueLayout::parse(
        (1..=SECTIONS)
            .map(|s| SectionLayout {
                section: format!("S{s}"),
                price_tier: "A".into(),
                rows: (1..=ROWS)
                    .map(|r| RowLayout {
                        row: format!("R{r}"),
                        seats: SEATS,
                    })
                    .collect(),
                general_admission: false,
            })
            .collect(),
    )?)
}

fn seat(n: u32) -> anyhow::Result<SeatId> {
    let n = n % (SECTIONS * ROWS * SEATS);
    let (s, r, k) = (n / (ROWS * SEATS), n / SEATS % ROWS, n % SEATS);
    Ok(SeatId::parse(&format!("S{}-R{}-{}", s + 1, r + 1, k + 1))?)
}

/// A show's log: scheduled, then cycles of five events (a hold released; a hold ordered and
/// paid: every order a seat of its own) until `events`.
fn show_log(i: u32, events: u32) -> anyhow::Result<Vec<ShowEvent>> {
    let id = show_id(i);
    let t0 = Utc
        .with_ymd_and_hms(2026, 12, 1, 10, 0, 0)
        .single()
        .context("time")?;
    let mut log = vec![ShowEvent::ShowScheduled {
        info: ShowInfo {
            show_id: id,
            venue_id: VenueId::new(uuid::Uuid::from_u128(1)),
            venue_name: "Bench Arena".into(),
            city: "Oslo".into(),
            name: format!("Replay {i}"),
            performer: "The Benchmarks".into(),
            starts_at: t0 + chrono::Duration::days(30),
            on_sale_at: t0,
            prices: [("A".to_string(), 5_000)].into(),
            currency: Default::default(),
            waiting_room: false,
            hold_ttl_seconds: 600,
            policy: Default::default(),
        },
        layout: layout()?,
    }];
    let mut c = 0u32;
    while log.len() < events as usize {
        let fan = AccountId::parse(&format!("fan-{}", c % 5_000))?;
        let at = t0 + chrono::Duration::seconds(i64::from(c));
        let released = HoldId::new(id);
        let kept = HoldId::new(id);
        let order = OrderId::new(id);
        let sold = seat(c)?;
        let cycle = [
            ShowEvent::SeatsHeld {
                hold_id: released,
                account_id: fan.clone(),
                seat_ids: vec![seat(c + 1)?, seat(c + 2)?],
                expires_at: at + chrono::Duration::minutes(10),
                best_available: false,
                idempotency: None,
            },
            ShowEvent::HoldReleased { hold_id: released },
            ShowEvent::SeatsHeld {
                hold_id: kept,
                account_id: fan.clone(),
                seat_ids: vec![sold.clone()],
                expires_at: at + chrono::Duration::minutes(10),
                best_available: true,
                idempotency: None,
            },
            ShowEvent::OrderPlaced {
                order_id: order,
                hold_id: kept,
                account_id: fan,
                seat_ids: vec![sold],
                total_cents: 5_000,
                placed_at: at,
                idempotency: Idempotency {
                    key: IdempotencyKey::parse(&format!("k-{c}"))?,
                    fingerprint: "bench".into(),
                },
            },
            ShowEvent::PaymentSucceeded {
                order_id: order,
                at,
            },
        ];
        log.extend(cycle.into_iter().take(events as usize - log.len()));
        c += 1;
    }
    Ok(log)
}

/// COPY's text format: backslash, tab and newline escaped.
fn copy_text(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
}

/// Writes the log unless the database holds it already; returns the number of events.
async fn generate(pool: &PgPool, shows: u32, events: u32) -> anyhow::Result<u64> {
    use cqrs_es::DomainEvent;
    let total = u64::from(shows) * u64::from(events);
    let have: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE aggregate_type = 'show'")
        .fetch_one(pool)
        .await?;
    if have as u64 == total {
        eprintln!("the log is there: {total} events");
        return Ok(total);
    }
    anyhow::ensure!(have == 0, "the database holds another log ({have} events)");
    let started = Instant::now();
    let bar = indicatif::ProgressBar::new(u64::from(shows));
    let mut conn = pool.acquire().await?;
    sqlx::query("ALTER TABLE events DISABLE TRIGGER events_chain")
        .execute(&mut *conn)
        .await
        .context("the benchmark's database is its own: the chain trigger is off for the load")?;
    for i in 0..shows {
        let id = show_id(i).to_string();
        let log = show_log(i, events)?;
        let mut copy = conn
            .copy_in_raw(
                "COPY events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata) FROM STDIN",
            )
            .await?;
        let mut buf = String::with_capacity(log.len() * 400);
        for (seq, e) in log.iter().enumerate() {
            let at = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
            buf.push_str(&format!(
                "show\t{id}\t{}\t{}\t1\t{}\t{{\"at\":\"{at}\"}}\n",
                seq + 1,
                e.event_type(),
                copy_text(&serde_json::to_string(e)?)
            ));
        }
        copy.send(buf.as_bytes()).await?;
        copy.finish().await?;
        bar.inc(1);
    }
    sqlx::query("ALTER TABLE events ENABLE TRIGGER events_chain")
        .execute(&mut *conn)
        .await?;
    sqlx::query("ANALYZE events").execute(&mut *conn).await?;
    bar.finish_and_clear();
    eprintln!(
        "generated {total} events in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(total)
}

/// Publishes the log to the topic unless the topic holds it already: a relay's first start
/// on a log makes its slot and fills the gap from the table, every event.
async fn publish(pool: &PgPool, kafka: &KafkaConfig, total: u64) -> anyhow::Result<()> {
    if topic_size(kafka).await? >= total {
        eprintln!("the topic is there");
        return Ok(());
    }
    let started = Instant::now();
    Relay::start(
        pool.clone(),
        kafka.clone(),
        RelayConfig {
            slot: "bench_replay".into(),
            batch: 5_000,
            linger_ms: 25,
            step_timeout_secs: 30,
            shard: 1,
        },
    )
    .await?;
    // The slot is not read here: dropped so it keeps no WAL.
    sqlx::query("SELECT pg_drop_replication_slot('bench_replay')")
        .execute(pool)
        .await?;
    eprintln!(
        "published {} events in {:.0} s",
        topic_size(kafka).await?,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn topic_size(kafka: &KafkaConfig) -> anyhow::Result<u64> {
    let kafka = kafka.clone();
    tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let consumer: BaseConsumer = kafka.client().set("group.id", "bench-replay").create()?;
        let md = consumer.fetch_metadata(Some(&kafka.events_topic), Duration::from_secs(10))?;
        let mut size = 0u64;
        for t in md
            .topics()
            .iter()
            .filter(|t| t.name() == kafka.events_topic)
        {
            for p in t.partitions() {
                let (low, high) = consumer.fetch_watermarks(
                    &kafka.events_topic,
                    p.id(),
                    Duration::from_secs(10),
                )?;
                size += (high - low).max(0) as u64;
            }
        }
        Ok(size)
    })
    .await?
}

const READ: &str = "SELECT aggregate_id, sequence, payload FROM events
                     WHERE aggregate_type = 'show' ORDER BY aggregate_type, aggregate_id, sequence";

async fn copy_raw(pool: &PgPool) -> anyhow::Result<Figure> {
    let started = Instant::now();
    let mut conn = pool.acquire().await?;
    let mut stream = conn
        .copy_out_raw(&format!("COPY ({READ}) TO STDOUT"))
        .await?;
    let mut rows = 0u64;
    while let Some(chunk) = stream.try_next().await? {
        rows += chunk.iter().filter(|b| **b == b'\n').count() as u64;
    }
    Ok(Figure {
        name: "COPY raw (no decoding)",
        events: rows,
        secs: started.elapsed().as_secs_f64(),
    })
}

async fn export(pool: &PgPool) -> anyhow::Result<Figure> {
    let out = std::env::temp_dir().join(format!("onsale-bench-export-{}", uuid::Uuid::new_v4()));
    let started = Instant::now();
    let manifest = onsale_export::export(
        std::slice::from_ref(pool),
        &onsale_export::Options {
            out: out.clone(),
            show: None,
            from: None,
            until: None,
            format: onsale_export::Format::Parquet,
            accounts: onsale_export::Accounts::Pseudonymized(
                b"bench-replay-pseudonym-key-32-bytes".to_vec(),
            ),
            development_key: false,
            file_rows: 1_000_000,
            progress: false,
        },
    )
    .await?;
    let secs = started.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&out)?;
    Ok(Figure {
        name: "onsale export to Parquet",
        events: manifest.events,
        secs,
    })
}

async fn from_store(pool: &PgPool, concurrency: usize) -> anyhow::Result<Figure> {
    let ids: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT aggregate_id FROM events WHERE aggregate_type = 'show'",
    )
    .fetch_all(pool)
    .await?;
    let log = PgEventLog::new(pool.clone());
    let started = Instant::now();
    let versions: Vec<i64> = futures::stream::iter(ids)
        .map(|id| {
            let log = log.clone();
            // Each show on a task of its own, as an owner loads it: the runtime's threads
            // fold `concurrency` shows at once, on as many cores.
            tokio::spawn(async move {
                let show: ShowId = id.parse()?;
                Ok::<_, anyhow::Error>(log.replay(show).await?.version)
            })
        })
        .buffer_unordered(concurrency)
        .map(|joined| joined?)
        .try_collect()
        .await?;
    Ok(Figure {
        name: "store: EventLog::replay per show",
        events: versions.iter().map(|v| *v as u64).sum(),
        secs: started.elapsed().as_secs_f64(),
    })
}

async fn from_topic(kafka: &KafkaConfig) -> anyhow::Result<Figure> {
    let kafka = kafka.clone();
    tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        use rdkafka::Message;
        let consumer: BaseConsumer = kafka
            .client()
            .set("group.id", format!("bench-replay-{}", uuid::Uuid::new_v4()))
            .set("enable.auto.commit", "false")
            .set("fetch.max.bytes", "104857600")
            .set("max.partition.fetch.bytes", "16777216")
            .create()?;
        let topic = &kafka.events_topic;
        let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
        let mut tpl = rdkafka::TopicPartitionList::new();
        let mut ends = HashMap::new();
        for t in md.topics().iter().filter(|t| t.name() == topic) {
            for p in t.partitions() {
                let (_, high) =
                    consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(10))?;
                if high > 0 {
                    ends.insert(p.id(), high);
                    tpl.add_partition_offset(topic, p.id(), rdkafka::Offset::Beginning)?;
                }
            }
        }
        let started = Instant::now();
        consumer.assign(&tpl)?;
        let mut shows: HashMap<String, (Show, i64)> = HashMap::new();
        let mut events = 0u64;
        while !ends.is_empty() {
            let Some(m) = consumer.poll(Duration::from_secs(5)) else {
                anyhow::bail!("the topic stopped short of its end");
            };
            let m = m?;
            if m.offset() + 1 >= ends.get(&m.partition()).copied().unwrap_or(0) {
                ends.remove(&m.partition());
            }
            let env: Envelope = serde_json::from_slice(m.payload().context("a body")?)?;
            let (show, version) = shows.entry(env.after.aggregate_id).or_default();
            // At least once: what was applied is dropped.
            if env.after.sequence <= *version {
                continue;
            }
            let event: ShowEvent = serde_json::from_value(env.after.payload)?;
            show.apply(event);
            *version = env.after.sequence;
            events += 1;
        }
        Ok(Figure {
            name: "topic: consumed from offset 0, folded per show",
            events,
            secs: started.elapsed().as_secs_f64(),
        })
    })
    .await?
}
