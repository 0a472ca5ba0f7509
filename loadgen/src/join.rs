//! `bench-join`: what a join challenge costs the fan's device (the search) and the server (the
//! check), at a given size, with real signed challenges.

use std::time::Instant;

use onsale_waiting_room::challenge::{self, ChallengeClaims};
use onsale_waiting_room::tokens::Signer;
use serde_json::json;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}

/// Solves `runs` fresh challenges of `bits` (each signed as the server signs them), then checks
/// one `checks` times; prints one JSON line.
pub(crate) fn bench(bits: u8, runs: usize, checks: usize) -> anyhow::Result<()> {
    let signer = Signer::new(&uuid::Uuid::new_v4().to_string());
    let (account, show) = ("bench-fan", uuid::Uuid::new_v4().to_string());
    let now = chrono::Utc::now().timestamp();
    let (mut ms, mut tries) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    let mut hashed = 0u64;
    let started = Instant::now();
    let mut last = (String::new(), String::new());
    for _ in 0..runs {
        let token = signer.sign(&ChallengeClaims::new(account, &show, bits, now));
        let t = Instant::now();
        let (answer, n) = challenge::solve(&token, bits);
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        tries.push(n as f64);
        hashed += n;
        last = (token, answer);
    }
    let solving = started.elapsed().as_secs_f64();
    // The server's check: the MAC, the claims, one hash (the spend in Redis is apart).
    let (token, answer) = last;
    let mut check_us = Vec::with_capacity(checks);
    for _ in 0..checks {
        let t = Instant::now();
        let claims = signer
            .verify::<ChallengeClaims>(&token, challenge::CHALLENGE, account, &show)
            .map_err(|e| anyhow::anyhow!("the challenge does not verify: {e:?}"))?;
        anyhow::ensure!(challenge::solves(&token, &answer, claims.bits));
        check_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "{}",
        json!({"client": "native (Rust, one core)", "bits": bits, "runs": runs,
            "solve_ms_median": median(&mut ms), "solve_ms_p90": quantile(&mut ms, 0.9),
            "solve_ms_max": quantile(&mut ms, 1.0),
            "tries_median": median(&mut tries), "hashes_per_s": hashed as f64 / solving,
            "check_us_median": median(&mut check_us), "check_us_p99": quantile(&mut check_us, 0.99)})
    );
    Ok(())
}
