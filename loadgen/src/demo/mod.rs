//! `make demo`: an on-sale with simulated fans through the whole stack. The show is opened
//! (`open`), each fan goes through the line, holds, pays, releases or walks away (`fan`), then
//! everything the fans were told is checked against the API's reads, the processor's books
//! and a replay of the log (`check`), and the summary printed (`report`). A drill (a primary
//! or a node killed mid-sale) rides along and is judged by the same checks.

mod check;
mod fan;
mod report;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::bail;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use tokio::sync::Mutex;

use crate::client::{Api, Fan};
use crate::drill::Drill;
use crate::venue;

pub(crate) use report::{bump, Tally};

/// What the demo's show sells and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sale {
    pub(crate) ga_floor: u32,
    pub(crate) best_available_only: bool,
    pub(crate) join_challenge_bits: u8,
}

/// How long the demo's holds last before they lapse.
const HOLD_TTL_SECONDS: u32 = 120;

/// The on-sale as the fans share it: the show, what they counted and measured, the orders
/// they were acknowledged (with the fan who placed each, to read it back).
#[derive(Debug)]
struct OnSale {
    api: Api,
    event: String,
    sale: Sale,
    secret: String,
    tally: Tally,
    hold_latency: Mutex<Histogram<u64>>,
    order_latency: Mutex<Histogram<u64>>,
    queue_wait: Mutex<Histogram<u64>>,
    orders: Mutex<Vec<(String, Fan)>>,
    drill: Option<Arc<Drill>>,
}

/// The demo: `fans` fans, `concurrency` at a time, against the API at `base`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    base: &str,
    database_url: &str,
    fans: u32,
    concurrency: usize,
    secret: &str,
    processor: &str,
    drill: Option<Arc<Drill>>,
    sale: Sale,
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()?;
    let api = Api::new(http, base);
    let event = open(&api, secret, sale).await?;
    println!(
        "on sale: event {event}, {} seats and {} places on a general-admission floor, {fans} fans, {concurrency} at a time{}",
        venue::SEATS,
        sale.ga_floor,
        if sale.best_available_only { ", best available only" } else { "" }
    );
    if sale.join_challenge_bits > 0 {
        println!(
            "its line: verified accounts only, a {}-bit proof of work per join",
            sale.join_challenge_bits
        );
    }
    let on_sale = Arc::new(OnSale {
        api: api.clone(),
        event,
        sale,
        secret: secret.to_owned(),
        tally: Tally::default(),
        hold_latency: Mutex::new(Histogram::new(3)?),
        order_latency: Mutex::new(Histogram::new(3)?),
        queue_wait: Mutex::new(Histogram::new(3)?),
        orders: Mutex::default(),
        drill: drill.clone(),
    });
    let watcher = drill.map(|d| {
        let (http, base, db) = (api.http().clone(), base.to_owned(), database_url.to_owned());
        tokio::spawn(async move { d.watch(http, base, db).await })
    });
    let started = Instant::now();
    crowd(&on_sale, fans, concurrency).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let checked = check::after_sale(&on_sale, database_url, processor, watcher).await?;
    report::print(&on_sale, elapsed, &checked).await;
    if checked.sold_twice > 0
        || checked.mismatches > 0
        || on_sale.tally.other.load(Ordering::Relaxed) > 0
    {
        bail!("the on-sale broke an invariant");
    }
    checked.drill.unwrap_or(Ok(()))
}

/// Creates the venue and the show: on sale now, through a waiting room, with the sale's
/// policies; its event id.
async fn open(api: &Api, secret: &str, sale: Sale) -> anyhow::Result<String> {
    let mut venue = venue::venue_body();
    if sale.ga_floor > 0 {
        if let Some(sections) = venue["sections"].as_array_mut() {
            sections.push(json!({"section": "FLOOR", "priceTier": "C", "capacity": sale.ga_floor}));
        }
    }
    let mut policy = if sale.best_available_only {
        json!({"bestAvailableOnly": "ALWAYS"})
    } else {
        json!({})
    };
    if sale.join_challenge_bits > 0 {
        policy["requireVerifiedAccount"] = json!(true);
        policy["joinChallengeBits"] = json!(sale.join_challenge_bits);
    }
    crate::create_show_with(
        api.http(),
        api.base(),
        secret,
        &venue,
        HOLD_TTL_SECONDS,
        true,
        policy,
    )
    .await
}

/// The fans, `concurrency` at a time, each taken by the next free worker.
async fn crowd(on_sale: &Arc<OnSale>, fans: u32, concurrency: usize) -> anyhow::Result<()> {
    let bar = ProgressBar::new(u64::from(fans));
    bar.set_style(ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} fans {per_sec}",
    )?);
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (on_sale, next, bar) = (on_sale.clone(), next.clone(), bar.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= u64::from(fans) {
                        break;
                    }
                    fan::journey(&on_sale, n).await;
                    bar.inc(1);
                }
            })
        })
        .collect();
    for w in workers {
        w.await?;
    }
    bar.finish();
    Ok(())
}
