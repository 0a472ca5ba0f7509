//! `onsale-loadgen search-freshness`: how soon search says what the log says, on a running
//! stack (serve, relay and project; `make bench-search`): for each of `shows` shows of two
//! seats, one after another, the time from an acknowledged write to the first search that
//! answers it: the show scheduled (found by its performer), sold out (both seats held: listed
//! `SOLD_OUT`) and on sale again (the hold released: `ON_SALE`). Each search every 5 ms. One
//! show more goes first, uncounted: it finds the path cold (a relay's slot just made, a
//! projector's consumer group just joining).

use std::time::{Duration, Instant};

use anyhow::Context;
use onsale_edge::auth::{mint, Role};
use serde_json::{json, Value};

/// How long one change may take before the run gives up on it.
const GIVE_UP: Duration = Duration::from_secs(30);

/// Searches for `performer` until `done` says the answer shows the change: how long it took.
async fn until(
    http: &reqwest::Client,
    base: &str,
    performer: &str,
    from: Instant,
    done: impl Fn(&Value) -> bool,
) -> anyhow::Result<Duration> {
    let url = format!("{base}/v1/events?q={performer}");
    loop {
        let res = http.get(&url).send().await?;
        anyhow::ensure!(res.status().is_success(), "{url}: {}", res.status());
        let body: Value = res.json().await?;
        if done(&body) {
            return Ok(from.elapsed());
        }
        anyhow::ensure!(
            from.elapsed() < GIVE_UP,
            "{url}: not searchable after {GIVE_UP:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether the answer lists the show `id` with `status` (a search for one performer may find
/// others near it: the shows before it, a letter apart).
fn listed(body: &Value, id: &str, status: &str) -> bool {
    body["events"].as_array().is_some_and(|e| {
        e.iter()
            .any(|e| e["eventId"] == id && e["status"] == status)
    })
}

/// Milliseconds at quantile `q` of `d` (sorted).
fn at(d: &[Duration], q: f64) -> f64 {
    let i = ((d.len() as f64 * q).ceil() as usize).clamp(1, d.len()) - 1;
    d[i].as_secs_f64() * 1000.0
}

pub(crate) async fn run(base: String, secret: &str, shows: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let fan = mint(secret, "freshness-fan", Role::Fan, 3600)?;
    let run = chrono::Utc::now().timestamp();
    let (mut scheduled, mut sold_out, mut back) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..=shows {
        let performer = format!("Fresco{run}x{i}");
        let venue = json!({"name": format!("{performer} Hall"), "city": "Oslo", "sections": [
            {"section": "A", "priceTier": "A", "rows": [{"row": "1", "seats": 2}]}]});
        let more = json!({"name": "Fresh Nights", "performer": performer, "prices": {"A": 5000}});
        let id = crate::create_show_with(&http, &base, secret, &venue, 600, false, more).await?;
        let t = Instant::now();
        let id = id.as_str();
        scheduled.push(until(&http, &base, &performer, t, |b| listed(b, id, "ON_SALE")).await?);
        let hold: Value = http
            .post(format!("{base}/v1/events/{id}/holds"))
            .bearer_auth(&fan)
            .json(&json!({"seatIds": ["A-1-1", "A-1-2"]}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let t = Instant::now();
        sold_out.push(until(&http, &base, &performer, t, |b| listed(b, id, "SOLD_OUT")).await?);
        let hold_id = hold["holdId"].as_str().context("a hold id")?;
        http.delete(format!("{base}/v1/holds/{hold_id}"))
            .bearer_auth(&fan)
            .send()
            .await?
            .error_for_status()?;
        let t = Instant::now();
        back.push(until(&http, &base, &performer, t, |b| listed(b, id, "ON_SALE")).await?);
        if i == 0 {
            scheduled.clear();
            sold_out.clear();
            back.clear();
        }
    }
    println!("| change | shows | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|");
    for (name, mut d) in [
        ("scheduled: found", scheduled),
        ("sold out: SOLD_OUT", sold_out),
        ("released: ON_SALE again", back),
    ] {
        d.sort();
        println!(
            "| {name} | {} | {:.0} | {:.0} | {:.0} |",
            d.len(),
            at(&d, 0.5),
            at(&d, 0.99),
            at(&d, 1.0)
        );
    }
    Ok(())
}
