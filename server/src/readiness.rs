//! The API's readiness, refreshed in the background (issue 53, item 4): `/readyz` answers from
//! what the last refresh found and never touches a pool itself, however often it is asked (a
//! probe on the public listener used to ping every shard's append pool per request).

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use onsale_eventlog::EventLog;
use tokio_util::sync::CancellationToken;

/// How often readiness is refreshed.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_millis(500);
/// How long the log's ping may take before the process is not ready.
pub(crate) const PING_WITHIN: Duration = Duration::from_secs(2);
/// A state older than this is not believed: the refresh died or hangs (its supervisor names
/// it down meanwhile, but that verdict would only reach a probe through a refresh).
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(5);

/// What a refresh checks once the log answered: the lease, the parts and the read side.
pub(crate) type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the last refresh found (`Ok` ready, `Err` why not), and when.
#[derive(Debug, Clone)]
pub(crate) struct Readiness(Arc<RwLock<(Result<(), String>, Instant)>>);

impl Readiness {
    /// Not ready until the first refresh.
    pub(crate) fn starting() -> Self {
        Self(Arc::new(RwLock::new((
            Err("starting".into()),
            Instant::now(),
        ))))
    }

    pub(crate) fn get(&self) -> Result<(), String> {
        let (state, at) = self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        match at.elapsed() {
            age if age > STALE_AFTER => Err(format!(
                "readiness was last refreshed {} s ago",
                age.as_secs()
            )),
            _ => state,
        }
    }

    fn set(&self, r: Result<(), String>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = (r, Instant::now());
    }

    /// Refreshes every [`REFRESH_EVERY`] until `shutdown`: the log (every shard) answers a
    /// ping within [`PING_WITHIN`], then `check` (the parts and the read side).
    pub(crate) async fn refresh(
        self,
        log: Arc<dyn EventLog>,
        check: Check,
        shutdown: CancellationToken,
    ) {
        let mut every = tokio::time::interval(REFRESH_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = every.tick() => {}
            }
            let r = match tokio::time::timeout(PING_WITHIN, log.ping()).await {
                Ok(Ok(())) => check(),
                Ok(Err(e)) => Err(format!("the event log is unreachable: {e}")),
                Err(_) => Err(format!(
                    "the event log did not answer within {} s",
                    PING_WITHIN.as_secs()
                )),
            };
            self.set(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_ready_until_refreshed() {
        let r = Readiness::starting();
        assert_eq!(r.get(), Err("starting".into()));
        r.set(Ok(()));
        assert_eq!(r.clone().get(), Ok(()));
    }

    #[test]
    fn a_state_no_refresh_renewed_is_not_believed() {
        let r = Readiness::starting();
        r.set(Ok(()));
        let old = Instant::now()
            .checked_sub(STALE_AFTER + Duration::from_secs(1))
            .expect("an instant in the past");
        r.0.write().expect("lock").1 = old;
        let why = r.get().expect_err("stale");
        assert!(why.contains("last refreshed 6 s ago"), "{why}");
    }
}
