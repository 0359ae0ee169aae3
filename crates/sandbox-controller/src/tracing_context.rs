//! Trace propagation: a Sandbox carrying the `opentelemetry.io/trace-context` annotation (a JSON
//! object of W3C headers, written by the client or the claim controller) continues that trace.
//! The controller never writes the annotation itself (that would cost a Sandbox write per
//! creation).
//!
//! Spans of one reconcile: `ReconcileSandbox` (parented on the annotation) with children
//! `reconcilePVCs`, `reconcilePod` (and `createPod` inside it when the Pod is created), and,
//! at the status write that turns the Sandbox Ready, `waitForPodReady`: from this process'
//! creation of the Pod to that write (none when the Pod was created by an earlier process).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use controller_common::first_seen::FirstSeen;

use api_types::Sandbox;
use kube::ResourceExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::desired::pod::normalize_created_by;
use crate::keys::{CREATED_BY_LABEL, TRACE_CONTEXT_ANNOTATION};

/// Entries kept before the bookkeeping is reset (bounds memory).
const MAX_TRACKED: usize = 20_000;

/// This controller's trace bookkeeping, held by its `Context` (no process-global state: two
/// controllers in one process, as in the tests, keep their own).
#[derive(Debug)]
pub struct TraceMemory {
    /// Sandbox UID → when this process created its Pod (the start of `waitForPodReady`).
    pods_created: Mutex<HashMap<String, SystemTime>>,
    /// Sandboxes whose malformed annotation was reported.
    warned: FirstSeen,
}

impl Default for TraceMemory {
    fn default() -> Self {
        TraceMemory {
            pods_created: Mutex::default(),
            warned: FirstSeen::new(MAX_TRACKED),
        }
    }
}

impl TraceMemory {
    /// Notes that the Sandbox's Pod was created now (the start of `waitForPodReady`).
    pub fn pod_created(&self, sandbox: &Sandbox) {
        let mut created = self.pods_created.lock().unwrap_or_else(|e| e.into_inner());
        if created.len() >= MAX_TRACKED {
            created.clear();
        }
        created.insert(sandbox.uid().unwrap_or_default(), SystemTime::now());
    }

    /// Emits `waitForPodReady` under the current span, ending now, when this process created
    /// the Sandbox's Pod (a warm Sandbox's Pod was ready long before its claim: nothing to
    /// wait for).
    pub fn pod_became_ready(&self, sandbox: &Sandbox) {
        let Some(start) = self
            .pods_created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&sandbox.uid().unwrap_or_default())
        else {
            return;
        };
        let parent = tracing::Span::current().context();
        controller_common::telemetry::emit_timed_span(
            controller_common::telemetry::TimedSpan {
                name: "waitForPodReady",
                start,
                end: SystemTime::now(),
                attributes: vec![
                    opentelemetry::KeyValue::new("sandbox.name", sandbox.name_any()),
                    opentelemetry::KeyValue::new(
                        "sandbox.namespace",
                        sandbox.namespace().unwrap_or_default(),
                    ),
                    opentelemetry::KeyValue::new("pod.name", sandbox.name_any()),
                ],
                error: None,
                ids: None,
            },
            &parent,
        );
    }

    /// Forgets the Pods of Sandboxes whose UID `live` rejects (gone before their Pod was Ready).
    pub fn prune(&self, live: impl Fn(&str) -> bool) {
        self.pods_created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|uid, _| live(uid));
    }

    /// The W3C headers stored on the object, if the annotation is a JSON string map; a
    /// malformed one is reported once per Sandbox, then ignored.
    pub fn carrier(&self, sandbox: &Sandbox) -> Option<HashMap<String, String>> {
        let raw = sandbox.annotations().get(TRACE_CONTEXT_ANNOTATION)?;
        if raw.is_empty() {
            return None;
        }
        match serde_json::from_str(raw) {
            Ok(map) => Some(map),
            Err(err) => {
                self.warn_once(sandbox, &err);
                None
            }
        }
    }

    fn warn_once(&self, sandbox: &Sandbox, err: &serde_json::Error) {
        if self.warned.first(&sandbox.uid().unwrap_or_default()) {
            tracing::warn!(
                sandbox = %format!("{}/{}", sandbox.namespace().unwrap_or_default(), sandbox.name_any()),
                error = %err,
                "ignoring the {TRACE_CONTEXT_ANNOTATION} annotation: not a JSON object of strings"
            );
        }
    }
}

/// Makes `span` a child of the Sandbox's stored trace context, and records the normalized
/// `created-by` label on it.
pub fn attach_parent(span: &tracing::Span, sandbox: &Sandbox, traces: &TraceMemory) {
    if let Some(v) = sandbox.labels().get(CREATED_BY_LABEL) {
        span.record(CREATED_BY_LABEL, normalize_created_by(v));
    }
    let Some(carrier) = traces.carrier(sandbox) else {
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
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt};

    /// Collects every value recorded on spans after their creation.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<(String, String)>>>);

    impl Visit for Recorded {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0
                .lock()
                .unwrap()
                .push((field.name().to_string(), format!("{value:?}")));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0
                .lock()
                .unwrap()
                .push((field.name().to_string(), value.to_string()));
        }
    }

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorded {
        fn on_record(
            &self,
            _: &tracing::span::Id,
            values: &tracing::span::Record<'_>,
            _: Context<'_, S>,
        ) {
            values.record(&mut self.clone());
        }
    }

    #[test]
    fn created_by_is_recorded_normalized_on_the_reconcile_span() {
        let recorded = Recorded::default();
        let subscriber = tracing_subscriber::registry().with(recorded.clone());
        tracing::subscriber::with_default(subscriber, || {
            let mut sb = Sandbox::new("sb", SandboxSpec::default());
            sb.metadata.labels =
                Some([(CREATED_BY_LABEL.to_string(), "invalid-value".to_string())].into());
            let span = tracing::info_span!(
                "ReconcileSandbox",
                "agents.x-k8s.io/created-by" = tracing::field::Empty
            );
            attach_parent(&span, &sb, &TraceMemory::default());
        });
        assert_eq!(
            recorded.0.lock().unwrap().as_slice(),
            [(CREATED_BY_LABEL.to_string(), "unknown".to_string())]
        );
    }

    #[test]
    fn carrier_is_read_from_the_annotation_and_garbage_ignored() {
        let traces = TraceMemory::default();
        let carrier = |sb: &Sandbox| traces.carrier(sb);
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
