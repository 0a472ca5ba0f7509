//! Clients of Redis, in the clear (`redis://`) or over TLS (`rediss://`, issue 53 item 7),
//! the server's certificate checked against an operator's CA (`ONSALE_REDIS_CA_FILE`) or the
//! system's roots.

use std::path::Path;

use anyhow::Context;

/// A client for `url`; with `ca` (a PEM file), a `rediss://` server's certificate must chain
/// to it. A `redis://` URL given a CA is refused: the operator asked for TLS and would not
/// get it.
pub fn client(url: &str, ca: Option<&Path>) -> anyhow::Result<redis::Client> {
    let tls = url.starts_with("rediss://");
    if !tls {
        anyhow::ensure!(
            ca.is_none(),
            "a CA file for Redis is set but its URL is not rediss://"
        );
        return Ok(redis::Client::open(url)?);
    }
    // redis's rustls asks for the process's crypto provider; ring and aws-lc-rs are both in
    // the tree, so one is named (a second call finds it installed and changes nothing).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Some(ca) = ca else {
        return Ok(redis::Client::open(url)?);
    };
    let root_cert =
        std::fs::read(ca).with_context(|| format!("read the Redis CA file {}", ca.display()))?;
    Ok(redis::Client::build_with_tls(
        url,
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root_cert),
        },
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_for_a_clear_url_is_refused_and_a_missing_ca_file_is_named() {
        assert!(client("redis://127.0.0.1:6379/", None).is_ok());
        let e = client("redis://127.0.0.1:6379/", Some(Path::new("/ca.pem")))
            .expect_err("a CA for a clear URL");
        assert!(e.to_string().contains("not rediss://"), "{e}");
        let e = client(
            "rediss://127.0.0.1:6379/",
            Some(Path::new("/no/such/ca.pem")),
        )
        .expect_err("a CA file that is not there");
        assert!(format!("{e:#}").contains("/no/such/ca.pem"), "{e:#}");
        assert!(client("rediss://127.0.0.1:6379/", None).is_ok());
    }
}
