//! Bearer JWT (HS256) with the roles of API.md.

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use onsale_domain::AccountId;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::problem::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Fan,
    Admin,
    Scanner,
    Auditor,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub role: Role,
    pub exp: u64,
}

/// Signs a token: the CLI's `token` command and the tests use it.
pub fn mint(secret: &str, sub: &str, role: Role, ttl_secs: u64) -> anyhow::Result<String> {
    let exp = chrono::Utc::now().timestamp().max(0) as u64 + ttl_secs;
    let claims = Claims {
        sub: sub.to_owned(),
        role,
        exp,
    };
    Ok(encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )?)
}

/// The verified caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub account: AccountId,
    pub role: Role,
}

impl Caller {
    pub fn require(&self, roles: &[Role]) -> Result<(), ApiError> {
        if roles.contains(&self.role) {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "FORBIDDEN",
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
    DecodingKey: FromRef<S>,
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
        verify(token, &DecodingKey::from_ref(state))
    }
}

fn unauthenticated(detail: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", detail)
}

/// The caller a bearer token names, if its signature and expiry hold (REST and gRPC).
pub fn verify(token: &str, key: &DecodingKey) -> Result<Caller, ApiError> {
    let data = decode::<Claims>(token, key, &Validation::new(Algorithm::HS256))
        .map_err(|e| unauthenticated(&format!("invalid token: {e}")))?;
    let account =
        AccountId::parse(&data.claims.sub).map_err(|_| unauthenticated("invalid subject"))?;
    Ok(Caller {
        account,
        role: data.claims.role,
    })
}

pub fn decoding_key(secret: &str) -> DecodingKey {
    DecodingKey::from_secret(secret.as_bytes())
}

/// How this process checks (and, for development tokens, signs) bearer tokens.
#[derive(Debug, Clone, clap::Args)]
pub struct AuthSettings {
    /// HS256 secret for bearer tokens.
    #[arg(long, env = "ONSALE_JWT_SECRET", default_value = "onsale-dev-secret", value_parser = secret)]
    pub jwt_secret: SecretString,
}

impl AuthSettings {
    pub fn decoding_key(&self) -> DecodingKey {
        decoding_key(self.jwt_secret.expose_secret())
    }

    /// Signs a token for `sub` in `role`, valid for `ttl_secs`.
    pub fn mint(&self, sub: &str, role: Role, ttl_secs: u64) -> anyhow::Result<String> {
        mint(self.jwt_secret.expose_secret(), sub, role, ttl_secs)
    }
}

/// Parses a secret setting (never printed: `Debug` shows it redacted).
pub fn secret(s: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(s))
}
