//! Bearer JWTs with the roles of docs/api.md: signed by an identity provider (EdDSA, ES256 or
//! RS256) and checked against its JWKS, fetched and cached by `kid` (a new key is taken
//! without a restart, an old one honoured until it leaves the set); HS256 with a shared secret
//! in development only.

use crate::ErrorCode;
use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use jsonwebtoken::{
    decode, decode_header, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation,
};
use onsale_domain::AccountId;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

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
    /// A scanner's venue: it admits tickets of that venue's shows only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub venue: Option<String>,
    /// A scanner's shows: it admits tickets of these shows only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shows: Option<Vec<String>>,
}

/// The issuer and audience onsale signs and expects unless configured otherwise.
pub const DEFAULT_ISSUER: &str = "onsale";
pub const DEFAULT_AUDIENCE: &str = "onsale-api";
/// The longest a token may live (`exp - iat`) unless configured otherwise: one day.
pub const DEFAULT_MAX_LIFETIME_SECS: u64 = 86_400;
/// The longest an admin's token may live unless configured otherwise: an hour.
pub const DEFAULT_ADMIN_MAX_LIFETIME_SECS: u64 = 3_600;
/// The asymmetric algorithms an identity provider's tokens may be signed with.
pub const PROVIDER_ALGORITHMS: [Algorithm; 3] =
    [Algorithm::EdDSA, Algorithm::ES256, Algorithm::RS256];
/// An unknown `kid` fetches the JWKS again at most this often (a flood of made-up kids costs
/// the provider one fetch per interval).
const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(10);
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

/// Signs a scanner's token, with the default issuer and audience, for the gates it admits at.
pub fn mint_scanner(
    secret: &str,
    sub: &str,
    gates: &Gates,
    ttl_secs: u64,
) -> anyhow::Result<String> {
    let mut claims = claims_for(
        DEFAULT_ISSUER,
        DEFAULT_AUDIENCE,
        sub,
        Role::Scanner,
        ttl_secs,
    );
    match gates {
        Gates::Venue(v) => claims.venue = Some(v.clone()),
        Gates::Shows(s) => claims.shows = Some(s.clone()),
    }
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
        venue: None,
        shows: None,
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
    /// A scanner's gates: the venue or shows it may admit tickets of (always set for a
    /// scanner: a scanner token without one is refused).
    pub gates: Option<Gates>,
}

/// What a scanner's token lets it admit: a venue's shows, or named shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gates {
    Venue(String),
    Shows(Vec<String>),
}

impl Gates {
    /// Whether a ticket of `show`, at `venue`, may be admitted through these gates.
    pub fn admit(&self, show: &str, venue: &str) -> bool {
        match self {
            Self::Venue(v) => v == venue,
            Self::Shows(shows) => shows.iter().any(|s| s == show),
        }
    }
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
        Verifier::from_ref(state).verify_fresh(token).await
    }
}

fn unauthenticated(detail: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated, detail)
}

/// An identity provider's signing keys (its JWKS), by `kid`: fetched at start and every
/// refresh, and again (at most every [`REFETCH_AT_MOST_EVERY`]) when a token names a kid not
/// in the set, so a provider's new key is taken at once. A key that left the set is forgotten
/// at the next fetch: its tokens are refused from then on.
pub struct Jwks {
    url: String,
    http: reqwest::Client,
    keys: RwLock<Arc<HashMap<String, (Algorithm, DecodingKey)>>>,
    /// When the last fetch for an unknown kid started; held while one is under way (one at a
    /// time, the others waiting for its result).
    fetched: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwks")
            .field("url", &self.url)
            .field("kids", &self.kids())
            .finish_non_exhaustive()
    }
}

impl Jwks {
    pub fn new(url: &str) -> Arc<Self> {
        Arc::new(Self {
            url: url.to_owned(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap_or_default(),
            keys: RwLock::default(),
            fetched: tokio::sync::Mutex::new(None),
        })
    }

    /// The key ids in the set now.
    pub fn kids(&self) -> Vec<String> {
        let mut kids: Vec<String> = self.current().keys().cloned().collect();
        kids.sort();
        kids
    }

    fn current(&self) -> Arc<HashMap<String, (Algorithm, DecodingKey)>> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Fetches the set and replaces the keys with it; answers how many it holds. On failure the
    /// keys stay as they were.
    pub async fn refresh(&self) -> anyhow::Result<usize> {
        self.fetch().await
    }

    async fn fetch(&self) -> anyhow::Result<usize> {
        let body: serde_json::Value = self
            .http
            .get(&self.url)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let keys = parse_jwks(&body);
        let n = keys.len();
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
        Ok(n)
    }

    /// A token named `kid`, not in the set: the set is fetched again unless it was within
    /// [`REFETCH_AT_MOST_EVERY`] (one fetch at a time; those waiting see its result).
    async fn missing(&self, kid: &str) {
        let mut fetched = self.fetched.lock().await;
        if self.current().contains_key(kid)
            || fetched.is_some_and(|at| at.elapsed() < REFETCH_AT_MOST_EVERY)
        {
            return;
        }
        *fetched = Some(Instant::now());
        match self.fetch().await {
            Ok(n) => {
                tracing::debug!(url = %self.url, %kid, keys = n, "identity provider's keys fetched for an unknown kid")
            }
            Err(e) => {
                tracing::warn!(url = %self.url, error = %e, "the identity provider's keys were not fetched")
            }
        }
    }

    /// Fetches the set every `every` until `stop` (the first at once): keys that left it are
    /// refused from the next fetch on.
    pub async fn keep_fresh(
        self: Arc<Self>,
        every: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while stop.run_until_cancelled(tick.tick()).await.is_some() {
            match self.refresh().await {
                Ok(n) => {
                    tracing::debug!(url = %self.url, keys = n, "identity provider's keys fetched")
                }
                Err(e) => {
                    tracing::warn!(url = %self.url, error = %e, "the identity provider's keys were not fetched; the last ones stay")
                }
            }
        }
    }
}

/// The signing keys of a JWKS document, by kid: each a key of [`PROVIDER_ALGORITHMS`] with a
/// kid, its algorithm named or implied by its type; any other key (an encryption key, a
/// shared secret, a type this build does not know) is left out, never the whole set.
pub fn parse_jwks(doc: &serde_json::Value) -> HashMap<String, (Algorithm, DecodingKey)> {
    use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
    let mut keys = HashMap::new();
    for raw in doc["keys"].as_array().into_iter().flatten() {
        let Ok(jwk) = serde_json::from_value::<Jwk>(raw.clone()) else {
            continue;
        };
        let Some(kid) = jwk.common.key_id.clone() else {
            continue;
        };
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let implied = match &jwk.algorithm {
            AlgorithmParameters::OctetKeyPair(_) => Some(Algorithm::EdDSA),
            AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => {
                Some(Algorithm::ES256)
            }
            AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
            _ => None,
        };
        let alg = match jwk.common.key_algorithm {
            Some(KeyAlgorithm::EdDSA) => Some(Algorithm::EdDSA),
            Some(KeyAlgorithm::ES256) => Some(Algorithm::ES256),
            Some(KeyAlgorithm::RS256) => Some(Algorithm::RS256),
            Some(_) => None,
            None => implied,
        };
        // The named algorithm must fit the key's type (an "EdDSA" RSA key is no key).
        let Some(alg) = alg.filter(|a| Some(*a) == implied) else {
            continue;
        };
        if let Ok(key) = DecodingKey::from_jwk(&jwk) {
            keys.insert(kid, (alg, key));
        }
    }
    keys
}

/// Checks bearer tokens: the signature (an identity provider's key from its JWKS, by `kid`;
/// or, in development only, HS256 with the shared secret), issuer, audience, `exp` and `nbf`
/// (with 30 s of leeway), and a lifetime (`exp - iat`) no longer than the cap (an admin's
/// shorter). Cloned with every request's state, so shared: its validation rules are sets of
/// strings, and copying them per request showed as a tenth of the hold path's time in the
/// allocator.
#[derive(Clone)]
pub struct Verifier {
    inner: Arc<Rules>,
}

struct Rules {
    /// Development only: the shared secret's key.
    shared: Option<DecodingKey>,
    provider: Option<Arc<Jwks>>,
    validations: HashMap<Algorithm, Validation>,
    max_lifetime_secs: u64,
    admin_max_lifetime_secs: u64,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.inner.validations.values().next();
        f.debug_struct("Verifier")
            .field("iss", &v.map(|v| &v.iss))
            .field("aud", &v.map(|v| &v.aud))
            .field("shared_secret", &self.inner.shared.is_some())
            .field("provider", &self.inner.provider)
            .field("max_lifetime_secs", &self.inner.max_lifetime_secs)
            .finish_non_exhaustive()
    }
}

/// Why a token was not taken: one the caller is told only as "not valid", or a key not (yet)
/// in the provider's set.
enum Refusal {
    Invalid(String),
    UnknownKey(String),
}

impl Verifier {
    /// Checks tokens signed with `secret` (HS256; development) when given, issued by `iss`,
    /// and tokens signed by the identity provider whose keys `provider` holds when given,
    /// issued by its issuer (`provider_iss`, `iss` when `None`).
    pub fn new(
        secret: Option<&str>,
        provider: Option<Arc<Jwks>>,
        provider_iss: Option<&str>,
        iss: &str,
        aud: &str,
        max_lifetime_secs: u64,
        admin_max_lifetime_secs: u64,
    ) -> Self {
        let validations = std::iter::once(Algorithm::HS256)
            .chain(PROVIDER_ALGORITHMS)
            .map(|alg| {
                let mut v = Validation::new(alg);
                let issuer = match alg {
                    Algorithm::HS256 => iss,
                    _ => provider_iss.unwrap_or(iss),
                };
                v.set_issuer(&[issuer]);
                v.set_audience(&[aud]);
                v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
                v.validate_nbf = true;
                v.leeway = LEEWAY_SECS;
                (alg, v)
            })
            .collect();
        Self {
            inner: Arc::new(Rules {
                shared: secret.map(|s| DecodingKey::from_secret(s.as_bytes())),
                provider,
                validations,
                max_lifetime_secs,
                admin_max_lifetime_secs,
            }),
        }
    }

    /// A verifier of HS256 tokens with `secret` and the default issuer, audience and lifetime
    /// caps (tests).
    pub fn with_defaults(secret: &str) -> Self {
        Self::new(
            Some(secret),
            None,
            None,
            DEFAULT_ISSUER,
            DEFAULT_AUDIENCE,
            DEFAULT_MAX_LIFETIME_SECS,
            DEFAULT_ADMIN_MAX_LIFETIME_SECS,
        )
    }

    /// The identity provider's keys, when tokens are checked against them.
    pub fn provider(&self) -> Option<&Arc<Jwks>> {
        self.inner.provider.as_ref()
    }

    /// The caller a bearer token names, with the keys this process has now (a kid it does not
    /// know is refused). Why a token was refused is logged, never told: the caller learns only
    /// that it was.
    pub fn verify(&self, token: &str) -> Result<Caller, ApiError> {
        self.check(token).map_err(refused)
    }

    /// As [`Verifier::verify`], but a token naming a key not in the provider's set fetches the
    /// set again first (at most every 10 s): a provider's new key is taken at once.
    pub async fn verify_fresh(&self, token: &str) -> Result<Caller, ApiError> {
        match (self.check(token), &self.inner.provider) {
            (Err(Refusal::UnknownKey(kid)), Some(provider)) => {
                provider.missing(&kid).await;
                self.verify(token)
            }
            (checked, _) => checked.map_err(refused),
        }
    }

    fn check(&self, token: &str) -> Result<Caller, Refusal> {
        let rules = &*self.inner;
        // No provider (development): HS256 alone, one decode, its header read once.
        if rules.provider.is_none() {
            let shared = rules
                .shared
                .as_ref()
                .ok_or_else(|| Refusal::Invalid("no key to check tokens with".into()))?;
            return self.caller(token, shared, Algorithm::HS256);
        }
        let header = decode_header(token).map_err(|e| Refusal::Invalid(e.to_string()))?;
        let provider_key;
        let key = match header.alg {
            Algorithm::HS256 => rules
                .shared
                .as_ref()
                .ok_or_else(|| Refusal::Invalid("HS256 outside development mode".into()))?,
            alg if PROVIDER_ALGORITHMS.contains(&alg) => {
                let provider = rules
                    .provider
                    .as_ref()
                    .ok_or_else(|| Refusal::Invalid("no identity provider is configured".into()))?;
                let kid = header
                    .kid
                    .ok_or_else(|| Refusal::Invalid("no kid in the header".into()))?;
                let keys = provider.current();
                match keys.get(&kid) {
                    Some((key_alg, key)) if *key_alg == alg => {
                        provider_key = key.clone();
                        &provider_key
                    }
                    Some(_) => {
                        return Err(Refusal::Invalid(format!("{kid} is not an {alg:?} key")))
                    }
                    None => return Err(Refusal::UnknownKey(kid)),
                }
            }
            alg => return Err(Refusal::Invalid(format!("{alg:?} is not accepted"))),
        };
        self.caller(token, key, header.alg)
    }

    /// The caller `token` names, its signature checked with `key` as `alg`.
    fn caller(&self, token: &str, key: &DecodingKey, alg: Algorithm) -> Result<Caller, Refusal> {
        let rules = &*self.inner;
        let validation = &rules.validations[&alg];
        let data = decode::<Claims>(token, key, validation)
            .map_err(|e| Refusal::Invalid(e.to_string()))?;
        let c = data.claims;
        let cap = match c.role {
            Role::Admin => rules.admin_max_lifetime_secs.min(rules.max_lifetime_secs),
            _ => rules.max_lifetime_secs,
        };
        if c.exp.saturating_sub(c.iat) > cap || c.iat > now_secs() + LEEWAY_SECS {
            return Err(Refusal::Invalid(format!(
                "lives too long: iat {} exp {} (cap {cap} s)",
                c.iat, c.exp
            )));
        }
        let account =
            AccountId::parse(&c.sub).map_err(|e| Refusal::Invalid(format!("sub: {e}")))?;
        let gates = match (c.role, c.venue, c.shows) {
            (Role::Scanner, _, Some(shows)) if !shows.is_empty() => Some(Gates::Shows(shows)),
            (Role::Scanner, Some(venue), _) => Some(Gates::Venue(venue)),
            (Role::Scanner, _, _) => {
                return Err(Refusal::Invalid(
                    "a scanner token names no venue or shows".into(),
                ))
            }
            _ => None,
        };
        Ok(Caller {
            account,
            role: c.role,
            verified: c.verified,
            gates,
        })
    }
}

fn refused(r: Refusal) -> ApiError {
    match r {
        Refusal::Invalid(why) => tracing::debug!(%why, "bearer token refused"),
        Refusal::UnknownKey(kid) => {
            tracing::debug!(%kid, "bearer token refused: its key is not in the provider's set")
        }
    }
    unauthenticated("the bearer token is not valid")
}

/// How this process checks (and, for development tokens, signs) bearer tokens, and whether
/// development mode is on.
#[derive(Debug, Clone, clap::Args)]
pub struct AuthSettings {
    /// The identity provider's JWKS (its `jwks_uri`): tokens signed with EdDSA, ES256 or
    /// RS256 by one of its keys are accepted. Required unless development mode is on.
    #[arg(long, env = "ONSALE_JWKS_URL")]
    pub jwks_url: Option<String>,
    /// The issuer (`iss`) the identity provider's tokens name, when it is not
    /// `ONSALE_JWT_ISSUER` (the development tokens' then keep theirs).
    #[arg(long, env = "ONSALE_JWKS_ISSUER")]
    pub jwks_issuer: Option<String>,
    /// How often the JWKS is fetched again (a token naming an unknown key fetches it at once,
    /// at most every 10 s): a key the provider retired is refused from the next fetch.
    #[arg(long, env = "ONSALE_JWKS_REFRESH_SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub jwks_refresh_secs: u64,
    /// HS256 secret for development tokens (`onsale token`, the local stack's sign-in):
    /// accepted in development mode only, and refused if set outside it.
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
    /// The longest lifetime an admin's token may have (never more than the above).
    #[arg(long, env = "ONSALE_JWT_ADMIN_MAX_LIFETIME_SECS", default_value_t = DEFAULT_ADMIN_MAX_LIFETIME_SECS)]
    pub jwt_admin_max_lifetime_secs: u64,
    /// Development mode: secrets left unset take built-in development values and short ones
    /// are accepted. `make up`, `make demo` and the tests turn it on; never in production.
    #[arg(long = "dev-mode", env = "ONSALE_DEV_MODE", default_value_t = false, value_parser = clap::builder::BoolishValueParser::new())]
    pub dev_mode: bool,
}

impl AuthSettings {
    /// The verifier these settings describe: the provider's keys when a JWKS is named (fetched
    /// once the caller runs [`Jwks::keep_fresh`]), the shared secret in development mode. Build
    /// one per process and share it: each holds its own copy of the provider's keys.
    pub fn verifier(&self) -> Verifier {
        Verifier::new(
            self.dev_mode.then(|| self.jwt_secret.expose_secret()),
            self.jwks_url.as_deref().map(Jwks::new),
            self.jwks_issuer.as_deref(),
            &self.jwt_issuer,
            &self.jwt_audience,
            self.jwt_max_lifetime_secs,
            self.jwt_admin_max_lifetime_secs,
        )
    }

    /// The longest a token of `role` may live.
    pub fn max_lifetime_secs(&self, role: Role) -> u64 {
        match role {
            Role::Admin => self
                .jwt_admin_max_lifetime_secs
                .min(self.jwt_max_lifetime_secs),
            _ => self.jwt_max_lifetime_secs,
        }
    }

    /// Signs a development token (HS256) for `sub` in `role`, valid for `ttl_secs`;
    /// `verified` sets the claim, `gates` a scanner's venue or shows.
    pub fn mint(
        &self,
        sub: &str,
        role: Role,
        verified: bool,
        gates: Option<&Gates>,
        ttl_secs: u64,
    ) -> anyhow::Result<String> {
        anyhow::ensure!(
            self.dev_mode,
            "development tokens (HS256) are for development mode only (ONSALE_DEV_MODE=1): \
             outside it tokens come from the identity provider"
        );
        let mut claims = claims_for(&self.jwt_issuer, &self.jwt_audience, sub, role, ttl_secs);
        claims.verified = verified;
        match gates {
            Some(Gates::Venue(v)) => claims.venue = Some(v.clone()),
            Some(Gates::Shows(s)) => claims.shows = Some(s.clone()),
            None => {}
        }
        encode_claims(self.jwt_secret.expose_secret(), &claims)
    }

    /// These settings with the secret checked: see [`AuthSettings::secure`].
    pub fn secured(mut self) -> Result<Self, SecretError> {
        self.secure()?;
        Ok(self)
    }

    /// In development mode the JWT secret defaulted (see [`require_secret`]); outside it an
    /// identity provider's JWKS is required and a shared secret refused (HS256 tokens are
    /// development's).
    pub fn secure(&mut self) -> Result<(), SecretError> {
        if self.dev_mode {
            return require_secret(
                &mut self.jwt_secret,
                "ONSALE_JWT_SECRET",
                "onsale-dev-secret",
                true,
            );
        }
        if !self.jwt_secret.expose_secret().is_empty() {
            return Err(SecretError::DevelopmentOnly("ONSALE_JWT_SECRET"));
        }
        match self.jwks_url.as_deref() {
            Some(url) if url.starts_with("https://") || url.starts_with("http://") => Ok(()),
            _ => Err(SecretError::NoIdentityProvider),
        }
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
    #[error("ONSALE_JWKS_URL is not set: outside development mode bearer tokens are checked against an identity provider's keys (its JWKS URL; HS256 with a shared secret is for development only)")]
    NoIdentityProvider,
    #[error("{0} is for development mode only: outside it bearer tokens come from the identity provider (ONSALE_JWKS_URL)")]
    DevelopmentOnly(&'static str),
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
#[path = "auth_tests.rs"]
mod tests;
