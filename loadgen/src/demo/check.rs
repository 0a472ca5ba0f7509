//! After the last fan: every payment resolves, every acknowledged order reads back from the
//! API, the log replays to the same seats, the seat map (built from the log by the relay and
//! the projection) agrees, and the processor charged each order at most once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use onsale_domain::show::Seat;
use onsale_domain::ShowId;
use onsale_eventlog::{EventLog, PgEventLog};
use onsale_query::snapshots::SeatMap;

use super::OnSale;
use crate::client::Fan;
use crate::drill::{self, Drill};

/// What the checks found.
#[derive(Debug)]
pub(super) struct Checked {
    /// Orders by status, as the orders projection counts them.
    pub(super) by_status: Vec<(String, i64)>,
    /// How long the payments took to resolve after the last fan.
    pub(super) payments_secs: f64,
    /// Orders the processor charged, and the most charges of one.
    pub(super) charged: usize,
    pub(super) most_charges: u64,
    /// Seats in confirmed orders as the API reads them back, and those claimed twice.
    pub(super) seats_in_orders: usize,
    pub(super) sold_twice: u64,
    /// Seats the replayed log has pending or sold, and the log's length.
    pub(super) log_claimed: u64,
    pub(super) log_events: i64,
    /// The seat map once it agreed (or the last one read), and how long after the last fan.
    pub(super) map: SeatMap,
    pub(super) map_sold: u64,
    pub(super) read_secs: f64,
    /// Disagreements between the API, the log, the seat map and the processor.
    pub(super) mismatches: u64,
    /// The drill's own verdict, when one ran.
    pub(super) drill: Option<anyhow::Result<()>>,
}

impl Checked {
    pub(super) fn count(&self, status: &str) -> i64 {
        self.by_status
            .iter()
            .find(|(s, _)| s == status)
            .map_or(0, |(_, n)| *n)
    }
}

pub(super) async fn after_sale(
    on_sale: &OnSale,
    database_url: &str,
    processor: &str,
    watcher: Option<tokio::task::JoinHandle<()>>,
) -> anyhow::Result<Checked> {
    let read_started = Instant::now();
    let orders = on_sale.orders.lock().await.clone();
    let pool = sqlx::PgPool::connect(database_url)
        .await
        .context("connect to the event store")?;
    let payments_started = Instant::now();
    let by_status = payments_resolved(&pool, &on_sale.event, orders.len()).await?;
    let payments_secs = payments_started.elapsed().as_secs_f64();
    let captures = drill::captures(on_sale.api.http(), processor).await?;
    let most_charges = captures.values().copied().max().unwrap_or(0);
    let (seat_owner, sold_twice) = read_back(&orders).await?;

    let show: ShowId = on_sale.event.parse()?;
    let replayed = PgEventLog::new(pool.clone()).replay(show).await?;
    if let Some(w) = watcher {
        w.abort();
    }
    let mut mismatches = 0u64;
    let drill = match &on_sale.drill {
        Some(d) => {
            let ids: Vec<String> = orders.iter().map(|(o, _)| o.clone()).collect();
            let report = d.report(&replayed.show, &ids);
            // The projections, fed by the relay across the promotion, equal a replay.
            let wrong = Drill::seat_map_mismatches(&pool, &on_sale.event, &replayed.show).await?;
            println!("seat map against a replay of the log: {wrong} seats differ");
            if wrong > 0 {
                mismatches += 1;
            }
            Some(report)
        }
        None => None,
    };
    let mut log_claimed = 0u64;
    for (seat, state) in replayed.show.seats() {
        if let Seat::PendingPayment(o) | Seat::Sold(o) = state {
            // Every payment resolved above: a pending seat here is a mismatch.
            log_claimed += 1;
            if seat_owner.get(seat) != Some(&o.to_string()) {
                mismatches += 1;
            }
        }
    }
    if log_claimed as usize != seat_owner.len() {
        mismatches += 1;
    }
    let map = seat_map_sold(on_sale, log_claimed).await?;
    let map_sold = sold(&map);
    if map_sold != log_claimed {
        mismatches += 1;
    }
    let mut checked = Checked {
        by_status,
        payments_secs,
        charged: captures.len(),
        most_charges,
        seats_in_orders: seat_owner.len(),
        sold_twice,
        log_claimed,
        log_events: replayed.version,
        map,
        map_sold,
        read_secs: read_started.elapsed().as_secs_f64(),
        mismatches,
        drill,
    };
    if checked.most_charges > 1
        || checked.count("PENDING_PAYMENT") > 0
        || checked.charged as i64 != checked.count("CONFIRMED")
    {
        checked.mismatches += 1;
    }
    Ok(checked)
}

/// Waits (up to two minutes) until the orders projection has every order and none is still
/// pending its payment; the counts by status.
async fn payments_resolved(
    pool: &sqlx::PgPool,
    event: &str,
    orders: usize,
) -> anyhow::Result<Vec<(String, i64)>> {
    let mut by_status = Vec::new();
    for _ in 0..1_200 {
        by_status = onsale_projections::orders::count_by_status(pool, event).await?;
        let total: i64 = by_status.iter().map(|(_, n)| n).sum();
        let pending: i64 = by_status
            .iter()
            .filter(|(s, _)| s == "PENDING_PAYMENT")
            .map(|(_, n)| n)
            .sum();
        if total as usize == orders && pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(by_status)
}

/// Every acknowledged order read back by the fan who placed it: each confirmed order's seats
/// and whose they are, and how many seats two orders claim.
async fn read_back(orders: &[(String, Fan)]) -> anyhow::Result<(HashMap<String, String>, u64)> {
    let mut seat_owner: HashMap<String, String> = HashMap::new();
    let mut sold_twice = 0u64;
    for (order_id, fan) in orders {
        let mut view = None;
        for _ in 0..300 {
            view = fan.order_view(order_id).await?;
            if view.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let Some(view) = view else {
            bail!("order {order_id} never reached the orders projection");
        };
        if view.status != "CONFIRMED" {
            continue;
        }
        for seat in view.seat_ids {
            if seat_owner.insert(seat, order_id.clone()).is_some() {
                sold_twice += 1;
            }
        }
    }
    Ok((seat_owner, sold_twice))
}

/// The seat map once it counts `claimed` seats sold (up to 30 s), or the last one read.
async fn seat_map_sold(on_sale: &OnSale, claimed: u64) -> anyhow::Result<SeatMap> {
    let mut map = on_sale.api.seat_map(&on_sale.event).await?;
    for _ in 0..300 {
        if sold(&map) == claimed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        map = on_sale.api.seat_map(&on_sale.event).await?;
    }
    Ok(map)
}

fn sold(map: &SeatMap) -> u64 {
    map.sections.iter().map(|s| s.sold.max(0) as u64).sum()
}
