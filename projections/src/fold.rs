//! One event of the log as a projection sees it, and the show state it folds into.

use chrono::{DateTime, Utc};
use cqrs_es::Aggregate;
use onsale_domain::show::Seat;
use onsale_domain::transitions::SeatStatus;
use onsale_domain::{Show, ShowEvent, ShowId};
use std::borrow::Cow;

use onsale_eventlog::{chain, LogRow};
use onsale_kafka::envelope::parse_lsn;
use serde::Deserialize;
use serde_json::value::RawValue;

/// An event of a show, from the topic or from the events table.
#[derive(Debug, Clone)]
pub struct LogEvent {
    pub show_id: ShowId,
    pub sequence: i64,
    pub event: ShowEvent,
    /// When the command side decided it (the row's metadata), else its commit time.
    pub at: DateTime<Utc>,
    /// The commit LSN, when it came through the relay (a backfill or the table has none).
    pub commit_lsn: Option<u64>,
    /// The commit time, when it came through the relay: lag is measured from it.
    pub committed_at: Option<DateTime<Utc>>,
    /// The sampled trace it belongs to (a W3C `traceparent`): the relay's span from the
    /// message's header (or the append's, from the row's metadata, for an event read from the
    /// table), then the projection's span it is folded under (docs/adr/019).
    pub trace: Option<String>,
    /// Its link in the show's hash chain (migration 0009).
    pub hash: [u8; 32],
    /// For an event from the topic, what it claims chains from the fold's head and to what:
    /// the row's bytes (see [`onsale_eventlog::chain::row_bytes`]) and its hash, or for a
    /// scrubbed payload the scrubbed row's bytes and its hash, and its proof. It is folded
    /// only if that holds ([`LogEvent::chains_from`]). `None` for a row read from the table,
    /// which is the truth.
    claimed: Option<(Vec<u8>, [u8; 32])>,
}

/// What a projection reads of a message on the events topic (an [`onsale_kafka::Envelope`]),
/// borrowed from its bytes: the payload goes from its text straight into a [`ShowEvent`], with
/// no tree of it built in between.
#[derive(Deserialize)]
struct EnvelopeView<'a> {
    #[serde(borrow)]
    op: Cow<'a, str>,
    #[serde(borrow)]
    after: RowView<'a>,
    #[serde(borrow)]
    source: SourceView<'a>,
}

#[derive(Deserialize)]
struct RowView<'a> {
    #[serde(borrow)]
    aggregate_type: Cow<'a, str>,
    #[serde(borrow)]
    aggregate_id: Cow<'a, str>,
    sequence: i64,
    #[serde(borrow)]
    event_type: Cow<'a, str>,
    #[serde(borrow)]
    event_version: Cow<'a, str>,
    #[serde(borrow)]
    payload: &'a RawValue,
    #[serde(borrow)]
    metadata: &'a RawValue,
    #[serde(default, borrow)]
    hash: Option<Cow<'a, str>>,
    /// A scrubbed payload's proof (see `onsale_kafka::envelope::RawEventRow::scrub`).
    #[serde(default, borrow)]
    scrubbed: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct SourceView<'a> {
    #[serde(rename = "commitLsn", borrow)]
    commit_lsn: Cow<'a, str>,
    ts_ms: i64,
}

/// What a projection reads of an event's metadata.
#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(default, borrow)]
    at: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    traceparent: Option<Cow<'a, str>>,
}

impl Metadata<'_> {
    fn at(&self) -> Option<DateTime<Utc>> {
        self.at.as_deref()?.parse().ok()
    }
}

impl LogEvent {
    /// A message of the events topic; `None` for rows of other aggregates (venues).
    pub fn from_message(body: &[u8]) -> anyhow::Result<Option<Self>> {
        let e: EnvelopeView<'_> = serde_json::from_slice(body)?;
        if e.after.aggregate_type != Show::TYPE {
            return Ok(None);
        }
        let event: ShowEvent = serde_json::from_str(e.after.payload.get())?;
        let meta: Metadata<'_> = serde_json::from_str(e.after.metadata.get())?;
        let committed_at = DateTime::from_timestamp_millis(e.source.ts_ms);
        let live = e.op == "c";
        let row = &e.after;
        // A message without a hash, or with one that is not 32 bytes, claims a hash no row
        // has: it never chains.
        let hex32 = |h: Option<&str>| {
            h.and_then(|h| hex::decode(h).ok())
                .and_then(|h| <[u8; 32]>::try_from(h).ok())
        };
        let hash = hex32(row.hash.as_deref()).unwrap_or_default();
        let mut bytes = chain::row_bytes(
            &row.aggregate_type,
            &row.aggregate_id,
            row.sequence,
            &row.event_type,
            &row.event_version,
            row.payload.get(),
            row.metadata.get(),
        );
        let expect = match &row.scrubbed {
            None => hash,
            Some(proof) => {
                bytes.extend_from_slice(&hash);
                hex32(Some(proof)).unwrap_or_default()
            }
        };
        Ok(Some(Self {
            show_id: e.after.aggregate_id.parse()?,
            sequence: e.after.sequence,
            event,
            at: meta.at().or(committed_at).unwrap_or_else(Utc::now),
            commit_lsn: live.then(|| parse_lsn(&e.source.commit_lsn)).flatten(),
            committed_at: live.then_some(committed_at).flatten(),
            trace: None,
            hash,
            claimed: Some((bytes, expect)),
        }))
    }

    /// Whether it is the event after one whose hash is `head`: always for a row of the table;
    /// for a message, if its hash is that of its row after `head`. A message that does not
    /// chain was not written by the log (a forgery, or a broken relay): it is not folded, and
    /// the table's row of that sequence is (issue 53 item 7).
    pub fn chains_from(&self, head: &[u8; 32]) -> bool {
        self.claimed
            .as_ref()
            .is_none_or(|(row, expect)| chain::link(head, row) == *expect)
    }

    /// A row read from the events table.
    pub fn from_row(show_id: ShowId, row: &LogRow) -> anyhow::Result<Self> {
        let meta: Metadata<'_> = serde_json::from_str(&row.metadata)?;
        Ok(Self {
            show_id,
            sequence: row.sequence,
            event: serde_json::from_str(&row.payload)?,
            at: meta.at().unwrap_or_else(Utc::now),
            commit_lsn: None,
            committed_at: None,
            // Read from the table, not published: it continues the append's span.
            trace: onsale_telemetry::trace::enabled()
                .then(|| meta.traceparent.map(Cow::into_owned))
                .flatten(),
            hash: row.hash,
            claimed: None,
        })
    }
}

/// What a projection is told about one applied event: the state after it, and each seat it
/// touched with that seat's status before.
#[derive(Debug)]
pub struct EventCtx<'a> {
    pub log: &'a LogEvent,
    pub after: &'a Show,
    pub touched: &'a [(u32, SeatStatus)],
}

/// Applies `log` to `show` and calls `f` with the context: the one place events are folded.
pub fn apply<R>(show: &mut Show, log: &LogEvent, f: impl FnOnce(&EventCtx<'_>) -> R) -> R {
    let touched: Vec<(u32, SeatStatus)> = show
        .seats_touched_by(&log.event)
        .into_iter()
        .map(|i| {
            (
                i,
                show.seat_at(i)
                    .map_or(SeatStatus::Available, |(_, s)| s.status()),
            )
        })
        .collect();
    show.apply(log.event.clone());
    f(&EventCtx {
        log,
        after: show,
        touched: &touched,
    })
}

/// The state of seat `i` of `show` after the event.
pub fn status_at(show: &Show, i: u32) -> SeatStatus {
    show.seat_at(i)
        .map_or(SeatStatus::Available, |(_, s): (&str, &Seat)| s.status())
}

#[cfg(test)]
mod tests {
    use super::*;
    use onsale_domain::HoldId;
    use onsale_eventlog::LogRow;
    use onsale_kafka::envelope::{RawEnvelope, RawEventRow};
    use onsale_kafka::{Envelope, Source};

    fn source(ts_ms: i64) -> Source {
        Source {
            connector: "onsale-relay".into(),
            db: "onsale".into(),
            shard: 1,
            schema: "public".into(),
            table: "events".into(),
            lsn: "0/16B3748".into(),
            commit_lsn: "0/16B3800".into(),
            tx_id: Some(9),
            ts_ms,
            snapshot: "false".into(),
        }
    }

    /// The hash of the event before the relayed one.
    const PREV: [u8; 32] = [3; 32];

    fn relayed(aggregate_type: &str, id: String, event: &ShowEvent, metadata: &str) -> Vec<u8> {
        let mut row = LogRow {
            aggregate_type: aggregate_type.into(),
            aggregate_id: id,
            sequence: 12,
            event_type: "HoldExpired".into(),
            event_version: "1".into(),
            payload: serde_json::to_string(event).expect("JSON"),
            metadata: metadata.into(),
            hash: [0; 32],
        };
        row.hash = row.chain_from(&PREV);
        serde_json::to_vec(&RawEnvelope {
            op: "c",
            before: None,
            after: RawEventRow::try_from(row).expect("JSON"),
            source: source(1_764_896_400_000),
            ts_ms: 1_764_896_400_005,
        })
        .expect("JSON")
    }

    #[test]
    fn a_message_reads_as_the_event_the_log_holds() {
        let show = ShowId::random();
        let event = ShowEvent::HoldExpired {
            hold_id: HoldId::new(show),
        };
        let body = relayed(
            Show::TYPE,
            show.to_string(),
            &event,
            r#"{"at":"2026-12-05T01:00:00.250Z","traceparent":"00-ab-cd-01"}"#,
        );
        let log = LogEvent::from_message(&body)
            .expect("parses")
            .expect("a show's");
        assert_eq!((log.show_id, log.sequence), (show, 12));
        assert_eq!(
            serde_json::to_value(&log.event).expect("JSON"),
            serde_json::to_value(&event).expect("JSON")
        );
        assert_eq!(log.at.to_rfc3339(), "2026-12-05T01:00:00.250+00:00");
        assert_eq!(log.commit_lsn, parse_lsn("0/16B3800"));
        assert_eq!(
            log.committed_at,
            DateTime::from_timestamp_millis(1_764_896_400_000)
        );

        // The same message as a consumer's parsed Envelope prints it (keys sorted, a tree):
        // read the same.
        let envelope: Envelope = serde_json::from_slice(&body).expect("an Envelope");
        let again = LogEvent::from_message(&serde_json::to_vec(&envelope).expect("JSON"))
            .expect("parses")
            .expect("a show's");
        assert_eq!(
            (again.show_id, again.sequence, again.at),
            (show, 12, log.at)
        );

        // A backfill (`op: "r"`) carries no LSN; a row without `at` takes the commit time.
        let mut backfill: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        backfill["op"] = "r".into();
        backfill["after"]["metadata"] = serde_json::json!({});
        let log = LogEvent::from_message(&serde_json::to_vec(&backfill).expect("JSON"))
            .expect("parses")
            .expect("a show's");
        assert_eq!((log.commit_lsn, log.committed_at), (None, None));
        assert_eq!(
            Some(log.at),
            DateTime::from_timestamp_millis(1_764_896_400_000)
        );

        // Another aggregate's row is not a show's event; a broken message is an error.
        let venue = relayed("venue", show.to_string(), &event, "{}");
        assert!(LogEvent::from_message(&venue).expect("parses").is_none());
        assert!(LogEvent::from_message(b"{\"op\":\"c\"}").is_err());
        let mut bad: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        bad["after"]["payload"] = serde_json::json!({"NoSuchEvent": {}});
        assert!(LogEvent::from_message(&serde_json::to_vec(&bad).expect("JSON")).is_err());
    }

    #[test]
    fn a_message_is_folded_only_if_it_chains_from_the_fold() {
        let show = ShowId::random();
        let event = ShowEvent::HoldExpired {
            hold_id: HoldId::new(show),
        };
        let body = relayed(
            Show::TYPE,
            show.to_string(),
            &event,
            r#"{"at":"2026-12-05T01:00:00Z"}"#,
        );
        let parse = |v: &serde_json::Value| {
            LogEvent::from_message(&serde_json::to_vec(v).expect("JSON"))
                .expect("parses")
                .expect("a show's")
        };
        let message: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        let log = parse(&message);
        assert!(log.chains_from(&PREV));
        // After another event than the one it was written after (a fork, a replayed stream).
        assert!(!log.chains_from(&[4; 32]));
        // Its hash kept, its content changed: a forger who cannot compute the chain.
        let mut forged = message.clone();
        forged["after"]["payload"] =
            serde_json::json!({"HoldExpired": {"hold_id": HoldId::new(show)}});
        assert!(!parse(&forged).chains_from(&PREV));
        let mut forged = message.clone();
        forged["after"]["sequence"] = 13.into();
        assert!(!parse(&forged).chains_from(&PREV));
        // No hash, or not one.
        for hash in [serde_json::Value::Null, "ab".into(), "zz".repeat(32).into()] {
            let mut unhashed = message.clone();
            unhashed["after"]["hash"] = hash.clone();
            assert!(!parse(&unhashed).chains_from(&PREV), "{hash}");
        }
        // The table is the truth: its rows are not checked again.
        let row = LogRow {
            aggregate_type: Show::TYPE.into(),
            aggregate_id: show.to_string(),
            sequence: 12,
            event_type: "HoldExpired".into(),
            event_version: "1".into(),
            payload: serde_json::to_string(&event).expect("JSON"),
            metadata: "{}".into(),
            hash: [9; 32],
        };
        let from_table = LogEvent::from_row(show, &row).expect("a row");
        assert!(from_table.chains_from(&[4; 32]));
        assert_eq!(from_table.hash, [9; 32]);
    }

    #[test]
    fn a_scrubbed_message_chains_by_its_proof_and_hands_on_the_logs_hash() {
        let show = ShowId::random();
        let event = ShowEvent::HoldExpired {
            hold_id: HoldId::new(show),
        };
        let mut row = LogRow {
            aggregate_type: Show::TYPE.into(),
            aggregate_id: show.to_string(),
            sequence: 12,
            event_type: "HoldExpired".into(),
            event_version: "1".into(),
            // As stored, with something the relay takes out on its way.
            payload: serde_json::to_string(&event)
                .expect("JSON")
                .replacen('{', r#"{"payment_token":"tok_4242","#, 2)
                .replacen(r#"{"payment_token":"tok_4242","#, "{", 1),
            metadata: "{}".into(),
            hash: [0; 32],
        };
        row.hash = row.chain_from(&PREV);
        let stored_hash = row.hash;
        let mut after = RawEventRow::try_from(row).expect("JSON");
        let clean = serde_json::to_string(&event).expect("JSON");
        after.scrub(clean, &PREV).expect("scrubbed");
        let body = serde_json::to_vec(&RawEnvelope {
            op: "r",
            before: None,
            after,
            source: source(1_764_896_400_000),
            ts_ms: 1_764_896_400_005,
        })
        .expect("JSON");
        assert!(!String::from_utf8_lossy(&body).contains("tok_4242"));
        let log = LogEvent::from_message(&body)
            .expect("parses")
            .expect("a show's");
        assert!(log.chains_from(&PREV));
        assert!(!log.chains_from(&[4; 32]));
        // The next event chains from the log's own hash of it.
        assert_eq!(log.hash, stored_hash);
        let mut tampered: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        tampered["after"]["hash"] = "07".repeat(32).into();
        let log = LogEvent::from_message(&serde_json::to_vec(&tampered).expect("JSON"))
            .expect("parses")
            .expect("a show's");
        assert!(
            !log.chains_from(&PREV),
            "the proof binds the hash it hands on"
        );
    }
}
