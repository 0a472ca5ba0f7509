//! The admitter: every tick, for every show with a line, one script moves `admitted_through` by
//! the free slots (N scaled by the controller) divided by the claim rate. Several replicas may
//! run; the script's read and advance are one atomic step, so they never both spend the same
//! free capacity. The watchdog raises the alarm nobody else would: nothing admitted for 30 s
//! while people wait and admission is not paused.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onsale_domain::ShowId;
use onsale_edge::admission::{BookingHealth, ProcessorProbe, WriteProbe};
use tokio_util::sync::CancellationToken;

use crate::controller::{Controller, ControllerConfig};
use crate::sale::SaleMeasure;
use crate::{now_ms, WaitingRoom};

/// One admitter replica.
pub struct Admitter {
    room: WaitingRoom,
    health: Arc<BookingHealth>,
    /// The write path's own probe (the append pool), not the read pool's.
    write_path: WriteProbe,
    /// Whether the card processor answers the payments (read by the crate that keeps them).
    processor: ProcessorProbe,
    /// Each show's controller (its own booking path's health, the shared store's and the
    /// processor's), so one show hammered into failing pauses its own line alone.
    controllers: HashMap<ShowId, Controller>,
    config: ControllerConfig,
    /// Per show, its sale's measure and when it was taken (see [`MEASURE_EVERY`]).
    measured: HashMap<ShowId, (Instant, SaleMeasure)>,
}

/// How often a show's sale is measured again when N follows it: conversion and seats left move
/// over seconds, and the measure reads the show's recent log.
const MEASURE_EVERY: Duration = Duration::from_secs(2);

impl std::fmt::Debug for Admitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitter")
            .field("controllers", &self.controllers.len())
            .finish_non_exhaustive()
    }
}

impl Admitter {
    pub fn new(
        room: WaitingRoom,
        health: Arc<BookingHealth>,
        write_path: WriteProbe,
        processor: ProcessorProbe,
    ) -> Self {
        let config = ControllerConfig {
            target_p99: Duration::from_millis(room.config.hold_p99_ms),
            ..ControllerConfig::default()
        };
        Self {
            room,
            health,
            write_path,
            processor,
            controllers: HashMap::new(),
            config,
            measured: HashMap::new(),
        }
    }

    /// Ticks until `shutdown` is cancelled.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let period = Duration::from_millis(self.room.config.tick_ms.max(10));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = Instant::now();
        while shutdown.run_until_cancelled(tick.tick()).await.is_some() {
            let dt = last.elapsed();
            last = Instant::now();
            if let Err(e) = self.tick(dt).await {
                metrics::counter!(onsale_telemetry::metrics::ADMITTER_ERRORS_TOTAL).increment(1);
                tracing::warn!(error = %format!("{e:#}"), "admitter tick failed");
            }
        }
    }

    /// One tick over every show: the controller reads the booking path, then each show's line
    /// moves in one round trip.
    pub async fn tick(&mut self, dt: Duration) -> anyhow::Result<()> {
        let store_ok = (self.write_path)().await;
        let processor_ok = (self.processor)().await;
        metrics::gauge!(onsale_telemetry::metrics::PROCESSOR_FAILING)
            .set(f64::from(u8::from(!processor_ok)));
        let samples = self.health.samples(Duration::from_secs(5));
        let config = self.room.config.clone();
        // Without bounds N stays the configured target; with them it follows each show's sale.
        let follows = config.target_min.is_some() || config.target_max.is_some();
        let (min, max) = (
            config.target_min.unwrap_or(config.target),
            config.target_max.unwrap_or(config.target),
        );
        let shows = self.room.store.shows().await?;
        // Nobody more is let in while no seat is available: the line is told SOLD_OUT or
        // SEATS_MAY_RETURN, and moves again when seats come back. Held back like a pause, so
        // the admissions already given are extended by it. One query for every show.
        let ids: Vec<ShowId> = shows.iter().map(|(show, ..)| *show).collect();
        let sales = crate::sale::availabilities(&self.room.pool, &ids).await;
        self.measured.retain(|show, _| ids.contains(show));
        self.controllers.retain(|show, _| ids.contains(show));
        // The lowest factor of any show (1 with none): the pause an operator looks for first.
        let mut lowest: f64 = 1.0;
        for (show, opens, starts) in shows {
            if now_ms() >= starts {
                // The show started: its sale is over, its line is of no use to anyone.
                self.room.store.retire(show, RETIRED_KEYS_KEEP_MS).await?;
                tracing::info!(%show, "the show started: its waiting room is retired");
                continue;
            }
            let sale = sales
                .get(&show)
                .copied()
                .unwrap_or(crate::sale::Availability::Unknown);
            let n = if follows {
                self.measure(show).await.target(config.target, min, max)
            } else {
                config.target
            };
            let controller = self
                .controllers
                .entry(show)
                .or_insert_with(|| Controller::new(self.config));
            let sample = samples.get(&show).copied().unwrap_or_default();
            let factor = controller.step(sample, store_ok, processor_ok, dt);
            let (target, paused) = (controller.target(n), controller.paused());
            lowest = lowest.min(factor);
            metrics::gauge!(
                onsale_telemetry::metrics::SHOW_ADMISSION_FACTOR,
                "show" => onsale_telemetry::metrics::show_label(&show.to_string())
            )
            .set(factor);
            let started = Instant::now();
            let t = self
                .room
                .store
                .tick(
                    show,
                    now_ms(),
                    opens,
                    target,
                    self.room.grace().as_millis() as i64,
                    paused || !sale.admits(),
                )
                .await?;
            metrics::histogram!(onsale_telemetry::metrics::ADMITTER_TICK_SECONDS)
                .record(started.elapsed().as_secs_f64());
            let labels = [(
                "show",
                onsale_telemetry::metrics::show_label(&show.to_string()),
            )];
            metrics::gauge!(onsale_telemetry::metrics::QUEUE_DEPTH, &labels)
                .set((t.tail - t.admitted_through).max(0) as f64);
            metrics::gauge!(onsale_telemetry::metrics::LIVE_SESSIONS, &labels).set(t.live as f64);
            metrics::gauge!(onsale_telemetry::metrics::ADMISSION_CLAIM_RATE, &labels)
                .set(t.claim_rate);
            metrics::gauge!(onsale_telemetry::metrics::ADMITTED_THROUGH, &labels)
                .set(t.admitted_through as f64);
            metrics::gauge!(onsale_telemetry::metrics::ADMISSION_TARGET, &labels).set(n as f64);
            metrics::gauge!(onsale_telemetry::metrics::ADMISSION_SOLD_OUT, &labels)
                .set(f64::from(u8::from(!sale.admits())));
            metrics::counter!(onsale_telemetry::metrics::ADMITTED_POSITIONS_TOTAL, &labels)
                .increment(t.advanced.max(0) as u64);
        }
        metrics::gauge!(onsale_telemetry::metrics::ADMISSION_FACTOR).set(lowest);
        Ok(())
    }
}

impl Admitter {
    /// The show's sale as last measured, measured again when older than [`MEASURE_EVERY`].
    async fn measure(&mut self, show: ShowId) -> SaleMeasure {
        if let Some((at, m)) = self.measured.get(&show) {
            if at.elapsed() < MEASURE_EVERY {
                return *m;
            }
        }
        let m = crate::sale::measure(&self.room.pool, &self.room.catalog, show)
            .await
            .unwrap_or_default();
        self.measured.insert(show, (Instant::now(), m));
        m
    }
}

/// How long a started show's waiting-room keys stay in Redis (for a look after the fact).
pub const RETIRED_KEYS_KEEP_MS: i64 = 3_600_000;

/// The stall alarm, for one show: positions admitted in the last 30 s is zero while the queue
/// is not empty, the sale is open and admission is not deliberately paused.
pub async fn stalled(room: &WaitingRoom, show: ShowId, paused: bool) -> redis::RedisResult<bool> {
    let now = now_ms();
    let (passed, depth, newest_tick) = room.store.recent(show, now, 30_000).await?;
    // A tick loop that stopped leaves the history frozen: that is a stall too.
    let frozen = newest_tick > 0 && now - newest_tick > 30_000;
    Ok(!paused && depth > 0 && (passed == 0 || frozen))
}

/// Watches every show for a stalled admitter; sets `onsale_admission_stalled{show}`.
pub async fn watchdog(room: WaitingRoom, every: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    let mut paused_seen: std::collections::HashMap<ShowId, i64> = Default::default();
    while shutdown.run_until_cancelled(tick.tick()).await.is_some() {
        let Ok(shows) = room.store.shows().await else {
            continue;
        };
        for (show, opens, _) in shows {
            if now_ms() < opens + 30_000 {
                continue;
            }
            // A deliberate pause (the controller) is not a stall: its total grows.
            let total = room.store.paused_ms(show).await.unwrap_or(0);
            let paused = paused_seen.insert(show, total).is_some_and(|p| total > p);
            if let Ok(stalled) = stalled(&room, show, paused).await {
                metrics::gauge!(onsale_telemetry::metrics::ADMISSION_STALLED, "show" => onsale_telemetry::metrics::show_label(&show.to_string()))
                    .set(f64::from(u8::from(stalled)));
                if stalled {
                    tracing::error!(%show, "ADMISSION STALLED: nobody admitted for 30 s while fans wait");
                }
            }
        }
    }
}
