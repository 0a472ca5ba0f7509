//! `onsale-loadgen bench-owner` (`make bench-owner`): what one command costs a show's owner at
//! worst as the show's memory grows, and what copying the show for a snapshot costs the
//! owner's task (issue 30: no request over 100 ms; ADR 003, "still open"). In the domain
//! alone, on one thread, as the owner runs them: each new fan's keyed 1-seat hold on the
//! 50,000-seat arena, the seat's previous hold released first (2 s holds lapsing in an
//! on-sale: every fan's key, and the hold it names, is remembered for a day), decided and
//! applied and timed one by one. Every `--report-every` holds a row, and the show copied as
//! the owner copies it for a snapshot; the copy is kept while the next 1,000 commands run
//! (the owner's copy lives until it is serialized off its task).

use std::time::{Duration, Instant};

use anyhow::anyhow;
use cqrs_es::Aggregate;
use hdrhistogram::Histogram;
use onsale_domain::{AccountId, HoldId, Idempotency, IdempotencyKey, ShowCommand};

/// Commands run while a snapshot's copy is alive.
const COPY_KEPT_FOR: u32 = 1_000;

pub(crate) fn bench(holds: u32, report_every: u32) -> anyhow::Result<()> {
    let (show_id, mut show, start) = crate::bots::arena_show("The owner's worst command")?;
    let seats = crate::venue::SEATS;
    let mut last: Vec<Option<(HoldId, AccountId)>> = vec![None; seats as usize];
    // Nanoseconds, up to 100 s.
    let mut window = Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 3)?;
    let mut kept = None;
    println!("| holds made | holds + orders + keys remembered | command p50 | p99.9 | max | over 1 ms | over 10 ms | snapshot copy |");
    println!("|---|---|---|---|---|---|---|---|");
    for n in 0..holds {
        let now = start + chrono::Duration::milliseconds(i64::from(n));
        let seat = n % seats;
        let fan = AccountId::parse(&format!("fan-{n}")).map_err(|e| anyhow!("{e}"))?;
        let hold = HoldId::new(show_id);
        let mut commands = Vec::with_capacity(2);
        if let Some((hold_id, account)) = last[seat as usize].take() {
            commands.push(ShowCommand::ReleaseHold { hold_id, account });
        }
        commands.push(ShowCommand::HoldSeats {
            hold_id: hold,
            account: fan.clone(),
            seat_ids: vec![crate::venue::seat_id(seat)],
            idempotency: Some(Idempotency {
                key: IdempotencyKey::parse(&format!("k-{n}")).map_err(|e| anyhow!("{e}"))?,
                fingerprint: "fp".into(),
            }),
        });
        for command in commands {
            let t = Instant::now();
            let events = show.decide(command, now).map_err(|e| anyhow!("{e}"))?;
            for e in events {
                show.apply(e);
            }
            window.record(t.elapsed().as_nanos().max(1) as u64)?;
            if let Some((_, left)) = kept.as_mut() {
                *left -= 1;
            }
        }
        last[seat as usize] = Some((hold, fan));
        if kept.as_ref().is_some_and(|(_, left): &(_, u32)| *left == 0) {
            kept = None;
        }
        if (n + 1) % report_every == 0 {
            // Copied as the owner copies for a snapshot; its commands after it are in the next
            // row, while the copy is alive.
            let t = Instant::now();
            let copy = show.snapshot_copy();
            let copy_ms = t.elapsed().as_secs_f64() * 1e3;
            let ms = |ns: u64| Duration::from_nanos(ns).as_secs_f64() * 1e3;
            let over = |limit: u64| window.count_between(limit, u64::MAX);
            println!(
                "| {} | {} | {:.1} µs | {:.1} µs | {:.2} ms | {} | {} | {copy_ms:.2} ms |",
                n + 1,
                show.history_len(),
                window.value_at_quantile(0.5) as f64 / 1e3,
                window.value_at_quantile(0.999) as f64 / 1e3,
                ms(window.max()),
                over(1_000_000),
                over(10_000_000),
            );
            window.reset();
            kept = Some((copy, COPY_KEPT_FOR));
        }
    }
    Ok(())
}
