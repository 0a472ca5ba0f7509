//! The rate limits: what a request is, whose budgets it spends, and the GCRA that decides.

use super::*;
use crate::auth::Caller;

/// What a request is, for the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
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
pub(super) enum Key {
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

/// An address's budget and its network's: their rate, their keys, their names in a refusal.
pub(super) struct AddressBudget {
    per_sec: u32,
    burst: u32,
    key: fn(IpAddr) -> Key,
    prefix_key: fn(IpAddr) -> Key,
    who: &'static str,
    prefix_who: &'static str,
}

/// One budget: a key and its rate.
#[derive(Debug, Clone)]
pub(super) struct Budget {
    pub(super) key: Key,
    pub(super) per_sec: u32,
    pub(super) burst: u32,
    /// Named in the refusal.
    pub(super) who: &'static str,
}

/// Rate limits per account and per client address on the writes that reach a show (and
/// joins and scans), and per address on anonymous reads: GCRA, in Redis across the nodes when
/// one is configured ([`RateLimits::shared`]), else (and while it is away) in this process
/// (`governor`).
#[derive(Clone)]
pub struct RateLimits {
    /// Shared: the limits are cloned with every request.
    pub(super) settings: Arc<LimitSettings>,
    pub(super) accounts: Option<Arc<DefaultKeyedRateLimiter<String>>>,
    pub(super) addresses: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    pub(super) reads: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    pub(super) prefixes: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    pub(super) prefix_reads: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    pub(super) account_reads: Option<Arc<DefaultKeyedRateLimiter<String>>>,
    pub(super) misses: Option<Arc<DefaultKeyedRateLimiter<Key>>>,
    pub(super) shared: Option<Shared>,
    /// Budgets refused, and until when. A key's theoretical arrival time only grows (any
    /// node's request can only push it later), so every request before the moment a refusal
    /// named would be refused too: a flood of them is answered from here, without a round
    /// trip to Redis each; and a caller whose misses are spent is refused here until then.
    pub(super) refused: moka::sync::Cache<Key, std::time::Instant>,
    pub(super) verifier: Verifier,
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
pub(super) fn prefix48(ip: IpAddr) -> Option<IpAddr> {
    match address_key(ip) {
        IpAddr::V4(_) => None,
        IpAddr::V6(v6) => Some(IpAddr::V6((u128::from(v6) & !((1u128 << 80) - 1)).into())),
    }
}

pub(super) fn quota(per_sec: u32, burst: u32) -> Option<Quota> {
    let rate = NonZeroU32::new(per_sec)?;
    let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
    Some(Quota::per_second(rate).allow_burst(burst))
}

pub(super) fn keyed<K: std::hash::Hash + Eq + Clone>(
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
    pub(super) fn class(method: &Method, path: &str, grpc: bool, authenticated: bool) -> Class {
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
    pub(super) fn client(&self, req: &Request) -> Option<IpAddr> {
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
    pub(super) fn budgets(&self, req: &Request, grpc: bool) -> Spend {
        let s = &self.settings;
        if s.rate_account_per_sec == 0
            && s.rate_address_per_sec == 0
            && s.rate_read_address_per_sec == 0
            && s.rate_read_account_per_sec == 0
            && s.rate_misses_per_sec == 0
        {
            return Spend::default();
        }
        let Some((class, caller)) = self.caller(req, grpc) else {
            return Spend::default();
        };
        let client = self.client(req);
        let ip = client.map(address_key);
        let prefix = client
            .and_then(prefix48)
            .filter(|_| s.rate_prefix48_factor > 0);
        match (class, caller) {
            (Class::Write, caller) => self.write_budgets(caller.as_ref(), ip, prefix),
            (Class::AccountRead, Some(c)) => self.account_read_budgets(&c),
            (Class::AnonymousRead, _) => self.anonymous_read_budgets(ip, prefix),
            (Class::AccountRead, None) | (Class::Free, _) => Spend::default(),
        }
    }

    /// What a request is for the limits, and its caller when a budget of its account is
    /// wanted; `None` when it spends nothing. An order without its Idempotency-Key is refused
    /// by its handler before any work (400 IDEMPOTENCY_KEY_REQUIRED): it spends nothing, and
    /// is told what is wrong even past a budget. The token is verified only when its account
    /// has a budget here (a MAC each); a read whose token does not verify is an anonymous one.
    fn caller(&self, req: &Request, grpc: bool) -> Option<(Class, Option<Caller>)> {
        let s = &self.settings;
        let bearer = req
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let class = Self::class(req.method(), req.uri().path(), grpc, bearer.is_some());
        if class == Class::Write
            && req.uri().path() == "/v1/orders"
            && !req.headers().contains_key("idempotency-key")
        {
            return None;
        }
        let wanted = match class {
            Class::Write => s.rate_account_per_sec > 0 || s.rate_misses_per_sec > 0,
            Class::AccountRead => s.rate_read_account_per_sec > 0 || s.rate_misses_per_sec > 0,
            Class::AnonymousRead | Class::Free => false,
        };
        let caller = bearer
            .filter(|_| wanted)
            .and_then(|t| self.verifier.verify(t).ok());
        let class = match (class, &caller) {
            (Class::AccountRead, None) => Class::AnonymousRead,
            (class, _) => class,
        };
        Some((class, caller))
    }

    /// The budget of `key`'s requests that found nothing, when there is one.
    fn misses(&self, key: Key, who: &'static str) -> Option<Budget> {
        let s = &self.settings;
        (s.rate_misses_per_sec > 0).then(|| Budget {
            key,
            per_sec: s.rate_misses_per_sec,
            burst: s.rate_misses_burst.max(1),
            who,
        })
    }

    /// An address's budget, and its IPv6 /48's (the prefix factor times larger) when it has
    /// one.
    fn address_budgets(&self, ip: IpAddr, prefix: Option<IpAddr>, b: AddressBudget) -> Vec<Budget> {
        let factor = self.settings.rate_prefix48_factor;
        let mut budgets = vec![Budget {
            key: (b.key)(ip),
            per_sec: b.per_sec,
            burst: b.burst.max(1),
            who: b.who,
        }];
        if let Some(p) = prefix {
            budgets.push(Budget {
                key: (b.prefix_key)(p),
                per_sec: b.per_sec.saturating_mul(factor),
                burst: b.burst.saturating_mul(factor).max(1),
                who: b.prefix_who,
            });
        }
        budgets
    }

    /// A write: its account's budget (an unauthenticated write is refused by its handler, so
    /// only its address counts then), its address's and network's; and, when it names what
    /// does not exist (a made-up show, hold or order), its caller's misses as a read does.
    fn write_budgets(
        &self,
        caller: Option<&Caller>,
        ip: Option<IpAddr>,
        prefix: Option<IpAddr>,
    ) -> Spend {
        let s = &self.settings;
        let missed = match (caller, ip) {
            (Some(c), _) => self.misses(
                Key::AccountMisses(c.account.as_str().to_owned()),
                "this account (requests naming what does not exist)",
            ),
            (None, Some(ip)) => self.misses(
                Key::AddressMisses(ip),
                "this address (requests naming what does not exist)",
            ),
            (None, None) => None,
        };
        let mut budgets = Vec::new();
        if let (Some(c), true) = (caller, s.rate_account_per_sec > 0) {
            budgets.push(Budget {
                key: Key::Account(c.account.as_str().to_owned()),
                per_sec: s.rate_account_per_sec,
                burst: s.rate_account_burst.max(1),
                who: "this account",
            });
        }
        if let (Some(ip), true) = (ip, s.rate_address_per_sec > 0) {
            budgets.extend(self.address_budgets(
                ip,
                prefix,
                AddressBudget {
                    per_sec: s.rate_address_per_sec,
                    burst: s.rate_address_burst,
                    key: Key::Address,
                    prefix_key: Key::Prefix,
                    who: "this address",
                    prefix_who: "this network (/48)",
                },
            ));
        }
        Spend { budgets, missed }
    }

    /// A read with a verified token: its account's reads, and its misses.
    fn account_read_budgets(&self, c: &Caller) -> Spend {
        let s = &self.settings;
        let mut budgets = Vec::new();
        if s.rate_read_account_per_sec > 0 {
            budgets.push(Budget {
                key: Key::AccountReads(c.account.as_str().to_owned()),
                per_sec: s.rate_read_account_per_sec,
                burst: s.rate_read_account_burst.max(1),
                who: "this account (reads)",
            });
        }
        let missed = self.misses(
            Key::AccountMisses(c.account.as_str().to_owned()),
            "this account (reads of what does not exist)",
        );
        Spend { budgets, missed }
    }

    /// A read without a (verified) token: its address's and network's reads, and its misses.
    fn anonymous_read_budgets(&self, ip: Option<IpAddr>, prefix: Option<IpAddr>) -> Spend {
        let s = &self.settings;
        let Some(ip) = ip else {
            return Spend::default();
        };
        let budgets = if s.rate_read_address_per_sec > 0 {
            self.address_budgets(
                ip,
                prefix,
                AddressBudget {
                    per_sec: s.rate_read_address_per_sec,
                    burst: s.rate_read_address_burst,
                    key: Key::AddressReads,
                    prefix_key: Key::PrefixReads,
                    who: "this address (reads without a token)",
                    prefix_who: "this network (/48, reads without a token)",
                },
            )
        } else {
            Vec::new()
        };
        let missed = self.misses(
            Key::AddressMisses(ip),
            "this address (reads of what does not exist)",
        );
        Spend { budgets, missed }
    }

    /// This process's own budgets (no Redis, or Redis away).
    pub(super) fn check_locally(&self, budgets: &[Budget]) -> Result<(), ApiError> {
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
    pub(super) async fn check(&self, spend: &Spend) -> Result<(), ApiError> {
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
    pub(super) async fn missed(&self, m: &Budget) {
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
pub(super) struct Spend {
    pub(super) budgets: Vec<Budget>,
    pub(super) missed: Option<Budget>,
}
