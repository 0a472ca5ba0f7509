//! The failover drills (`make drill-failover`, `make drill-nodes`): during the demo's on-sale
//! the primary's machine, or the command node owning the show, is killed at a random moment (an
//! operator's command), and afterwards every acknowledged hold and order is looked up one by one
//! in the log, and the time without writes and the admission pause are reported.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use onsale_domain::show::Show;
use onsale_domain::{HoldId, OrderId};
use rand::Rng;

/// The processor's books (the simulator's `/v1/ledger`): captures per order reference.
pub(crate) async fn captures(
    http: &reqwest::Client,
    processor: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
    let ledger: serde_json::Value = http
        .get(format!("{processor}/v1/ledger"))
        .send()
        .await?
        .json()
        .await?;
    Ok(ledger["capturesPerReference"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(order, n)| (order.clone(), n.as_u64().unwrap_or(0)))
        .collect())
}

/// The acknowledged holds and orders the replayed `show` lacks (an id that does not parse
/// counts as lost).
pub(crate) fn lost<'a>(
    show: &Show,
    holds: &'a [String],
    orders: &'a [String],
) -> (Vec<&'a String>, Vec<&'a String>) {
    let holds = holds
        .iter()
        .filter(|h| {
            h.parse::<HoldId>()
                .map_or(true, |id| show.hold(&id).is_none())
        })
        .collect();
    let orders = orders
        .iter()
        .filter(|o| {
            o.parse::<OrderId>()
                .map_or(true, |id| show.order(&id).is_none())
        })
        .collect();
    (holds, orders)
}

/// What the drill kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Victim {
    /// The PostgreSQL primary (`make up HA=1`).
    Primary,
    /// The command node owning the show (`make up NODES=3`).
    Node,
}

impl Victim {
    fn name(self) -> &'static str {
        match self {
            Self::Primary => "the primary",
            Self::Node => "the show's command node",
        }
    }
}

#[derive(Debug)]
pub(crate) struct Drill {
    command: String,
    victim: Victim,
    started: Instant,
    /// The fan whose turn triggers the kill.
    kill_at: u64,
    killed_at: OnceLock<Instant>,
    /// When each write (hold 201, order 202) was acknowledged.
    acks: Mutex<Vec<Instant>>,
    /// Every hold acknowledged.
    holds: Mutex<Vec<String>>,
    /// The lowest admission factor the service reported after the kill.
    lowest_factor: Mutex<Option<f64>>,
    /// When a primary first answered again through the operators' address after the kill.
    promoted_at: OnceLock<Instant>,
}

impl Drill {
    /// Kills with `command` when a fan between 20% and 60% of `fans` starts.
    pub(crate) fn new(command: String, victim: Victim, fans: u32) -> Self {
        let fans = u64::from(fans.max(5));
        let kill_at = rand::rng().random_range(fans / 5..fans * 3 / 5);
        Self {
            command,
            victim,
            started: Instant::now(),
            kill_at,
            killed_at: OnceLock::new(),
            acks: Mutex::default(),
            holds: Mutex::default(),
            lowest_factor: Mutex::default(),
            promoted_at: OnceLock::new(),
        }
    }

    /// Called as fan `fan` starts: runs the kill on its turn (in the background).
    pub(crate) fn fan_starts(&self, fan: u64) {
        if fan != self.kill_at {
            return;
        }
        let _ = self.killed_at.set(Instant::now());
        let command = self.command.clone();
        tokio::spawn(async move {
            match tokio::process::Command::new("sh")
                .args(["-c", &command])
                .output()
                .await
            {
                Ok(out) => println!(
                    "\n[drill] fan {fan}: ran `{command}`: {}",
                    String::from_utf8_lossy(&out.stdout).trim()
                ),
                Err(e) => println!("\n[drill] `{command}` failed: {e}"),
            }
        });
    }

    pub(crate) fn acknowledged(&self, hold: Option<&str>) {
        let now = Instant::now();
        if let Ok(mut a) = self.acks.lock() {
            a.push(now);
        }
        if let (Some(h), Ok(mut holds)) = (hold, self.holds.lock()) {
            holds.push(h.to_owned());
        }
    }

    /// After the kill: samples the service's admission factor (its `/metrics`), and notes when
    /// a primary answers again at `database_url` (HAProxy's address), until the run ends.
    pub(crate) async fn watch(&self, http: reqwest::Client, base: String, database_url: String) {
        loop {
            if let Some(killed) = self.killed_at.get() {
                if killed.elapsed() > Duration::from_secs(120) {
                    return;
                }
                if self.victim == Victim::Primary && self.promoted_at.get().is_none() {
                    let primary = async {
                        use sqlx::Connection;
                        let mut c = sqlx::PgConnection::connect(&database_url).await?;
                        sqlx::query_scalar::<_, bool>("SELECT NOT pg_is_in_recovery()")
                            .fetch_one(&mut c)
                            .await
                    };
                    // The old primary may still answer for the instant the kill takes.
                    if killed.elapsed() > Duration::from_millis(500)
                        && matches!(
                            tokio::time::timeout(Duration::from_secs(1), primary).await,
                            Ok(Ok(true))
                        )
                    {
                        let _ = self.promoted_at.set(Instant::now());
                    }
                }
                let text = match http.get(format!("{base}/metrics")).send().await {
                    Ok(r) => r.text().await.unwrap_or_default(),
                    Err(_) => String::new(),
                };
                let factor = text
                    .lines()
                    .filter(|l| l.starts_with("onsale_admission_factor"))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .reduce(f64::min);
                if let (Some(f), Ok(mut low)) = (factor, self.lowest_factor.lock()) {
                    *low = Some(low.map_or(f, |l: f64| l.min(f)));
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits (60 s at most) until the seat map projection says of every seat what the replay
    /// says; returns the seats that still differ.
    pub(crate) async fn seat_map_mismatches(
        pool: &sqlx::PgPool,
        show_id: &str,
        show: &Show,
    ) -> anyhow::Result<usize> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let map: std::collections::HashMap<String, String> =
                onsale_projections::seat_map::seat_statuses(pool, show_id)
                    .await?
                    .into_iter()
                    .collect();
            let wrong = show
                .seats()
                .filter(|(id, seat)| {
                    map.get(*id).map(String::as_str) != Some(seat.status().public())
                })
                .count();
            if wrong == 0 || Instant::now() > deadline {
                return Ok(wrong);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The report; `Err` when an acknowledged write is missing from the log.
    pub(crate) fn report(&self, show: &Show, orders: &[String]) -> anyhow::Result<()> {
        let Some(killed) = self.killed_at.get().copied() else {
            anyhow::bail!(
                "the drill never killed {} (fan {} never started)",
                self.victim.name(),
                self.kill_at
            );
        };
        let mut acks = self.acks.lock().map(|a| a.clone()).unwrap_or_default();
        acks.sort();
        // The longest stretch without an acknowledged write that overlaps the kill.
        let mut window = Duration::ZERO;
        let mut prev = acks
            .iter()
            .rev()
            .find(|t| **t <= killed)
            .copied()
            .unwrap_or(killed);
        for t in acks.iter().filter(|t| **t > killed) {
            window = window.max(*t - prev);
            prev = *t;
        }
        let holds = self.holds.lock().map(|h| h.clone()).unwrap_or_default();
        let (lost_holds, lost_orders) = lost(show, &holds, orders);
        let after = acks.iter().filter(|t| **t > killed).count();
        println!("\n== failover drill ==");
        println!(
            "`{}` hit {} {:.1} s into the sale (fan {}); acknowledged writes after it: {after}",
            self.command,
            self.victim.name(),
            (killed - self.started).as_secs_f64(),
            self.kill_at
        );
        println!(
            "seconds without an acknowledged write around the kill: {:.1}",
            window.as_secs_f64()
        );
        if let Some(p) = self.promoted_at.get() {
            let first = acks.iter().find(|t| **t > *p);
            println!(
                "a new primary answered through HAProxy {:.1} s after the kill; onsale's first acknowledged write {} after that",
                (*p - killed).as_secs_f64(),
                first.map_or("never".to_owned(), |f| format!("{:.2} s", (*f - *p).as_secs_f64()))
            );
        }
        println!(
            "admission factor during the outage: lowest {} (0 = admission paused)",
            self.lowest_factor
                .lock()
                .ok()
                .and_then(|l| *l)
                .map_or("not seen".to_owned(), |f| format!("{f:.2}"))
        );
        println!(
            "acknowledged holds {} checked one by one in the log: {} lost; acknowledged orders {}: {} lost",
            holds.len(),
            lost_holds.len(),
            orders.len(),
            lost_orders.len()
        );
        if !lost_holds.is_empty() || !lost_orders.is_empty() {
            anyhow::bail!(
                "acknowledged writes lost: holds {:?}, orders {:?}",
                lost_holds.iter().take(5).collect::<Vec<_>>(),
                lost_orders.iter().take(5).collect::<Vec<_>>()
            );
        }
        if after == 0 {
            anyhow::bail!("no write was acknowledged after the kill: the service never recovered");
        }
        Ok(())
    }
}
