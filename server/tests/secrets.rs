//! `onsale serve` refuses to start without its secrets, naming the one missing, unless
//! development mode is on. Nothing else is needed: the check runs before any connection.

use std::process::Output;

fn serve(envs: &[(&str, &str)]) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_onsale"));
    cmd.arg("serve");
    for (k, _) in std::env::vars() {
        if k.starts_with("ONSALE_") || k == "DATABASE_URL" {
            cmd.env_remove(k);
        }
    }
    // Nothing listens here: a process that got past the secrets would fail on the database,
    // with another message.
    cmd.env("DATABASE_URL", "postgres://nobody@127.0.0.1:9/none");
    cmd.envs(envs.iter().copied());
    cmd.output().expect("onsale runs")
}

fn refused_naming(out: &Output, name: &str, why: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "onsale started: {err}");
    assert!(
        err.contains(&format!("{name} {why}")),
        "the error names {name}: {err}"
    );
}

const STRONG: &str = "0123456789abcdef0123456789abcdef-strong";

const JWKS: &str = "https://id.example/.well-known/jwks.json";

#[test]
fn serve_without_configuration_refuses_to_start_and_names_the_missing_secret() {
    refused_naming(&serve(&[]), "ONSALE_JWKS_URL", "is not set");
    refused_naming(
        &serve(&[("ONSALE_JWKS_URL", JWKS)]),
        "ONSALE_WEBHOOK_SECRET",
        "is not set",
    );
    refused_naming(
        &serve(&[("ONSALE_JWKS_URL", JWKS), ("ONSALE_WEBHOOK_SECRET", STRONG)]),
        "ONSALE_ADMISSION_SECRET",
        "is not set",
    );
    refused_naming(
        &serve(&[
            ("ONSALE_JWKS_URL", JWKS),
            ("ONSALE_WEBHOOK_SECRET", STRONG),
            ("ONSALE_ADMISSION_SECRET", STRONG),
        ]),
        "ONSALE_NODE_SECRET",
        "is not set",
    );
}

#[test]
fn a_development_or_short_secret_is_refused_outside_development_mode() {
    refused_naming(
        &serve(&[("ONSALE_JWKS_URL", JWKS), ("ONSALE_JWT_SECRET", STRONG)]),
        "ONSALE_JWT_SECRET",
        "is for development mode only",
    );
    refused_naming(
        &serve(&[
            ("ONSALE_JWKS_URL", JWKS),
            ("ONSALE_WEBHOOK_SECRET", "onsale-dev-webhook-secret"),
        ]),
        "ONSALE_WEBHOOK_SECRET",
        "is a built-in development secret",
    );
    refused_naming(
        &serve(&[
            ("ONSALE_JWKS_URL", JWKS),
            ("ONSALE_WEBHOOK_SECRET", "sixteen-bytes-ok"),
        ]),
        "ONSALE_WEBHOOK_SECRET",
        "is shorter than 32 bytes",
    );
}

/// The local scripts' environment (scripts/local-env.sh: what `make up`, the demo, the drills
/// and the benches run the processes with) is one the binary takes: a value it refuses (as
/// `ONSALE_PUBLIC_METRICS=1` once was) would stop `make up` while every other test passes.
/// With it, `onsale serve` gets past its settings and its secrets and fails on the database
/// only (nothing listens there).
#[test]
fn the_local_scripts_environment_is_one_the_binary_takes() {
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/local-env.sh"
    ))
    .expect("scripts/local-env.sh");
    // `export NAME=${NAME:-VALUE}`: the value the scripts give NAME unless it is set.
    let defaults: Vec<(String, String)> = script
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| {
            let (name, rest) = l.split_once('=')?;
            let value = rest
                .strip_prefix(&format!("${{{name}:-"))?
                .strip_suffix('}')?;
            Some((name.to_owned(), value.to_owned()))
        })
        .collect();
    assert!(
        defaults.len() >= 8 && defaults.iter().any(|(n, _)| n == "ONSALE_DEV_MODE"),
        "the defaults read: {defaults:?}"
    );
    let envs: Vec<(&str, &str)> = defaults
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let out = serve(&envs);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "onsale started: {err}");
    assert_ne!(out.status.code(), Some(2), "a usage error: {err}");
    for refusal in ["invalid value", "is not set", "is shorter", "loopback"] {
        assert!(!err.contains(refusal), "refused before the database: {err}");
    }
}
