//! The API's readiness, refreshed in the background (issue 53, item 4): `/readyz` answers from
//! what the last refresh found and never touches a pool itself, however often it is asked (a
//! probe on the public listener used to ping every shard's append pool per request).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use onsale_eventlog::EventLog;
use tokio_util::sync::CancellationToken;

/// How often readiness is refreshed.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_millis(500);
/// How long the log's ping may take before the process is not ready.
pub(crate) const PING_WITHIN: Duration = Duration::from_secs(2);

/// What the last refresh found: `Ok` ready, `Err` why not.
#[derive(Debug, Clone)]
pub(crate) struct Readiness(Arc<RwLock<Result<(), String>>>);

impl Readiness {
    /// Not ready until the first refresh.
    pub(crate) fn starting() -> Self {
        Self(Arc::new(RwLock::new(Err("starting".into()))))
    }

    pub(crate) fn get(&self) -> Result<(), String> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, r: Result<(), String>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = r;
    }

    /// Refreshes every [`REFRESH_EVERY`] until `shutdown`: the log (every shard) answers a
    /// ping within [`PING_WITHIN`], then `check` (the parts and the read side).
    pub(crate) async fn refresh(
        self,
        log: Arc<dyn EventLog>,
        check: impl Fn() -> Result<(), String> + Send + 'static,
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
}
