//! The waiting room's state in Redis, one hash-tagged key family per show (a show's keys live on
//! one shard of a Redis cluster), and the Lua scripts (`src/lua/`) that change it atomically.
//! Every call a fan's request makes (join, standing, enter, heartbeat, leave, the session gate's
//! lease) and the admitter's tick is one round trip; the watchdog's reads (`shows`, `recent`)
//! take a few.
//!
//! Keys of show S (prefix `wr:{S}:`): `pos` (hash account -> position), `pre` (sorted set of the
//! pre-queue, scored by a random draw), `open` (set once the pre-queue was drawn), `next` (the
//! position counter, taken in blocks), `tail` (the highest position handed out), `admitted`
//! (admitted_through), `leases` (sorted set session -> lease expiry ms), `reserved` (sorted set
//! of slots kept for admitted fans during their grace window), `claimed` (admissions traded for a
//! session), `passes` (sorted set: when the line reached each admitted_through), `hist` (recent
//! ticks, for the claim rate), `paused` (total paused ms), `last` (last tick ms), `rate` (EWMA of
//! positions admitted per second), `eta` (hash account -> last ETA told), `used:<jti>`
//! (admission tokens already traded), `pow:<nonce>` (join challenges already answered),
//! `opens` and `starts` (the sale's opening and the show's
//! start). `wr:shows` is the set of shows with a line; once a show starts, the admitter takes
//! it out and its keys expire an hour later.

use onsale_domain::ShowId;
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};

pub fn key(show: ShowId, part: &str) -> String {
    format!("wr:{{{show}}}:{part}")
}

const SHOWS: &str = "wr:shows";

/// Every key of a show's family but the admission tokens' (`used:<jti>`) and the answered
/// challenges' (`pow:<nonce>`), which expire alone.
pub const PARTS: [&str; 17] = [
    "pos", "pre", "open", "next", "tail", "admitted", "leases", "reserved", "claimed", "passes",
    "hist", "paused", "last", "rate", "eta", "opens", "starts",
];

/// The positions one process takes from the counter at a time.
pub const BLOCK: i64 = 100;

/// What a tick did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    pub admitted_through: i64,
    pub live: i64,
    pub reserved: i64,
    pub advanced: i64,
    pub claim_rate: f64,
    pub tail: i64,
    pub drawn: i64,
}

/// Where a fan stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    /// `None`: in the pre-queue, not drawn yet.
    pub position: Option<i64>,
    pub admitted_through: i64,
    /// When the line reached the position (ms), once it has, and the show's paused total then.
    pub passed_at_ms: Option<i64>,
    pub paused_at_pass_ms: i64,
    pub rate: f64,
    pub paused_ms: i64,
    /// The last ETA told to this fan and when (s, ms).
    pub last_eta: Option<(f64, i64)>,
    pub tail: i64,
}

/// The outcome of trading an admission for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entered {
    Yes,
    /// A retry of an admission already traded, whose session is still alive: the same session
    /// (a lost answer must not cost the fan their turn, nor take a second slot).
    Again,
    /// This admission was already traded and its session has ended.
    Replayed,
    /// The zone is full (more fans claimed than expected): try again shortly; the admission
    /// stays good until its window closes.
    Full,
}

#[derive(Clone)]
pub struct Store {
    /// Set once the first connection succeeds; until then every call fails like an outage
    /// (the callers' fallback), so a Redis that is down at start-up does not stop the service.
    conn: std::sync::Arc<tokio::sync::OnceCell<ConnectionManager>>,
    join: Script,
    block: Script,
    tick: Script,
    enter: Script,
    standing: Script,
    heartbeat: Script,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

impl Store {
    /// Connects, or (Redis unreachable) keeps trying once a second in the background while
    /// every call answers as an outage. Only a malformed URL is an error.
    pub async fn connect(
        client: redis::Client,
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> redis::RedisResult<Self> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(std::time::Duration::from_millis(500)))
            .set_response_timeout(Some(std::time::Duration::from_secs(2)))
            .set_number_of_retries(1);
        let conn = std::sync::Arc::new(tokio::sync::OnceCell::new());
        match ConnectionManager::new_with_config(client.clone(), config.clone()).await {
            Ok(c) => {
                let _ = conn.set(c);
            }
            Err(e) => {
                tracing::warn!(error = %e, "redis unreachable at start; the waiting room runs in fallback until it answers");
                let (cell, stop) = (conn.clone(), shutdown.clone());
                tokio::spawn(async move {
                    let pause = || tokio::time::sleep(std::time::Duration::from_secs(1));
                    while stop.run_until_cancelled(pause()).await.is_some() {
                        if let Ok(c) =
                            ConnectionManager::new_with_config(client.clone(), config.clone()).await
                        {
                            let _ = cell.set(c);
                            tracing::info!("redis reachable: the waiting room leaves fallback");
                            return;
                        }
                    }
                });
            }
        }
        Ok(Self {
            conn,
            join: Script::new(JOIN),
            block: Script::new(BLOCK_SCRIPT),
            tick: Script::new(TICK),
            enter: Script::new(ENTER),
            standing: Script::new(STANDING),
            heartbeat: Script::new(HEARTBEAT),
        })
    }

    pub fn conn(&self) -> redis::RedisResult<ConnectionManager> {
        self.conn.get().cloned().ok_or_else(|| {
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "redis has not answered yet",
            ))
        })
    }

    /// Registers the show's line (the admitter ticks every show in `wr:shows`) with when its
    /// sale opens and when the show starts (ms): past the start, the line is retired.
    pub async fn register(
        &self,
        show: ShowId,
        opens_at_ms: i64,
        starts_at_ms: i64,
    ) -> redis::RedisResult<()> {
        let mut c = self.conn()?;
        redis::pipe()
            .sadd(SHOWS, show.to_string())
            .ignore()
            .set_nx(key(show, "opens"), opens_at_ms)
            .ignore()
            .set_nx(key(show, "starts"), starts_at_ms)
            .ignore()
            .query_async(&mut c)
            .await
    }

    /// Every show with a line: when its sale opens and when it starts (ms; `i64::MAX` if not
    /// known).
    pub async fn shows(&self) -> redis::RedisResult<Vec<(ShowId, i64, i64)>> {
        let mut c = self.conn()?;
        let shows: Vec<String> = c.smembers(SHOWS).await?;
        let mut out = Vec::with_capacity(shows.len());
        // Only this code writes the set, with show ids; anything else in it is skipped.
        for s in shows.iter().filter_map(|s| s.parse::<ShowId>().ok()) {
            let (opens, starts): (Option<i64>, Option<i64>) = redis::pipe()
                .get(key(s, "opens"))
                .get(key(s, "starts"))
                .query_async(&mut c)
                .await?;
            out.push((s, opens.unwrap_or(0), starts.unwrap_or(i64::MAX)));
        }
        Ok(out)
    }

    /// The show started: its line leaves `wr:shows` (no admitter ticks it again) and every key
    /// of it expires `keep_ms` later (admission tokens already have a day's expiry of their own).
    pub async fn retire(&self, show: ShowId, keep_ms: i64) -> redis::RedisResult<()> {
        let mut c = self.conn()?;
        let mut pipe = redis::pipe();
        pipe.srem(SHOWS, show.to_string()).ignore();
        for part in PARTS {
            pipe.pexpire(key(show, part), keep_ms).ignore();
        }
        pipe.query_async(&mut c).await
    }

    /// Takes a block of positions for this process: `None` before the opening draw.
    pub async fn take_block(
        &self,
        show: ShowId,
        now_ms: i64,
        opens_at_ms: i64,
    ) -> redis::RedisResult<Option<i64>> {
        let mut c = self.conn()?;
        let end: i64 = self
            .block
            .key(key(show, "open"))
            .key(key(show, "next"))
            .key(key(show, "pre"))
            .arg(BLOCK)
            .arg(now_ms)
            .arg(opens_at_ms)
            .invoke_async(&mut c)
            .await?;
        Ok((end >= 0).then_some(end))
    }

    /// One place per account: the existing one, else `candidate` (after the opening), else a
    /// place in the pre-queue (`-1`). `requeue`: the fan's admission lapsed, so they go to the
    /// back with `candidate`. A `candidate` of 0 (asked for before the opening) on a line that
    /// opened since takes the next free position, so a join straddling the opening is never
    /// left without a place.
    pub async fn join(
        &self,
        show: ShowId,
        account: &str,
        candidate: i64,
        lottery: u64,
        requeue: bool,
    ) -> redis::RedisResult<i64> {
        let mut c = self.conn()?;
        self.join
            .key(key(show, "pos"))
            .key(key(show, "pre"))
            .key(key(show, "open"))
            .key(key(show, "tail"))
            .key(key(show, "next"))
            .arg(account)
            .arg(candidate)
            .arg(lottery)
            .arg(i32::from(requeue))
            .invoke_async(&mut c)
            .await
    }

    /// One admitter tick for a show: draw the pre-queue if it is time, sweep expired leases and
    /// reservations, count live sessions, and move `admitted_through` by the free slots divided
    /// by the claim rate, reserving the slots the newly admitted are expected to take.
    pub async fn tick(
        &self,
        show: ShowId,
        now_ms: i64,
        opens_at_ms: i64,
        target: u64,
        grace_ms: i64,
        paused: bool,
    ) -> redis::RedisResult<Tick> {
        let mut c = self.conn()?;
        let (admitted_through, live, reserved, advanced, rate, tail, drawn): (
            i64,
            i64,
            i64,
            i64,
            String,
            i64,
            i64,
        ) = self
            .tick
            .key(key(show, "admitted"))
            .key(key(show, "leases"))
            .key(key(show, "reserved"))
            .key(key(show, "claimed"))
            .key(key(show, "hist"))
            .key(key(show, "tail"))
            .key(key(show, "passes"))
            .key(key(show, "paused"))
            .key(key(show, "last"))
            .key(key(show, "pre"))
            .key(key(show, "open"))
            .key(key(show, "pos"))
            .key(key(show, "next"))
            .key(key(show, "rate"))
            .arg(now_ms)
            .arg(target)
            .arg(grace_ms)
            .arg(i32::from(paused))
            .arg(opens_at_ms)
            .invoke_async(&mut c)
            .await?;
        Ok(Tick {
            admitted_through,
            live,
            reserved,
            advanced,
            claim_rate: rate.parse().unwrap_or(1.0),
            tail,
            drawn,
        })
    }

    /// Marks a join challenge answered, until it expires: `false` if it was already (a reuse).
    pub async fn spend_challenge(
        &self,
        show: ShowId,
        nonce: &str,
        until_ms: i64,
    ) -> redis::RedisResult<bool> {
        let mut c = self.conn()?;
        let set: Option<String> = redis::cmd("SET")
            .arg(key(show, &format!("pow:{nonce}")))
            .arg(1)
            .arg("NX")
            .arg("PXAT")
            .arg(until_ms)
            .query_async(&mut c)
            .await?;
        Ok(set.is_some())
    }

    pub async fn standing(&self, show: ShowId, account: &str) -> redis::RedisResult<Standing> {
        let mut c = self.conn()?;
        let (pos, admitted, passed, rate, paused, eta, eta_at, tail, paused_at): (
            i64,
            i64,
            i64,
            String,
            i64,
            String,
            i64,
            i64,
            i64,
        ) = self
            .standing
            .key(key(show, "pos"))
            .key(key(show, "admitted"))
            .key(key(show, "passes"))
            .key(key(show, "rate"))
            .key(key(show, "paused"))
            .key(key(show, "eta"))
            .key(key(show, "tail"))
            .key(key(show, "next"))
            .arg(account)
            .invoke_async(&mut c)
            .await?;
        Ok(Standing {
            position: (pos > 0).then_some(pos),
            admitted_through: admitted,
            passed_at_ms: (passed >= 0).then_some(passed),
            paused_at_pass_ms: paused_at,
            rate: rate.parse().unwrap_or(0.0),
            paused_ms: paused,
            last_eta: (eta_at > 0).then(|| (eta.parse().unwrap_or(0.0), eta_at)),
            tail,
        })
    }

    /// The show's total paused time (ms).
    pub async fn paused_ms(&self, show: ShowId) -> redis::RedisResult<i64> {
        let mut c = self.conn()?;
        let v: Option<i64> = c.get(key(show, "paused")).await?;
        Ok(v.unwrap_or(0))
    }

    pub async fn remember_eta(
        &self,
        show: ShowId,
        account: &str,
        eta: f64,
        now_ms: i64,
    ) -> redis::RedisResult<()> {
        let mut c = self.conn()?;
        c.hset(key(show, "eta"), account, format!("{eta}:{now_ms}"))
            .await
    }

    /// Trades an admission (`jti`) for a session lease, once.
    pub async fn enter(
        &self,
        show: ShowId,
        jti: &str,
        sid: &str,
        now_ms: i64,
        lease_ms: i64,
        target: u64,
    ) -> redis::RedisResult<(Entered, String)> {
        // A traded admission is remembered for a day, far past any grace window.
        const REMEMBER_MS: i64 = 24 * 3600 * 1000;
        let mut c = self.conn()?;
        let (r, sid): (i64, String) = self
            .enter
            .key(key(show, &format!("used:{jti}")))
            .key(key(show, "leases"))
            .key(key(show, "reserved"))
            .key(key(show, "claimed"))
            .arg(now_ms)
            .arg(lease_ms)
            .arg(sid)
            .arg(target)
            .arg(REMEMBER_MS)
            .invoke_async(&mut c)
            .await?;
        let outcome = match r {
            1 => Entered::Yes,
            2 => Entered::Again,
            -1 => Entered::Replayed,
            _ => Entered::Full,
        };
        Ok((outcome, sid))
    }

    /// Renews a live lease; `false` if it had already expired (or never existed).
    pub async fn heartbeat(
        &self,
        show: ShowId,
        sid: &str,
        until_ms: i64,
        now_ms: i64,
    ) -> redis::RedisResult<bool> {
        let mut c = self.conn()?;
        let renewed: i64 = self
            .heartbeat
            .key(key(show, "leases"))
            .arg(sid)
            .arg(until_ms)
            .arg(now_ms)
            .invoke_async(&mut c)
            .await?;
        Ok(renewed == 1)
    }

    /// Ends a session now: its slot is free for the next fan (a clean exit, design.md §7.3).
    pub async fn leave(&self, show: ShowId, sid: &str) -> redis::RedisResult<()> {
        let mut c = self.conn()?;
        c.zrem(key(show, "leases"), sid).await
    }

    /// The session's lease expiry (ms), if it has one.
    pub async fn lease(&self, show: ShowId, sid: &str) -> redis::RedisResult<Option<i64>> {
        let mut c = self.conn()?;
        let s: Option<f64> = c.zscore(key(show, "leases"), sid).await?;
        Ok(s.map(|v| v as i64))
    }

    /// Positions the line passed in the last `window_ms` (from the tick history) and the depth.
    pub async fn recent(
        &self,
        show: ShowId,
        now_ms: i64,
        window_ms: i64,
    ) -> redis::RedisResult<(i64, i64, i64)> {
        let mut c = self.conn()?;
        let hist: Vec<String> = c.lrange(key(show, "hist"), 0, -1).await?;
        let admitted: Option<i64> = c.get(key(show, "admitted")).await?;
        let tail: Option<i64> = c.get(key(show, "tail")).await?;
        let admitted = admitted.unwrap_or(0);
        let mut oldest = admitted;
        let mut newest_ms = 0;
        for h in &hist {
            let mut f = h.split(':');
            let t: i64 = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            let a: i64 = f.next().and_then(|v| v.parse().ok()).unwrap_or(admitted);
            newest_ms = newest_ms.max(t);
            if now_ms - t <= window_ms {
                oldest = oldest.min(a);
            }
        }
        Ok((admitted - oldest, tail.unwrap_or(0) - admitted, newest_ms))
    }
}

// The scripts, each naming its KEYS and ARGV in its first lines; the calls pass them in that order.
const BLOCK_SCRIPT: &str = include_str!("lua/block.lua");

const JOIN: &str = include_str!("lua/join.lua");

const TICK: &str = include_str!("lua/tick.lua");

const ENTER: &str = include_str!("lua/enter.lua");

const STANDING: &str = include_str!("lua/standing.lua");
const HEARTBEAT: &str = include_str!("lua/heartbeat.lua");
