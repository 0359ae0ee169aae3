//! The claim's trace: one `claim-to-bound` span per claim, from the claim's creation to the
//! status write that makes it Ready with a Sandbox, and every reconcile pass under it.
//!
//! ```text
//! <client span>                       (from the claim's trace-context annotation; none: root)
//! └─ claim-to-bound                   emitted once, at the first Ready write
//!    ├─ ReconcileSandboxClaim         every pass (parented on claim-to-bound's id up front)
//!    │  ├─ selectCandidate / adoptSandbox / createSandbox / updateClaimStatus
//!    │  └─ ReconcileSandbox ...       core controller: the Sandbox carries this pass's context
//!    └─ waitForSandboxReady           from the bind to the Ready write
//! ```
//!
//! `claim-to-bound` covers several reconciles (and maybe restarts), so it is emitted at its
//! end with explicit timestamps and an id derived from the claim UID; passes name that id as
//! their parent before it exists. A claim without the annotation gets a trace id derived from
//! its UID too, so every pass lands in the same trace without a write; the claim is stamped
//! with `claim-to-bound`'s context at first Ready (in the same patch as
//! `claim-first-ready-at`).
//!
//! Once per claim: emitted by the pass that writes the Ready=True transition; or, after a
//! restart that missed it, by the first pass that finds Ready=True persisted without
//! `claim-first-ready-at` (end = the Ready condition's stored transition time). A crash between
//! the emission and the annotation patch can emit it twice (with the same span id, which
//! trace backends merge or show as a duplicate); never zero times while annotations are on.

use std::time::SystemTime;

use controller_common::first_seen::FirstSeen;

use api_types::SandboxClaim;
use api_types::keys::TRACE_CONTEXT_ANNOTATION;
use controller_common::telemetry::span_ids::{derived_span_id, derived_trace_id, remote_parent};
use controller_common::telemetry::{TimedSpan, context_from_json, emit_timed_span};
use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceId};

use super::ledger::Progress;

/// Name of the span from claim creation to bound.
pub const CLAIM_TO_BOUND: &str = "claim-to-bound";
/// Name of the span from the bind (adoption or creation) to the Ready write.
pub const WAIT_FOR_SANDBOX_READY: &str = "waitForSandboxReady";

/// Where the claim's spans go.
#[derive(Debug, Clone)]
pub struct ClaimTrace {
    /// The client's context from the annotation, if valid.
    client: Option<opentelemetry::Context>,
    trace_id: TraceId,
    bound_span: SpanId,
    sampled: bool,
}

impl ClaimTrace {
    /// Reads the claim's annotation; a malformed one is logged (once per claim in `warned`)
    /// and ignored: the claim then gets its own trace, as one without the annotation.
    pub fn of(claim: &SandboxClaim, warned: &FirstSeen) -> ClaimTrace {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        let bound_span = derived_span_id(CLAIM_TO_BOUND, uid);
        let raw = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TRACE_CONTEXT_ANNOTATION))
            .filter(|v| !v.is_empty());
        let client = raw.and_then(|raw| match context_from_json(raw) {
            Ok(cx) if cx.span().span_context().is_valid() => Some(cx),
            Ok(_) => {
                warn_once(warned, claim, uid, "it holds no valid traceparent");
                None
            }
            Err(e) => {
                warn_once(
                    warned,
                    claim,
                    uid,
                    &format!("it is not a JSON object of strings: {e}"),
                );
                None
            }
        });
        match client {
            Some(cx) => {
                let sc = cx.span().span_context().clone();
                ClaimTrace {
                    trace_id: sc.trace_id(),
                    sampled: sc.is_sampled(),
                    client: Some(cx),
                    bound_span,
                }
            }
            None => ClaimTrace {
                client: None,
                trace_id: derived_trace_id(uid),
                bound_span,
                sampled: true,
            },
        }
    }

    /// The parent of every reconcile pass of this claim: `claim-to-bound`, by id.
    pub fn pass_parent(&self) -> opentelemetry::Context {
        remote_parent(self.trace_id, self.bound_span, self.sampled)
    }

    /// The annotation value naming `claim-to-bound` (stamped on a claim that had none).
    pub fn bound_annotation(&self) -> Option<String> {
        controller_common::telemetry::context_to_json(&self.pass_parent())
    }

    /// Whether the claim's own annotation carried a valid context.
    pub fn has_client_parent(&self) -> bool {
        self.client.is_some()
    }

    /// Emits `claim-to-bound` (and `waitForSandboxReady` when the bind time is known) ending
    /// at `end`, with this process' `progress` of the claim (passes, lost races, bind time).
    /// Returns the emitted context (invalid when traces are not exported).
    pub fn emit_bound(
        &self,
        claim: &SandboxClaim,
        bound: &Bound<'_>,
        progress: Option<Progress>,
        end: SystemTime,
    ) -> SpanContext {
        let start = claim
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(end, |t| SystemTime::from(t.0));
        let mut attributes = vec![
            KeyValue::new(
                "claim.namespace",
                claim.metadata.namespace.clone().unwrap_or_default(),
            ),
            KeyValue::new(
                "claim.name",
                claim.metadata.name.clone().unwrap_or_default(),
            ),
            KeyValue::new("sandbox.name", bound.sandbox.to_owned()),
            KeyValue::new("warmpool.name", claim.spec.warm_pool_ref.name.clone()),
            KeyValue::new("sandbox.template", bound.template.to_owned()),
            KeyValue::new("launch_type", bound.launch_type.to_owned()),
            KeyValue::new("agents.x-k8s.io/created-by", bound.created_by.to_owned()),
        ];
        if let Some(p) = &progress {
            attributes.push(KeyValue::new("claim.reconcile_passes", i64::from(p.passes)));
            attributes.push(KeyValue::new(
                "claim.adoption_conflicts",
                i64::from(p.adoption_conflicts),
            ));
        }
        attributes.push(KeyValue::new(
            "claim.bound_in_this_process",
            progress.is_some_and(|p| p.bound_at.is_some()),
        ));
        let root_parent = opentelemetry::Context::new();
        let parent = self.client.as_ref().unwrap_or(&root_parent);
        let context = emit_timed_span(
            TimedSpan {
                name: CLAIM_TO_BOUND,
                start,
                end,
                attributes,
                error: None,
                ids: Some((Some(self.trace_id), self.bound_span)),
            },
            parent,
        );
        if let Some(bound_at) = progress.and_then(|p| p.bound_at) {
            emit_timed_span(
                TimedSpan {
                    name: WAIT_FOR_SANDBOX_READY,
                    // A pass's time is taken when it starts: a Sandbox bound and Ready in
                    // the same pass waited for nothing.
                    start: bound_at.min(end),
                    end,
                    attributes: vec![
                        KeyValue::new("sandbox.name", bound.sandbox.to_owned()),
                        KeyValue::new("launch_type", bound.launch_type.to_owned()),
                    ],
                    error: None,
                    ids: None,
                },
                &self.pass_parent(),
            );
        }
        context
    }
}

/// What the claim got, for the `claim-to-bound` attributes.
#[derive(Debug, Clone, Copy)]
pub struct Bound<'a> {
    pub sandbox: &'a str,
    pub template: &'a str,
    pub launch_type: &'a str,
    pub created_by: &'a str,
}

fn warn_once(warned: &FirstSeen, claim: &SandboxClaim, uid: &str, why: &str) {
    if warned.first(uid) {
        tracing::warn!(
            claim = %format!(
                "{}/{}",
                claim.metadata.namespace.as_deref().unwrap_or_default(),
                claim.metadata.name.as_deref().unwrap_or_default()
            ),
            "ignoring the {TRACE_CONTEXT_ANNOTATION} annotation: {why}; the claim gets a trace of its own"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SimpleSpanProcessor};

    fn claim(uid: &str, annotation: Option<&str>) -> SandboxClaim {
        let mut c: SandboxClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": uid,
                         "creationTimestamp": "2026-01-02T03:04:05Z"},
            "spec": {"warmPoolRef": {"name": "pool"}},
        }))
        .unwrap();
        if let Some(a) = annotation {
            c.metadata.annotations =
                Some([(TRACE_CONTEXT_ANNOTATION.to_owned(), a.to_owned())].into());
        }
        c
    }

    const PARENT: &str =
        r#"{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#;

    #[test]
    fn passes_hang_under_claim_to_bound_in_the_clients_trace() {
        let t = ClaimTrace::of(&claim("u1", Some(PARENT)), &FirstSeen::new(8));
        assert!(t.has_client_parent());
        let parent = t.pass_parent();
        let sc = parent.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(sc.span_id(), derived_span_id(CLAIM_TO_BOUND, "u1"));
        assert!(sc.is_sampled());
        let json = t.bound_annotation().unwrap();
        assert!(json.contains("0af7651916cd43dd8448eb211c80319c"), "{json}");
    }

    #[test]
    fn without_or_with_a_malformed_annotation_the_trace_id_comes_from_the_uid() {
        for annotation in [
            None,
            Some("not json"),
            Some("{\"traceparent\":\"garbage\"}"),
        ] {
            let t = ClaimTrace::of(&claim("u2", annotation), &FirstSeen::new(8));
            assert!(!t.has_client_parent(), "{annotation:?}");
            assert_eq!(
                t.pass_parent().span().span_context().trace_id(),
                derived_trace_id("u2")
            );
        }
    }

    #[test]
    fn claim_to_bound_spans_creation_to_the_ready_write_with_its_attributes() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(SimpleSpanProcessor::new(exporter.clone()))
            .with_id_generator(controller_common::telemetry::span_ids::OverridableIds::default())
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        let mut c = claim("u3", Some(PARENT));
        // Created (whole seconds, as the API server stores it) a moment ago.
        let now = k8s_openapi::jiff::Timestamp::now();
        let created_at = k8s_openapi::jiff::Timestamp::from_second(now.as_second() - 1).unwrap();
        c.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            created_at,
        ));
        let t = ClaimTrace::of(&c, &FirstSeen::new(8));
        let progress = Progress {
            passes: 2,
            adoption_conflicts: 0,
            bound_at: Some(SystemTime::now()),
        };
        let created = SystemTime::from(created_at);
        let end = SystemTime::now() + std::time::Duration::from_millis(1234);
        let bound = Bound {
            sandbox: "pool-x",
            template: "tpl",
            launch_type: "warm",
            created_by: "python-client",
        };
        let cx = t.emit_bound(&c, &bound, Some(progress), end);
        assert_eq!(cx.span_id(), derived_span_id(CLAIM_TO_BOUND, "u3"));
        let spans = exporter.get_finished_spans().unwrap();
        let main = spans.iter().find(|s| s.name == CLAIM_TO_BOUND).unwrap();
        assert_eq!(main.start_time, created);
        assert_eq!(main.end_time, end);
        assert_eq!(main.parent_span_id.to_string(), "b7ad6b7169203331");
        let attr = |k: &str| {
            main.attributes
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.to_string())
        };
        assert_eq!(attr("launch_type").as_deref(), Some("warm"));
        assert_eq!(attr("sandbox.name").as_deref(), Some("pool-x"));
        assert_eq!(attr("claim.reconcile_passes").as_deref(), Some("2"));
        let wait = spans
            .iter()
            .find(|s| s.name == WAIT_FOR_SANDBOX_READY)
            .unwrap();
        assert_eq!(wait.parent_span_id, derived_span_id(CLAIM_TO_BOUND, "u3"));
        assert_eq!(wait.end_time, end);
        assert!(wait.start_time >= created && wait.start_time < end);
    }
}
