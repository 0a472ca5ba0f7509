//! The alerting rules of telemetry/alerts: valid for Prometheus (`promtool check rules`), each
//! alert firing and staying quiet as its tests say (`promtool test rules`), and reading only
//! metrics onsale exports.

use std::path::Path;
use std::process::Command;

fn alerts() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/alerts"))
}

fn promtool(args: &[&str]) {
    let promtool = std::env::var("ONSALE_TEST_PROMTOOL").expect(
        "ONSALE_TEST_PROMTOOL is unset: run the tests with `make test`, which installs promtool",
    );
    let out = Command::new(&promtool)
        .args(args)
        .current_dir(alerts())
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_rules_are_valid_for_prometheus() {
    promtool(&["check", "rules", "onsale.rules.yml"]);
}

#[test]
fn every_alert_fires_and_stays_quiet_as_its_tests_say() {
    promtool(&["test", "rules", "onsale.rules.test.yml"]);
}

#[test]
fn the_rules_read_only_metrics_onsale_exports() {
    let rules = std::fs::read_to_string(alerts().join("onsale.rules.yml")).expect("rules");
    let exported = include_str!("../src/metrics.rs");
    let mut read = 0;
    for line in rules.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let mut rest = line;
        while let Some(at) = rest.find("onsale_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            // Commands named in descriptions (`onsale reconcile`) are not metrics.
            assert!(
                exported.contains(&format!("\"{name}\"")),
                "the rules read {name}, which telemetry/src/metrics.rs does not define"
            );
            read += 1;
        }
    }
    assert!(read >= 10, "the rules read {read} metrics");
}
