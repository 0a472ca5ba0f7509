//! The simulator in `make test`: a bounded number of universes keep every rule, and a seed
//! replays exactly.

use onsale_sim::{run, Config};

/// Universes per `make test` (about 0.1 s each in a debug build); `make sim` runs more.
const SEEDS: u64 = 300;

#[test]
fn a_seed_replays_exactly_and_another_seed_differs() {
    let config = Config::default();
    let (a, b) = (run(42, &config), run(42, &config));
    assert!(
        a.commands > 100,
        "a universe sends commands: {}",
        a.commands
    );
    assert_eq!(a.trace, b.trace);
    assert_eq!(a.hash, b.hash);
    assert_ne!(run(43, &config).hash, a.hash);
}

/// Another process, other hash seeds, another heap: the same traces. (Found once: tokio's
/// watch channel wakes its waiters from shards picked at random.)
#[test]
fn runs_replay_exactly_in_another_process() {
    let hashes = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_onsale-sim"))
            .args(["--seeds", "100", "--hashes"])
            .output()
            .expect("the simulator runs");
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).expect("text");
        // The last line is the throughput, which differs.
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines[..lines.len() - 1].to_vec()
    };
    let first = hashes();
    assert_eq!(first.len(), 100);
    assert_eq!(first, hashes());
}

#[test]
fn universes_keep_every_rule() {
    let config = Config::default();
    for seed in 0..SEEDS {
        let report = run(seed, &config);
        if let Some(v) = report.violation {
            panic!("seed {seed} broke a rule: {v}\nreplay it: make sim SEED={seed}");
        }
    }
}

/// Seeds that once found a bug, kept after its fix, with what they found.
const FOUND: &[(u64, &str)] = &[
    (
        43,
        "a refund's record refused by a node whose state held an order from a batch its fenced \
         append never wrote (the owner answered refusals before the batch committed; the \
         universes have grown since, and command-side/tests/owner.rs pins that bug itself)",
    ),
    (
        1279,
        "a cancellation whose tickets were revoked before the issuer saw the capture, and whose \
         CancelOrder failed, left unfinished (the simulator's drain did not run the job that \
         finishes cancellations)",
    ),
];

#[test]
fn seeds_that_found_bugs_keep_every_rule() {
    let config = Config::default();
    for (seed, found) in FOUND {
        let report = run(*seed, &config);
        assert_eq!(report.violation, None, "seed {seed} once found: {found}");
    }
}
