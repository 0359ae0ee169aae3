//! Trace propagation: a Sandbox carrying the `opentelemetry.io/trace-context` annotation (a JSON
//! object of W3C headers, written by the client or the claim controller) continues that trace.
//! The controller never writes the annotation itself (that would cost a Sandbox write per
//! creation).

use std::collections::HashMap;

use api_types::Sandbox;
use kube::ResourceExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::desired::pod::normalize_created_by;
use crate::keys::{CREATED_BY_LABEL, TRACE_CONTEXT_ANNOTATION};

/// The W3C headers stored on the object, if the annotation is a JSON string map.
pub fn carrier(sandbox: &Sandbox) -> Option<HashMap<String, String>> {
    let raw = sandbox.annotations().get(TRACE_CONTEXT_ANNOTATION)?;
    if raw.is_empty() {
        return None;
    }
    match serde_json::from_str(raw) {
        Ok(map) => Some(map),
        Err(err) => {
            tracing::debug!(error = %err, "ignoring malformed trace-context annotation");
            None
        }
    }
}

/// Makes `span` a child of the Sandbox's stored trace context, and records the normalized
/// `created-by` label on it.
pub fn attach_parent(span: &tracing::Span, sandbox: &Sandbox) {
    if let Some(v) = sandbox.labels().get(CREATED_BY_LABEL) {
        span.record("created_by", normalize_created_by(v));
    }
    let Some(carrier) = carrier(sandbox) else {
        return;
    };
    let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier));
    // Fails only when no OpenTelemetry layer is installed: tracing export is off.
    let _ = span.set_parent(cx);
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::SandboxSpec;

    #[test]
    fn carrier_is_read_from_the_annotation_and_garbage_ignored() {
        let mut sb = Sandbox::new("sb", SandboxSpec::default());
        assert_eq!(carrier(&sb), None);
        sb.metadata.annotations = Some(
            [(
                TRACE_CONTEXT_ANNOTATION.to_string(),
                r#"{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#
                    .to_string(),
            )]
            .into(),
        );
        assert_eq!(
            carrier(&sb).unwrap()["traceparent"],
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        sb.metadata.annotations = Some(
            [(
                TRACE_CONTEXT_ANNOTATION.to_string(),
                "spoofed-trace".to_string(),
            )]
            .into(),
        );
        assert_eq!(carrier(&sb), None);
    }
}
