//! `onsale-sim`: runs universes by seed and reports throughput, or replays one with its trace.

use std::time::Instant;

use clap::Parser;
use onsale_sim::{run, Config};

#[derive(Parser)]
#[command(about = "Deterministic simulation of onsale's write path")]
struct Args {
    /// How many universes to run (seeds FIRST .. FIRST + SEEDS).
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Replay one seed and print its trace.
    #[arg(long)]
    seed: Option<u64>,
    /// Steps per universe.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Keep running universes (from FIRST on) for this many seconds instead (`make sim-soak`).
    #[arg(long)]
    soak_seconds: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = Config {
        steps: args.steps,
        ..Config::default()
    };
    if let Some(seed) = args.seed {
        let report = run(seed, &config);
        for line in &report.trace {
            println!("{line}");
        }
        println!(
            "seed {seed}: {} commands, {} rows, trace {}",
            report.commands, report.rows, report.hash
        );
        if let Some(v) = report.violation {
            anyhow::bail!("seed {seed} broke a rule: {v}");
        }
        return Ok(());
    }
    let started = Instant::now();
    let deadline = args
        .soak_seconds
        .map(|s| started + std::time::Duration::from_secs(s));
    let (mut commands, mut universes) = (0u64, 0u64);
    let mut seed = args.first;
    loop {
        let done = match deadline {
            Some(d) => Instant::now() >= d,
            None => seed >= args.first + args.seeds,
        };
        if done {
            break;
        }
        let report = run(seed, &config);
        commands += report.commands;
        universes += 1;
        if let Some(v) = report.violation {
            eprintln!("seed {seed} broke a rule: {v}");
            eprintln!("replay it: make sim SEED={seed}");
            anyhow::bail!("seed {seed} failed");
        }
        seed += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{universes} universes (seeds {}..{seed}), {commands} commands in {secs:.1} s: {:.0} simulated commands per second, no rule broken",
        args.first,
        commands as f64 / secs
    );
    Ok(())
}
