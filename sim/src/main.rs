//! `onsale-sim`: runs universes by seed and reports throughput, or replays one with its trace.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use clap::Parser;
use onsale_sim::{run, Config, Report};

/// Lines of a failing universe's trace printed with its seed.
const TRACE_TAIL: usize = 40;

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
    /// Print each universe's trace hash (two runs, or two builds, compared line by line).
    #[arg(long)]
    hashes: bool,
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
    let end = args.first + args.seeds;
    // Universes are independent: one per core at a time, each on its own runtime, each the
    // same whichever thread runs it.
    let next = AtomicU64::new(args.first);
    let failed = AtomicBool::new(false);
    let runs: Mutex<Vec<(u64, Report)>> = Mutex::default();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let over = match deadline {
                    Some(d) => Instant::now() >= d,
                    None => false,
                };
                if over || failed.load(Ordering::Relaxed) {
                    break;
                }
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if deadline.is_none() && seed >= end {
                    break;
                }
                let mut report = run(seed, &config);
                report.trace = Vec::new();
                if report.violation.is_some() {
                    failed.store(true, Ordering::Relaxed);
                }
                runs.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((seed, report));
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let mut runs = runs.into_inner().unwrap_or_else(|p| p.into_inner());
    runs.sort_by_key(|(seed, _)| *seed);
    if args.hashes {
        for (seed, report) in &runs {
            println!("{seed} {}", report.hash);
        }
    }
    // The lowest seed that broke a rule, whichever worker ran it first.
    if let Some((seed, report)) = runs.iter().find(|(_, r)| r.violation.is_some()) {
        // The same universe again, for its trace (it replays exactly): the last of it.
        let again = run(*seed, &config);
        for line in &again.trace[again.trace.len().saturating_sub(TRACE_TAIL)..] {
            eprintln!("{line}");
        }
        eprintln!(
            "seed {seed} broke a rule: {}",
            report.violation.as_deref().unwrap_or_default()
        );
        eprintln!("replay it (the whole trace): make sim SEED={seed}");
        anyhow::bail!("seed {seed} failed");
    }
    let commands: u64 = runs.iter().map(|(_, r)| r.commands).sum();
    let last = runs.last().map_or(args.first, |(seed, _)| seed + 1);
    println!(
        "{} universes (seeds {}..{last}) on {workers} threads, {commands} commands in {secs:.1} s: {:.0} simulated commands per second, no rule broken",
        runs.len(),
        args.first,
        commands as f64 / secs
    );
    Ok(())
}
