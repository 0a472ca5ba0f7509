//! What the fan is told: an ETA from an EWMA of the admission rate, which never jumps upward.

/// An exponentially weighted rate over a time constant (30 s: design.md §7.6).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ewma {
    pub per_sec: f64,
    tau_secs: f64,
}

impl Ewma {
    pub fn new(tau_secs: f64) -> Self {
        Self {
            per_sec: 0.0,
            tau_secs,
        }
    }

    pub fn with_rate(tau_secs: f64, per_sec: f64) -> Self {
        Self { per_sec, tau_secs }
    }

    /// `count` events in the last `dt_secs`.
    pub fn observe(&mut self, count: f64, dt_secs: f64) {
        if dt_secs <= 0.0 {
            return;
        }
        let alpha = 1.0 - (-dt_secs / self.tau_secs).exp();
        self.per_sec += alpha * (count / dt_secs - self.per_sec);
    }
}

/// The ETA (seconds) for a fan `ahead` positions from the front at `rate` positions/s, never
/// more than what they were told last (`last`, told `since_secs` ago) minus the time since:
/// an ETA that grows is a support ticket. `None` when nothing is moving and nothing was said.
pub fn eta(ahead: u64, rate: f64, last: Option<(f64, f64)>) -> Option<f64> {
    let fresh = (rate > 0.01).then(|| ahead as f64 / rate);
    let bound = last.map(|(told, since)| (told - since).max(0.0));
    match (fresh, bound) {
        (Some(f), Some(b)) => Some(f.min(b)),
        (Some(f), None) => Some(f),
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_follows_admissions_and_the_eta_never_grows() {
        let mut r = Ewma::new(30.0);
        for _ in 0..600 {
            r.observe(50.0, 0.5); // 100/s for 5 minutes
        }
        assert!((r.per_sec - 100.0).abs() < 1.0, "{}", r.per_sec);
        assert_eq!(eta(1_000, 100.0, None), Some(10.0));
        // The line slows: the fresh estimate is 20 s, but 9 s were promised 1 s ago... 8 s.
        assert_eq!(eta(1_000, 50.0, Some((9.0, 1.0))), Some(8.0));
        // It speeds up: the fresh, lower estimate wins.
        assert_eq!(eta(100, 100.0, Some((9.0, 1.0))), Some(1.0));
        assert_eq!(eta(100, 0.0, None), None);
        assert_eq!(eta(100, 0.0, Some((3.0, 5.0))), Some(0.0));
    }
}
