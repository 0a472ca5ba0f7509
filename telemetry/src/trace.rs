//! Distributed traces (docs/adr/019): the spans of one request, across the processes it passes
//! through, exported to Zipkin. A span meant for the trace is a `tracing` span with the target
//! [`TARGET`]; only the OpenTelemetry layer sees those (never the log), and only when
//! `ONSALE_TRACE_ZIPKIN_URL` names a collector, so with tracing off they cost a disabled
//! callsite. Between processes a span's context travels as a W3C `traceparent`: in HTTP
//! headers, in an event's metadata (the relay reads it from the log), in Kafka headers, and in
//! a seat-map delta's row.
//!
//! Sampling (`ONSALE_TRACE_SAMPLE`, a ratio of 0 to 1, default 0) decides at the first span of
//! a trace; a caller's sampled `traceparent` is followed whatever the ratio, so one request can
//! be traced on demand: another node's always, the public's a few times a second at most.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The target of every span that belongs in a trace.
pub const TARGET: &str = "onsale::trace";

/// The W3C header (and metadata key) a span's context travels in.
pub const TRACEPARENT: &str = "traceparent";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether this process exports traces: when not, nothing reads or writes a `traceparent`.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Exports what is left when dropped (the end of `main`).
#[must_use = "dropping it flushes and stops the trace exporter"]
pub struct Tracing {
    provider: Option<SdkTracerProvider>,
}

impl std::fmt::Debug for Tracing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracing")
            .field("exporting", &self.provider.is_some())
            .finish()
    }
}

impl Drop for Tracing {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.shutdown();
        }
    }
}

/// The variable naming Zipkin's span endpoint; unset or empty, no span is exported.
pub const ZIPKIN_URL: &str = "ONSALE_TRACE_ZIPKIN_URL";
/// The variable holding the share of traces started here that are sampled (0 to 1, default 0).
pub const SAMPLE: &str = "ONSALE_TRACE_SAMPLE";
/// What is logged when `RUST_LOG` does not say.
pub const DEFAULT_LOG: &str = "info,sqlx=warn";

/// Logs to stderr (`RUST_LOG`, default [`DEFAULT_LOG`]) and, with `ONSALE_TRACE_ZIPKIN_URL`
/// (`http://host:9411/api/v2/spans`), exports the spans of [`TARGET`] as `service`.
pub fn init(service: &'static str) -> Tracing {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG))
        .add_directive(format!("{TARGET}=off").parse().expect("a directive"));
    let log = tracing_subscriber::fmt::layer().with_filter(filter);
    let url = std::env::var(ZIPKIN_URL).ok().filter(|u| !u.is_empty());
    let Some(url) = url else {
        let _ = tracing_subscriber::registry().with(log).try_init();
        return Tracing { provider: None };
    };
    let ratio = std::env::var(SAMPLE)
        .ok()
        .and_then(|r| r.parse::<f64>().ok())
        .unwrap_or(0.0)
        .clamp(0.0, 1.0);
    let exporter = match crate::zipkin::Zipkin::new(url.clone(), service) {
        Ok(e) => e,
        Err(e) => {
            let _ = tracing_subscriber::registry().with(log).try_init();
            tracing::error!(error = %e, %url, "traces not exported: no HTTP client for Zipkin");
            return Tracing { provider: None };
        }
    };
    // Its own thread sends a batch at least every 500 ms; spans beyond its queue are dropped,
    // never waited for.
    let batch = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(Duration::from_millis(500))
                .with_max_queue_size(65_536)
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(batch)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            ratio,
        ))))
        .with_resource(Resource::builder_empty().with_service_name(service).build())
        .build();
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("onsale"))
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_level(false)
        .with_target(false)
        .with_filter(
            tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::INFO),
        );
    let _ = tracing_subscriber::registry()
        .with(log)
        .with(spans)
        .try_init();
    ENABLED.store(true, Ordering::Relaxed);
    tracing::info!(%url, ratio, service, "exporting traces to Zipkin");
    Tracing {
        provider: Some(provider),
    }
}

/// `span`'s context as a W3C `traceparent`, when it is sampled: what a header, a message or a
/// row carries on. `None` when tracing is off or the span is not sampled.
pub fn traceparent(span: &Span) -> Option<String> {
    if !enabled() || span.is_disabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_sampled() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Whether `span` is recorded (and its children are): the work that costs something extra for
/// a trace (carrying its context on) is done only for these.
pub fn sampled(span: &Span) -> bool {
    enabled() && !span.is_disabled() && span.context().span().span_context().is_sampled()
}

/// Makes `span` (not entered yet) a child of the span a `traceparent` names.
pub fn follow(span: &Span, traceparent: &str) {
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let _ = span.set_parent(TraceContextPropagator::new().extract(&carrier));
}

/// Makes `span` (not entered yet) a child of the caller's span, when its headers name one.
pub fn follow_headers(span: &Span, headers: &http::HeaderMap, caller: Caller) {
    let cx = TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
    let context = cx.span().span_context().clone();
    if !context.is_valid() {
        return;
    }
    // A sampled context from the internet is followed within the budget only; past it the
    // request is a trace of its own, sampled by the ratio like any other.
    if caller == Caller::Public && context.is_sampled() && !FORCED.take(unix_secs()) {
        return;
    }
    let _ = span.set_parent(cx);
}

/// Who sent a request's `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// Anyone on the public listeners: a sampled context of theirs is followed at most
    /// [`FORCED_PER_SEC`] times a second (issue 53, item 11: a client could have every request
    /// it sent traced and exported).
    Public,
    /// Another onsale node (the internal listener, signed requests): always followed.
    Node,
}

/// How many requests a second the public may have traced by sending a sampled `traceparent`
/// (one request traced on demand stays possible).
pub const FORCED_PER_SEC: u32 = 2;

static FORCED: PerSecond = PerSecond::new(FORCED_PER_SEC);

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// At most `per_sec` takes in each second (a take racing the turn of a second may land in
/// either).
#[derive(Debug)]
pub struct PerSecond {
    per_sec: u32,
    second: AtomicU64,
    used: AtomicU32,
}

impl PerSecond {
    pub const fn new(per_sec: u32) -> Self {
        Self {
            per_sec,
            second: AtomicU64::new(0),
            used: AtomicU32::new(0),
        }
    }

    /// Whether one more is allowed in second `now`.
    pub fn take(&self, now: u64) -> bool {
        let seen = self.second.load(Ordering::Relaxed);
        if seen != now
            && self
                .second
                .compare_exchange(seen, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.used.store(0, Ordering::Relaxed);
        }
        self.used.fetch_add(1, Ordering::Relaxed) < self.per_sec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_so_many_are_taken_in_a_second_and_the_next_second_starts_afresh() {
        let budget = PerSecond::new(2);
        assert!(budget.take(100));
        assert!(budget.take(100));
        assert!(!budget.take(100), "a third in the same second");
        assert!(!budget.take(100));
        assert!(budget.take(101), "the next second");
        assert!(budget.take(101));
        assert!(!budget.take(101));
    }
}
