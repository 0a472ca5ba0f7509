//! Bearer JWT (HS256) with the roles of docs/api.md.

use crate::ErrorCode;
use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use onsale_domain::AccountId;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::problem::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Fan,
    Admin,
    Scanner,
    Auditor,
}

/// A bearer token's claims. `iss`, `aud`, `iat` and `exp` are required; `nbf` is honoured when
/// present.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub role: Role,
    pub iss: String,
    pub aud: String,
    pub iat: u64,
    pub exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// The identity provider vouches for the account (a verified account with a payment
    /// history): a show may admit only such accounts to its waiting room. Absent: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verified: bool,
}

/// The issuer and audience onsale signs and expects unless configured otherwise.
pub const DEFAULT_ISSUER: &str = "onsale";
pub const DEFAULT_AUDIENCE: &str = "onsale-api";
/// The longest a token may live (`exp - iat`) unless configured otherwise: one day.
pub const DEFAULT_MAX_LIFETIME_SECS: u64 = 86_400;
/// Clock skew tolerated on `exp`, `nbf` and `iat`.
const LEEWAY_SECS: u64 = 30;

/// Signs a token with the default issuer and audience: the tests and the load generator use it.
pub fn mint(secret: &str, sub: &str, role: Role, ttl_secs: u64) -> anyhow::Result<String> {
    mint_for(
        secret,
        DEFAULT_ISSUER,
        DEFAULT_AUDIENCE,
        sub,
        role,
        ttl_secs,
    )
}

/// Signs a token for `sub` in `role`, issued now by `iss` for `aud`, valid for `ttl_secs`.
pub fn mint_for(
    secret: &str,
    iss: &str,
    aud: &str,
    sub: &str,
    role: Role,
    ttl_secs: u64,
) -> anyhow::Result<String> {
    encode_claims(secret, &claims_for(iss, aud, sub, role, ttl_secs))
}

/// Signs a token, with the default issuer and audience, for an account the identity provider
/// has verified (the `verified` claim).
pub fn mint_verified(secret: &str, sub: &str, role: Role, ttl_secs: u64) -> anyhow::Result<String> {
    let mut claims = claims_for(DEFAULT_ISSUER, DEFAULT_AUDIENCE, sub, role, ttl_secs);
    claims.verified = true;
    encode_claims(secret, &claims)
}

fn claims_for(iss: &str, aud: &str, sub: &str, role: Role, ttl_secs: u64) -> Claims {
    let iat = now_secs();
    Claims {
        sub: sub.to_owned(),
        role,
        iss: iss.to_owned(),
        aud: aud.to_owned(),
        iat,
        exp: iat + ttl_secs,
        nbf: None,
        verified: false,
    }
}

/// Signs `claims` as they are (tests build tokens that must be refused with it).
pub fn encode_claims(secret: &str, claims: &Claims) -> anyhow::Result<String> {
    Ok(encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )?)
}

fn now_secs() -> u64 {
    chrono::Utc::now().timestamp().max(0) as u64
}

/// The verified caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub account: AccountId,
    pub role: Role,
    /// The token's `verified` claim.
    pub verified: bool,
}

impl Caller {
    pub fn require(&self, roles: &[Role]) -> Result<(), ApiError> {
        if roles.contains(&self.role) {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::Forbidden,
                "this role may not do that",
            ))
        }
    }

    /// Admins and auditors see everything; a fan only what is theirs.
    pub fn sees(&self, owner: &AccountId) -> bool {
        matches!(self.role, Role::Admin | Role::Auditor) || &self.account == owner
    }
}

impl<S> FromRequestParts<S> for Caller
where
    Verifier: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| unauthenticated("an Authorization: Bearer token is required"))?;
        Verifier::from_ref(state).verify(token)
    }
}

fn unauthenticated(detail: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated, detail)
}

/// Checks bearer tokens: HS256 signature, issuer, audience, `exp` and `nbf` (with 30 s of
/// leeway), and a lifetime (`exp - iat`) no longer than the configured cap. Cloned with every
/// request's state, so shared: its validation rules are sets of strings, and copying them
/// per request showed as a tenth of the hold path's time in the allocator.
#[derive(Clone)]
pub struct Verifier {
    inner: std::sync::Arc<Rules>,
}

struct Rules {
    key: DecodingKey,
    validation: Validation,
    max_lifetime_secs: u64,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("iss", &self.inner.validation.iss)
            .field("aud", &self.inner.validation.aud)
            .field("max_lifetime_secs", &self.inner.max_lifetime_secs)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    pub fn new(secret: &str, iss: &str, aud: &str, max_lifetime_secs: u64) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[iss]);
        validation.set_audience(&[aud]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECS;
        Self {
            inner: std::sync::Arc::new(Rules {
                key: DecodingKey::from_secret(secret.as_bytes()),
                validation,
                max_lifetime_secs,
            }),
        }
    }

    /// A verifier with the default issuer, audience and lifetime cap (tests).
    pub fn with_defaults(secret: &str) -> Self {
        Self::new(
            secret,
            DEFAULT_ISSUER,
            DEFAULT_AUDIENCE,
            DEFAULT_MAX_LIFETIME_SECS,
        )
    }

    /// The caller a bearer token names (REST and gRPC). Why a token was refused is logged,
    /// never told: the caller learns only that it was.
    pub fn verify(&self, token: &str) -> Result<Caller, ApiError> {
        let rules = &*self.inner;
        let data = decode::<Claims>(token, &rules.key, &rules.validation).map_err(|e| {
            tracing::debug!(error = %e, "bearer token refused");
            unauthenticated("the bearer token is not valid")
        })?;
        let c = data.claims;
        if c.exp.saturating_sub(c.iat) > rules.max_lifetime_secs || c.iat > now_secs() + LEEWAY_SECS
        {
            tracing::debug!(iat = c.iat, exp = c.exp, "bearer token lives too long");
            return Err(unauthenticated("the bearer token is not valid"));
        }
        let account = AccountId::parse(&c.sub)
            .map_err(|_| unauthenticated("the bearer token is not valid"))?;
        Ok(Caller {
            account,
            role: c.role,
            verified: c.verified,
        })
    }
}

/// How this process checks (and, for development tokens, signs) bearer tokens, and whether
/// development mode is on.
#[derive(Debug, Clone, clap::Args)]
pub struct AuthSettings {
    /// HS256 secret for bearer tokens: at least 32 bytes (required unless development mode
    /// is on).
    #[arg(long, env = "ONSALE_JWT_SECRET", default_value = "", hide_default_value = true, value_parser = secret)]
    pub jwt_secret: SecretString,
    /// The issuer (`iss`) a bearer token must name.
    #[arg(long, env = "ONSALE_JWT_ISSUER", default_value = DEFAULT_ISSUER)]
    pub jwt_issuer: String,
    /// The audience (`aud`) a bearer token must name.
    #[arg(long, env = "ONSALE_JWT_AUDIENCE", default_value = DEFAULT_AUDIENCE)]
    pub jwt_audience: String,
    /// The longest lifetime (`exp - iat`, seconds) a bearer token may have.
    #[arg(long, env = "ONSALE_JWT_MAX_LIFETIME_SECS", default_value_t = DEFAULT_MAX_LIFETIME_SECS)]
    pub jwt_max_lifetime_secs: u64,
    /// Development mode: secrets left unset take built-in development values and short ones
    /// are accepted. `make up`, `make demo` and the tests turn it on; never in production.
    #[arg(long = "dev-mode", env = "ONSALE_DEV_MODE", default_value_t = false, value_parser = clap::builder::BoolishValueParser::new())]
    pub dev_mode: bool,
}

impl AuthSettings {
    pub fn verifier(&self) -> Verifier {
        Verifier::new(
            self.jwt_secret.expose_secret(),
            &self.jwt_issuer,
            &self.jwt_audience,
            self.jwt_max_lifetime_secs,
        )
    }

    /// Signs a token for `sub` in `role`, valid for `ttl_secs`; `verified` sets the claim.
    pub fn mint(
        &self,
        sub: &str,
        role: Role,
        verified: bool,
        ttl_secs: u64,
    ) -> anyhow::Result<String> {
        let mut claims = claims_for(&self.jwt_issuer, &self.jwt_audience, sub, role, ttl_secs);
        claims.verified = verified;
        encode_claims(self.jwt_secret.expose_secret(), &claims)
    }

    /// These settings with the secret checked: see [`AuthSettings::secure`].
    pub fn secured(mut self) -> Result<Self, SecretError> {
        self.secure()?;
        Ok(self)
    }

    /// The JWT secret checked (and, in development mode, defaulted): see [`require_secret`].
    pub fn secure(&mut self) -> Result<(), SecretError> {
        require_secret(
            &mut self.jwt_secret,
            "ONSALE_JWT_SECRET",
            "onsale-dev-secret",
            self.dev_mode,
        )
    }
}

/// The built-in development values of every secret: refused outside development mode.
pub const DEV_SECRETS: &[&str] = &[
    "onsale-dev-secret",
    "onsale-dev-webhook-secret",
    "onsale-dev-admission-secret",
    "onsale-dev-node-secret",
    "onsale-dev-pseudonym-key",
];

/// The shortest secret accepted outside development mode (bytes).
pub const MIN_SECRET_BYTES: usize = 32;

/// Why a process refuses to start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("{0} is not set: set it to a random value of at least 32 bytes (or turn development mode on with ONSALE_DEV_MODE=1, never in production)")]
    Missing(&'static str),
    #[error("{0} is a built-in development secret: set a random value of at least 32 bytes")]
    Default(&'static str),
    #[error("{0} is shorter than 32 bytes: set a random value of at least 32 bytes")]
    Short(&'static str),
    #[error("development mode serves only this machine, but {0} is {1}: listen on loopback (127.0.0.1, ::1, localhost), or turn development mode off and set every secret")]
    NotLoopback(&'static str, String),
}

/// Whether a listener's address (`host:port`) is on loopback: `127.0.0.0/8`, `::1`
/// (`[::1]:port`) or `localhost`. Anything else, unspecified addresses (`0.0.0.0`, `[::]`)
/// and names included, is not.
pub fn on_loopback(listen: &str) -> bool {
    let Some((host, _port)) = listen.rsplit_once(':') else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Checks one secret setting (named by its environment variable): unset, a built-in
/// development value or shorter than 32 bytes is refused, unless `dev` is on, where an unset
/// secret takes `dev_default`.
pub fn require_secret(
    value: &mut SecretString,
    env: &'static str,
    dev_default: &str,
    dev: bool,
) -> Result<(), SecretError> {
    let v = value.expose_secret();
    if v.is_empty() {
        if dev {
            *value = SecretString::from(dev_default);
            return Ok(());
        }
        return Err(SecretError::Missing(env));
    }
    if dev {
        return Ok(());
    }
    if DEV_SECRETS.contains(&v) {
        return Err(SecretError::Default(env));
    }
    if v.len() < MIN_SECRET_BYTES {
        return Err(SecretError::Short(env));
    }
    Ok(())
}

/// Parses a secret setting (never printed: `Debug` shows it redacted).
pub fn secret(s: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "a-test-secret-of-at-least-32-bytes!";

    fn claims(f: impl FnOnce(&mut Claims)) -> String {
        let now = now_secs();
        let mut c = Claims {
            sub: "fan-1".into(),
            role: Role::Fan,
            iss: DEFAULT_ISSUER.into(),
            aud: DEFAULT_AUDIENCE.into(),
            iat: now,
            exp: now + 600,
            nbf: None,
            verified: false,
        };
        f(&mut c);
        encode_claims(KEY, &c).expect("signs")
    }

    fn refused(token: &str) -> ApiError {
        let e = Verifier::with_defaults(KEY)
            .verify(token)
            .expect_err("the token is refused");
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert_eq!(e.code, ErrorCode::Unauthenticated);
        assert_eq!(e.detail, "the bearer token is not valid", "no library text");
        e
    }

    #[test]
    fn a_token_of_the_right_issuer_and_audience_is_accepted() {
        let c = Verifier::with_defaults(KEY)
            .verify(&claims(|_| {}))
            .expect("accepted");
        assert_eq!(c.role, Role::Fan);
        assert_eq!(c.account.as_str(), "fan-1");
        assert!(!c.verified, "no claim: not verified");
        let v = Verifier::with_defaults(KEY)
            .verify(&claims(|c| c.verified = true))
            .expect("accepted");
        assert!(v.verified);
    }

    #[test]
    fn issuer_audience_signature_time_and_lifetime_are_checked() {
        refused(&claims(|c| c.iss = "someone-else".into()));
        refused(&claims(|c| c.aud = "another-api".into()));
        refused(&claims(|c| c.nbf = Some(now_secs() + 600)));
        refused(&claims(|c| c.exp = now_secs() - 120));
        refused(&claims(|c| c.exp = c.iat + DEFAULT_MAX_LIFETIME_SECS + 1));
        refused(&claims(|c| {
            c.iat = now_secs() + 3_600;
            c.exp = c.iat + 60;
        }));
        refused(
            &mint(
                "another-secret-of-at-least-32-bytes",
                "fan-1",
                Role::Fan,
                60,
            )
            .expect("signs"),
        );
        refused("not.a.token");
    }

    #[test]
    fn a_token_without_issuer_audience_or_issue_time_is_refused() {
        let now = now_secs();
        for body in [
            serde_json::json!({"sub": "fan-1", "role": "fan", "exp": now + 60}),
            serde_json::json!({"sub": "fan-1", "role": "fan", "aud": DEFAULT_AUDIENCE, "iat": now, "exp": now + 60}),
            serde_json::json!({"sub": "fan-1", "role": "fan", "iss": DEFAULT_ISSUER, "iat": now, "exp": now + 60}),
            serde_json::json!({"sub": "fan-1", "role": "fan", "iss": DEFAULT_ISSUER, "aud": DEFAULT_AUDIENCE, "exp": now + 60}),
        ] {
            let t = encode(
                &Header::new(Algorithm::HS256),
                &body,
                &EncodingKey::from_secret(KEY.as_bytes()),
            )
            .expect("signs");
            refused(&t);
        }
    }

    #[test]
    fn secrets_are_required_long_and_not_the_development_ones_outside_development() {
        let check = |v: &str, dev: bool| {
            let mut s = SecretString::from(v);
            require_secret(&mut s, "ONSALE_X", "onsale-dev-secret", dev)
                .map(|()| s.expose_secret().to_owned())
        };
        assert_eq!(check("", false), Err(SecretError::Missing("ONSALE_X")));
        assert!(SecretError::Missing("ONSALE_X")
            .to_string()
            .starts_with("ONSALE_X is not set"));
        assert_eq!(
            check("onsale-dev-secret", false),
            Err(SecretError::Default("ONSALE_X"))
        );
        assert_eq!(check("short", false), Err(SecretError::Short("ONSALE_X")));
        assert_eq!(check(KEY, false), Ok(KEY.to_owned()));
        assert_eq!(check("", true), Ok("onsale-dev-secret".to_owned()));
        assert_eq!(check("short", true), Ok("short".to_owned()));
    }
}
