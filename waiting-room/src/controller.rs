//! The admission controller (design.md §7.7): the concurrency target N is scaled by a
//! factor the booking path's health drives. When holds fail or slow past their target the
//! factor drops to zero at once (admission pauses by itself, no runbook); when the path is
//! healthy again it ramps back, so a recovering primary is not hit by the whole backlog.

use std::time::Duration;

use onsale_edge::admission::HealthSample;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControllerConfig {
    /// Hold p99 above this is "slow".
    pub target_p99: Duration,
    /// A failure share above this is "failing".
    pub max_error_rate: f64,
    /// Fewer requests than this in the window say nothing about latency.
    pub min_requests: usize,
    /// How fast the factor climbs back, per second (0.2: five seconds from 0 to 1).
    pub ramp_per_sec: f64,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            target_p99: Duration::from_millis(500),
            max_error_rate: 0.05,
            min_requests: 20,
            ramp_per_sec: 0.2,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Controller {
    pub config: ControllerConfig,
    factor: f64,
}

impl Controller {
    pub fn new(config: ControllerConfig) -> Self {
        Self {
            config,
            factor: 1.0,
        }
    }

    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// True while admission is paused.
    pub fn paused(&self) -> bool {
        self.factor <= 0.0
    }

    /// One step: `store_ok` is whether the event store answered its health check,
    /// `processor_ok` whether the card processor is taking payments (a fan admitted during an
    /// outage could hold seats but not pay for them); `dt` the time since the last step.
    /// Returns the new factor.
    pub fn step(
        &mut self,
        sample: HealthSample,
        store_ok: bool,
        processor_ok: bool,
        dt: Duration,
    ) -> f64 {
        let c = &self.config;
        let judged = sample.requests >= c.min_requests;
        let failing = !store_ok
            || !processor_ok
            || (judged && sample.error_rate > c.max_error_rate)
            || (judged && sample.p99_secs > c.target_p99.as_secs_f64())
            // A few requests that all fail are enough: nothing healthy answers like that.
            || (sample.requests >= 3 && sample.error_rate >= 0.5);
        self.factor = if failing {
            0.0
        } else {
            (self.factor + c.ramp_per_sec * dt.as_secs_f64()).min(1.0)
        };
        self.factor
    }

    /// The effective concurrency target for `n`.
    pub fn target(&self, n: u64) -> u64 {
        (n as f64 * self.factor).floor() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(requests: usize, p99_ms: u64, error_rate: f64) -> HealthSample {
        HealthSample {
            requests,
            p99_secs: p99_ms as f64 / 1000.0,
            error_rate,
        }
    }

    const TICK: Duration = Duration::from_millis(500);

    #[test]
    fn failure_or_slowness_pauses_at_once_and_recovery_ramps_back() {
        let mut c = Controller::new(ControllerConfig::default());
        assert_eq!(c.target(1_000), 1_000);
        c.step(sample(100, 40, 0.0), true, true, TICK);
        assert_eq!(c.target(1_000), 1_000);
        c.step(sample(100, 900, 0.0), true, true, TICK);
        assert!(c.paused(), "p99 past target pauses");
        c.step(sample(100, 40, 0.0), true, true, TICK);
        assert_eq!(c.target(1_000), 100, "recovery ramps: 0.2/s for 0.5 s");
        for _ in 0..20 {
            c.step(sample(100, 40, 0.0), true, true, TICK);
        }
        assert_eq!(c.target(1_000), 1_000);
        c.step(sample(0, 0, 0.0), false, true, TICK);
        assert!(c.paused(), "an event store that does not answer pauses");
        for _ in 0..20 {
            c.step(sample(100, 40, 0.0), true, true, TICK);
        }
        c.step(sample(100, 40, 0.0), true, false, TICK);
        assert!(
            c.paused(),
            "a processor outage pauses: orders could not be paid"
        );
        c.step(sample(100, 40, 0.0), true, true, TICK);
        assert_eq!(c.target(1_000), 100, "and ramps back after it");
        c.step(sample(5, 10, 0.0), true, true, TICK);
        c.step(sample(4, 10, 1.0), true, true, TICK);
        assert!(
            c.paused(),
            "every request failing pauses even with few requests"
        );
        let mut quiet = Controller::new(ControllerConfig::default());
        quiet.step(sample(5, 5_000, 0.0), true, true, TICK);
        assert!(!quiet.paused(), "five slow requests are not a verdict");
    }
}
