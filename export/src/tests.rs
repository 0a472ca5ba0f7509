//! The export's rules without a database: typing, pseudonyms, bounds, and the files.

use std::collections::BTreeMap;

use chrono::{Duration, TimeZone, Utc};
use onsale_domain::{
    AccountId, HoldId, Idempotency, IdempotencyKey, OrderId, RowLayout, SeatId, SectionLayout,
    ShowEvent, ShowId, ShowInfo, VenueId, VenueLayout,
};
use proptest::prelude::*;

use super::*;

const KEY: &[u8] = b"a-test-pseudonym-key-of-32-bytes!!";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0)
        .single()
        .expect("valid time")
}

fn show() -> ShowId {
    ShowId::new(uuid::Uuid::from_u128(7))
}

fn acct(a: &str) -> AccountId {
    AccountId::parse(a).expect("account")
}

fn seats(s: &[&str]) -> Vec<SeatId> {
    s.iter().map(|s| SeatId::parse(s).expect("seat")).collect()
}

fn stored(sequence: i64, event: &ShowEvent) -> Stored {
    use cqrs_es::DomainEvent;
    Stored {
        show_id: show().to_string(),
        sequence,
        event_type: event.event_type(),
        event_version: "1".into(),
        committed_at: t0() + Duration::seconds(sequence),
        xid: 1000 + sequence,
        payload: serde_json::to_string(event).expect("json"),
    }
}

/// A show's life: scheduled, a hold released, a hold ordered and paid, the order cancelled
/// by an admin and refunded.
fn life() -> Vec<ShowEvent> {
    let (h1, h2) = (HoldId::new(show()), HoldId::new(show()));
    let order = OrderId::new(show());
    let layout = VenueLayout::parse(vec![SectionLayout {
        section: "A".into(),
        price_tier: "P".into(),
        rows: vec![RowLayout {
            row: "1".into(),
            seats: 4,
        }],
        general_admission: false,
    }])
    .expect("layout");
    vec![
        ShowEvent::ShowScheduled {
            info: ShowInfo {
                show_id: show(),
                venue_id: VenueId::new(uuid::Uuid::from_u128(9)),
                venue_name: "Hall".into(),
                city: "Oslo".into(),
                name: "Night".into(),
                performer: "Band".into(),
                starts_at: t0() + Duration::days(30),
                on_sale_at: t0(),
                prices: BTreeMap::from([("P".to_string(), 12_000)]),
                currency: Default::default(),
                waiting_room: true,
                hold_ttl_seconds: 600,
                policy: Default::default(),
            },
            layout,
        },
        ShowEvent::SeatsHeld {
            hold_id: h1,
            account_id: acct("fan-1"),
            seat_ids: seats(&["A-1-1"]),
            expires_at: t0() + Duration::minutes(10),
            best_available: false,
            idempotency: None,
        },
        ShowEvent::HoldReleased { hold_id: h1 },
        ShowEvent::SeatsHeld {
            hold_id: h2,
            account_id: acct("fan-2"),
            seat_ids: seats(&["A-1-2", "A-1-3"]),
            expires_at: t0() + Duration::minutes(10),
            best_available: true,
            idempotency: None,
        },
        ShowEvent::OrderPlaced {
            order_id: order,
            hold_id: h2,
            account_id: acct("fan-2"),
            seat_ids: seats(&["A-1-2", "A-1-3"]),
            total_cents: 24_000,
            placed_at: t0(),
            idempotency: Idempotency {
                key: IdempotencyKey::parse("k-1").expect("key"),
                fingerprint: "f".into(),
            },
        },
        ShowEvent::PaymentSucceeded {
            order_id: order,
            at: t0(),
        },
        ShowEvent::OrderCancelled {
            order_id: order,
            seat_ids: seats(&["A-1-2", "A-1-3"]),
            by: acct("admin-1"),
            at: t0(),
        },
        ShowEvent::OrderRefunded {
            order_id: order,
            refund_id: "re_1".into(),
            at: t0(),
        },
    ]
}

fn rows(accounts: Accounts) -> Vec<Row> {
    let mut typer = Typer::new(accounts);
    life()
        .iter()
        .enumerate()
        .map(|(i, e)| typer.row(stored(i as i64 + 1, e)).expect("row"))
        .collect()
}

#[test]
fn every_field_of_the_payload_has_its_column_and_a_release_names_who_held() {
    let r = rows(Accounts::Raw);
    assert_eq!(r[0].event_type, "ShowScheduled");
    assert_eq!(r[0].city.as_deref(), Some("Oslo"));
    assert_eq!(r[0].prices.as_deref(), Some(r#"{"P":12000}"#));
    assert_eq!(r[0].actor.as_deref(), Some("onsale:catalog"));
    assert_eq!(r[1].seat_ids, Some(vec!["A-1-1".to_string()]));
    assert_eq!(r[1].best_available, Some(false));
    assert_eq!(r[2].event_type, "HoldReleased");
    assert_eq!(r[2].actor.as_deref(), Some("fan-1"));
    assert_eq!(r[2].account_id.as_deref(), Some("fan-1"));
    assert_eq!(r[4].total_cents, Some(24_000));
    assert_eq!(r[4].hold_id, r[3].hold_id);
    assert_eq!(r[5].actor.as_deref(), Some("processor"));
    assert_eq!(r[5].order_id, r[4].order_id);
    assert_eq!(r[6].actor.as_deref(), Some("admin-1"));
    assert_eq!(r[7].refund_id.as_deref(), Some("re_1"));
    assert_eq!(r[7].xid, 1008);
    assert_eq!(r[7].committed_at, t0() + Duration::seconds(8));
}

#[test]
fn account_ids_are_pseudonymized_by_a_keyed_hash_unless_asked_otherwise() {
    let keyed = rows(Accounts::Pseudonymized(KEY.to_vec()));
    let text = serde_json::to_string(&keyed).expect("json");
    for who in ["fan-1", "fan-2", "admin-1"] {
        assert!(!text.contains(who), "{who} left the export in clear");
    }
    // Stable under one key (a fan's hold and order join), different under another.
    assert_eq!(keyed[3].account_id, keyed[4].account_id);
    assert!(keyed[3]
        .account_id
        .as_deref()
        .is_some_and(|a| a.starts_with("anon-") && a.len() == 5 + 32));
    let other = rows(Accounts::Pseudonymized(
        b"another-key-of-at-least-32-bytes!!".to_vec(),
    ));
    assert_ne!(keyed[3].account_id, other[3].account_id);
    assert_eq!(keyed[2].actor, keyed[1].account_id);
}

#[test]
fn a_card_token_in_an_old_payload_is_dropped() {
    let order = &life()[4];
    let mut payload: serde_json::Value = serde_json::to_value(order).expect("json");
    payload["OrderPlaced"]["payment_token"] = "tok_secret_4242".into();
    let mut s = stored(5, order);
    s.payload = payload.to_string();
    let row = Typer::new(Accounts::Raw).row(s).expect("row");
    assert!(!serde_json::to_string(&row)
        .expect("json")
        .contains("tok_secret"));
}

#[test]
fn bounds_are_sequences_from_one_or_instants() {
    assert_eq!("12".parse::<Bound>(), Ok(Bound::Sequence(12)));
    assert_eq!(
        "2026-12-01T10:00:00Z".parse::<Bound>(),
        Ok(Bound::Time(t0()))
    );
    assert!("0".parse::<Bound>().is_err());
    assert!("yesterday".parse::<Bound>().is_err());
    assert_eq!("ndjson".parse::<Format>(), Ok(Format::Ndjson));
    assert!("csv".parse::<Format>().is_err());
}

fn write_all(
    format: Format,
    file_rows: usize,
    rows: &[Row],
) -> (tempfile::TempDir, Vec<FileEntry>) {
    let dir = tempfile::tempdir().expect("dir");
    let mut files = Files {
        dir: dir.path().to_owned(),
        format,
        file_rows,
        open: None,
        done: Vec::new(),
    };
    for chunk in rows.chunks(3) {
        files.write(chunk).expect("write");
    }
    files.close().expect("close");
    (dir, files.done)
}

fn read_parquet(path: &Path) -> Vec<(String, i64, Option<i64>, usize)> {
    use arrow_array::{Array, Int64Array, ListArray, StringArray};
    let file = File::open(path).expect("open");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("reader");
    let mut out = Vec::new();
    for batch in reader {
        let b = batch.expect("batch");
        assert_eq!(b.schema(), row::schema());
        let col = |n: &str| b.column_by_name(n).expect("column").clone();
        let (types, seqs, totals, seats) = (
            col("event_type"),
            col("sequence"),
            col("total_cents"),
            col("seat_ids"),
        );
        let types = types.as_any().downcast_ref::<StringArray>().expect("text");
        let seqs = seqs.as_any().downcast_ref::<Int64Array>().expect("int");
        let totals = totals.as_any().downcast_ref::<Int64Array>().expect("int");
        let seats = seats.as_any().downcast_ref::<ListArray>().expect("list");
        for i in 0..b.num_rows() {
            out.push((
                types.value(i).to_owned(),
                seqs.value(i),
                totals.is_valid(i).then(|| totals.value(i)),
                if seats.is_valid(i) {
                    seats.value(i).len()
                } else {
                    0
                },
            ));
        }
    }
    out
}

#[test]
fn parquet_files_read_back_typed() {
    let r = rows(Accounts::Raw);
    let (dir, files) = write_all(Format::Parquet, 5, &r);
    assert_eq!(files.iter().map(|f| f.rows).collect::<Vec<_>>(), [5, 3]);
    let back: Vec<_> = files
        .iter()
        .flat_map(|f| read_parquet(&dir.path().join(&f.name)))
        .collect();
    assert_eq!(back.len(), r.len());
    assert_eq!(back[4], ("OrderPlaced".to_string(), 5, Some(24_000), 2));
    assert_eq!(back[0].2, None);
    assert!(std::fs::read_dir(dir.path()).expect("dir").all(|e| !e
        .expect("entry")
        .file_name()
        .to_string_lossy()
        .ends_with(".partial")));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Whatever the file size, every row is written once, in order, no file holds more than
    /// its share, and each NDJSON line is one row.
    #[test]
    fn files_roll_over_without_losing_or_repeating_a_row(n in 0usize..40, file_rows in 1usize..12) {
        let base = rows(Accounts::Raw);
        let all: Vec<Row> = (0..n).map(|i| Row { sequence: i as i64 + 1, ..base[i % base.len()].clone() }).collect();
        let (dir, files) = write_all(Format::Ndjson, file_rows, &all);
        prop_assert!(files.iter().all(|f| f.rows as usize <= file_rows && f.rows > 0));
        let mut seqs = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(dir.path().join(&f.name)).expect("read");
            prop_assert_eq!(text.lines().count() as u64, f.rows);
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
                seqs.push(v["sequence"].as_i64().expect("sequence"));
            }
        }
        prop_assert_eq!(seqs, (1..=n as i64).collect::<Vec<_>>());
    }
}
