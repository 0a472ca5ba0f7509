//! What keeps one process standing under abuse: a cap on long-lived streams (SSE, gRPC
//! streams, the waiting room's), rate limits per account and per client address (GCRA,
//! `governor`), and a bound on how long a request may take. Each refusal is problem+json with
//! `Retry-After`: 503 past a cap or a deadline, 429 past a rate.

use crate::ErrorCode;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ipnet::IpNet;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::Verifier;
use crate::problem::ApiError;

/// The limits of one process (flattened into `onsale serve`'s settings).
#[derive(Debug, Clone, clap::Args)]
pub struct LimitSettings {
    /// Most long-lived streams (SSE, gRPC `StreamDeltas`, the waiting room's) open at once in
    /// this process; past it a new one is answered 503 with `Retry-After`.
    #[arg(long, env = "ONSALE_MAX_STREAMS", default_value_t = 20_000)]
    pub max_streams: usize,
    /// Most waiting-room status streams open at once in this process: slots of their own, so
    /// seat-map streams cannot take the ones fans in a line read their turn through.
    #[arg(long, env = "ONSALE_MAX_QUEUE_STREAMS", default_value_t = 20_000)]
    pub max_queue_streams: usize,
    /// Most streams one client address (an IPv6 client's /64) may have open at once in this
    /// process, of each kind; past it a new one is answered 429 `TOO_MANY_STREAMS` (0: no cap).
    /// Many fans share an address behind a NAT, so this is a ceiling, not one fan's need.
    #[arg(long, env = "ONSALE_MAX_STREAMS_PER_ADDRESS", default_value_t = 500)]
    pub max_streams_per_address: usize,
    /// Most streams one account may have open at once in this process, of each kind (a fan
    /// with a few tabs); past it 429 `TOO_MANY_STREAMS` (0: no cap).
    #[arg(long, env = "ONSALE_MAX_STREAMS_PER_ACCOUNT", default_value_t = 16)]
    pub max_streams_per_account: usize,
    /// Longest a request may take to be answered (a stream: until its first byte), in
    /// milliseconds; past it: 503 `REQUEST_TIMEOUT` with `Retry-After`.
    #[arg(long, env = "ONSALE_REQUEST_TIMEOUT_MS", default_value_t = 10_000)]
    pub request_timeout_ms: u64,
    /// Writes that reach a show (holds, their release, orders, cancellations), joins and
    /// scans per second one account may make (0: no limit).
    #[arg(long, env = "ONSALE_RATE_ACCOUNT_PER_SEC", default_value_t = 10)]
    pub rate_account_per_sec: u32,
    /// How many of them one account may make at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_ACCOUNT_BURST", default_value_t = 20)]
    pub rate_account_burst: u32,
    /// The same writes per second from one client address, counted after the account's own
    /// limit (so a bot's refused requests take nothing from the fans behind its address): a
    /// ceiling for many accounts behind one NAT or proxy (0: no limit). The local stack turns
    /// it off: every simulated fan comes from 127.0.0.1.
    #[arg(long, env = "ONSALE_RATE_ADDRESS_PER_SEC", default_value_t = 200)]
    pub rate_address_per_sec: u32,
    /// How many of them one address may make at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_ADDRESS_BURST", default_value_t = 400)]
    pub rate_address_burst: u32,
    /// An IPv6 client's address is its /64 (what one subscriber is given); the /48 around it
    /// (what one site is given, 65,536 of them) has budgets this many times an address's, for
    /// writes and for reads without a token, so rotating through a /48 buys little (0: none).
    #[arg(long, env = "ONSALE_RATE_PREFIX48_FACTOR", default_value_t = 16)]
    pub rate_prefix48_factor: u32,
    /// Reads without a bearer token (event pages, seat maps, search, SSE and gRPC reads) per
    /// second from one client address: many people behind one NAT browse anonymously, so
    /// this is an address's ceiling, not one person's pace (0: no limit).
    #[arg(long, env = "ONSALE_RATE_READ_ADDRESS_PER_SEC", default_value_t = 100)]
    pub rate_read_address_per_sec: u32,
    /// How many of them one address may make at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_READ_ADDRESS_BURST", default_value_t = 200)]
    pub rate_read_address_burst: u32,
    /// Reads with a bearer token per second per account: one person at a seat map (a map, a
    /// stream, an order's status now and then), so far less than an address's (0: no limit).
    #[arg(long, env = "ONSALE_RATE_READ_ACCOUNT_PER_SEC", default_value_t = 10)]
    pub rate_read_account_per_sec: u32,
    /// How many of them one account may make at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_READ_ACCOUNT_BURST", default_value_t = 30)]
    pub rate_read_account_burst: u32,
    /// Reads answered "not found" per second per caller (its account with a token, else its
    /// address) before the caller's reads are refused for a while (10 s): a
    /// client that keeps naming shows, orders or holds that do not exist is enumerating, and
    /// each miss costs a lookup (0: no limit).
    #[arg(long, env = "ONSALE_RATE_MISSES_PER_SEC", default_value_t = 1)]
    pub rate_misses_per_sec: u32,
    /// How many misses a caller may have at once before the rate applies.
    #[arg(long, env = "ONSALE_RATE_MISSES_BURST", default_value_t = 20)]
    pub rate_misses_burst: u32,
    /// The proxies whose `X-Forwarded-For` is believed (addresses or CIDR blocks, comma
    /// separated): the client is the last address of the header that is not one of them. A
    /// header from any other peer is ignored (anyone can write one).
    #[arg(long, env = "ONSALE_TRUSTED_PROXIES", value_delimiter = ',', value_parser = proxy)]
    pub trusted_proxies: Vec<IpNet>,
}

fn proxy(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("{s} is neither an address nor a CIDR block"))
}

/// A per-process cap on open streams, and a cap per client address and per account within
/// it: a stream holds a [`StreamSlot`] for as long as it runs.
#[derive(Debug, Clone)]
pub struct StreamSlots {
    slots: Arc<Semaphore>,
    clients: Arc<StreamClients>,
}

/// The streams each client has open, against its caps (0: none).
#[derive(Debug)]
struct StreamClients {
    per_address: usize,
    per_account: usize,
    open: std::sync::Mutex<std::collections::HashMap<StreamKey, usize>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum StreamKey {
    Address(IpAddr),
    Account(String),
}

impl StreamClients {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<StreamKey, usize>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One open stream's share of the caps: dropping it (the stream ending) frees it.
#[derive(Debug)]
pub struct StreamSlot {
    _permit: OwnedSemaphorePermit,
    keys: Vec<StreamKey>,
    clients: Arc<StreamClients>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.clients.lock();
        for key in self.keys.drain(..) {
            if let std::collections::hash_map::Entry::Occupied(mut e) = open.entry(key) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
    }
}

impl StreamSlots {
    /// `max` streams in all, `per_address` and `per_account` of them for one client (0: no
    /// cap).
    pub fn new(max: usize, per_address: usize, per_account: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
            clients: Arc::new(StreamClients {
                per_address,
                per_account,
                open: std::sync::Mutex::default(),
            }),
        }
    }

    /// The seat-map streams' slots of `settings` (SSE and gRPC `StreamDeltas`).
    pub fn for_seat_maps(settings: &LimitSettings) -> Self {
        Self::new(
            settings.max_streams,
            settings.max_streams_per_address,
            settings.max_streams_per_account,
        )
    }

    /// The waiting room's status streams' slots of `settings`.
    pub fn for_lines(settings: &LimitSettings) -> Self {
        Self::new(
            settings.max_queue_streams,
            settings.max_streams_per_address,
            settings.max_streams_per_account,
        )
    }

    /// A slot for a new stream of a client at `address` (see [`ClientAddress`]) signed in as
    /// `account`: 429 `TOO_MANY_STREAMS` when that account or address has as many open as it
    /// may, 503 `TOO_MANY_STREAMS` when this process has; both with `Retry-After`.
    pub fn open(
        &self,
        address: Option<IpAddr>,
        account: Option<&str>,
    ) -> Result<StreamSlot, ApiError> {
        let c = &self.clients;
        let keys: Vec<(StreamKey, usize, &'static str)> = [
            account.map(|a| {
                (
                    StreamKey::Account(a.to_owned()),
                    c.per_account,
                    "this account",
                )
            }),
            address.map(|ip| {
                (
                    StreamKey::Address(address_key(ip)),
                    c.per_address,
                    "this address",
                )
            }),
        ]
        .into_iter()
        .flatten()
        .filter(|(_, cap, _)| *cap > 0)
        .collect();
        let mut open = c.lock();
        if let Some((_, _, who)) = keys
            .iter()
            .find(|(key, cap, _)| open.get(key).is_some_and(|n| n >= cap))
        {
            metrics::counter!(names::STREAMS_REFUSED_TOTAL, "cap" => "client").increment(1);
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::TooManyStreams,
                format!("{who} has as many streams open as it may; close one, or retry later"),
            )
            .retry_after(5));
        }
        let permit = self.slots.clone().try_acquire_owned().map_err(|_| {
            metrics::counter!(names::STREAMS_REFUSED_TOTAL, "cap" => "process").increment(1);
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::TooManyStreams,
                "this server has as many open streams as it serves; retry shortly",
            )
            .retry_after(5)
        })?;
        let keys: Vec<StreamKey> = keys.into_iter().map(|(key, _, _)| key).collect();
        for key in &keys {
            *open.entry(key.clone()).or_insert(0) += 1;
        }
        Ok(StreamSlot {
            _permit: permit,
            keys,
            clients: self.clients.clone(),
        })
    }
}

/// Whether a request of `method` to `path` (a route's template will do) spends a budget, so
/// may be answered 429: what the OpenAPI document names 429 on.
pub fn budgeted(method: &Method, path: &str) -> bool {
    RateLimits::class(method, path, false, false) != Class::Free
}

/// The client's address as the limits see it (the peer's, or a trusted proxy's
/// `X-Forwarded-For`), put in each request's extensions by [`rate_limit`]: what the stream
/// caps count against.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub IpAddr);

/// The metrics this module counts.
pub mod names {
    pub const STREAMS_REFUSED_TOTAL: &str = "onsale_streams_refused_total";
    pub const RATE_LIMITED_TOTAL: &str = "onsale_rate_limited_total";
    pub const REQUESTS_TIMED_OUT_TOTAL: &str = "onsale_requests_timed_out_total";
    /// Limit checks decided by this node alone because Redis did not answer.
    pub const RATE_LIMIT_FALLBACKS_TOTAL: &str = "onsale_rate_limit_fallbacks_total";
}

/// What a request is, for the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A write that reaches a show's owner, a join or a scan: per account, then per address.
    Write,
    /// A read without a bearer token: per address.
    AnonymousRead,
    /// A read with one: per account.
    AccountRead,
    /// Not limited (probes, static files, webhooks).
    Free,
}

/// Whose budget: an account's or an address's, for writes or for reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Account(String),
    Address(IpAddr),
    AccountReads(String),
    AddressReads(IpAddr),
    /// An IPv6 client's /48.
    Prefix(IpAddr),
    PrefixReads(IpAddr),
    /// Reads that found nothing.
    AccountMisses(String),
    AddressMisses(IpAddr),
}

impl std::fmt::Display for Key {
    /// The key's name in Redis (after `rl:`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Account(a) => write!(f, "a:{a}"),
            Key::Address(ip) => write!(f, "w:{ip}"),
            Key::AccountReads(a) => write!(f, "ra:{a}"),
            Key::AddressReads(ip) => write!(f, "r:{ip}"),
            Key::Prefix(ip) => write!(f, "w48:{ip}"),
            Key::PrefixReads(ip) => write!(f, "r48:{ip}"),
            Key::AccountMisses(a) => write!(f, "ma:{a}"),
            Key::AddressMisses(ip) => write!(f, "m:{ip}"),
        }
    }
}

/// One budget: a key and its rate.
#[derive(Debug, Clone)]
struct Budget {
    key: Key,
    per_sec: u32,
    burst: u32,
    /// Named in the refusal.
    who: &'static str,
}

/// GCRA over every budget of a request in one Redis round trip: each key holds its
/// theoretical arrival time (ms); a request is let through only if every budget allows it,
/// and only then are they all advanced (so a request refused by its account's budget takes
/// nothing from its address's). Answers 0, or the 1-based index of the budget that refused
/// and the milliseconds until it would allow.
const GCRA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local new = {}
for i, key in ipairs(KEYS) do
  local period = 1000 / tonumber(ARGV[2 * i - 1])
  local tolerance = period * tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  local next_tat = tat + period
  local allow_at = next_tat - tolerance
  if allow_at > now then
    return {i, math.ceil(allow_at - now)}
  end
  new[i] = next_tat
end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, tostring(new[i]), 'PX', math.ceil(new[i] - now) + 1000)
end
return {0, 0}
"#;

/// The budgets kept in Redis, shared by every node (so N nodes allow the rate, not N times
/// it); while Redis does not answer within [`SHARED_TIMEOUT`] each node falls back to its own
/// (and stops asking for a second).
#[derive(Clone)]
struct Shared {
    conn: Arc<tokio::sync::OnceCell<redis::aio::ConnectionManager>>,
    script: Arc<redis::Script>,
    /// Until when (ms after `base`) Redis is not asked: it failed just now.
    away_until: Arc<std::sync::atomic::AtomicU64>,
    base: std::time::Instant,
}

/// How long a caller whose misses are spent is refused: long enough that enumerating costs
/// the enumerator, short enough that the fans behind a scanner's address (reading without a
/// token; with one, their accounts' budgets are their own) are back soon.
pub const MISS_PENALTY: Duration = Duration::from_secs(10);

/// Most refused budgets remembered (each a key and an instant; the rest are asked again).
const REFUSED_REMEMBERED: u64 = 100_000;

/// How long a limit check waits for Redis before it decides with this node's own budgets.
pub const SHARED_TIMEOUT: Duration = Duration::from_millis(50);

impl Shared {
    fn connect(client: redis::Client) -> Self {
        let conn = Arc::new(tokio::sync::OnceCell::new());
        let cell = conn.clone();
        tokio::spawn(async move {
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_millis(500)))
                .set_response_timeout(Some(SHARED_TIMEOUT))
                .set_number_of_retries(0);
            loop {
                match redis::aio::ConnectionManager::new_with_config(client.clone(), config.clone())
                    .await
                {
                    Ok(c) => {
                        let _ = cell.set(c);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "rate limits: redis unreachable; each node limits alone");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Self {
            conn,
            script: Arc::new(redis::Script::new(GCRA)),
            away_until: Arc::default(),
            base: std::time::Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// `Some(Ok(()))` allowed, `Some(Err((i, wait)))` refused by budget `i`; `None`: Redis
    /// did not answer (the caller decides alone).
    async fn check(&self, budgets: &[Budget]) -> Option<Result<(), (usize, Duration)>> {
        use std::sync::atomic::Ordering;
        if self.now_ms() < self.away_until.load(Ordering::Relaxed) {
            return None;
        }
        let mut conn = self.conn.get()?.clone();
        let mut call = self.script.prepare_invoke();
        for b in budgets {
            call.key(format!("rl:{}", b.key))
                .arg(b.per_sec)
                .arg(b.burst);
        }
        let answer =
            tokio::time::timeout(SHARED_TIMEOUT, call.invoke_async::<(i64, i64)>(&mut conn)).await;
        match answer {
            Ok(Ok((0, _))) => Some(Ok(())),
            Ok(Ok((i, wait))) => {
                let i = usize::try_from(i - 1).unwrap_or(0);
                Some(Err((
                    i,
                    Duration::from_millis(u64::try_from(wait).unwrap_or(0)),
                )))
            }
            Ok(Err(e)) => {
                self.away(&e.to_string());
                None
            }
            Err(_) => {
                self.away("no answer within the bound");
                None
            }
        }
    }

    fn away(&self, why: &str) {
        metrics::counter!(names::RATE_LIMIT_FALLBACKS_TOTAL).increment(1);
        tracing::warn!(%why, "rate limits: redis away; this node limits alone for a second");
        self.away_until
            .store(self.now_ms() + 1_000, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Rate limits per account and per client address on the writes that reach a show (and
/// joins and scans), and per address on anonymous reads: GCRA, in Redis across the nodes when
/// one is configured ([`RateLimits::shared`]), else (and while it is away) in this process
/// (`governor`).
#[derive(Clone)]
pub struct RateLimits {
    /// Shared: the limits are cloned with every request.
    settings: Arc<LimitSettings>,
    accounts: Option<Arc<DefaultKeyedRateLimiter<String>>>,
    addresses: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    reads: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    prefixes: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    prefix_reads: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    account_reads: Option<Arc<DefaultKeyedRateLimiter<String>>>,
    misses: Option<Arc<DefaultKeyedRateLimiter<Key>>>,
    shared: Option<Shared>,
    /// Budgets refused, and until when. A key's theoretical arrival time only grows (any
    /// node's request can only push it later), so every request before the moment a refusal
    /// named would be refused too: a flood of them is answered from here, without a round
    /// trip to Redis each; and a caller whose misses are spent is refused here until then.
    refused: moka::sync::Cache<Key, std::time::Instant>,
    verifier: Verifier,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits")
            .field("accounts", &self.accounts.is_some())
            .field("addresses", &self.addresses.is_some())
            .field("reads", &self.reads.is_some())
            .field("shared", &self.shared.is_some())
            .finish_non_exhaustive()
    }
}

/// Whom an address's budgets and connections count against: an IPv4 address, or an IPv6
/// address's /64 (what one subscriber is handed; the rest of it rotates freely). An IPv4
/// address written as IPv6 (`::ffff:a.b.c.d`) is that IPv4 address.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

/// An IPv6 client's /48, whose budgets are coarser; `None` for IPv4.
fn prefix48(ip: IpAddr) -> Option<IpAddr> {
    match address_key(ip) {
        IpAddr::V4(_) => None,
        IpAddr::V6(v6) => Some(IpAddr::V6((u128::from(v6) & !((1u128 << 80) - 1)).into())),
    }
}

fn quota(per_sec: u32, burst: u32) -> Option<Quota> {
    let rate = NonZeroU32::new(per_sec)?;
    let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
    Some(Quota::per_second(rate).allow_burst(burst))
}

fn keyed<K: std::hash::Hash + Eq + Clone>(
    per_sec: u32,
    burst: u32,
) -> Option<Arc<DefaultKeyedRateLimiter<K>>> {
    quota(per_sec, burst).map(|q| Arc::new(RateLimiter::dashmap(q)))
}

impl RateLimits {
    pub fn new(settings: &LimitSettings, verifier: Verifier) -> Self {
        let s = settings;
        Self {
            settings: Arc::new(s.clone()),
            accounts: keyed(s.rate_account_per_sec, s.rate_account_burst),
            addresses: keyed(s.rate_address_per_sec, s.rate_address_burst),
            reads: keyed(s.rate_read_address_per_sec, s.rate_read_address_burst),
            prefixes: keyed(
                s.rate_address_per_sec
                    .saturating_mul(s.rate_prefix48_factor),
                s.rate_address_burst.saturating_mul(s.rate_prefix48_factor),
            ),
            prefix_reads: keyed(
                s.rate_read_address_per_sec
                    .saturating_mul(s.rate_prefix48_factor),
                s.rate_read_address_burst
                    .saturating_mul(s.rate_prefix48_factor),
            ),
            account_reads: keyed(s.rate_read_account_per_sec, s.rate_read_account_burst),
            misses: keyed(s.rate_misses_per_sec, s.rate_misses_burst),
            shared: None,
            refused: moka::sync::Cache::builder()
                .max_capacity(REFUSED_REMEMBERED)
                // A refusal lasts at most a period of its budget (a second at the slowest
                // rate); a minute bounds what a forgotten entry can hold.
                .time_to_live(Duration::from_secs(60))
                .build(),
            verifier,
        }
    }

    /// Keeps the budgets in `redis`, shared by every node; this process's own are the
    /// fallback while it is away.
    pub fn shared(mut self, redis: redis::Client) -> Self {
        self.shared = Some(Shared::connect(redis));
        self
    }

    /// Forgets the keys whose allowance is full again (the maps stay as large as the callers
    /// of the last seconds). Run every few seconds.
    pub fn prune(&self) {
        for limiter in [
            &self.addresses,
            &self.reads,
            &self.prefixes,
            &self.prefix_reads,
        ]
        .into_iter()
        .flatten()
        {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        for limiter in [&self.accounts, &self.account_reads].into_iter().flatten() {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        if let Some(limiter) = &self.misses {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }

    /// What a request is for the limits: every route a fan can send to a show's owner (holds,
    /// their release, orders, cancellations), the line's joins and the gate's scans are
    /// writes; a request to `/v1/` (or gRPC) without a bearer token is an anonymous read.
    fn class(method: &Method, path: &str, grpc: bool, authenticated: bool) -> Class {
        let write = match *method {
            Method::DELETE => path.starts_with("/v1/holds/"),
            // Every POST under a show: holds, and the line's join, enter, heartbeat and leave.
            Method::POST => match (
                path.strip_prefix("/v1/events/"),
                path.strip_prefix("/v1/orders/"),
            ) {
                (Some(rest), _) => rest.contains('/'),
                (_, Some(rest)) => rest.ends_with("/cancel"),
                _ => path == "/v1/orders" || path == "/v1/scans",
            },
            _ => false,
        };
        if write {
            return Class::Write;
        }
        let read =
            grpc || (matches!(*method, Method::GET | Method::HEAD) && path.starts_with("/v1/"));
        match (read, authenticated) {
            (true, false) => Class::AnonymousRead,
            (true, true) => Class::AccountRead,
            (false, _) => Class::Free,
        }
    }

    /// The client's address: the peer's, or (from a trusted proxy) the last address of
    /// `X-Forwarded-For` that is not itself a trusted proxy.
    fn client(&self, req: &Request) -> Option<IpAddr> {
        let peer = req
            .extensions()
            .get::<ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip())?;
        let trusted = |ip: &IpAddr| self.settings.trusted_proxies.iter().any(|n| n.contains(ip));
        if !trusted(&peer) {
            return Some(peer);
        }
        let forwarded: Vec<IpAddr> = req
            .headers()
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|a| a.trim().parse::<IpAddr>().ok())
            .collect();
        Some(
            forwarded
                .into_iter()
                .rev()
                .find(|ip| !trusted(ip))
                .unwrap_or(peer),
        )
    }

    /// The budgets a request spends, in the order they are checked: the account's first.
    fn budgets(&self, req: &Request, grpc: bool) -> Spend {
        let s = &self.settings;
        if s.rate_account_per_sec == 0
            && s.rate_address_per_sec == 0
            && s.rate_read_address_per_sec == 0
            && s.rate_read_account_per_sec == 0
            && s.rate_misses_per_sec == 0
        {
            return Spend::default();
        }
        let bearer = req
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let class = Self::class(req.method(), req.uri().path(), grpc, bearer.is_some());
        // An order without its Idempotency-Key is refused by its handler before any work
        // (400 IDEMPOTENCY_KEY_REQUIRED): it spends nothing, and is told what is wrong even
        // past a budget.
        if class == Class::Write
            && req.uri().path() == "/v1/orders"
            && !req.headers().contains_key("idempotency-key")
        {
            return Spend::default();
        }
        // The token is verified only when its account has a budget here (a MAC each).
        let wanted = match class {
            Class::Write => s.rate_account_per_sec > 0 || s.rate_misses_per_sec > 0,
            Class::AccountRead => s.rate_read_account_per_sec > 0 || s.rate_misses_per_sec > 0,
            Class::AnonymousRead | Class::Free => false,
        };
        let caller = bearer
            .filter(|_| wanted)
            .and_then(|t| self.verifier.verify(t).ok());
        // A read whose token does not verify is an anonymous one.
        let class = match (class, &caller) {
            (Class::AccountRead, None) => Class::AnonymousRead,
            (class, _) => class,
        };
        let client = self.client(req);
        let ip = client.map(address_key);
        let prefix = client
            .and_then(prefix48)
            .filter(|_| s.rate_prefix48_factor > 0);
        let mut budgets = Vec::new();
        let misses = |key: Key, who: &'static str| {
            (s.rate_misses_per_sec > 0).then(|| Budget {
                key,
                per_sec: s.rate_misses_per_sec,
                burst: s.rate_misses_burst.max(1),
                who,
            })
        };
        let mut missed = None;
        match class {
            Class::Free => {}
            Class::Write => {
                // A write naming what does not exist (a made-up show, hold or order) spends
                // its caller's misses as a read does.
                missed = match (&caller, ip) {
                    (Some(c), _) => misses(
                        Key::AccountMisses(c.account.as_str().to_owned()),
                        "this account (requests naming what does not exist)",
                    ),
                    (None, Some(ip)) => misses(
                        Key::AddressMisses(ip),
                        "this address (requests naming what does not exist)",
                    ),
                    (None, None) => None,
                };
                // An unauthenticated write is refused by its handler: only its address counts.
                if let (Some(c), true) = (&caller, s.rate_account_per_sec > 0) {
                    budgets.push(Budget {
                        key: Key::Account(c.account.as_str().to_owned()),
                        per_sec: s.rate_account_per_sec,
                        burst: s.rate_account_burst.max(1),
                        who: "this account",
                    });
                }
                if let (Some(ip), true) = (ip, s.rate_address_per_sec > 0) {
                    budgets.push(Budget {
                        key: Key::Address(ip),
                        per_sec: s.rate_address_per_sec,
                        burst: s.rate_address_burst.max(1),
                        who: "this address",
                    });
                    if let Some(p) = prefix {
                        budgets.push(Budget {
                            key: Key::Prefix(p),
                            per_sec: s
                                .rate_address_per_sec
                                .saturating_mul(s.rate_prefix48_factor),
                            burst: s
                                .rate_address_burst
                                .saturating_mul(s.rate_prefix48_factor)
                                .max(1),
                            who: "this network (/48)",
                        });
                    }
                }
            }
            Class::AccountRead => {
                if let Some(c) = &caller {
                    if s.rate_read_account_per_sec > 0 {
                        budgets.push(Budget {
                            key: Key::AccountReads(c.account.as_str().to_owned()),
                            per_sec: s.rate_read_account_per_sec,
                            burst: s.rate_read_account_burst.max(1),
                            who: "this account (reads)",
                        });
                    }
                    missed = misses(
                        Key::AccountMisses(c.account.as_str().to_owned()),
                        "this account (reads of what does not exist)",
                    );
                }
            }
            Class::AnonymousRead => {
                if let (Some(ip), true) = (ip, s.rate_read_address_per_sec > 0) {
                    budgets.push(Budget {
                        key: Key::AddressReads(ip),
                        per_sec: s.rate_read_address_per_sec,
                        burst: s.rate_read_address_burst.max(1),
                        who: "this address (reads without a token)",
                    });
                    if let Some(p) = prefix {
                        budgets.push(Budget {
                            key: Key::PrefixReads(p),
                            per_sec: s
                                .rate_read_address_per_sec
                                .saturating_mul(s.rate_prefix48_factor),
                            burst: s
                                .rate_read_address_burst
                                .saturating_mul(s.rate_prefix48_factor)
                                .max(1),
                            who: "this network (/48, reads without a token)",
                        });
                    }
                }
                if let Some(ip) = ip {
                    missed = misses(
                        Key::AddressMisses(ip),
                        "this address (reads of what does not exist)",
                    );
                }
            }
        }
        Spend { budgets, missed }
    }

    /// This process's own budgets (no Redis, or Redis away).
    fn check_locally(&self, budgets: &[Budget]) -> Result<(), ApiError> {
        for b in budgets {
            let verdict = match &b.key {
                Key::Account(a) => self.accounts.as_ref().map(|l| l.check_key(a)),
                Key::AccountReads(a) => self.account_reads.as_ref().map(|l| l.check_key(a)),
                Key::Address(ip) => self.addresses.as_ref().map(|l| l.check_key(ip)),
                Key::AddressReads(ip) => self.reads.as_ref().map(|l| l.check_key(ip)),
                Key::Prefix(ip) => self.prefixes.as_ref().map(|l| l.check_key(ip)),
                Key::PrefixReads(ip) => self.prefix_reads.as_ref().map(|l| l.check_key(ip)),
                Key::AccountMisses(_) | Key::AddressMisses(_) => {
                    self.misses.as_ref().map(|l| l.check_key(&b.key))
                }
            };
            if let Some(Err(n)) = verdict {
                let wait = n.wait_time_from(DefaultClock::default().now());
                return Err(too_many(wait, b.who));
            }
        }
        Ok(())
    }

    /// Whether a request may go on: not while a budget of its caller is remembered refused
    /// (its misses' included), else as its budgets say (Redis, or this node's own).
    async fn check(&self, spend: &Spend) -> Result<(), ApiError> {
        let now = std::time::Instant::now();
        for b in spend.budgets.iter().chain(&spend.missed) {
            if let Some(until) = self.refused.get(&b.key) {
                if until > now {
                    return Err(too_many(until - now, b.who));
                }
            }
        }
        if spend.budgets.is_empty() {
            return Ok(());
        }
        if let Some(shared) = &self.shared {
            if let Some(verdict) = shared.check(&spend.budgets).await {
                return verdict.map_err(|(i, wait)| match spend.budgets.get(i) {
                    Some(b) => {
                        self.refused
                            .insert(b.key.clone(), std::time::Instant::now() + wait);
                        too_many(wait, b.who)
                    }
                    None => too_many(wait, "this caller"),
                });
            }
        }
        self.check_locally(&spend.budgets)
    }

    /// A read found nothing: it spends one of its caller's misses, and once they are spent
    /// the caller's reads are refused for [`MISS_PENALTY`] (or longer, if the budget says).
    async fn missed(&self, m: &Budget) {
        let shared = match &self.shared {
            Some(shared) => shared.check(std::slice::from_ref(m)).await,
            None => None,
        };
        let wait = match shared {
            Some(verdict) => verdict.err().map(|(_, wait)| wait),
            None => self
                .check_locally(std::slice::from_ref(m))
                .err()
                .map(|e| Duration::from_secs(e.retry_after_secs.unwrap_or(1))),
        };
        if let Some(wait) = wait {
            self.refused.insert(
                m.key.clone(),
                std::time::Instant::now() + wait.max(MISS_PENALTY),
            );
        }
    }
}

/// What a request spends: its budgets, checked before it runs, and the budget its caller's
/// misses come out of if it finds nothing.
#[derive(Debug, Default)]
struct Spend {
    budgets: Vec<Budget>,
    missed: Option<Budget>,
}

fn too_many(wait: Duration, who: &str) -> ApiError {
    metrics::counter!(names::RATE_LIMITED_TOTAL).increment(1);
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::RateLimited,
        format!("too many requests from {who}; retry after the time Retry-After says"),
    )
    .retry_after(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
}

/// Whether a request is gRPC (or gRPC-web): its refusals are gRPC statuses, not problem+json.
fn is_grpc(req: &Request) -> bool {
    req.headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"))
}

/// Middleware: requests past a rate answer 429 (gRPC: `RESOURCE_EXHAUSTED`) before their
/// handler.
///
/// The limits come in an `Arc`: axum clones a middleware's state for every request, and
/// cloning [`RateLimits`] itself (its limiters, its cache's channels) is a dozen atomic
/// operations where this is one.
pub async fn rate_limit(
    State(limits): State<Arc<RateLimits>>,
    req: Request,
    next: Next,
) -> Response {
    let grpc = is_grpc(&req);
    // Read from the request before anything is awaited (a request is not `Sync`).
    let spend = limits.budgets(&req, grpc);
    let mut req = req;
    if let Some(ip) = limits.client(&req) {
        req.extensions_mut().insert(ClientAddress(ip));
    }
    if let Err(e) = limits.check(&spend).await {
        if grpc {
            return e.into_status().into_http();
        }
        return e.into_response();
    }
    let res = next.run(req).await;
    if let Some(m) = &spend.missed {
        if found_nothing(&res) {
            limits.missed(m).await;
        }
    }
    res
}

/// A 404, or gRPC's `NOT_FOUND` (sent in the headers of a trailers-only answer).
fn found_nothing(res: &Response) -> bool {
    res.status() == StatusCode::NOT_FOUND
        || res
            .headers()
            .get("grpc-status")
            .is_some_and(|v| v.as_bytes() == b"5")
}

/// Middleware: a request not answered within the deadline is answered 503 `REQUEST_TIMEOUT`
/// (its handler is dropped; a command already submitted to its show's owner still runs, and
/// its idempotency key gives the same answer on a retry).
pub async fn deadline(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    let grpc = is_grpc(&req);
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(res) => res,
        Err(_) => {
            metrics::counter!(names::REQUESTS_TIMED_OUT_TOTAL).increment(1);
            let e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::RequestTimeout,
                "the request took too long to answer; retry (with the same Idempotency-Key)",
            )
            .retry_after(1);
            if grpc {
                return e.into_status().into_http();
            }
            e.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_that_reach_a_show_and_anonymous_reads_are_limited() {
        let class =
            |m: Method, p: &str, grpc: bool, auth: bool| RateLimits::class(&m, p, grpc, auth);
        for (m, p) in [
            (Method::POST, "/v1/events/e/holds"),
            (Method::POST, "/v1/events/e/waiting-room"),
            (Method::POST, "/v1/events/e/enter"),
            (Method::POST, "/v1/events/e/heartbeat"),
            (Method::POST, "/v1/events/e/leave"),
            (Method::POST, "/v1/orders"),
            (Method::POST, "/v1/scans"),
            (Method::POST, "/v1/orders/o/cancel"),
            (Method::DELETE, "/v1/holds/h"),
        ] {
            assert_eq!(class(m.clone(), p, false, true), Class::Write, "{m} {p}");
        }
        for (m, p) in [
            (Method::GET, "/v1/events/e"),
            (Method::GET, "/v1/events/e/seats"),
            (Method::GET, "/v1/search?q=x"),
        ] {
            assert_eq!(
                class(m.clone(), p, false, false),
                Class::AnonymousRead,
                "{m} {p}"
            );
            assert_eq!(
                class(m.clone(), p, false, true),
                Class::AccountRead,
                "{m} {p} with a token"
            );
        }
        assert_eq!(
            class(
                Method::POST,
                "/onsale.v1.SeatMaps/StreamDeltas",
                true,
                false
            ),
            Class::AnonymousRead
        );
        for (m, p) in [
            (Method::GET, "/healthz"),
            (Method::GET, "/assets/app.js"),
            (Method::POST, "/v1/webhooks/processor"),
            (Method::GET, "/v1/orders/o"),
            (Method::POST, "/v1/events"),
            (Method::PUT, "/v1/events/e/policy"),
        ] {
            assert_ne!(class(m.clone(), p, false, true), Class::Write, "{m} {p}");
            assert_ne!(
                class(m.clone(), p, false, true),
                Class::AnonymousRead,
                "{m} {p}"
            );
        }
    }

    #[test]
    fn ipv6_clients_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(
            address_key(ip("2001:db8:1:2:aaaa::1")),
            address_key(ip("2001:db8:1:2:ffff:1:2:3")),
            "one /64"
        );
        assert_ne!(
            address_key(ip("2001:db8:1:2::1")),
            address_key(ip("2001:db8:1:3::1"))
        );
        assert_eq!(address_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(address_key(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(
            prefix48(ip("2001:db8:1:2:3:4:5:6")),
            Some(ip("2001:db8:1::"))
        );
        assert_eq!(prefix48(ip("192.0.2.7")), None);
    }

    #[tokio::test]
    async fn a_client_rotating_through_its_ipv6_network_meets_the_48s_budget() {
        let settings = LimitSettings {
            max_streams: 1,
            max_queue_streams: 1,
            max_streams_per_address: 0,
            max_streams_per_account: 0,
            request_timeout_ms: 1,
            rate_account_per_sec: 0,
            rate_account_burst: 0,
            rate_address_per_sec: 0,
            rate_address_burst: 0,
            rate_prefix48_factor: 2,
            rate_read_address_per_sec: 1,
            rate_read_address_burst: 2,
            rate_read_account_per_sec: 0,
            rate_read_account_burst: 0,
            rate_misses_per_sec: 0,
            rate_misses_burst: 0,
            trusted_proxies: Vec::new(),
        };
        let verifier = Verifier::with_defaults("a-secret-of-at-least-32-bytes-long");
        let limits = RateLimits::new(&settings, verifier);
        let read = |peer: &str| {
            let mut r = Request::builder()
                .uri("/v1/events/e")
                .body(axum::body::Body::empty())
                .expect("a request");
            r.extensions_mut()
                .insert(ConnectInfo(std::net::SocketAddr::new(
                    peer.parse().expect("ip"),
                    1,
                )));
            let spend = limits.budgets(&r, false);
            let limits = limits.clone();
            async move { limits.check(&spend).await.is_ok() }
        };
        // An address's burst of two, whatever the last 64 bits say.
        assert!(read("2001:db8:1:1::1").await);
        assert!(read("2001:db8:1:1::2").await);
        assert!(!read("2001:db8:1:1:ffff::9").await, "the same /64");
        // Another /64 of the same /48 has a budget of its own, until the /48's (4) is spent.
        assert!(read("2001:db8:1:2::1").await);
        assert!(read("2001:db8:1:2::2").await);
        assert!(
            !read("2001:db8:1:3::1").await,
            "a third /64 of the /48 meets the network's budget"
        );
        assert!(read("2001:db8:2::1").await, "another /48");
        assert!(read("192.0.2.7").await, "IPv4 has no /48 budget");
    }

    #[test]
    fn forwarded_for_is_believed_only_from_a_trusted_proxy() {
        let settings = |proxies: &str| {
            let mut s = LimitSettings {
                max_streams: 1,
                max_queue_streams: 1,
                max_streams_per_address: 0,
                max_streams_per_account: 0,
                request_timeout_ms: 1,
                rate_account_per_sec: 0,
                rate_account_burst: 0,
                rate_address_per_sec: 0,
                rate_address_burst: 0,
                rate_prefix48_factor: 0,
                rate_read_address_per_sec: 0,
                rate_read_address_burst: 0,
                rate_read_account_per_sec: 0,
                rate_read_account_burst: 0,
                rate_misses_per_sec: 0,
                rate_misses_burst: 0,
                trusted_proxies: Vec::new(),
            };
            s.trusted_proxies = proxies
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|p| proxy(p).expect("a proxy"))
                .collect();
            s
        };
        let verifier = Verifier::with_defaults("a-secret-of-at-least-32-bytes-long");
        let req = |peer: &str, xff: &str| {
            let mut r = Request::builder()
                .uri("/v1/events/e")
                .header("x-forwarded-for", xff)
                .body(axum::body::Body::empty())
                .expect("a request");
            r.extensions_mut().insert(ConnectInfo(
                format!("{peer}:1")
                    .parse::<std::net::SocketAddr>()
                    .expect("addr"),
            ));
            r
        };
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let open = RateLimits::new(&settings(""), verifier.clone());
        assert_eq!(
            open.client(&req("203.0.113.9", "10.0.0.1")),
            Some(ip("203.0.113.9")),
            "an untrusted peer's header is a lie"
        );
        let behind = RateLimits::new(&settings("127.0.0.1,10.1.0.0/16"), verifier);
        assert_eq!(
            behind.client(&req("127.0.0.1", "198.51.100.7, 10.1.2.3")),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(behind.client(&req("127.0.0.1", "")), Some(ip("127.0.0.1")));
        assert_eq!(
            behind.client(&req("203.0.113.9", "198.51.100.7")),
            Some(ip("203.0.113.9"))
        );
    }

    #[test]
    fn a_miss_is_a_404_or_grpcs_not_found() {
        let answer = |status: u16, grpc: Option<&str>| {
            let mut r = Response::builder().status(status);
            if let Some(g) = grpc {
                r = r.header("grpc-status", g);
            }
            r.body(axum::body::Body::empty()).expect("a response")
        };
        assert!(found_nothing(&answer(404, None)));
        assert!(found_nothing(&answer(200, Some("5"))));
        assert!(!found_nothing(&answer(200, Some("0"))));
        assert!(!found_nothing(&answer(200, None)));
        assert!(!found_nothing(&answer(429, None)));
    }

    #[test]
    fn a_stream_past_the_cap_is_refused_until_one_ends() {
        let slots = StreamSlots::new(2, 0, 0);
        let a = slots.open(None, None).expect("first");
        let _b = slots.open(None, None).expect("second");
        let e = slots.open(None, None).expect_err("third");
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.retry_after_secs, Some(5));
        drop(a);
        assert!(slots.open(None, None).is_ok(), "a slot came back");
    }

    #[test]
    fn one_address_or_account_takes_only_its_share_of_the_streams() {
        let slots = StreamSlots::new(100, 3, 2);
        let ip = |s: &str| Some(s.parse::<IpAddr>().expect("an address"));
        // An account: two streams, then 429 wherever it comes from.
        let a1 = slots
            .open(ip("192.0.2.1"), Some("ann"))
            .expect("ann's first");
        let _a2 = slots
            .open(ip("192.0.2.2"), Some("ann"))
            .expect("ann's second");
        let e = slots
            .open(ip("192.0.2.3"), Some("ann"))
            .expect_err("ann's third");
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.code, ErrorCode::TooManyStreams);
        assert_eq!(e.retry_after_secs, Some(5));
        // An address: three streams whatever the accounts, an IPv6 client counted by its /64.
        let _x = slots.open(ip("2001:db8:1:2::1"), None).expect("first");
        let _y = slots
            .open(ip("2001:db8:1:2::2"), Some("bob"))
            .expect("second");
        let _z = slots
            .open(ip("2001:db8:1:2:ffff::9"), Some("cat"))
            .expect("third");
        let e = slots
            .open(ip("2001:db8:1:2::77"), Some("dan"))
            .expect_err("the /64's fourth");
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            slots.open(ip("2001:db8:1:3::1"), None).is_ok(),
            "the next /64 is another client"
        );
        // A refusal took nothing: dan was not counted; ann gets a slot back when one ends.
        assert!(slots.open(ip("198.51.100.1"), Some("dan")).is_ok());
        drop(a1);
        assert!(
            slots.open(ip("198.51.100.2"), Some("ann")).is_ok(),
            "ann's slot came back"
        );
        assert!(
            slots.clients.lock().len() <= 8,
            "closed streams leave no count behind"
        );
    }

    #[test]
    fn counts_of_closed_streams_are_forgotten() {
        let slots = StreamSlots::new(10, 5, 5);
        let ip = "203.0.113.9".parse::<IpAddr>().ok();
        let open: Vec<_> = (0..5)
            .map(|_| slots.open(ip, Some("eve")).expect("a slot"))
            .collect();
        drop(open);
        assert!(slots.clients.lock().is_empty());
    }
}
