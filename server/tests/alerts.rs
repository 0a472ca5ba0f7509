//! The alerting rules of telemetry/alerts: valid for Prometheus (`promtool check rules`), and each
//! alert firing and staying quiet as its tests say (`promtool test rules`), on the promtool
//! `make test` installs. (That they read only metrics onsale exports is telemetry's unit test.)

use std::path::Path;
use std::process::Command;

fn alerts() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../telemetry/alerts"))
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
