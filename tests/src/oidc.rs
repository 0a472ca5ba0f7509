//! A real OpenID provider for a test (panva's oidc-provider, `scripts/oidc`, installed by
//! `make test`): machine clients whose access tokens are JWTs signed with keys the test rotates.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

/// The provider, on a port of its own, its keys and clients in a directory of its own.
#[derive(Debug)]
pub struct Provider {
    tools: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    child: Option<tokio::process::Child>,
    http: reqwest::Client,
}

/// The clients every test provider has: `(client_id, role)`; each one's secret is
/// `<client_id>-secret-of-the-test`.
pub const CLIENTS: [(&str, &str); 3] = [("ann", "fan"), ("boss", "admin"), ("gate-1", "scanner")];

impl Provider {
    /// Started with one `alg` key (`EdDSA`, `ES256`, `RS256`).
    pub async fn start(alg: &str) -> anyhow::Result<Self> {
        let tools = PathBuf::from(
            std::env::var("ONSALE_TEST_OIDC_DIR")
                .context("ONSALE_TEST_OIDC_DIR is unset: run the tests with `make test`")?,
        );
        let dir = tempfile::tempdir()?;
        let clients: Vec<serde_json::Value> = CLIENTS
            .iter()
            .map(|(id, role)| {
                let mut c = serde_json::json!({
                    "client_id": id,
                    "client_secret": format!("{id}-secret-of-the-test"),
                    "role": role,
                });
                if *role == "scanner" {
                    c["venue"] = "test-venue".into();
                }
                c
            })
            .collect();
        std::fs::write(
            dir.path().join("clients.json"),
            serde_json::to_vec(&clients)?,
        )?;
        let mut provider = Self {
            tools,
            dir,
            port: crate::free_port(),
            child: None,
            http: reqwest::Client::new(),
        };
        provider.keys(&["add", alg]).await?;
        provider.restart().await?;
        Ok(provider)
    }

    pub fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn jwks_url(&self) -> String {
        format!("{}/jwks", self.issuer())
    }

    /// A new `alg` key signs from the next start on; the old ones stay in the set.
    pub async fn rotate(&mut self, alg: &str) -> anyhow::Result<()> {
        self.keys(&["add", alg]).await?;
        self.restart().await
    }

    /// The oldest key leaves the set.
    pub async fn retire(&mut self) -> anyhow::Result<()> {
        self.keys(&["retire"]).await?;
        self.restart().await
    }

    /// The key ids its JWKS names now.
    pub async fn kids(&self) -> anyhow::Result<Vec<String>> {
        let jwks: serde_json::Value = self.http.get(self.jwks_url()).send().await?.json().await?;
        Ok(jwks["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k["kid"].as_str().map(str::to_owned))
            .collect())
    }

    /// An access token for `client` (client credentials).
    pub async fn token(&self, client: &str) -> anyhow::Result<String> {
        let answer: serde_json::Value = self
            .http
            .post(format!("{}/token", self.issuer()))
            .basic_auth(client, Some(format!("{client}-secret-of-the-test")))
            .form(&[("grant_type", "client_credentials"), ("scope", "onsale")])
            .send()
            .await?
            .json()
            .await?;
        answer["access_token"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("no access token: {answer}"))
    }

    async fn keys(&self, args: &[&str]) -> anyhow::Result<()> {
        let keys = self.dir.path().join("keys.json");
        let out = tokio::process::Command::new("node")
            .arg(self.tools.join("keys.mjs"))
            .arg(args[0])
            .arg(&keys)
            .args(&args[1..])
            .output()
            .await?;
        anyhow::ensure!(
            out.status.success(),
            "keys.mjs {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// Stops the provider (if it runs) and starts it again with the keys as they are now.
    async fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        let child = tokio::process::Command::new("node")
            .arg(self.tools.join("provider.mjs"))
            .arg(self.port.to_string())
            .arg(self.dir.path().join("keys.json"))
            .arg(self.dir.path().join("clients.json"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        self.child = Some(child);
        let url = self.jwks_url();
        crate::poll_until(
            "the identity provider answers",
            Duration::from_secs(20),
            Duration::from_millis(100),
            || {
                let (http, url) = (self.http.clone(), url.clone());
                async move {
                    match http.get(&url).send().await {
                        Ok(r) if r.status().is_success() => Ok(()),
                        Ok(r) => Err(format!("{}", r.status())),
                        Err(e) => Err(e.to_string()),
                    }
                }
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
    }
}
