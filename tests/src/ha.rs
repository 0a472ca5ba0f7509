//! A replicated PostgreSQL of a test's own, as `make up HA=1` runs it: three PostgreSQL 15
//! nodes under Patroni with synchronous quorum commit (`ANY 1` of two standbys, strict), etcd,
//! and HAProxy routing to the primary; started, killed and restarted by `scripts/stack.sh`.

use std::time::Duration;

use anyhow::Context;

use crate::read_path::{stack_sh, stack_sh_async};
use crate::TestDb;

#[derive(Debug)]
pub struct HaCluster {
    /// HAProxy's port (the read-write address); node i's PostgreSQL listens on `base + i`.
    pub base: u16,
    dir: std::path::PathBuf,
}

impl HaCluster {
    /// Bootstraps the three nodes and returns once the primary has two streaming standbys.
    pub async fn start() -> anyhow::Result<Self> {
        let base = free_base()?;
        // Under the run's directory, so `make test` reaps what a killed test binary left.
        let dir = std::env::var_os("ONSALE_TEST_DIR")
            .map_or_else(std::env::temp_dir, std::path::PathBuf::from)
            .join(format!("ha-{}", uuid::Uuid::new_v4().simple()));
        let me = Self { base, dir };
        me.script(&["ha-up", &base.to_string()]).await?;
        Ok(me)
    }

    /// A fresh database on the cluster, reached through HAProxy as every onsale process does.
    pub async fn db(&self) -> anyhow::Result<TestDb> {
        TestDb::on(&self.admin_url(self.base)).await
    }

    /// The admin database at `port` (HAProxy's, or one node's directly).
    pub fn admin_url(&self, port: u16) -> String {
        format!("postgres://onsale@127.0.0.1:{port}/postgres")
    }

    /// `url` (of a database on this cluster) pointed at node `i` directly, bypassing HAProxy.
    pub fn on_node(&self, url: &str, i: u16) -> String {
        url.replace(
            &format!("127.0.0.1:{}/", self.base),
            &format!("127.0.0.1:{}/", self.base + i),
        )
    }

    /// The node that is primary now (per Patroni's API).
    pub async fn leader(&self) -> anyhow::Result<u16> {
        let dir = self.dir.to_string_lossy().to_string();
        let out = tokio::process::Command::new("bash")
            .arg(crate::read_path::STACK_SH)
            .args(["ha-leader", &dir])
            .output()
            .await?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .context("no primary")
    }

    /// SIGKILL of the primary's node, its Patroni with it (`make kill-primary`). Returns it.
    pub async fn kill_primary(&self) -> anyhow::Result<u16> {
        let i = self.leader().await?;
        self.script(&["ha-kill", &i.to_string()]).await?;
        Ok(i)
    }

    /// Stops node `i` cleanly.
    pub async fn stop(&self, i: u16) -> anyhow::Result<()> {
        self.script(&["ha-stop", &i.to_string()]).await
    }

    /// Starts node `i` again (a returning old primary is rewound and rejoins as a standby).
    pub async fn start_node(&self, i: u16) -> anyhow::Result<()> {
        self.script(&["ha-start", &i.to_string()]).await
    }

    /// Waits (bounded) until a primary serves with two streaming standbys.
    pub async fn replicated(&self) -> anyhow::Result<()> {
        self.script(&["ha-wait", "replicated", "90"]).await
    }

    /// Waits (bounded at `within`) until a node other than `old` is the primary; returns it.
    pub async fn promoted(&self, old: u16, within: Duration) -> anyhow::Result<u16> {
        crate::poll_until(
            "a standby promoted",
            within,
            Duration::from_millis(200),
            || async move {
                match self.leader().await {
                    Ok(i) if i != old => Ok(i),
                    Ok(i) => Err(format!("node {i} still the primary")),
                    Err(e) => Err(format!("{e:#}")),
                }
            },
        )
        .await
        .map_err(|failed| anyhow::anyhow!("{failed}; the agents said:\n{}", self.agents_said(12)))
    }

    /// The last `lines` lines of each node's Patroni log, for a failure's message.
    fn agents_said(&self, lines: usize) -> String {
        (1..=3)
            .map(|i| {
                let log = self.dir.join(format!("pg-{i}/patroni.log"));
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(lines).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("-- node {i} ({})\n{}", log.display(), tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn script(&self, args: &[&str]) -> anyhow::Result<()> {
        let dir = self.dir.to_string_lossy();
        let mut all = vec![args[0], &dir];
        all.extend_from_slice(&args[1..]);
        stack_sh_async(&all).await
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        let _ = stack_sh(&["ha-down", &self.dir.to_string_lossy()]);
    }
}

/// A base port with every port of the cluster free (HAProxy, the nodes, their APIs, etcd).
fn free_base() -> anyhow::Result<u16> {
    for _ in 0..100 {
        // Below the ephemeral range (32768 up), as for the brokers.
        let p = 20_000 + (uuid::Uuid::new_v4().as_u128() % 12_000) as u16;
        let free = [0, 1, 2, 3, 10, 11, 21, 22, 23]
            .iter()
            .all(|d| std::net::TcpListener::bind(("127.0.0.1", p + d)).is_ok());
        if free {
            return Ok(p);
        }
    }
    anyhow::bail!("no free ports for a replicated cluster")
}
