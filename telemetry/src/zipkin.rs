//! Spans to Zipkin's v2 API (`POST /api/v2/spans`, a JSON list), each with this process's
//! service name as its local endpoint. Written here rather than taken from
//! `opentelemetry-zipkin`: that crate is deprecated upstream (for OTLP, which the Zipkin server
//! on Maven Central does not take) and its last release drops the service name, so every span
//! lands in Zipkin without one (docs/adr/019). The mapping is Zipkin's documented model.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use serde_json::{json, Map, Value};

/// Exports each batch in one blocking request: it runs on the batch span processor's own
/// thread, never on an async runtime's.
#[derive(Debug)]
pub(crate) struct Zipkin {
    client: reqwest::blocking::Client,
    url: String,
    service: &'static str,
}

impl Zipkin {
    /// Builds its client on a thread of its own: a blocking client runs a runtime, which may
    /// not be made (or dropped) on an async runtime's thread.
    pub(crate) fn new(url: String, service: &'static str) -> Result<Self, String> {
        std::thread::spawn(move || {
            let client = reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .map_err(|e| e.to_string())?;
            Ok(Self {
                client,
                url,
                service,
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the exporter's thread panicked".to_owned()))
    }
}

fn micros(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One span in Zipkin's v2 model.
pub(crate) fn zipkin_span(service: &str, s: &SpanData) -> Value {
    let mut span = Map::new();
    span.insert(
        "traceId".into(),
        json!(s.span_context.trace_id().to_string()),
    );
    span.insert("id".into(), json!(s.span_context.span_id().to_string()));
    if s.parent_span_id != SpanId::INVALID {
        span.insert("parentId".into(), json!(s.parent_span_id.to_string()));
    }
    span.insert("name".into(), json!(s.name));
    let kind = match s.span_kind {
        SpanKind::Server => Some("SERVER"),
        SpanKind::Client => Some("CLIENT"),
        SpanKind::Producer => Some("PRODUCER"),
        SpanKind::Consumer => Some("CONSUMER"),
        SpanKind::Internal => None,
    };
    if let Some(kind) = kind {
        span.insert("kind".into(), json!(kind));
    }
    let (start, end) = (micros(s.start_time), micros(s.end_time));
    span.insert("timestamp".into(), json!(start));
    // Zipkin reads a duration of 0 as unknown.
    span.insert("duration".into(), json!(end.saturating_sub(start).max(1)));
    span.insert("localEndpoint".into(), json!({ "serviceName": service }));
    let mut tags: Map<String, Value> = s
        .attributes
        .iter()
        .map(|kv| (kv.key.to_string(), json!(kv.value.to_string())))
        .collect();
    if let Status::Error { description } = &s.status {
        tags.insert("error".into(), json!(description.to_string()));
    }
    if !tags.is_empty() {
        span.insert("tags".into(), Value::Object(tags));
    }
    Value::Object(span)
}

impl SpanExporter for Zipkin {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans: Vec<Value> = batch.iter().map(|s| zipkin_span(self.service, s)).collect();
        self.client
            .post(&self.url)
            .json(&spans)
            .send()
            .and_then(reqwest::blocking::Response::error_for_status)
            .map(|_| ())
            .map_err(|e| OTelSdkError::InternalFailure(format!("zipkin: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, TraceFlags, TraceId, TraceState};
    use opentelemetry::KeyValue;

    #[test]
    fn a_span_carries_its_ids_times_kind_tags_and_the_service_name() {
        let trace_id = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("hex");
        let data = SpanData {
            span_context: SpanContext::new(
                trace_id,
                SpanId::from_hex("00f067aa0ba902b7").expect("hex"),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::from_hex("b7ad6b7169203331").expect("hex"),
            parent_span_is_remote: true,
            span_kind: SpanKind::Server,
            name: "post /v1/events/{id}/holds".into(),
            start_time: SystemTime::UNIX_EPOCH + Duration::from_micros(1_000_000),
            end_time: SystemTime::UNIX_EPOCH + Duration::from_micros(1_000_250),
            attributes: vec![KeyValue::new("http.response.status_code", 201)],
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        };
        assert_eq!(
            zipkin_span("onsale-serve", &data),
            json!({
                "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
                "id": "00f067aa0ba902b7",
                "parentId": "b7ad6b7169203331",
                "name": "post /v1/events/{id}/holds",
                "kind": "SERVER",
                "timestamp": 1_000_000,
                "duration": 250,
                "localEndpoint": {"serviceName": "onsale-serve"},
                "tags": {"http.response.status_code": "201"},
            })
        );
    }
}
