//! Traces in memory: an OTLP/HTTP receiver (`POST /v1/traces`, protobuf bodies) that keeps
//! every span it is sent, flattened with its resource's `service.name`, and a waterfall view of
//! one trace ([`waterfall`]): text for a terminal, SVG for a file.
//!
//! `cargo xtask dev --traces` serves [`http_router`] and draws each claim's trace; the
//! end-to-end tests (`e2e_tests::otlp_receiver`) add an OTLP/gRPC front end over the same
//! [`SpanSink`]. Written here rather than taken from a collector: a few dozen lines over
//! `opentelemetry-proto`'s generated types, with nothing to install or run beside the
//! controllers.

pub mod waterfall;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;

/// One received span, flattened.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedSpan {
    /// `service.name` of the resource that sent it.
    pub service: String,
    pub name: String,
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    /// Attribute values rendered as strings.
    pub attributes: BTreeMap<String, String>,
    /// OTLP status code: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
}

impl CapturedSpan {
    /// Duration in nanoseconds.
    pub fn duration_nanos(&self) -> u64 {
        self.end_unix_nano.saturating_sub(self.start_unix_nano)
    }

    /// The attribute `key`, if present.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn render(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// Flattens an export request into spans.
pub fn flatten(request: &ExportTraceServiceRequest) -> Vec<CapturedSpan> {
    let mut out = Vec::new();
    for resource_spans in &request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .map(|kv| render(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for scope_spans in &resource_spans.scope_spans {
            for span in &scope_spans.spans {
                out.push(CapturedSpan {
                    service: service.clone(),
                    name: span.name.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| {
                            (
                                kv.key.clone(),
                                render(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                            )
                        })
                        .collect(),
                    status_code: span.status.as_ref().map_or(0, |s| s.code),
                });
            }
        }
    }
    out
}

/// What a receiver recorded; every transport writes through [`SpanSink::record`]. Cheap to
/// clone (shared).
#[derive(Clone, Default)]
pub struct SpanSink {
    spans: Arc<Mutex<Vec<CapturedSpan>>>,
    requests: Arc<Mutex<u64>>,
    /// `(lowercase name, value)` of every request header or gRPC metadata entry seen.
    headers: Arc<Mutex<BTreeSet<(String, String)>>>,
}

impl SpanSink {
    /// One export request: its headers (lowercase names) and its spans.
    pub fn record(
        &self,
        headers: impl Iterator<Item = (String, String)>,
        request: &ExportTraceServiceRequest,
    ) {
        self.headers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(headers);
        self.spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(flatten(request));
        *self.requests.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<CapturedSpan> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Export requests received so far.
    pub fn requests(&self) -> u64 {
        *self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether some request carried header (or gRPC metadata) `name: value`.
    pub fn saw_header(&self, name: &str, value: &str) -> bool {
        self.headers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(name.to_ascii_lowercase(), value.to_owned()))
    }

    /// The spans of trace `trace_id`.
    pub fn trace(&self, trace_id: &str) -> Vec<CapturedSpan> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }
}

/// The OTLP/HTTP routes (`POST /v1/traces`) recording into `sink`.
pub fn http_router(sink: SpanSink) -> axum::Router {
    axum::Router::new()
        .route("/v1/traces", axum::routing::post(http_export))
        .with_state(sink)
}

/// `POST /v1/traces` of OTLP/HTTP: protobuf bodies only.
async fn http_export(
    axum::extract::State(captured): axum::extract::State<SpanSink>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> (axum::http::StatusCode, Vec<u8>) {
    let protobuf = headers
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v == "application/x-protobuf");
    if !protobuf {
        return (axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new());
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (axum::http::StatusCode::BAD_REQUEST, Vec::new());
    };
    captured.record(
        headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned()))),
        &request,
    );
    let response = ExportTraceServiceResponse {
        partial_success: None,
    };
    (axum::http::StatusCode::OK, response.encode_to_vec())
}
