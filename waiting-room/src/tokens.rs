//! The three signed tokens of the waiting room, HS256 JWTs told apart by their audience:
//! the queue token ("I hold a place in this show's line"), the admission token ("the line has
//! passed my position: I may enter until `exp`", single use) and the session ("I am inside").
//! Each names the show and the account, so a token replayed by another account, or for another
//! show, is refused; verification is a MAC check, no lookup.

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

pub const QUEUE: &str = "onsale-queue";
pub const ADMISSION: &str = "onsale-admission";
pub const SESSION: &str = "onsale-session";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueClaims {
    pub aud: String,
    pub sub: String,
    pub show: String,
    pub iat: i64,
    pub exp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionClaims {
    pub aud: String,
    pub sub: String,
    pub show: String,
    pub pos: u64,
    /// Single use: the id of this admission (one per position).
    pub jti: String,
    /// The end of the grace window in ms, before any pause is added.
    pub exp_ms: i64,
    /// The show's total paused time (ms) when the token was signed: a pause since then extends
    /// the window by as much (design.md §7.7: nobody admitted just before a failover loses their turn).
    pub paused_ms: i64,
    /// Unix seconds; long after `exp_ms` so the JWT layer never refuses a paused token first.
    pub exp: i64,
    /// Signed by the fallback while Redis was away: it enters through PostgreSQL. A typed
    /// claim, never read off the id (which names the account).
    #[serde(default)]
    pub fallback: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClaims {
    pub aud: String,
    pub sub: String,
    pub show: String,
    pub sid: String,
    /// The lease this token was signed with (ms); Redis holds the live one.
    pub lease_ms: i64,
    pub exp: i64,
    /// A session the fallback opened (it lives in PostgreSQL, not Redis).
    #[serde(default)]
    pub fallback: bool,
}

/// Why a token is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not ours, tampered with, another audience, or expired at the JWT layer.
    Invalid,
    /// Signed for another account or another show.
    Foreign,
}

#[derive(Clone)]
pub struct Signer {
    enc: EncodingKey,
    dec: DecodingKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer")
    }
}

impl Signer {
    pub fn new(secret: &str) -> Self {
        Self {
            enc: EncodingKey::from_secret(secret.as_bytes()),
            dec: DecodingKey::from_secret(secret.as_bytes()),
        }
    }

    pub fn sign<T: Serialize>(&self, claims: &T) -> String {
        encode(&Header::new(Algorithm::HS256), claims, &self.enc)
            .expect("HS256 signing of plain claims cannot fail")
    }

    /// Verifies signature, audience and expiry, then that the token is `account`'s for `show`.
    pub fn verify<T: DeserializeOwned + Bound>(
        &self,
        token: &str,
        audience: &str,
        account: &str,
        show: &str,
    ) -> Result<T, Refusal> {
        let mut v = Validation::new(Algorithm::HS256);
        v.set_audience(&[audience]);
        v.leeway = 0;
        let claims = decode::<T>(token, &self.dec, &v)
            .map_err(|_| Refusal::Invalid)?
            .claims;
        if claims.account() != account || claims.show() != show {
            return Err(Refusal::Foreign);
        }
        Ok(claims)
    }
}

/// What every token is bound to.
pub trait Bound {
    fn account(&self) -> &str;
    fn show(&self) -> &str;
}

macro_rules! bound {
    ($t:ty) => {
        impl Bound for $t {
            fn account(&self) -> &str {
                &self.sub
            }
            fn show(&self) -> &str {
                &self.show
            }
        }
    };
}
bound!(QueueClaims);
bound!(AdmissionClaims);
bound!(SessionClaims);
bound!(crate::challenge::ChallengeClaims);

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(sub: &str, show: &str) -> QueueClaims {
        QueueClaims {
            aud: QUEUE.into(),
            sub: sub.into(),
            show: show.into(),
            iat: 0,
            exp: chrono::Utc::now().timestamp() + 60,
        }
    }

    #[test]
    fn a_token_is_refused_for_another_account_show_audience_or_key() {
        let s = Signer::new("k");
        let t = s.sign(&queue("ann", "s1"));
        assert!(s.verify::<QueueClaims>(&t, QUEUE, "ann", "s1").is_ok());
        assert_eq!(
            s.verify::<QueueClaims>(&t, QUEUE, "bob", "s1").err(),
            Some(Refusal::Foreign)
        );
        assert_eq!(
            s.verify::<QueueClaims>(&t, QUEUE, "ann", "s2").err(),
            Some(Refusal::Foreign)
        );
        assert_eq!(
            s.verify::<QueueClaims>(&t, SESSION, "ann", "s1").err(),
            Some(Refusal::Invalid)
        );
        assert_eq!(
            Signer::new("other")
                .verify::<QueueClaims>(&t, QUEUE, "ann", "s1")
                .err(),
            Some(Refusal::Invalid)
        );
        let mut old = queue("ann", "s1");
        old.exp = chrono::Utc::now().timestamp() - 1;
        let t = s.sign(&old);
        assert_eq!(
            s.verify::<QueueClaims>(&t, QUEUE, "ann", "s1").err(),
            Some(Refusal::Invalid)
        );
    }
}
