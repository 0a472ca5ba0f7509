//! The message on the events topic: Debezium's change-event envelope over one `events` row.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// One row of the `events` table, as the log stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRow {
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub sequence: i64,
    pub event_type: String,
    pub event_version: String,
    pub payload: Value,
    pub metadata: Value,
    /// The row's link in its aggregate's hash chain, in hex (migration 0009): consumers fold
    /// an event only if it chains from the one before it (issue 53 item 7). Absent on
    /// messages of relays from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

/// Where and when the change happened, as Debezium's PostgreSQL connector reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    pub connector: String,
    pub db: String,
    /// The write cluster the row was committed on (docs/adr/021): LSNs are positions in that
    /// cluster's WAL, comparable only with the same shard's. Absent (before shards): 1.
    #[serde(default = "first_shard")]
    pub shard: u16,
    pub schema: String,
    pub table: String,
    /// The change's WAL position ("0/16B3748"); for a backfill, the WAL position when it began.
    pub lsn: String,
    /// The end of the commit record of its transaction: every change of a transaction shares it,
    /// and it only grows in commit order. Seat-map watermarks use it.
    #[serde(rename = "commitLsn")]
    pub commit_lsn: String,
    #[serde(rename = "txId")]
    pub tx_id: Option<i64>,
    /// Commit time in milliseconds since the epoch.
    pub ts_ms: i64,
    /// "false" for a change from the slot, "true" for a backfill (Debezium's snapshot marker).
    pub snapshot: String,
}

fn first_shard() -> u16 {
    1
}

/// Debezium's envelope: `op` is "c" (insert from the slot) or "r" (read by a backfill).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub op: String,
    pub before: Option<EventRow>,
    pub after: EventRow,
    pub source: Source,
    /// When the relay published it, milliseconds since the epoch.
    pub ts_ms: i64,
}

/// A row as the relay publishes it: its json columns carried as the text PostgreSQL stored,
/// checked to be JSON but never parsed into a tree and printed again (that round trip was a
/// third of the relay's CPU). Serializes as an [`EventRow`] does, keys in the same order.
#[derive(Debug, Serialize)]
pub struct RawEventRow {
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub sequence: i64,
    pub event_type: String,
    pub event_version: String,
    pub payload: Box<RawValue>,
    pub metadata: Box<RawValue>,
    pub hash: String,
    /// Set when the payload was scrubbed on its way ([`without_card_token`]): SHA-256 over the
    /// previous row's hash, the scrubbed row's bytes and this row's hash, in hex. The stored
    /// row no longer hashes to `hash`; this proves the message to a consumer that knows the
    /// previous hash all the same (issue 53 items 7 and 11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrubbed: Option<String>,
}

/// The payload of an `OrderPlaced` stored before the card vault (issue 16), which carried the
/// order's payment token, without it; `None` for every other payload (the token never leaves
/// the database again: the relay publishes this instead).
pub fn without_card_token(event_type: &str, payload: &str) -> Option<String> {
    if event_type != "OrderPlaced" || !payload.contains("\"payment_token\"") {
        return None;
    }
    let mut v: Value = serde_json::from_str(payload).ok()?;
    v.get_mut("OrderPlaced")?
        .as_object_mut()?
        .remove("payment_token")?;
    serde_json::to_string(&v).ok()
}

impl RawEventRow {
    /// Replaces the payload with `payload` (a scrubbed one), proved against `prev`, the hash
    /// of the aggregate's row before this one.
    pub fn scrub(&mut self, payload: String, prev: &[u8]) -> serde_json::Result<()> {
        let hash = hex::decode(&self.hash).unwrap_or_default();
        let mut row = onsale_eventlog::chain::row_bytes(
            &self.aggregate_type,
            &self.aggregate_id,
            self.sequence,
            &self.event_type,
            &self.event_version,
            &payload,
            self.metadata.get(),
        );
        row.extend_from_slice(&hash);
        self.scrubbed = Some(hex::encode(onsale_eventlog::chain::link(prev, &row)));
        self.payload = RawValue::from_string(payload)?;
        Ok(())
    }
}

impl TryFrom<onsale_eventlog::LogRow> for RawEventRow {
    type Error = serde_json::Error;

    /// Fails if either json column is not JSON.
    fn try_from(r: onsale_eventlog::LogRow) -> serde_json::Result<Self> {
        Ok(RawEventRow {
            aggregate_type: r.aggregate_type,
            aggregate_id: r.aggregate_id,
            sequence: r.sequence,
            event_type: r.event_type,
            event_version: r.event_version,
            payload: RawValue::from_string(r.payload)?,
            metadata: RawValue::from_string(r.metadata)?,
            hash: hex::encode(r.hash),
            scrubbed: None,
        })
    }
}

/// An [`Envelope`] as the relay writes it (`before` is always null: the log is append-only).
#[derive(Debug, Serialize)]
pub struct RawEnvelope {
    pub op: &'static str,
    pub before: Option<RawEventRow>,
    pub after: RawEventRow,
    pub source: Source,
    pub ts_ms: i64,
}

impl Envelope {
    pub fn commit_time(&self) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp_millis(self.source.ts_ms)
    }
}

/// Parses "X/Y" into the 64-bit position it names.
pub fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// Formats a 64-bit WAL position the way PostgreSQL prints it.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(payload: &str, metadata: &str) -> onsale_eventlog::LogRow {
        onsale_eventlog::LogRow {
            aggregate_type: "show".into(),
            aggregate_id: "s1".into(),
            sequence: 7,
            event_type: "HoldPlaced".into(),
            event_version: "1".into(),
            payload: payload.into(),
            metadata: metadata.into(),
            hash: [7; 32],
        }
    }

    #[test]
    fn a_raw_envelope_reads_back_as_the_envelope_and_keeps_the_stored_text() {
        let payload = r#"{"HoldPlaced":{"hold_id":"h1","seats":["A-1"],"note":"é \"x\""}}"#;
        let metadata = r#"{"at":"2026-12-05T01:00:00Z","traceparent":"00-ab-cd-01"}"#;
        let source = Source {
            connector: "onsale-relay".into(),
            db: "onsale".into(),
            shard: 2,
            schema: "public".into(),
            table: "events".into(),
            lsn: "0/16B3748".into(),
            commit_lsn: "0/16B3800".into(),
            tx_id: Some(7),
            ts_ms: 1_764_896_400_000,
            snapshot: "false".into(),
        };
        let raw = RawEnvelope {
            op: "c",
            before: None,
            after: RawEventRow::try_from(row(payload, metadata)).expect("JSON"),
            source: source.clone(),
            ts_ms: 1_764_896_400_001,
        };
        let text = serde_json::to_string(&raw).expect("serializes");
        assert!(text.contains(payload), "the payload as stored: {text}");
        let read: Envelope = serde_json::from_str(&text).expect("an Envelope");
        let parsed = Envelope {
            op: "c".into(),
            before: None,
            after: EventRow {
                aggregate_type: "show".into(),
                aggregate_id: "s1".into(),
                sequence: 7,
                event_type: "HoldPlaced".into(),
                event_version: "1".into(),
                payload: serde_json::from_str(payload).expect("JSON"),
                metadata: serde_json::from_str(metadata).expect("JSON"),
                hash: Some("07".repeat(32)),
            },
            source,
            ts_ms: 1_764_896_400_001,
        };
        assert_eq!(read, parsed);
        assert!(RawEventRow::try_from(row("{not json", "{}")).is_err());
        assert!(RawEventRow::try_from(row("{}", "")).is_err());
    }

    #[test]
    fn lsn_round_trips_and_orders() {
        for s in ["0/0", "0/16B3748", "1/0", "AB/FFFFFFFF"] {
            assert_eq!(format_lsn(parse_lsn(s).expect("parses")), s);
        }
        assert!(parse_lsn("0/FFFFFFFF") < parse_lsn("1/0"));
        assert_eq!(parse_lsn("nonsense"), None);
    }

    #[test]
    fn an_order_placed_before_the_vault_loses_its_token_and_nothing_else_does() {
        let old = r#"{"OrderPlaced":{"order_id":"o1","hold_id":"h1","payment_token":"tok_4242","total_cents":5000}}"#;
        let scrubbed = without_card_token("OrderPlaced", old).expect("scrubbed");
        assert!(!scrubbed.contains("tok_4242"), "{scrubbed}");
        let v: Value = serde_json::from_str(&scrubbed).expect("JSON");
        assert_eq!(v["OrderPlaced"]["order_id"], "o1");
        assert_eq!(v["OrderPlaced"]["total_cents"], 5000);
        let new = r#"{"OrderPlaced":{"order_id":"o1","hold_id":"h1","total_cents":5000}}"#;
        assert_eq!(without_card_token("OrderPlaced", new), None);
        // Another event naming the field (a hold's fan could be called anything) is left.
        let other = r#"{"SeatsHeld":{"hold_id":"h1","note":"\"payment_token\""}}"#;
        assert_eq!(without_card_token("SeatsHeld", other), None);
    }
}
