//! Budgets shared by every node in Redis (GCRA in one round trip), with this node's own
//! as the fallback when Redis does not answer in time.

use super::*;

/// GCRA over every budget of a request in one Redis round trip: each key holds its
/// theoretical arrival time (ms); a request is let through only if every budget allows it,
/// and only then are they all advanced (so a request refused by its account's budget takes
/// nothing from its address's). Answers 0, or the 1-based index of the budget that refused
/// and the milliseconds until it would allow.
pub(super) const GCRA: &str = r#"
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
pub(super) struct Shared {
    pub(super) conn: Arc<tokio::sync::OnceCell<redis::aio::ConnectionManager>>,
    pub(super) script: Arc<redis::Script>,
    /// Until when (ms after `base`) Redis is not asked: it failed just now.
    pub(super) away_until: Arc<std::sync::atomic::AtomicU64>,
    pub(super) base: std::time::Instant,
}

/// How long a caller whose misses are spent is refused: long enough that enumerating costs
/// the enumerator, short enough that the fans behind a scanner's address (reading without a
/// token; with one, their accounts' budgets are their own) are back soon.
pub const MISS_PENALTY: Duration = Duration::from_secs(10);

/// Most refused budgets remembered (each a key and an instant; the rest are asked again).
pub(super) const REFUSED_REMEMBERED: u64 = 100_000;

/// How long a limit check waits for Redis before it decides with this node's own budgets.
pub const SHARED_TIMEOUT: Duration = Duration::from_millis(50);

impl Shared {
    pub(super) fn connect(client: redis::Client) -> Self {
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

    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// `Some(Ok(()))` allowed, `Some(Err((i, wait)))` refused by budget `i`; `None`: Redis
    /// did not answer (the caller decides alone).
    pub(super) async fn check(&self, budgets: &[Budget]) -> Option<Result<(), (usize, Duration)>> {
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

    pub(super) fn away(&self, why: &str) {
        metrics::counter!(names::RATE_LIMIT_FALLBACKS_TOTAL).increment(1);
        tracing::warn!(%why, "rate limits: redis away; this node limits alone for a second");
        self.away_until
            .store(self.now_ms() + 1_000, std::sync::atomic::Ordering::Relaxed);
    }
}
