//! The virtual waiting room (design.md §7): fans join a
//! show's line and get a position and a signed queue token; an admitter moves one integer per
//! show (`admitted_through`) so that live sessions stay at the concurrency target N; a fan the
//! line has passed trades a signed, single-use admission token for a session lease, which holds
//! and orders of the show require. N is pushed down to zero by the booking path's own health and
//! ramps back when it recovers; the pause is published and extends admissions already given.
//!
//! State lives in Redis ([`store`]); every call on a fan's path is one round trip. The queue is a
//! concurrency limiter and a fairness promise, never a bypass: the booking rules underneath are
//! unchanged. It does not decide anything about seats.

pub mod admitter;
pub mod api;
pub mod challenge;
pub mod controller;
pub mod eta;
pub mod fallback;
pub mod sale;
pub mod store;
pub mod tokens;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use onsale_domain::{AccountId, ShowId};
use onsale_edge::admission::{GateFuture, GateRefusal, SessionGate};
use onsale_edge::ApiError;
use onsale_eventlog::Catalog;
use secrecy::{ExposeSecret, SecretString};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

pub use store::Store;
pub use tokens::Signer;

/// Printed (`Debug`) with the Redis URL's password redacted and the secret withheld.
#[derive(Clone, clap::Args)]
pub struct WaitingRoomConfig {
    /// Redis for the waiting room; without it shows with `waitingRoom: true` are refused.
    #[arg(id = "redis_url", long = "redis-url", env = "ONSALE_REDIS_URL")]
    pub redis_url: Option<String>,
    /// The CA (a PEM file) a `rediss://` Redis's certificate must chain to; unset: the
    /// system's roots.
    #[arg(
        id = "redis_ca_file",
        long = "redis-ca-file",
        env = "ONSALE_REDIS_CA_FILE"
    )]
    pub redis_ca_file: Option<std::path::PathBuf>,
    /// The concurrency target N: live sessions the booking path is sized for (seed it from a
    /// capacity test: Little's law on the hold pool and its p99; BENCHMARKS.md).
    #[arg(
        id = "admission_target",
        long = "admission-target",
        env = "ONSALE_ADMISSION_TARGET",
        default_value_t = 2_000
    )]
    pub target: u64,
    /// The least N may follow the sale down to (unset: N stays the target). With a bound set,
    /// each show's N follows its measured conversion and seats left (sale.rs, Little's law),
    /// starting from the target until the sale has said enough.
    #[arg(
        id = "admission_target_min",
        long = "admission-target-min",
        env = "ONSALE_ADMISSION_TARGET_MIN"
    )]
    pub target_min: Option<u64>,
    /// The most N may follow the sale up to (unset: the target).
    #[arg(
        id = "admission_target_max",
        long = "admission-target-max",
        env = "ONSALE_ADMISSION_TARGET_MAX"
    )]
    pub target_max: Option<u64>,
    /// How often (milliseconds) the admitter admits the next fans of each line and the
    /// controller reads the booking path's health.
    #[arg(
        id = "admission_tick_ms",
        long = "admission-tick-ms",
        env = "ONSALE_ADMISSION_TICK_MS",
        default_value_t = 500
    )]
    pub tick_ms: u64,
    /// The grace window: how long an admitted fan has to enter.
    #[arg(
        id = "admission_grace_secs",
        long = "admission-grace-secs",
        env = "ONSALE_ADMISSION_GRACE_SECS",
        default_value_t = 60
    )]
    pub grace_secs: u64,
    /// A session's lease; a heartbeat renews it.
    #[arg(
        id = "session_lease_secs",
        long = "session-lease-secs",
        env = "ONSALE_SESSION_LEASE_SECS",
        default_value_t = 120
    )]
    pub lease_secs: u64,
    /// The hold p99 above which admission pauses.
    #[arg(
        id = "admission_hold_p99_ms",
        long = "admission-hold-p99-ms",
        env = "ONSALE_ADMISSION_HOLD_P99_MS",
        default_value_t = 500
    )]
    pub hold_p99_ms: u64,
    /// Admissions per second per process while Redis is unreachable (no positions then).
    #[arg(
        id = "admission_fallback_per_sec",
        long = "admission-fallback-per-sec",
        env = "ONSALE_ADMISSION_FALLBACK_PER_SEC",
        default_value_t = 5
    )]
    pub fallback_per_sec: u32,
    /// The key the waiting room's tokens are signed with: at least 32 bytes (required unless
    /// development mode is on).
    #[arg(
        id = "admission_secret",
        long = "admission-secret",
        env = "ONSALE_ADMISSION_SECRET",
        default_value = "",
        hide_default_value = true,
        value_parser = onsale_edge::auth::secret
    )]
    pub secret: SecretString,
}

impl WaitingRoomConfig {
    /// A client of the Redis at `url` (the waiting room's, which the rate limits share), over
    /// TLS for `rediss://` with [`WaitingRoomConfig::redis_ca_file`].
    pub fn redis_client(&self, url: &str) -> anyhow::Result<redis::Client> {
        onsale_edge::redis_tls::client(url, self.redis_ca_file.as_deref())
    }
}

impl std::fmt::Debug for WaitingRoomConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitingRoomConfig")
            .field(
                "redis_url",
                &self.redis_url.as_deref().map(onsale_telemetry::redact_url),
            )
            .field("redis_ca_file", &self.redis_ca_file)
            .field("target", &self.target)
            .field("target_min", &self.target_min)
            .field("target_max", &self.target_max)
            .field("tick_ms", &self.tick_ms)
            .field("grace_secs", &self.grace_secs)
            .field("lease_secs", &self.lease_secs)
            .field("fallback_per_sec", &self.fallback_per_sec)
            .field("secret", &self.secret)
            .finish()
    }
}

/// What the waiting room needs to know of a show's schedule. Fixed when the show is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShowFacts {
    pub waiting_room: bool,
    pub on_sale_at: DateTime<Utc>,
    pub starts_at: DateTime<Utc>,
}

/// Who may join a show's line (the on-sale policies in force: an admin may change them, so
/// they are read again every few seconds, unlike the facts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JoinRules {
    /// Only accounts whose token carries the `verified` claim.
    pub verified_only: bool,
    /// The proof of work a join carries, in leading zero bits; 0: none.
    pub challenge_bits: u8,
}

/// How long a show's join rules are used before they are read again.
const RULES_FOR: Duration = Duration::from_secs(2);

/// A process's waiting room: the store, the signer, its position blocks and the fallback pace.
#[derive(Clone, Debug)]
pub struct WaitingRoom {
    pub store: Store,
    pub signer: Signer,
    pub config: WaitingRoomConfig,
    /// The read models (the seat map's counts) and the database's health.
    pub pool: PgPool,
    /// Where a show's [`ShowFacts`] and [`JoinRules`] are read: the catalog beside the log,
    /// never the show's owner.
    pub catalog: Catalog,
    /// Cancelled when the process shuts down: the admitter stops, status streams end.
    pub shutdown: CancellationToken,
    /// Per show, the next position of this process's block and the block's last. One lock for
    /// the whole map, held while a new block is fetched: concurrent joins must not each fetch
    /// a block and leave all but one of them as holes in the line.
    blocks: Arc<tokio::sync::Mutex<HashMap<ShowId, (i64, i64)>>>,
    rules: moka::future::Cache<ShowId, JoinRules>,
    fallback: Arc<Mutex<(f64, std::time::Instant)>>,
    /// While Redis is away, the admission this process gave each account for each show, kept
    /// for the grace it has to enter: asked again, the account gets the same one, and takes no
    /// second place of the fallback's pace (issue 53, item 11: one account asking over and
    /// over took one place each time, and the others' with it).
    fallback_issued: moka::sync::Cache<(ShowId, String), (String, i64)>,
}

pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

impl WaitingRoom {
    pub async fn connect(
        config: WaitingRoomConfig,
        pool: PgPool,
        catalog: Catalog,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Option<Self>> {
        let Some(url) = config.redis_url.clone() else {
            return Ok(None);
        };
        let store = Store::connect(config.redis_client(&url)?, &shutdown).await?;
        let grace_secs = config.grace_secs;
        Ok(Some(Self {
            store,
            signer: Signer::new(config.secret.expose_secret()),
            config,
            pool,
            catalog,
            shutdown,
            blocks: Arc::default(),
            rules: moka::future::Cache::builder()
                .time_to_live(RULES_FOR)
                .max_capacity(100_000)
                .build(),
            fallback: Arc::new(Mutex::new((0.0, std::time::Instant::now()))),
            fallback_issued: moka::sync::Cache::builder()
                .time_to_live(Duration::from_secs(grace_secs.max(1)))
                .max_capacity(1_000_000)
                .build(),
        }))
    }

    /// Starts the admitter replica and the stall watchdog of this process.
    /// `write_path` says whether the owners' appends would go through now (the controller's
    /// store signal), `processor` whether the card processor is answering the payments.
    pub fn spawn_admitter(
        &self,
        health: Arc<onsale_edge::admission::BookingHealth>,
        write_path: onsale_edge::admission::WriteProbe,
        processor: onsale_edge::admission::ProcessorProbe,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let stop = &self.shutdown;
        vec![
            tokio::spawn(
                admitter::Admitter::new(self.clone(), health, write_path, processor)
                    .run(stop.clone()),
            ),
            tokio::spawn(admitter::watchdog(
                self.clone(),
                Duration::from_secs(5),
                stop.clone(),
            )),
        ]
    }

    /// The show's facts, from the catalog (which reads a show's schedule once and keeps it: it
    /// never changes).
    pub async fn facts(&self, show: ShowId) -> Result<ShowFacts, ApiError> {
        let s = self.catalog.get(show).await?;
        Ok(ShowFacts {
            waiting_room: s.info.waiting_room,
            on_sale_at: s.info.on_sale_at,
            starts_at: s.info.starts_at,
        })
    }

    /// Who may join the show's line (read at most every [`RULES_FOR`] per show).
    pub async fn rules(&self, show: ShowId) -> Result<JoinRules, ApiError> {
        if let Some(r) = self.rules.get(&show).await {
            return Ok(r);
        }
        let (_, policy) = self.catalog.policy(show).await?;
        let rules = JoinRules {
            verified_only: policy.require_verified_account,
            challenge_bits: policy.join_challenge_bits,
        };
        self.rules.insert(show, rules).await;
        Ok(rules)
    }

    /// The next position from this process's block (a new block from Redis when it runs out):
    /// the counter is touched once per 100 joins, not on every one.
    pub async fn candidate(&self, show: ShowId, opens_at_ms: i64) -> redis::RedisResult<i64> {
        let mut blocks = self.blocks.lock().await;
        if let Some((next, end)) = blocks.get_mut(&show) {
            if *next <= *end {
                *next += 1;
                return Ok(*next - 1);
            }
        }
        let Some(end) = self.store.take_block(show, now_ms(), opens_at_ms).await? else {
            return Ok(0);
        };
        let start = end - store::BLOCK + 1;
        blocks.insert(show, (start + 1, end));
        Ok(start)
    }

    /// While Redis is away: one admission per `1/fallback_per_sec` seconds per process, no
    /// positions. A fixed, conservative pace: never an open gate.
    pub fn fallback_permit(&self) -> bool {
        let mut b = self.fallback.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let rate = f64::from(self.config.fallback_per_sec);
        b.0 = (b.0 + now.duration_since(b.1).as_secs_f64() * rate).min(rate.max(1.0));
        b.1 = now;
        if b.0 >= 1.0 {
            b.0 -= 1.0;
            true
        } else {
            false
        }
    }

    /// The fallback admission for `account` at `show`: the one given before while its grace
    /// runs, else a new one made by `issue` (`(token, enter by, ms)`) if the pace has a place
    /// now, else none.
    pub fn fallback_admission(
        &self,
        show: ShowId,
        account: &str,
        issue: impl FnOnce() -> (String, i64),
    ) -> Option<(String, i64)> {
        let key = (show, account.to_owned());
        if let Some(given) = self.fallback_issued.get(&key) {
            return Some(given);
        }
        if !self.fallback_permit() {
            return None;
        }
        let given = issue();
        self.fallback_issued.insert(key, given.clone());
        Some(given)
    }

    pub fn grace(&self) -> Duration {
        Duration::from_secs(self.config.grace_secs)
    }

    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.config.lease_secs)
    }
}

fn admission_required(detail: &str) -> GateRefusal {
    GateRefusal::AdmissionRequired(detail.to_owned())
}

impl SessionGate for WaitingRoom {
    /// A live session of this account for this show: the token's MAC, then its lease in Redis.
    /// Redis away: the lease signed into the token stands in (a session that was admitted keeps
    /// going; nobody new gets in except at the fallback pace).
    fn check<'a>(
        &'a self,
        show: ShowId,
        account: &'a AccountId,
        session: Option<&'a str>,
    ) -> GateFuture<'a> {
        Box::pin(async move {
            let Some(token) = session else {
                return Err(admission_required(
                    "this show sells through its waiting room: send X-Onsale-Session",
                ));
            };
            let claims: tokens::SessionClaims = self
                .signer
                .verify(token, tokens::SESSION, account.as_str(), &show.to_string())
                .map_err(|_| admission_required("the session is not yours, or not valid"))?;
            let now = now_ms();
            let live = if claims.fallback {
                fallback::live(&self.pool, &claims.sid, &show.to_string(), account.as_str())
                    .await
                    .map_err(|e| {
                        tracing::warn!(error = %e, "the fallback's sessions are unreachable");
                        GateRefusal::Unavailable
                    })?
            } else {
                match self.store.lease(show, &claims.sid).await {
                    Ok(lease) => lease.is_some_and(|l| l > now),
                    Err(e) => {
                        tracing::warn!(error = %e, "redis unreachable; checking the signed lease");
                        claims.lease_ms > now
                    }
                }
            };
            if live {
                Ok(())
            } else {
                Err(admission_required(
                    "the session's lease has expired: rejoin the line",
                ))
            }
        })
    }
}
