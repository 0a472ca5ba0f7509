//! Logging and metrics, set up once per process.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
}

/// The process-wide Prometheus recorder (installed on first use).
pub fn metrics() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ];
            // Lag of the read path: finer where its targets are (500 ms, 2 s).
            let lag = [
                0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75,
                1.0, 1.5, 2.0, 3.0, 5.0,
            ];
            PrometheusBuilder::new()
                .set_buckets(&buckets)
                .ok()?
                .set_buckets_for_metric(Matcher::Suffix("_lag_seconds".into()), &lag)
                .ok()?
                .install_recorder()
                .ok()
        })
        .clone()
}
