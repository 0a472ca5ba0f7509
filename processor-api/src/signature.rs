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

pub fn sign(secret: &str, t: i64, body: &[u8]) -> String {
    format!(
        "t={t},v1={}",
        hex::encode(mac(secret, t, body).finalize().into_bytes())
    )
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

pub fn verify(
    secret: &str,
    header: &str,
    body: &[u8],
    now: i64,
    tolerance_secs: i64,
) -> Result<(), SignatureError> {
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => v1 = hex::decode(v).ok(),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return Err(SignatureError::Malformed);
    };
    mac(secret, t, body)
        .verify_slice(&v1)
        .map_err(|_| SignatureError::Mismatch)?;
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
        let h = sign("s", 100, b"{}");
        assert_eq!(verify("s", &h, b"{}", 110, 300), Ok(()));
        assert_eq!(
            verify("s", &h, b"{ }", 110, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify("x", &h, b"{}", 110, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify("s", &h, b"{}", 1_000, 300),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify("s", "v1=zz", b"{}", 100, 300),
            Err(SignatureError::Malformed)
        );
    }
}
