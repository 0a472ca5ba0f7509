//! One fan's way through the on-sale: the line (solving the show's challenge if it asks one),
//! up to four tries at a hold, then an order (three in four), a release or a walk-away, and
//! leaving the sale so the next fan gets the slot.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use onsale_command::api::{HoldRequest, HoldResponse, OrderRequest};
use onsale_edge::auth::{mint_verified, Role};
use onsale_edge::Integer;
use onsale_waiting_room::api::JoinRequest;
use rand::Rng;

use super::report::{bump, unexpected, Tally};
use super::OnSale;
use crate::client::{Fan, Reply, With};
use crate::venue;

/// Fan number `n`, from the line to leaving the sale.
pub(super) async fn journey(on_sale: &OnSale, n: u64) {
    let tally = &on_sale.tally;
    if let Some(d) = &on_sale.drill {
        d.fan_starts(n);
    }
    let token =
        mint_verified(&on_sale.secret, &format!("fan-{n}"), Role::Fan, 3600).unwrap_or_default();
    let fan = on_sale.api.fan(token);
    let Some((session, waited)) = queue_in(&fan, &on_sale.event, tally).await else {
        return unexpected(tally, "the waiting room did not let the fan in".into());
    };
    let _ = on_sale
        .queue_wait
        .lock()
        .await
        .record(waited.as_micros() as u64);
    if let Some(hold) = hold(on_sale, &fan, &session).await {
        let roll: f64 = rand::rng().random();
        if roll < 0.75 {
            order(on_sale, &fan, &session, &hold, roll < 0.05).await;
        } else if roll < 0.85 {
            if fan.release(&hold.hold_id).await {
                bump(&tally.releases);
            }
        } else {
            bump(&tally.abandoned);
        }
    }
    // Done (or given up): leave the sale so the next fan gets the slot now.
    match fan.leave(&on_sale.event, &session).await {
        Reply::Done(()) => {
            tally.in_zone.fetch_sub(1, Ordering::Relaxed);
        }
        refused => unexpected(tally, format!("leave: {refused}")),
    }
}

/// Join, wait for the line to pass, enter: the session and how long the fan waited.
async fn queue_in(fan: &Fan, event: &str, tally: &Tally) -> Option<(String, Duration)> {
    let started = Instant::now();
    let mut joined = fan.join(event, &JoinRequest::default()).await;
    if joined.refused() == Some(428) {
        // The show asks a proof of work: a challenge, solved off the runtime's threads.
        let challenge = fan.challenge(event).await.ok()?;
        let t = Instant::now();
        let request = tokio::task::spawn_blocking(move || {
            let (solution, _) =
                onsale_waiting_room::challenge::solve(&challenge.challenge, challenge.bits);
            JoinRequest {
                challenge: Some(challenge.challenge),
                solution: Some(solution),
            }
        })
        .await
        .ok()?;
        tally
            .solve_micros
            .fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
        bump(&tally.challenges);
        joined = fan.join(event, &request).await;
    }
    let Reply::Done(joined) = joined else {
        return None;
    };
    let admission = fan
        .admission_token(event, &joined.queue_token, Duration::from_millis(100))
        .await?;
    loop {
        match fan.enter(event, &admission).await {
            Reply::Done(entry) => {
                let now = tally.in_zone.fetch_add(1, Ordering::Relaxed) + 1;
                tally.peak_in_zone.fetch_max(now, Ordering::Relaxed);
                return Some((entry.session_id, started.elapsed()));
            }
            Reply::Refused(429, _) => {
                bump(&tally.zone_full);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Reply::Refused(..) => return None,
        }
    }
}

/// Up to four tries at a hold of one to four seats: explicit seats (three tries in five unless
/// the show hands out the best available only), the best available, or places on the floor.
async fn hold(on_sale: &OnSale, fan: &Fan, session: &str) -> Option<HoldResponse> {
    let (sale, tally) = (on_sale.sale, &on_sale.tally);
    for attempt in 0..4 {
        let request = {
            let mut rng = rand::rng();
            let n = rng.random_range(1..=4u32);
            let explicit = !sale.best_available_only && attempt < 3 && rng.random_bool(0.6);
            let floor = sale.ga_floor > 0 && rng.random_bool(0.2);
            if floor {
                HoldRequest {
                    seat_ids: None,
                    quantity: Some(Integer(i64::from(n))),
                    section: Some("FLOOR".into()),
                }
            } else if explicit {
                HoldRequest {
                    seat_ids: Some(venue::pick(&mut rng, n, true)),
                    quantity: None,
                    section: None,
                }
            } else {
                HoldRequest {
                    seat_ids: None,
                    quantity: Some(Integer(i64::from(n))),
                    section: None,
                }
            }
        };
        let key = uuid::Uuid::new_v4().to_string();
        let with = With {
            key: Some(&key),
            session: Some(session),
        };
        let t = Instant::now();
        let reply = fan.hold(&on_sale.event, &request, with).await;
        let _ = on_sale
            .hold_latency
            .lock()
            .await
            .record(t.elapsed().as_micros() as u64);
        match reply {
            Reply::Done(hold) => {
                bump(&tally.holds);
                if let Some(d) = &on_sale.drill {
                    d.acknowledged(Some(&hold.hold_id));
                }
                return Some(hold);
            }
            Reply::Refused(409, _) => bump(&tally.conflicts),
            Reply::Refused(429, _) => bump(&tally.limited),
            Reply::Refused(503, _) => bump(&tally.unavailable),
            refused => unexpected(tally, format!("hold: {refused}")),
        }
    }
    None
}

/// Orders the hold with a card that mostly works (some are declined, some time out and settle
/// later); a fan who `clicks_twice` never saw the answer and places it again with the same key.
async fn order(
    on_sale: &OnSale,
    fan: &Fan,
    session: &str,
    hold: &HoldResponse,
    clicks_twice: bool,
) {
    let tally = &on_sale.tally;
    let payment_token = match rand::rng().random::<f64>() {
        r if r < 0.84 => "tok_ok",
        r if r < 0.92 => "tok_decline",
        r if r < 0.97 => "tok_timeout_then_ok",
        _ => "tok_timeout_then_fail",
    };
    let request = OrderRequest {
        hold_id: hold.hold_id.clone(),
        payment_token: payment_token.into(),
    };
    let key = uuid::Uuid::new_v4().to_string();
    let with = With {
        key: Some(&key),
        session: Some(session),
    };
    let t = Instant::now();
    let reply = fan.order(&request, with).await;
    let _ = on_sale
        .order_latency
        .lock()
        .await
        .record(t.elapsed().as_micros() as u64);
    let Reply::Done(accepted) = reply else {
        return unexpected(tally, format!("order: {reply}"));
    };
    bump(&tally.orders);
    if let Some(d) = &on_sale.drill {
        d.acknowledged(None);
    }
    if clicks_twice {
        match fan.order(&request, with).await {
            Reply::Done(again) if again.order_id == accepted.order_id => {
                bump(&tally.replays_matched)
            }
            Reply::Done(again) => unexpected(
                tally,
                format!("order replay: another order {}", again.order_id),
            ),
            refused => unexpected(tally, format!("order replay: {refused}")),
        }
    }
    on_sale
        .orders
        .lock()
        .await
        .push((accepted.order_id, fan.clone()));
}
