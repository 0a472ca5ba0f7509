//! What the waiting room plugs into the booking path: the session gate that holds and orders of
//! a show with a waiting room must pass, and the booking path's health as the admission
//! controller reads it. The booking rules underneath are unchanged: the gate only decides who
//! may ask.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use onsale_domain::{AccountId, ShowId};

/// Why the gate turned a caller away: a domain-level answer, which each surface words itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateRefusal {
    /// The caller holds no live session of this show's waiting room.
    #[error("{0}")]
    AdmissionRequired(String),
    /// Where sessions are kept cannot be read now.
    #[error("the waiting room's sessions are unreachable")]
    Unavailable,
}

pub type GateFuture<'a> = Pin<Box<dyn Future<Output = Result<(), GateRefusal>> + Send + 'a>>;

/// Checks that `account` holds a live session of `show`'s waiting room (`session` is the
/// `X-Onsale-Session` header): Redis for sessions of the line, PostgreSQL only for the few the
/// fallback opened while Redis was away.
pub trait SessionGate: Send + Sync + std::fmt::Debug {
    fn check<'a>(
        &'a self,
        show: ShowId,
        account: &'a AccountId,
        session: Option<&'a str>,
    ) -> GateFuture<'a>;
}

/// Whether the write path answers now: a probe of the pool the owners append through (not the
/// read pool, which a flood of public reads may fill without any hold failing).
pub type WriteProbe =
    std::sync::Arc<dyn Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// Whether the card processor is answering the payments now (the controller's processor
/// signal): `false` while payments fail together at it. Read by the crate that keeps the
/// payments, on every shard; a work list it cannot read says nothing (`true`).
pub type ProcessorProbe = WriteProbe;

/// The hold path's recent latencies and failures (a failure is the service's: 5xx, not a 409),
/// each show's apart: one show hammered into failing (its owner overloaded) pauses its own line,
/// not every show's (issue 53 item 11).
#[derive(Debug, Default)]
pub struct BookingHealth {
    window: Mutex<VecDeque<(Instant, ShowId, f64, bool)>>,
}

/// The hold path over a recent window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HealthSample {
    pub requests: usize,
    pub p99_secs: f64,
    pub error_rate: f64,
}

impl BookingHealth {
    const KEEP: Duration = Duration::from_secs(30);

    /// One hold request of `show`: how long it took and whether the service answered it.
    pub fn record(&self, show: ShowId, secs: f64, ok: bool) {
        let now = Instant::now();
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        w.push_back((now, show, secs, ok));
        while w
            .front()
            .is_some_and(|(t, ..)| now.duration_since(*t) > Self::KEEP)
        {
            w.pop_front();
        }
        // Bounded whatever the rate: the newest 50,000 are plenty for a p99.
        while w.len() > 50_000 {
            w.pop_front();
        }
    }

    /// Each show's requests of the last `over`: their p99 and the share that failed.
    pub fn samples(&self, over: Duration) -> HashMap<ShowId, HealthSample> {
        let now = Instant::now();
        let mut by_show: HashMap<ShowId, (Vec<f64>, usize)> = HashMap::new();
        {
            let w = self.window.lock().unwrap_or_else(|p| p.into_inner());
            for (t, show, secs, ok) in w.iter().rev() {
                if now.duration_since(*t) > over {
                    break;
                }
                let (lat, failed) = by_show.entry(*show).or_default();
                lat.push(*secs);
                *failed += usize::from(!ok);
            }
        }
        by_show
            .into_iter()
            .map(|(show, (mut lat, failed))| {
                lat.sort_by(f64::total_cmp);
                let idx = ((lat.len() as f64) * 0.99).ceil() as usize;
                let sample = HealthSample {
                    requests: lat.len(),
                    p99_secs: lat[idx.saturating_sub(1).min(lat.len() - 1)],
                    error_rate: failed as f64 / lat.len() as f64,
                };
                (show, sample)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shows_sample_reports_its_own_p99_and_failure_share() {
        let h = BookingHealth::default();
        let (hammered, quiet) = (ShowId::random(), ShowId::random());
        for i in 0..100 {
            h.record(quiet, f64::from(i) / 1000.0, i % 10 != 0);
            h.record(hammered, 2.0, false);
        }
        let samples = h.samples(Duration::from_secs(5));
        let s = samples[&quiet];
        assert_eq!(s.requests, 100);
        assert!((s.p99_secs - 0.098).abs() < 1e-9, "{s:?}");
        assert!((s.error_rate - 0.1).abs() < 1e-9);
        let s = samples[&hammered];
        assert_eq!((s.requests, s.p99_secs, s.error_rate), (100, 2.0, 1.0));
        assert!(BookingHealth::default()
            .samples(Duration::from_secs(5))
            .is_empty());
    }
}
