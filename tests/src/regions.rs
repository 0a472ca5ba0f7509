//! Two regions of a test's own (docs/adr/024): region a's PostgreSQL and region b's standby
//! of it, committing synchronously, as `make up REGIONS=2` runs them; cut off, brought back,
//! rejoined by `scripts/stack.sh`, promoted by `onsale region promote`.

use std::path::PathBuf;

use crate::read_path::{stack_sh, stack_sh_async};
use crate::{free_ports, TestDb};

#[derive(Debug)]
pub struct Regions {
    dir: PathBuf,
    /// Region a's PostgreSQL port; region b's is the next.
    pub port: u16,
    /// The slot, topic and names of this pair's processes.
    pub name: String,
}

impl Regions {
    /// Region a's cluster and b's synchronous standby of it.
    pub async fn start() -> anyhow::Result<Self> {
        let port = free_ports(&[0, 1]);
        let name = format!("regions_{}", uuid::Uuid::new_v4().simple());
        // Under the run's directory, so `make test` reaps what a killed test binary left.
        let dir = std::env::var_os("ONSALE_TEST_DIR")
            .map_or_else(std::env::temp_dir, PathBuf::from)
            .join(&name);
        let me = Self { dir, port, name };
        let (a, b) = (port.to_string(), (port + 1).to_string());
        stack_sh_async(&["region-pair-up", &me.dir.to_string_lossy(), &a, &b]).await?;
        Ok(me)
    }

    fn port_of(&self, region: &str) -> u16 {
        if region == "a" {
            self.port
        } else {
            self.port + 1
        }
    }

    fn dir_of(&self, region: &str) -> String {
        self.dir.join(region).to_string_lossy().into_owned()
    }

    /// Region `region`'s main database, as its processes reach it.
    pub fn db(&self, region: &str) -> TestDb {
        let base = format!("postgres://onsale@127.0.0.1:{}", self.port_of(region));
        TestDb {
            url: format!("{base}/onsale"),
            admin_url: format!("{base}/postgres"),
            name: self.name.clone(),
        }
    }

    /// The region's PostgreSQL stops: `immediate` as if its machine died.
    pub async fn stop(&self, region: &str, immediate: bool) -> anyhow::Result<()> {
        let mode = if immediate { "immediate" } else { "fast" };
        stack_sh_async(&["pg-stop", &self.dir_of(region), mode]).await
    }

    /// The region's PostgreSQL starts again as its data directory says (a primary that was
    /// replaced comes back a primary: the mistake the fence must survive).
    pub async fn start_again(&self, region: &str) -> anyhow::Result<()> {
        stack_sh_async(&["pg-start", &self.dir_of(region)]).await
    }

    /// `region` is rewound onto `writer`'s timeline and follows it; the writer commits
    /// synchronously to it again.
    pub async fn rejoin(&self, region: &str, writer: &str) -> anyhow::Result<()> {
        let name = format!("{region}_main");
        stack_sh_async(&[
            "pg-rejoin",
            &self.dir_of(region),
            &self.port_of(region).to_string(),
            &self.port_of(writer).to_string(),
            &name,
        ])
        .await?;
        stack_sh_async(&[
            "pg-sync",
            &self.port_of(writer).to_string(),
            &format!("\"{name}\""),
        ])
        .await
    }

    /// `onsale ARGS` (`bin`: the test's `CARGO_BIN_EXE_onsale`) on `region`'s databases.
    pub async fn onsale(&self, bin: &str, region: &str, args: &[&str]) -> std::process::Output {
        tokio::process::Command::new(bin)
            .args(args)
            .env("DATABASE_URL", self.db(region).url)
            .env("ONSALE_REGION", region)
            .env("ONSALE_DEV_MODE", "1")
            .env_remove("ONSALE_SHARD_URLS")
            .output()
            .await
            .expect("onsale runs")
    }
}

impl Drop for Regions {
    fn drop(&mut self) {
        for region in ["a", "b"] {
            let _ = stack_sh(&["pg-down", &self.dir_of(region)]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
