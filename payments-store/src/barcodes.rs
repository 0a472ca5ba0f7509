//! A ticket's barcode: the ticket's id, a step of [`STEP_SECS`] seconds and a MAC of both under
//! the ticket's own secret, so a screenshot stops working within seconds and a code cannot be
//! made without the secret.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, TimeZone, Utc};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use uuid::Uuid;

/// A barcode is good for one step of this many seconds (and the one before, for clock skew).
pub const STEP_SECS: i64 = 15;
const MAC_LEN: usize = 12;

fn step_mac(secret: &[u8], ticket: Uuid, step: i64) -> [u8; MAC_LEN] {
    let mut m =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes keys of any length");
    m.update(ticket.as_bytes());
    m.update(&step.to_be_bytes());
    let full = m.finalize().into_bytes();
    let mut out = [0u8; MAC_LEN];
    out.copy_from_slice(&full[..MAC_LEN]);
    out
}

pub fn step_of(at: DateTime<Utc>) -> i64 {
    at.timestamp().div_euclid(STEP_SECS)
}

/// The barcode of `ticket` for the step containing `at`, and when it stops being current.
pub fn barcode(secret: &[u8], ticket: Uuid, at: DateTime<Utc>) -> (String, DateTime<Utc>) {
    let step = step_of(at);
    let mut raw = Vec::with_capacity(16 + 8 + MAC_LEN);
    raw.extend_from_slice(ticket.as_bytes());
    raw.extend_from_slice(&step.to_be_bytes());
    raw.extend_from_slice(&step_mac(secret, ticket, step));
    let valid_until = Utc
        .timestamp_opt((step + 1) * STEP_SECS, 0)
        .single()
        .unwrap_or(at);
    (URL_SAFE_NO_PAD.encode(raw), valid_until)
}

/// A code as the scanner read it: the ticket it names and its step (not yet verified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code {
    pub ticket: Uuid,
    pub step: i64,
    mac: [u8; MAC_LEN],
}

impl Code {
    pub fn parse(code: &str) -> Option<Self> {
        let raw = URL_SAFE_NO_PAD.decode(code.trim()).ok()?;
        if raw.len() != 16 + 8 + MAC_LEN {
            return None;
        }
        let ticket = Uuid::from_slice(&raw[..16]).ok()?;
        let step = i64::from_be_bytes(raw[16..24].try_into().ok()?);
        let mac = raw[24..].try_into().ok()?;
        Some(Self { ticket, step, mac })
    }

    /// The MAC is the ticket's own, compared in constant time.
    pub fn signed_by(&self, secret: &[u8]) -> bool {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(secret)
            .expect("HMAC takes keys of any length");
        m.update(self.ticket.as_bytes());
        m.update(&self.step.to_be_bytes());
        m.verify_truncated_left(&self.mac).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    #[test]
    fn a_code_names_its_ticket_and_step_and_only_its_secret_signs_it() {
        let t = Uuid::new_v4();
        let (code, valid_until) = barcode(b"secret-1", t, at(7));
        let parsed = Code::parse(&code).expect("parses");
        assert_eq!(parsed.ticket, t);
        assert_eq!(parsed.step, step_of(at(7)));
        assert!(parsed.signed_by(b"secret-1"));
        assert!(!parsed.signed_by(b"secret-2"));
        assert!(valid_until > at(7) && valid_until <= at(7) + chrono::Duration::seconds(STEP_SECS));
    }

    #[test]
    fn the_code_rotates_every_step_and_a_tampered_one_fails() {
        let t = Uuid::new_v4();
        let (a, _) = barcode(b"k", t, at(0));
        let (b, _) = barcode(b"k", t, at(STEP_SECS * 3));
        assert_ne!(a, b);
        let mut raw = URL_SAFE_NO_PAD.decode(&a).expect("b64");
        raw[20] ^= 1; // move the step
        let forged = Code::parse(&URL_SAFE_NO_PAD.encode(raw)).expect("parses");
        assert!(!forged.signed_by(b"k"));
        assert!(Code::parse("not a code").is_none());
    }
}
