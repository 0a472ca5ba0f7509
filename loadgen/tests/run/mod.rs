//! Runs the load generator the way its make targets do (development mode, the tests' secret)
//! and answers what it printed, failing the test if it does not succeed within `within`.

use std::time::Duration;

pub(crate) async fn loadgen(args: &[&str], within: Duration) -> String {
    let out = tokio::time::timeout(
        within,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_onsale-loadgen"))
            .args(args)
            .env("ONSALE_DEV_MODE", "1")
            .env("ONSALE_JWT_SECRET", onsale_tests::SECRET)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("loadgen {} ends within {within:?}", args.join(" ")))
    .expect("loadgen runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
