//! Every background loop of a process runs under a supervisor: a loop that ends before
//! shutdown (it panicked, or returned) is logged, counted
//! (`onsale_part_restarts_total{part}`) and started again after a backoff (1 s doubling to
//! 30 s; back to 1 s once it has run a minute). From its death until it has run
//! [`STABLE`] again the part is "down": `/readyz` answers 503 naming it, and after
//! [`CRASH_LOOP`] deaths in a row without a stable run `/healthz` answers 503 too, so an
//! orchestrator replaces the process. Nothing dies silently.
//!
//! Hand-written rather than a crate's: the restart unit is one of the server's parts (several
//! tasks that live and die together) and its health feeds this server's own probes; tokio's
//! `JoinHandle` already turns a panic into a value, so what is left is the loop below.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use futures::future::select_all;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

/// How long a restarted part must run before it counts as up again.
pub const STABLE: Duration = Duration::from_secs(5);
/// Deaths in a row (none followed by a minute's run) after which the process is unhealthy.
pub const CRASH_LOOP: u32 = 5;
const FIRST_WAIT: Duration = Duration::from_secs(1);
const MAX_WAIT: Duration = Duration::from_secs(30);
const RESET_AFTER: Duration = Duration::from_secs(60);

/// The parts of this process that are down, and why.
#[derive(Debug, Clone, Default)]
pub struct PartsHealth {
    down: Arc<Mutex<BTreeMap<&'static str, Down>>>,
}

#[derive(Debug, Clone)]
struct Down {
    why: String,
    /// Deaths in a row without a minute's run.
    deaths: u32,
    /// Restarted at (still within [`STABLE`]); `None` while waiting to restart.
    restarted: Option<Instant>,
}

impl PartsHealth {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Down>> {
        self.down.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn died(&self, part: &'static str, why: String, deaths: u32) {
        self.lock().insert(
            part,
            Down {
                why,
                deaths,
                restarted: None,
            },
        );
    }

    fn restarted(&self, part: &'static str) {
        if let Some(d) = self.lock().get_mut(part) {
            d.restarted = Some(Instant::now());
        }
    }

    /// `Err` names every part that is down (or restarted less than [`STABLE`] ago).
    pub fn ready(&self) -> Result<(), String> {
        let mut down = self.lock();
        down.retain(|_, d| d.restarted.is_none_or(|at| at.elapsed() < STABLE));
        if down.is_empty() {
            return Ok(());
        }
        Err(down
            .iter()
            .map(|(part, d)| match d.restarted {
                Some(_) => format!(
                    "{part} restarted after it stopped ({}); {} in a row",
                    d.why, d.deaths
                ),
                None => format!("{part} is down ({}); restarting", d.why),
            })
            .collect::<Vec<_>>()
            .join("; "))
    }

    /// `Err` names a part that keeps dying: the process should be replaced.
    pub fn live(&self) -> Result<(), String> {
        match self.lock().iter().find(|(_, d)| d.deaths >= CRASH_LOOP) {
            Some((part, d)) => Err(format!(
                "{part} died {} times in a row ({})",
                d.deaths, d.why
            )),
            None => Ok(()),
        }
    }
}

/// Why a part's tasks ended.
fn why(result: Result<(), tokio::task::JoinError>) -> String {
    match result {
        Ok(()) => "its loop returned".to_owned(),
        Err(e) if e.is_panic() => {
            let p = e.into_panic();
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            format!("panicked: {msg}")
        }
        Err(_) => "its task was cancelled".to_owned(),
    }
}

/// Runs the part `name` (the tasks `start` spawns) until `stop`, restarting it when any of its
/// tasks ends before then. `first` are the tasks already started (so the first start's errors
/// reach the caller). Dropping (aborting) the supervisor aborts the part's tasks.
pub fn supervise<F, Fut>(
    name: &'static str,
    first: Vec<JoinHandle<()>>,
    health: PartsHealth,
    stop: CancellationToken,
    start: F,
) -> Supervised
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = anyhow::Result<Vec<JoinHandle<()>>>> + Send,
{
    let running = Running::default();
    let current = running.clone();
    // Owned before the supervisor first runs: aborting it at once still stops them.
    let first = current.track(first);
    let supervisor = tokio::spawn(async move {
        let mut tasks: Vec<AbortOnDropHandle<()>> = first;
        let (mut deaths, mut wait) = (0u32, FIRST_WAIT);
        loop {
            let started = Instant::now();
            if tasks.is_empty() {
                return;
            }
            let (ended, _, rest) = select_all(tasks).await;
            if stop.is_cancelled() {
                // Shutting down: the others stop by themselves.
                for t in rest {
                    let _ = t.await;
                }
                return;
            }
            drop(rest);
            if started.elapsed() >= RESET_AFTER {
                (deaths, wait) = (0, FIRST_WAIT);
            }
            deaths += 1;
            let why = why(ended);
            tracing::error!(part = name, %why, deaths, ?wait, "a part of this process stopped; restarting it");
            metrics::counter!(crate::metrics::PART_RESTARTS_TOTAL, "part" => name).increment(1);
            health.died(name, why, deaths);
            tasks = loop {
                if stop
                    .run_until_cancelled(tokio::time::sleep(wait))
                    .await
                    .is_none()
                {
                    return;
                }
                wait = (wait * 2).min(MAX_WAIT);
                match start().await {
                    Ok(t) => break current.track(t),
                    Err(e) => {
                        tracing::error!(part = name, error = %e, "the part did not start again");
                        health.died(name, format!("did not start: {e}"), deaths);
                    }
                }
            };
            health.restarted(name);
        }
    });
    Supervised {
        supervisor,
        running,
    }
}

/// The current tasks of a supervised part.
#[derive(Debug, Clone, Default)]
struct Running(Arc<Mutex<Vec<tokio::task::AbortHandle>>>);

impl Running {
    fn track(&self, tasks: Vec<JoinHandle<()>>) -> Vec<AbortOnDropHandle<()>> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) =
            tasks.iter().map(JoinHandle::abort_handle).collect();
        tasks.into_iter().map(AbortOnDropHandle::new).collect()
    }

    fn abort(&self) {
        for t in self.0.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            t.abort();
        }
    }
}

/// A part under its supervisor.
#[derive(Debug)]
pub struct Supervised {
    supervisor: JoinHandle<()>,
    running: Running,
}

impl Supervised {
    /// Stops the part and its supervisor where they stand: nothing restarts it.
    pub fn abort(&self) {
        self.supervisor.abort();
    }

    /// The part's tasks die where they stand (as a panic would end them); the supervisor sees
    /// it and starts them again. For drills and tests.
    pub fn crash(&self) {
        self.running.abort();
    }

    /// Waits for the supervisor to end (at shutdown, once the part's tasks have ended).
    pub async fn join(self) {
        let _ = self.supervisor.await;
    }

    pub fn abort_handle(&self) -> tokio::task::AbortHandle {
        self.supervisor.abort_handle()
    }
}

/// Where a process's background loops run (a lease's heartbeat, a listener, a poll, a
/// refresh): each under a [`supervise`] of its own, reported in `health`, ended by `stop`,
/// its supervisor waited for by `tracker` at shutdown. A crate that runs a loop takes a
/// `Loops` rather than spawning it, so no loop of the process dies silently (issue 53,
/// item 10).
#[derive(Debug, Clone)]
pub struct Loops {
    health: PartsHealth,
    stop: CancellationToken,
    tracker: TaskTracker,
    running: Arc<Mutex<Vec<(&'static str, Running)>>>,
}

impl Loops {
    pub fn new(health: PartsHealth, stop: CancellationToken, tracker: TaskTracker) -> Self {
        Self {
            health,
            stop,
            tracker,
            running: Arc::default(),
        }
    }

    /// Loops of their own, for a component run alone (a test, a benchmark): stopped by `stop`.
    pub fn alone(stop: CancellationToken) -> Self {
        Self::new(PartsHealth::default(), stop, TaskTracker::new())
    }

    /// Cancelled at shutdown: a loop returns once it is, and is then not restarted.
    pub fn stop(&self) -> &CancellationToken {
        &self.stop
    }

    /// Waited for at shutdown (the loops' supervisors, and whatever else their owner tracks).
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    pub fn health(&self) -> &PartsHealth {
        &self.health
    }

    /// Runs the loop `make` builds, as `name`, until [`Loops::stop`]; built again and
    /// restarted (after the supervisor's backoff) whenever it ends before then.
    pub fn spawn<F, Fut>(&self, name: &'static str, make: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let first = vec![tokio::spawn(make())];
        let sup = supervise(
            name,
            first,
            self.health.clone(),
            self.stop.clone(),
            move || {
                let run = make();
                async move { Ok(vec![tokio::spawn(run)]) }
            },
        );
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name, sup.running.clone()));
        self.tracker.spawn(sup.join());
    }

    /// The names of the loops running here.
    pub fn names(&self) -> Vec<&'static str> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.iter().map(|(name, _)| *name).collect()
    }

    /// The loop `name` dies where it stands, as a panic would end it; its supervisor starts it
    /// again. For drills and tests. `false` if no loop has that name.
    pub fn crash(&self, name: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut found = false;
        for (_, r) in running.iter().filter(|(n, _)| *n == name) {
            r.abort();
            found = true;
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_part_that_panics_is_named_down_restarted_and_then_up() {
        let health = PartsHealth::default();
        let runs = Arc::new(AtomicU32::new(0));
        let stop = CancellationToken::new();
        let start = {
            let runs = runs.clone();
            let stop = stop.clone();
            move || {
                let runs = runs.clone();
                let stop = stop.clone();
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst);
                    Ok(vec![tokio::spawn(async move {
                        assert!(n > 0, "the first run dies");
                        stop.cancelled().await;
                    })])
                }
            }
        };
        let first = start().await.expect("starts");
        let sup = supervise("intake", first, health.clone(), stop.clone(), start);
        // Down while it waits to restart.
        let down = until(FIRST_WAIT, || health.ready().err()).await;
        assert!(down.contains("intake is down (panicked"), "{down}");
        assert!(health.live().is_ok(), "one death is not a crash loop");
        until(FIRST_WAIT * 2, || {
            (runs.load(Ordering::SeqCst) >= 2).then_some(())
        })
        .await;
        assert_eq!(runs.load(Ordering::SeqCst), 2, "restarted once");
        assert!(health
            .ready()
            .expect_err("not stable yet")
            .contains("restarted"));
        until(STABLE * 2, || health.ready().ok()).await;
        assert_eq!(health.ready(), Ok(()));
        stop.cancel();
        sup.join().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_part_that_keeps_dying_makes_the_process_unhealthy() {
        let health = PartsHealth::default();
        let stop = CancellationToken::new();
        let start = || async { Ok(vec![tokio::spawn(async {})]) };
        let first = start().await.expect("starts");
        let _sup = supervise("worker", first, health.clone(), stop.clone(), start);
        let mut waited = Duration::ZERO;
        while health.live().is_ok() && waited < Duration::from_secs(600) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            waited += Duration::from_secs(1);
        }
        let why = health.live().expect_err("a crash loop");
        assert!(why.contains("worker died 5 times in a row"), "{why}");
        stop.cancel();
    }

    /// What `check` finds once it finds something, the paused clock advanced in 10 ms steps;
    /// the test fails past `within` of that clock.
    async fn until<T>(within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + within;
        loop {
            if let Some(found) = check() {
                return found;
            }
            assert!(Instant::now() < deadline, "nothing within {within:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_dies_is_named_down_and_built_again_until_stop() {
        let stop = CancellationToken::new();
        let loops = Loops::alone(stop.clone());
        let builds = Arc::new(AtomicU32::new(0));
        let counted = builds.clone();
        let stopped = stop.clone();
        loops.spawn("seat-map poll", move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let stopped = stopped.clone();
            async move { stopped.cancelled().await }
        });
        assert_eq!(loops.names(), vec!["seat-map poll"]);
        assert!(!loops.crash("no such loop"));
        assert!(loops.crash("seat-map poll"));
        let down = until(Duration::from_secs(1), || loops.health().ready().err()).await;
        assert!(down.contains("seat-map poll is down"), "{down}");
        until(FIRST_WAIT + STABLE + STABLE, || loops.health().ready().ok()).await;
        assert_eq!(builds.load(Ordering::SeqCst), 2, "built again once");
        assert_eq!(loops.health().ready(), Ok(()));
        stop.cancel();
        loops.tracker().close();
        loops.tracker().wait().await;
        assert_eq!(builds.load(Ordering::SeqCst), 2, "not built again at stop");
    }
}
