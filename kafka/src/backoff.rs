//! Doubling waits between retries of a long-running loop (the relay, the projections, topic
//! creation): from a first wait up to 5 s.

use std::time::Duration;

const MAX: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(first: Duration) -> Self {
        Self { first, next: first }
    }

    /// Sleeps for the current wait and doubles the next one (at most 5 s).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(MAX);
    }

    /// After a success: the next failure waits the first wait again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_double_up_to_five_seconds_and_reset() {
        let mut b = Backoff::new(Duration::from_millis(1_500));
        for want in [1_500, 3_000, 5_000, 5_000] {
            let start = tokio::time::Instant::now();
            b.wait().await;
            assert_eq!(start.elapsed(), Duration::from_millis(want));
        }
        b.reset();
        let start = tokio::time::Instant::now();
        b.wait().await;
        assert_eq!(start.elapsed(), Duration::from_millis(1_500));
    }
}
