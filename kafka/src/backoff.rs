//! Waits between retries of a long-running loop (the relay, the projections, topic creation):
//! exponential from a first wait up to 5 s, with jitter (backon's policy), so processes that
//! failed together do not retry in step.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

const MAX: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Backoff {
    policy: ExponentialBuilder,
    delays: ExponentialBackoff,
}

impl Backoff {
    pub fn new(first: Duration) -> Self {
        let policy = ExponentialBuilder::new()
            .with_min_delay(first)
            .with_max_delay(MAX)
            .with_jitter()
            .without_max_times();
        Self {
            delays: policy.build(),
            policy,
        }
    }

    /// Sleeps for the current wait (doubling, at most 5 s, plus up to as much again of jitter).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.delays.next().unwrap_or(MAX)).await;
    }

    /// After a success: the next failure waits the first wait again.
    pub fn reset(&mut self) {
        self.delays = self.policy.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn waited(b: &mut Backoff) -> Duration {
        let start = tokio::time::Instant::now();
        b.wait().await;
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn waits_double_up_to_five_seconds_with_jitter_and_reset() {
        let mut b = Backoff::new(Duration::from_millis(1_500));
        // The jitter is below the wait itself, but the paused clock rounds a sleep up to the next
        // millisecond: a jitter a hair under 1.5 s sleeps exactly 3 s.
        for want in [1_500, 3_000, 5_000, 5_000] {
            let w = waited(&mut b).await;
            let want = Duration::from_millis(want);
            assert!(w >= want && w <= want * 2, "{w:?} for {want:?}");
        }
        b.reset();
        let w = waited(&mut b).await;
        assert!(w >= Duration::from_millis(1_500) && w <= Duration::from_millis(3_000));
    }
}
