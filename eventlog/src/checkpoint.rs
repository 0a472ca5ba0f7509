//! Signed checkpoints of the log's chain heads (issue 53, item 6). The hash chain ([`crate::chain`])
//! shows a row changed by anyone who left the hashes after it alone; the schema's owner can
//! rewrite a row *and* every hash after it, and the chain holds again. A checkpoint closes that:
//! every aggregate's head (its last sequence and that row's hash) at a moment, signed with an
//! Ed25519 key the database's owner does not hold, kept outside the database. The log read
//! later must still carry each checkpointed head with the same hash; a rewrite before it changes
//! that hash (each hash covers every row before it), and the signature keeps the checkpoint
//! itself from being rewritten to match.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

/// One aggregate's chain head: its last row's sequence and hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Head {
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub sequence: i64,
    /// The row's hash, hex.
    pub hash: String,
}

/// Every head of the log at `taken_at`, signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    pub version: u32,
    pub taken_at: DateTime<Utc>,
    /// The signer's public key (base64): for the reader's information only; a checkpoint is
    /// checked against the key the auditor trusts, never the one it names.
    pub public_key: String,
    pub heads: Vec<Head>,
    /// Ed25519 over [`Checkpoint::signed_bytes`], base64.
    pub signature: String,
}

const VERSION: u32 = 1;

impl Checkpoint {
    /// The heads, sorted, signed with `key` as taken at `taken_at`.
    pub fn sign(mut heads: Vec<Head>, taken_at: DateTime<Utc>, key: &Ed25519KeyPair) -> Self {
        heads.sort_by(|a, b| {
            (&a.aggregate_type, &a.aggregate_id).cmp(&(&b.aggregate_type, &b.aggregate_id))
        });
        let mut cp = Self {
            version: VERSION,
            taken_at,
            public_key: B64.encode(key.public_key().as_ref()),
            heads,
            signature: String::new(),
        };
        cp.signature = B64.encode(key.sign(&cp.signed_bytes()).as_ref());
        cp
    }

    /// What the signature covers: the version, the moment and every head, one line each,
    /// fields separated by 0x1f (no JSON canonicalisation to agree on).
    fn signed_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "onsale checkpoint v{}\n{}\n",
            self.version,
            self.taken_at.to_rfc3339_opts(SecondsFormat::Micros, true)
        )
        .into_bytes();
        for h in &self.heads {
            for (i, part) in [
                h.aggregate_type.as_str(),
                h.aggregate_id.as_str(),
                &h.sequence.to_string(),
                h.hash.as_str(),
            ]
            .iter()
            .enumerate()
            {
                if i > 0 {
                    out.push(0x1f);
                }
                out.extend_from_slice(part.as_bytes());
            }
            out.push(b'\n');
        }
        out
    }

    /// `Ok` if `public_key` (raw 32 bytes, base64) signed this checkpoint as it reads now.
    pub fn check_signature(&self, public_key: &str) -> anyhow::Result<()> {
        let key = B64
            .decode(public_key.trim())
            .map_err(|e| anyhow::anyhow!("the public key is not base64: {e}"))?;
        let signature = B64
            .decode(&self.signature)
            .map_err(|e| anyhow::anyhow!("the signature is not base64: {e}"))?;
        anyhow::ensure!(
            self.version == VERSION,
            "checkpoint version {} is not {VERSION}",
            self.version
        );
        UnparsedPublicKey::new(&ED25519, key)
            .verify(&self.signed_bytes(), &signature)
            .map_err(|_| {
                anyhow::anyhow!(
                    "its signature does not hold under the given public key (changed after it was \
                     signed, or signed with another key)"
                )
            })
    }
}

/// A new signing key: its PKCS#8 document (keep it secret) and its public key (base64).
pub fn new_key() -> anyhow::Result<(Vec<u8>, String)> {
    let doc = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new())
        .map_err(|_| anyhow::anyhow!("no key generated"))?;
    let key = signing_key(doc.as_ref())?;
    Ok((doc.as_ref().to_vec(), B64.encode(key.public_key().as_ref())))
}

/// The signing key of a PKCS#8 document ([`new_key`]'s).
pub fn signing_key(pkcs8: &[u8]) -> anyhow::Result<Ed25519KeyPair> {
    Ed25519KeyPair::from_pkcs8(pkcs8).map_err(|e| anyhow::anyhow!("not an Ed25519 PKCS#8 key: {e}"))
}

/// Every aggregate's head in the log on `pool` (or show `show`'s only).
pub async fn heads(pool: &PgPool, show: Option<&str>) -> anyhow::Result<Vec<Head>> {
    let rows: Vec<(String, String, i64, Option<Vec<u8>>)> = sqlx::query_as(
        "SELECT DISTINCT ON (aggregate_type, aggregate_id)
                aggregate_type, aggregate_id, sequence, hash
           FROM events
          WHERE $1::text IS NULL OR (aggregate_type = 'show' AND aggregate_id = $1)
          ORDER BY aggregate_type, aggregate_id, sequence DESC",
    )
    .bind(show)
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(aggregate_type, aggregate_id, sequence, hash)| {
            let hash = hash.ok_or_else(|| {
                anyhow::anyhow!("{aggregate_type} {aggregate_id} {sequence} has no hash")
            })?;
            Ok(Head {
                aggregate_type,
                aggregate_id,
                sequence,
                hash: hex::encode(hash),
            })
        })
        .collect()
}

/// A checkpointed head the log no longer carries as it was signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub head: Head,
    /// The hash the log has at that sequence now (hex); `None`: no such row on any shard.
    pub now: Option<String>,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = &self.head;
        match &self.now {
            Some(now) => write!(
                f,
                "{} {} at sequence {}: the log's hash is {now}, the checkpoint signed {} (the log \
                 up to there was rewritten)",
                h.aggregate_type, h.aggregate_id, h.sequence, h.hash
            ),
            None => write!(
                f,
                "{} {} at sequence {}: no such row (the log was cut back)",
                h.aggregate_type, h.aggregate_id, h.sequence
            ),
        }
    }
}

/// The checkpoint's heads the logs on `pools` (every shard: a show may have moved since) do
/// not carry with the signed hash, in the checkpoint's order.
pub async fn compare(pools: &[PgPool], checkpoint: &Checkpoint) -> anyhow::Result<Vec<Mismatch>> {
    // Every hash each checkpointed row has on any shard (a moved show's copy carries its
    // hashes to the new shard).
    let mut found: std::collections::HashMap<(String, String, i64), Vec<String>> =
        std::collections::HashMap::new();
    for chunk in checkpoint.heads.chunks(5_000) {
        let types: Vec<&str> = chunk.iter().map(|h| h.aggregate_type.as_str()).collect();
        let ids: Vec<&str> = chunk.iter().map(|h| h.aggregate_id.as_str()).collect();
        let seqs: Vec<i64> = chunk.iter().map(|h| h.sequence).collect();
        for pool in pools {
            let rows: Vec<(String, String, i64, Option<Vec<u8>>)> = sqlx::query_as(
                "SELECT e.aggregate_type, e.aggregate_id, e.sequence, e.hash
                   FROM UNNEST($1::text[], $2::text[], $3::bigint[]) AS h(t, i, s)
                   JOIN events e ON (e.aggregate_type, e.aggregate_id, e.sequence) = (h.t, h.i, h.s)",
            )
            .bind(&types)
            .bind(&ids)
            .bind(&seqs)
            .fetch_all(pool)
            .await?;
            for (t, i, s, hash) in rows {
                found
                    .entry((t, i, s))
                    .or_default()
                    .push(hash.map(hex::encode).unwrap_or_default());
            }
        }
    }
    Ok(checkpoint
        .heads
        .iter()
        .filter_map(|h| {
            let key = (h.aggregate_type.clone(), h.aggregate_id.clone(), h.sequence);
            let hashes = found.get(&key).map(Vec::as_slice).unwrap_or_default();
            (!hashes.contains(&h.hash)).then(|| Mismatch {
                head: h.clone(),
                now: hashes.first().cloned(),
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(id: &str, sequence: i64, hash: &str) -> Head {
        Head {
            aggregate_type: "show".into(),
            aggregate_id: id.into(),
            sequence,
            hash: hash.into(),
        }
    }

    #[test]
    fn a_checkpoint_holds_under_its_key_and_under_no_other_nor_once_changed() {
        let (pkcs8, public) = new_key().expect("key");
        let key = signing_key(&pkcs8).expect("parsed");
        let at = DateTime::parse_from_rfc3339("2026-12-07T10:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let cp = Checkpoint::sign(vec![head("b", 4, "bb"), head("a", 9, "aa")], at, &key);
        assert_eq!(cp.heads[0].aggregate_id, "a", "heads sorted");
        assert_eq!(cp.public_key, public);
        cp.check_signature(&public).expect("holds");
        // Read back as the auditor keeps it.
        let kept: Checkpoint =
            serde_json::from_str(&serde_json::to_string(&cp).expect("json")).expect("parsed");
        kept.check_signature(&public).expect("holds once kept");

        let (_, other) = new_key().expect("another key");
        assert!(cp.check_signature(&other).is_err(), "another key");
        for change in [
            |c: &mut Checkpoint| c.heads[1].hash = "cc".into(),
            |c: &mut Checkpoint| c.heads[0].sequence = 8,
            |c: &mut Checkpoint| {
                c.heads.pop();
            },
            |c: &mut Checkpoint| c.taken_at += chrono::Duration::seconds(1),
        ] {
            let mut changed = cp.clone();
            change(&mut changed);
            let err = changed.check_signature(&public).expect_err("changed");
            assert!(err.to_string().contains("does not hold"), "{err}");
        }
        assert!(cp.check_signature("not base64!").is_err());
    }
}
