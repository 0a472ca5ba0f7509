//! Logging, traces and metrics, set up once per process: [`init_tracing`] (the log, and the
//! spans of [`trace`] exported to Zipkin when configured), and [`metrics()`], the Prometheus
//! recorder every crate's `metrics::counter!`/`gauge!`/`histogram!` report to, under the names
//! (and help texts) of [`metrics`]; and [`supervise`], under which every background loop of a
//! process runs, restarted when it dies, the process's health naming it meanwhile. It knows
//! nothing of onsale's domain.

pub mod metrics;
pub mod supervise;
pub mod trace;
mod zipkin;

pub use trace::init as init_tracing;

/// `url` as it may be printed: its password, if any, replaced (a URL that does not parse is
/// withheld whole: it might be a secret pasted in the wrong place).
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("redacted"));
            }
            u.to_string()
        }
        Err(_) => "(withheld: not a URL)".to_owned(),
    }
}

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

/// The process-wide Prometheus recorder (installed on first use, with every metric described).
/// A gauge not updated for [`metrics::SHOW_LABEL_IDLE`] is dropped from `/metrics`, so the
/// series of shows that went quiet do not pile up.
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
            // A count, not a time: commands per group commit, up to the owners' batch (512).
            let commands = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
            PrometheusBuilder::new()
                .set_buckets(&buckets)
                .ok()?
                .set_buckets_for_metric(Matcher::Suffix("_lag_seconds".into()), &lag)
                .ok()?
                .set_buckets_for_metric(
                    Matcher::Full(metrics::COMMIT_BATCH_COMMANDS.into()),
                    &commands,
                )
                .ok()?
                .idle_timeout(MetricKindMask::GAUGE, Some(metrics::SHOW_LABEL_IDLE))
                .install_recorder()
                .ok()
                .inspect(|_| metrics::describe())
        })
        .clone()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_group_commits_size_lands_in_a_bucket_of_commands_not_of_seconds() {
        let handle = super::metrics().expect("the recorder");
        metrics::histogram!(super::metrics::COMMIT_BATCH_COMMANDS).record(40.0);
        let text = handle.render();
        let bucket = |le: &str| {
            let name = format!("onsale_commit_batch_commands_bucket{{le=\"{le}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(name.as_str()))
                .and_then(|n| n.trim().parse::<u64>().ok())
        };
        // A batch of 40 is counted between 32 and 64 (with the seconds' buckets every batch
        // over 2.5 commands fell into +Inf alone).
        assert_eq!(bucket("32"), Some(0), "{text}");
        assert_eq!(bucket("64"), Some(1), "{text}");
        assert_eq!(bucket("2.5"), None, "{text}");
    }
}
