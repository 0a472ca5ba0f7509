//! The simulator has teeth: each known bug planted in the real crates (`onsale_domain::plant`)
//! is found within a bounded number of seeds. Built only with `--features planted-bugs`
//! (`make test` runs it apart, so no other build carries the bugs).
#![cfg(feature = "planted-bugs")]

use onsale_domain::plant::{plant, Bug};
use onsale_sim::{run, Config};

const SEEDS: u64 = 300;

#[test]
fn every_planted_bug_is_found() {
    let config = Config::default();
    for bug in Bug::ALL {
        plant(Some(bug));
        let found = (0..SEEDS).find_map(|seed| run(seed, &config).violation.map(|v| (seed, v)));
        plant(None);
        let (seed, why) = found.unwrap_or_else(|| panic!("{bug:?}: not found in {SEEDS} seeds"));
        println!("{bug:?}: found by seed {seed}: {why}");
    }
    // Unplanted, the first seeds keep every rule again.
    for seed in 0..20 {
        assert_eq!(run(seed, &config).violation, None, "seed {seed}");
    }
}
