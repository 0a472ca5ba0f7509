//! What the fans counted, and the on-sale's summary once it is checked.

use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;

use super::check::Checked;
use super::{OnSale, HOLD_TTL_SECONDS};

/// The fans' answers by kind.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) holds: AtomicU64,
    pub(crate) conflicts: AtomicU64,
    pub(crate) limited: AtomicU64,
    pub(crate) unavailable: AtomicU64,
    pub(crate) orders: AtomicU64,
    pub(crate) replays_matched: AtomicU64,
    pub(crate) releases: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) other: AtomicU64,
    /// The first few unexpected answers, to say what they were.
    pub(crate) other_seen: std::sync::Mutex<Vec<String>>,
    /// In the sale now (entered, not yet left), and the most at once.
    pub(crate) in_zone: AtomicU64,
    pub(crate) peak_in_zone: AtomicU64,
    pub(crate) zone_full: AtomicU64,
    /// Join challenges solved, and the time spent solving them.
    pub(crate) challenges: AtomicU64,
    pub(crate) solve_micros: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// An answer the demo did not expect: counted, and the first five kept for the report.
pub(super) fn unexpected(tally: &Tally, what: String) {
    bump(&tally.other);
    if let Ok(mut seen) = tally.other_seen.lock() {
        if seen.len() < 5 {
            seen.push(what);
        }
    }
}

/// The summary: what the fans were answered and how fast, then what the checks found.
pub(super) async fn print(on_sale: &OnSale, elapsed: f64, checked: &Checked) {
    let tally = &on_sale.tally;
    let t = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!("\n== on-sale summary ({elapsed:.1} s) ==");
    println!(
        "holds granted      {:>8}   ({:.0}/s)",
        t(&tally.holds),
        t(&tally.holds) as f64 / elapsed
    );
    println!(
        "seat conflicts 409 {:>8}   ({:.1}% of hold attempts)",
        t(&tally.conflicts),
        100.0 * t(&tally.conflicts) as f64
            / (t(&tally.holds) + t(&tally.conflicts) + t(&tally.limited)).max(1) as f64
    );
    println!("cap refusals 429   {:>8}", t(&tally.limited));
    println!("outages 503        {:>8}", t(&tally.unavailable));
    println!(
        "orders placed      {:>8}   ({} retried with the same key, same orderId)",
        t(&tally.orders),
        t(&tally.replays_matched)
    );
    println!("holds released     {:>8}", t(&tally.releases));
    println!(
        "holds abandoned    {:>8}   (they lapse after the {HOLD_TTL_SECONDS} s TTL)",
        t(&tally.abandoned)
    );
    println!("unexpected answers {:>8}", t(&tally.other));
    for seen in tally
        .other_seen
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default()
    {
        println!("  e.g. {seen}");
    }
    let qw = on_sale.queue_wait.lock().await;
    println!(
        "waiting room: every fan joined, waited (p50 {:.2} s, p99 {:.2} s) and entered; at most {} in the sale at once; {} entries found it full and retried",
        qw.value_at_quantile(0.5) as f64 / 1e6,
        qw.value_at_quantile(0.99) as f64 / 1e6,
        t(&tally.peak_in_zone),
        t(&tally.zone_full),
    );
    if t(&tally.challenges) > 0 {
        println!(
            "join challenges solved {:>8}   ({:.2} ms each on average, natively)",
            t(&tally.challenges),
            t(&tally.solve_micros) as f64 / t(&tally.challenges) as f64 / 1000.0
        );
    }
    let hl = on_sale.hold_latency.lock().await;
    println!(
        "hold latency  p50 {:.1} ms  p90 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        ms(&hl, 0.5),
        ms(&hl, 0.9),
        ms(&hl, 0.99),
        hl.max() as f64 / 1000.0
    );
    let ol = on_sale.order_latency.lock().await;
    println!(
        "order latency p50 {:.1} ms  p90 {:.1} ms  p99 {:.1} ms",
        ms(&ol, 0.5),
        ms(&ol, 0.9),
        ms(&ol, 0.99)
    );
    println!(
        "seats in orders {} (log replay: {}), log events {}",
        checked.seats_in_orders, checked.log_claimed, checked.log_events
    );
    println!(
        "seat map (read path): {} sold at lsn {} seq {} (read {:.1} s after the last fan, once every order had been read back)",
        checked.map_sold, checked.map.lsn, checked.map.seq, checked.read_secs
    );
    println!(
        "payments ({:.1} s to resolve after the last fan): {} confirmed, {} failed (declined or timed out and failed); charges per order: {} orders charged, at most {} each; orders still pending: {}",
        checked.payments_secs,
        checked.count("CONFIRMED"),
        checked.count("FAILED"),
        checked.charged,
        checked.most_charges,
        checked.count("PENDING_PAYMENT"),
    );
    println!(
        "seats sold twice: {}; API vs log mismatches: {}",
        checked.sold_twice, checked.mismatches
    );
}
