//! Webhook signatures: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, the scheme
//! real processors use. The receiver checks the MAC in constant time and refuses a timestamp
//! outside its tolerance (a replayed old delivery).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

pub const HEADER: &str = "processor-signature";

fn mac(secret: &str, t: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes keys of any length");
    m.update(t.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m
}

/// The header for `body` sent at `t`: one `v1=` per secret (a processor rolling its secret
/// signs with the new one and the old one until every receiver has the new one).
pub fn sign(secrets: &[&str], t: i64, body: &[u8]) -> String {
    let mut header = format!("t={t}");
    for secret in secrets {
        header.push_str(",v1=");
        header.push_str(&hex::encode(mac(secret, t, body).finalize().into_bytes()));
    }
    header
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the signature header is malformed")]
    Malformed,
    #[error("the signature does not match")]
    Mismatch,
    #[error("the signature is too old or from the future")]
    Stale,
}

/// Checks `header` for `body`: some `v1=` of it (every one is read, not only the last) must be
/// the MAC under one of `secrets` (the receiver's current one and, during a rollover, the
/// previous), and its `t` within `tolerance_secs` of `now`.
pub fn verify(
    secrets: &[&str],
    header: &str,
    body: &[u8],
    now: i64,
    tolerance_secs: i64,
) -> Result<(), SignatureError> {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => v1.extend(hex::decode(v).ok()),
            _ => {}
        }
    }
    let Some(t) = t.filter(|_| !v1.is_empty()) else {
        return Err(SignatureError::Malformed);
    };
    let matched = secrets.iter().any(|secret| {
        v1.iter()
            .any(|mac_sent| mac(secret, t, body).verify_slice(mac_sent).is_ok())
    });
    if !matched {
        return Err(SignatureError::Mismatch);
    }
    if (now - t).abs() > tolerance_secs {
        return Err(SignatureError::Stale);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_for_its_body_secret_and_time() {
        let h = sign(&["s"], 100, b"{}");
        assert_eq!(verify(&["s"], &h, b"{}", 110, 300), Ok(()));
        assert_eq!(
            verify(&["s"], &h, b"{ }", 110, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&["x"], &h, b"{}", 110, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&["s"], &h, b"{}", 1_000, 300),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(&["s"], "v1=zz", b"{}", 100, 300),
            Err(SignatureError::Malformed)
        );
    }

    #[test]
    fn during_a_rollover_either_secret_on_either_side_verifies() {
        // The processor signs with both; a receiver with either (or both) takes it.
        let both = sign(&["new", "old"], 100, b"{}");
        for receiver in [&["new"][..], &["old"], &["new", "old"], &["old", "new"]] {
            assert_eq!(
                verify(receiver, &both, b"{}", 100, 300),
                Ok(()),
                "{receiver:?}"
            );
        }
        // A processor still on the old secret, a receiver with the new and the previous.
        let old = sign(&["old"], 100, b"{}");
        assert_eq!(verify(&["new", "old"], &old, b"{}", 100, 300), Ok(()));
        // Neither secret: refused, whichever v1 comes last.
        assert_eq!(
            verify(&["other"], &both, b"{}", 100, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&["new"], &old, b"{}", 100, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&["s"], "t=100", b"{}", 100, 300),
            Err(SignatureError::Malformed)
        );
    }
}
