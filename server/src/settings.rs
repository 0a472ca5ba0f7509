//! Every setting of an onsale process, declared once (clap, with its environment variable and
//! default), grouped by the crate that uses it. Secrets are `SecretString`s: they never print.

use clap::Parser;
use onsale_command::OwnerConfig;
use onsale_edge::auth::{require_secret, SecretError};
use onsale_edge::limits::LimitSettings;
use onsale_edge::AuthSettings;
use secrecy::ExposeSecret;

use crate::cors::CorsSettings;
use crate::http::HttpSettings;
use crate::web::WebSettings;
use onsale_eventlog::DatabaseSettings;
use onsale_kafka::{KafkaConfig, RelayConfig};
use onsale_payments::PaymentsConfig;
use onsale_projections::RunnerConfig;
use onsale_query::QueryConfig;
use onsale_waiting_room::WaitingRoomConfig;

#[derive(Debug, Clone, clap::Args)]
pub struct Settings {
    #[command(flatten)]
    pub database: DatabaseSettings,
    #[command(flatten)]
    pub auth: AuthSettings,
    #[command(flatten)]
    pub owners: OwnerConfig,
    #[command(flatten)]
    pub query: QueryConfig,
    #[command(flatten)]
    pub payments: PaymentsConfig,
    #[command(flatten)]
    pub waiting_room: WaitingRoomConfig,
    #[command(flatten)]
    pub kafka: KafkaConfig,
    #[command(flatten)]
    pub relay: RelayConfig,
    #[command(flatten)]
    pub runner: RunnerConfig,
    #[command(flatten)]
    pub http: HttpSettings,
    #[command(flatten)]
    pub limits: LimitSettings,
    #[command(flatten)]
    pub cors: CorsSettings,
    #[command(flatten)]
    pub web: WebSettings,
    #[command(flatten)]
    pub checkpoints: crate::audit::CheckpointSettings,
    /// Where REST and SSE are served (port 0: any free port).
    #[arg(long, env = "ONSALE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Where gRPC and gRPC-web are served.
    #[arg(long, env = "ONSALE_GRPC_LISTEN", default_value = "127.0.0.1:50051")]
    pub grpc_listen: String,
    /// Where `/metrics`, `/healthz` and `/readyz` are served for operators: a process without
    /// the API (relay, projections) has no other listener, and the API's metrics are served
    /// only here unless `--public-metrics`.
    #[arg(long, env = "ONSALE_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// Also serve `/metrics` on the API's public listener (a development convenience: the
    /// local stack's scripts set it; an internet-facing listener should not tell anyone its
    /// load, its refusals and its shows' admission).
    #[arg(long, env = "ONSALE_PUBLIC_METRICS", default_value_t = false, value_parser = clap::builder::BoolishValueParser::new())]
    pub public_metrics: bool,
    /// The region this process runs in (docs/adr/024): it writes only while its main database
    /// is a primary recording this region as the writer; otherwise it serves reads and answers
    /// writes `503 OTHER_REGION` naming the writer.
    #[arg(long, env = "ONSALE_REGION", default_value = "a")]
    pub region: onsale_domain::region::RegionName,
    /// On SIGTERM or Ctrl-C, how long in-flight work may take to finish before the process
    /// gives up on it.
    #[arg(long, env = "ONSALE_SHUTDOWN_TIMEOUT_SECS", default_value_t = 10)]
    pub shutdown_timeout_secs: u64,
}

#[derive(Debug, Parser)]
struct Only {
    #[command(flatten)]
    settings: Settings,
}

impl Settings {
    /// Checks every secret before anything starts: an unset secret, a built-in development
    /// value or one shorter than 32 bytes stops the process with the setting's name, unless
    /// development mode is on (then unset secrets take development values).
    pub fn secure(&mut self) -> Result<(), SecretError> {
        let dev = self.auth.dev_mode;
        if dev {
            // Development mode hands tokens for any account to whoever asks from this
            // machine and fills unset secrets with the repository's own: only on loopback.
            let listeners = [
                ("ONSALE_LISTEN", Some(&self.listen)),
                ("ONSALE_GRPC_LISTEN", Some(&self.grpc_listen)),
                ("ONSALE_METRICS_LISTEN", self.metrics_listen.as_ref()),
                (
                    "ONSALE_INTERNAL_LISTEN",
                    Some(&self.owners.cluster.internal_listen),
                ),
            ];
            for (name, listen) in listeners {
                if let Some(l) = listen.filter(|l| !onsale_edge::auth::on_loopback(l)) {
                    return Err(SecretError::NotLoopback(name, l.clone()));
                }
            }
        }
        self.auth.secure()?;
        require_secret(
            &mut self.payments.webhook_secret,
            "ONSALE_WEBHOOK_SECRET",
            "onsale-dev-webhook-secret",
            dev,
        )?;
        // During a webhook secret's rollover only: held to the same rules when set.
        if !self
            .payments
            .webhook_secret_previous
            .expose_secret()
            .is_empty()
        {
            require_secret(
                &mut self.payments.webhook_secret_previous,
                "ONSALE_WEBHOOK_SECRET_PREVIOUS",
                "onsale-dev-webhook-secret",
                false,
            )?;
        }
        require_secret(
            &mut self.waiting_room.secret,
            "ONSALE_ADMISSION_SECRET",
            "onsale-dev-admission-secret",
            dev,
        )?;
        require_secret(
            &mut self.owners.cluster.node_secret,
            "ONSALE_NODE_SECRET",
            "onsale-dev-node-secret",
            dev,
        )
    }

    /// Settings from arguments (the first is the program name) and the environment: how tests
    /// build them, with the same defaults as the `onsale` binary.
    pub fn try_parse_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        Only::try_parse_from(args).map(|o| o.settings)
    }

    /// The flag of the setting environment variable `var` sets, and whether it takes a value
    /// (else it is a switch); `None` if no setting reads `var`. What lets one list of settings
    /// by variable set a child process and build a process in this one alike.
    pub fn flag_of(var: &str) -> Option<(String, bool)> {
        use clap::CommandFactory;
        Only::command()
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == var))
            .and_then(|a| {
                Some((
                    format!("--{}", a.get_long()?),
                    a.get_action().takes_values(),
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn development_mode_is_refused_off_loopback() {
        for (flag, addr, name) in [
            ("--listen", "0.0.0.0:8080", "ONSALE_LISTEN"),
            ("--grpc-listen", "192.0.2.7:50051", "ONSALE_GRPC_LISTEN"),
            ("--metrics-listen", "[::]:9100", "ONSALE_METRICS_LISTEN"),
            (
                "--internal-listen",
                "10.0.0.5:7000",
                "ONSALE_INTERNAL_LISTEN",
            ),
        ] {
            let mut s = Settings::try_parse_from(["onsale", "--dev-mode", flag, addr])
                .expect("the settings parse");
            let e = s.secure().expect_err("refused off loopback");
            assert!(e.to_string().contains(name), "{flag} {addr}: {e}");
        }
        for addr in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "localhost:8080",
            "127.0.0.2:0",
        ] {
            let mut s = Settings::try_parse_from(["onsale", "--dev-mode", "--listen", addr])
                .expect("the settings parse");
            assert!(s.secure().is_ok(), "{addr} is loopback");
        }
        // Off development mode, any address (every secret set).
        let mut s = Settings::try_parse_from([
            "onsale",
            "--listen",
            "0.0.0.0:8080",
            "--jwks-url",
            "https://id.example/jwks",
        ])
        .expect("the settings parse");
        let e = s.secure().map_err(|e| e.to_string());
        assert!(!e.as_ref().is_err_and(|m| m.contains("loopback")), "{e:?}");
    }

    #[test]
    fn every_setting_is_declared_once_with_a_name_of_its_own() {
        Only::command().debug_assert();
        let mut s = Settings::try_parse_from(["onsale", "--dev-mode"]).expect("the defaults parse");
        assert!(!s.public_metrics, "metrics only for operators by default");
        assert_eq!(s.shutdown_timeout_secs, 10);
        s.secure().expect("development mode fills the secrets in");
        assert!(
            !format!("{s:?}").contains("onsale-dev-secret"),
            "secrets never print"
        );
    }

    #[test]
    fn without_development_mode_each_secret_is_required_by_name() {
        let strong = "x".repeat(40);
        let mut s = Settings::try_parse_from(["onsale"]).expect("parses");
        assert_eq!(s.secure(), Err(SecretError::NoIdentityProvider));
        let mut args = vec![
            "--jwks-url".to_owned(),
            "https://id.example/jwks".to_owned(),
        ];
        for (flag, env) in [
            ("--webhook-secret", "ONSALE_WEBHOOK_SECRET"),
            ("--admission-secret", "ONSALE_ADMISSION_SECRET"),
            ("--node-secret", "ONSALE_NODE_SECRET"),
        ] {
            let mut s = Settings::try_parse_from(
                std::iter::once("onsale").chain(args.iter().map(String::as_str)),
            )
            .expect("parses");
            assert_eq!(s.secure(), Err(SecretError::Missing(env)));
            args.push(flag.to_owned());
            args.push(strong.clone());
        }
        let parse = |args: &[String]| {
            Settings::try_parse_from(
                std::iter::once("onsale").chain(args.iter().map(String::as_str)),
            )
            .expect("parses")
        };
        assert_eq!(parse(&args).secure(), Ok(()));
        // A previous webhook secret (a rollover) is held to the same rules when set.
        let mut rolling = args.clone();
        rolling.extend(["--webhook-secret-previous".to_owned(), "short".to_owned()]);
        assert_eq!(
            parse(&rolling).secure(),
            Err(SecretError::Short("ONSALE_WEBHOOK_SECRET_PREVIOUS"))
        );
        rolling.pop();
        rolling.push(strong.clone());
        assert_eq!(parse(&rolling).secure(), Ok(()));
        args[3] = "onsale-dev-webhook-secret".into();
        assert_eq!(
            parse(&args).secure(),
            Err(SecretError::Default("ONSALE_WEBHOOK_SECRET"))
        );
        // A shared JWT secret outside development mode is refused: HS256 is development's.
        let mut shared = args.clone();
        shared[3] = strong.clone();
        shared.extend(["--jwt-secret".to_owned(), strong]);
        assert_eq!(
            parse(&shared).secure(),
            Err(SecretError::DevelopmentOnly("ONSALE_JWT_SECRET"))
        );
    }
}
