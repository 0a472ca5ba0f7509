//! Time comes in through a trait so that tests can hold it still or jump it.

use std::fmt::Debug;
use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};

/// The only source of "now" the domain consults.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// A clock that only moves when told to: for tests and simulations.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new(at: DateTime<Utc>) -> Self {
        Self(Mutex::new(at))
    }

    pub fn advance(&self, by: Duration) {
        let mut now = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }

    pub fn set(&self, at: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The system clock, the production source of "now", to the microsecond: what PostgreSQL keeps
/// of a time, so an expiry the API answers on a write reads back the same from a read model.
#[derive(Debug)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        use chrono::SubsecRound;
        Utc::now().trunc_subsecs(6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_keeps_microseconds_as_postgresql_does() {
        for _ in 0..100 {
            assert_eq!(SystemClock.now().timestamp_subsec_nanos() % 1_000, 0);
        }
    }
}
