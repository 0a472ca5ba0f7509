//! The message on the events topic: Debezium's change-event envelope over one `events` row.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
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

    #[test]
    fn lsn_round_trips_and_orders() {
        for s in ["0/0", "0/16B3748", "1/0", "AB/FFFFFFFF"] {
            assert_eq!(format_lsn(parse_lsn(s).expect("parses")), s);
        }
        assert!(parse_lsn("0/FFFFFFFF") < parse_lsn("1/0"));
        assert_eq!(parse_lsn("nonsense"), None);
    }
}
