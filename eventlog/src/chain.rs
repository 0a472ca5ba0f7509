//! The log's tamper evidence (migration 0009, ADR 012): each row's `hash` is SHA-256 over its
//! aggregate's previous hash and the row's own columns, set by a trigger as the row is
//! appended. [`verify`] recomputes every chain here, independently of the database's functions,
//! and names the first row that does not match: a row changed, removed or inserted after the
//! fact breaks its chain from there on.

use sha2::{Digest, Sha256};
use sqlx::{PgPool, Row};

/// Where an aggregate's chain starts.
pub const GENESIS: [u8; 32] = [0; 32];

/// A row's hash: SHA-256 over the previous row's hash and the row's bytes ([`row_bytes`]: each
/// column followed by 0x1f, the trigger's `events_row_bytes`).
#[allow(clippy::too_many_arguments)]
pub fn row_hash(
    prev: &[u8],
    aggregate_type: &str,
    aggregate_id: &str,
    sequence: i64,
    event_type: &str,
    event_version: &str,
    payload: &str,
    metadata: &str,
) -> [u8; 32] {
    link(
        prev,
        &row_bytes(
            aggregate_type,
            aggregate_id,
            sequence,
            event_type,
            event_version,
            payload,
            metadata,
        ),
    )
}

/// A row's bytes as its hash covers them, for a consumer that learns the previous hash later
/// than the row.
#[allow(clippy::too_many_arguments)]
pub fn row_bytes(
    aggregate_type: &str,
    aggregate_id: &str,
    sequence: i64,
    event_type: &str,
    event_version: &str,
    payload: &str,
    metadata: &str,
) -> Vec<u8> {
    let sequence = sequence.to_string();
    let parts = [
        aggregate_type,
        aggregate_id,
        &sequence,
        event_type,
        event_version,
        payload,
        metadata,
    ];
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
    for part in parts {
        out.extend_from_slice(part.as_bytes());
        out.push(0x1f);
    }
    out
}

/// The hash of a row whose [`row_bytes`] are `row` after a row whose hash is `prev`.
pub fn link(prev: &[u8], row: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(row);
    h.finalize().into()
}

/// The first row whose chain does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub sequence: i64,
    pub reason: String,
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} breaks at sequence {}: {}",
            self.aggregate_type, self.aggregate_id, self.sequence, self.reason
        )
    }
}

/// What a verification read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    pub aggregates: u64,
    pub events: u64,
    /// The first break, if any (the rest of the log is not read past it).
    pub broken: Option<Break>,
}

/// Recomputes the chain of every aggregate (or of show `show` only), reading the log in pages
/// of `page` rows in key order: memory stays bounded whatever the log's size.
pub async fn verify(pool: &PgPool, show: Option<&str>, page: i64) -> anyhow::Result<Verified> {
    let mut out = Verified::default();
    let mut after: (String, String, i64) = (String::new(), String::new(), 0);
    let mut prev = GENESIS;
    let mut current: Option<(String, String)> = None;
    let mut last_sequence = 0;
    loop {
        let rows = sqlx::query(
            "SELECT aggregate_type, aggregate_id, sequence, event_type, event_version,
                    payload::text AS payload, metadata::text AS metadata, hash
               FROM events
              WHERE (aggregate_type, aggregate_id, sequence) > ($1, $2, $3)
                AND ($4::text IS NULL OR (aggregate_type = 'show' AND aggregate_id = $4))
              ORDER BY aggregate_type, aggregate_id, sequence
              LIMIT $5",
        )
        .bind(&after.0)
        .bind(&after.1)
        .bind(after.2)
        .bind(show)
        .bind(page)
        .fetch_all(pool)
        .await?;
        let Some(last) = rows.last() else {
            return Ok(out);
        };
        after = (
            last.try_get("aggregate_type")?,
            last.try_get("aggregate_id")?,
            last.try_get("sequence")?,
        );
        for r in &rows {
            let aggregate_type: String = r.try_get("aggregate_type")?;
            let aggregate_id: String = r.try_get("aggregate_id")?;
            let sequence: i64 = r.try_get("sequence")?;
            let stored: Option<Vec<u8>> = r.try_get("hash")?;
            let broken = |reason: String| Break {
                aggregate_type: aggregate_type.clone(),
                aggregate_id: aggregate_id.clone(),
                sequence,
                reason,
            };
            let expected_sequence = if current
                .as_ref()
                .is_some_and(|(t, i)| *t == aggregate_type && *i == aggregate_id)
            {
                last_sequence + 1
            } else {
                out.aggregates += 1;
                current = Some((aggregate_type.clone(), aggregate_id.clone()));
                prev = GENESIS;
                1
            };
            if sequence != expected_sequence {
                out.broken = Some(broken(format!(
                    "expected sequence {expected_sequence} (a row is missing)"
                )));
                return Ok(out);
            }
            let computed = row_hash(
                &prev,
                &aggregate_type,
                &aggregate_id,
                sequence,
                r.try_get("event_type")?,
                r.try_get("event_version")?,
                r.try_get("payload")?,
                r.try_get("metadata")?,
            );
            match stored {
                None => {
                    out.broken = Some(broken("the row has no hash".into()));
                    return Ok(out);
                }
                Some(h) if h.as_slice() != computed => {
                    out.broken = Some(broken(
                        "the row's content does not match its hash (changed after it was appended)"
                            .into(),
                    ));
                    return Ok(out);
                }
                Some(_) => {}
            }
            prev = computed;
            out.events += 1;
            last_sequence = sequence;
        }
    }
}
