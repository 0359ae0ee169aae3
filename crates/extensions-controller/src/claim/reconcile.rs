//! A SandboxClaim pass: observe → plan → apply.
//!
//! ```text
//! runner (controller_common::runner)       the claim's key, taken first come, first served
//!   └─ reconcile                           span, trace parent, housekeeping
//!        ├─ observe::observe               caches + the claim's ledger → Observation (no I/O)
//!        ├─ plan::plan                     Observation → Plan, with the reason (pure)
//!        └─ apply::apply                   every write, in order; errors back to the runner
//!             └─ plan::report              the Sandbox step's outcome → stamp, status,
//!                                          Events (pure)
//! ```
//!
//! Writes per warm claim with default flags: the guarded adoption patch of the Sandbox, the
//! claim's annotation stamp (`sandbox-name`, first-observed and first-ready times, trace
//! context), and the claim's status patch that makes it Ready: three, all on the worker's path,
//! the stamp before the status. With `--disable-claim-observability-annotations` two (no
//! stamp); `--claim-adoption-events` adds the `SandboxAdopted` Event.

use std::sync::Arc;
use std::time::Instant;

use api_types::SandboxClaim;
use api_types::keys::{CLAIM_FIRST_READY_AT_ANNOTATION, TRACE_CONTEXT_ANNOTATION};
use controller_common::runner::Action;
use k8s_openapi::jiff::Timestamp;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::observe::{PassTrace, observe};
use super::plan::plan;
use super::trace::ClaimTrace;
use crate::context::Context;
use crate::error::Error;
use crate::metrics::normalize_created_by;

pub const CONTROLLER_NAME: &str = "sandboxclaim";

fn key_of(claim: &SandboxClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

pub async fn reconcile(claim: Arc<SandboxClaim>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.is_synced() {
        return Ok(Action::requeue(crate::context::SYNC_RECHECK));
    }
    let started = Instant::now();
    let span = tracing::info_span!(
        "ReconcileSandboxClaim",
        claim = %key_of(&claim),
        claim.namespace = claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.name = claim.metadata.name.as_deref().unwrap_or_default(),
        warmpool.name = claim.spec.warm_pool_ref.name.as_str(),
        plan = tracing::field::Empty,
        "agents.x-k8s.io/created-by" = tracing::field::Empty,
        error.reason = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_message = tracing::field::Empty,
    );
    if let Some(created_by) = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(api_types::keys::CREATED_BY_LABEL))
    {
        span.record(
            "agents.x-k8s.io/created-by",
            normalize_created_by(Some(created_by)),
        );
    }
    // Every pass hangs under the claim's `claim-to-bound` span (see `claim::trace`), set
    // before the span is first entered (later it would not take); a malformed annotation is
    // logged once and ignored.
    let trace = ClaimTrace::of(&claim, &ctx.claim.trace_warned);
    // Fails only when no OpenTelemetry layer is installed: traces are not exported.
    let _ = span.set_parent(trace.pass_parent());
    let result = Box::pin(pass(&claim, &ctx, &span, &trace))
        .instrument(span.clone())
        .await;
    if let Err(e) = &result {
        span.record("error.reason", e.metric_label());
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_message", e.to_string());
    }
    ctx.observe(CONTROLLER_NAME, started, &result);
    if result.is_ok() {
        ctx.succeeded(&key_of(&claim));
    }
    result
}

async fn pass(
    claim: &Arc<SandboxClaim>,
    ctx: &Context,
    span: &tracing::Span,
    trace: &ClaimTrace,
) -> Result<Action, Error> {
    let meta = &claim.metadata;
    let uid = meta.uid.as_deref().unwrap_or_default();
    if uid.is_empty() || meta.name.is_none() || meta.namespace.is_none() {
        return Err(Error::MissingMetadata {
            kind: "SandboxClaim",
            field: "name/namespace/uid",
        });
    }
    let state = &ctx.claim;
    let annotations = meta.annotations.as_ref();
    if annotations.is_none_or(|a| !a.contains_key(CLAIM_FIRST_READY_AT_ANNOTATION)) {
        state.ledger.count_pass(uid);
    }
    // Housekeeping: forget claims that are gone (their delete events are not always seen).
    if state.ledger.len() > 2 * ctx.stores.claims.len() + 64 {
        let live: std::collections::HashSet<String> = ctx
            .stores
            .claims
            .state()
            .iter()
            .filter_map(|c| c.metadata.uid.clone())
            .collect();
        state.ledger.prune(|uid| live.contains(uid));
        state
            .own_writes
            .prune(controller_common::own_writes::ECHO_WAIT);
    }
    let pass_trace = PassTrace {
        // The Sandbox this pass binds carries this pass's context, so the core controller's
        // spans for it land under this pass in the claim's trace.
        pass: span.in_scope(controller_common::telemetry::current_context_json),
        // A claim created without a trace context records the one its spans went to (a
        // malformed one is the user's to fix, not overwritten).
        stamp: annotations
            .is_none_or(|a| !a.contains_key(TRACE_CONTEXT_ANNOTATION))
            .then(|| trace.bound_annotation())
            .flatten(),
    };
    let observation = observe(ctx, claim, pass_trace, Timestamp::now());
    let plan = plan(&observation, &state.settings);
    span.record("plan", plan.why);
    tracing::debug!(plan = plan.why, "claim pass");
    super::apply::apply(ctx, &observation, plan, trace).await
}

pub fn error_policy(claim: Arc<SandboxClaim>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(claim = %key_of(&claim), error = %error, "SandboxClaim reconcile failed");
    Action::requeue(ctx.backoff(&key_of(&claim)))
}
