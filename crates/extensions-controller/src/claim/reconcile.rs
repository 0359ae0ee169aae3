//! SandboxClaim reconcile: expiry, finding or making the claim's Sandbox (warm adoption first,
//! cold create otherwise), metadata sync, status, first-Ready metrics and annotations.
//!
//! Writes per warm claim with default flags: one guarded Sandbox patch (the ownership
//! transfer), one claim status patch, one claim annotation patch at first Ready (skipped with
//! `--disable-claim-observability-annotations`). The `SandboxAdopted` Event is a fourth, only
//! with `--claim-adoption-events` (and never with `--disable-claim-events`). Only the first two
//! are on a worker's path: the Event and the annotation patch are sent in the background, so a
//! worker is free again once the claim's Ready is stored.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api_types::conditions::{READY, REASON_CLAIM_EXPIRED, STATUS_TRUE, find_condition};
use api_types::keys::{
    CLAIM_FIRST_READY_AT_ANNOTATION, CLIENT_FIRST_REQUESTED_AT_ANNOTATION,
    CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION, SANDBOX_LAUNCH_TYPE_LABEL, SANDBOX_LAUNCH_TYPE_WARM,
    SANDBOX_TEMPLATE_REF_ANNOTATION, SANDBOX_TEMPLATE_REF_HASH_LABEL, TRACE_CONTEXT_ANNOTATION,
    WEBHOOK_FIRST_OBSERVED_AT_ANNOTATION,
};
use api_types::{
    ClaimShutdownPolicy, Sandbox, SandboxClaim, SandboxClaimStatus, SandboxTemplate,
    SandboxWarmPool, UpdateStrategyType, name_hash,
};
use controller_common::runner::Action;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::runtime::events::EventType;
use serde_json::{Map, Value, json};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use controller_common::lean::Lean;

mod acquire;
mod report;

use acquire::Adoption;
pub use report::rfc3339_nano;

use super::adoption::{adoption_patch, map_diff};
use super::candidate::{PoolRef, choose, has_pending_network};
use super::cold::{ColdError, build_cold_sandbox};
use super::injection::EnvError;
use super::lifecycle::{expires_at, shutdown_policy};
use super::metadata::{MetadataError, validate};
use super::pod_metadata::{claim_created_by, desired_pod_metadata};
use super::status::{Failure, Observed, compute_status};
use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, is_already_exists, is_conflict, is_not_found};
use crate::metrics::{
    ClaimCreationLabels, CreationLatencyLabels, StartupLabels, UNKNOWN_TEMPLATE,
    normalize_created_by,
};
use crate::ownership::{controlling_pool, is_controlled_by};
use crate::warm_pool::blueprint::is_stale;

pub const CONTROLLER_NAME: &str = "sandboxclaim";

/// How long a new claim waits for warm members that have no pod IPs yet before cold-starting.
pub const NETWORK_GRACE: Duration = Duration::from_secs(2);
/// Re-check interval while waiting for such members.
pub const NETWORK_RECHECK: Duration = Duration::from_millis(500);
/// Re-check delay after a `ReconcilerError`.
pub const RECONCILER_ERROR_RECHECK: Duration = Duration::from_secs(5);
/// Re-check delay after a status write lost to a newer version of the claim.
pub const STALE_RECHECK: Duration = Duration::from_millis(100);
/// How many candidates one pass tries before giving up on the warm path.
pub const MAX_ADOPTION_ATTEMPTS: usize = 8;

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
        claim = %format_args!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default()
        ),
        claim.namespace = claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.name = claim.metadata.name.as_deref().unwrap_or_default(),
        warmpool.name = claim.spec.warm_pool_ref.name.as_str(),
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
    // Every pass hangs under the claim's `claim-to-bound` span (see `claim::trace`); a
    // malformed annotation is logged once there and ignored.
    let trace = super::trace::ClaimTrace::of(&claim);
    // Fails only when no OpenTelemetry layer is installed: traces are not exported.
    let _ = span.set_parent(trace.pass_parent());
    // Only a claim without the annotation is stamped with its trace at first Ready (a
    // malformed one is the user's to fix, not overwritten).
    let lacks_trace = claim
        .metadata
        .annotations
        .as_ref()
        .is_none_or(|a| !a.contains_key(TRACE_CONTEXT_ANNOTATION));
    let unbound = claim
        .metadata
        .annotations
        .as_ref()
        .is_none_or(|a| !a.contains_key(CLAIM_FIRST_READY_AT_ANNOTATION));
    if unbound {
        super::trace::count_pass(claim.metadata.uid.as_deref().unwrap_or_default());
    }
    // The Sandbox this pass binds carries this pass's context, so the core controller's
    // spans for it land under this pass in the claim's trace.
    let injected = span.in_scope(controller_common::telemetry::current_context_json);
    let view = match &injected {
        Some(trace) => {
            let mut with_trace = (*claim).clone();
            with_trace
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(TRACE_CONTEXT_ANNOTATION.to_owned(), trace.clone());
            Arc::new(with_trace)
        }
        None => claim.clone(),
    };
    let mut pass = Pass::new(&view, &ctx, lacks_trace);
    pass.trace = Some(trace);
    // The pass's state lives on the heap: the future the runtime moves around (into its task,
    // between queues) stays a few words instead of the whole pass.
    let result = Box::pin(pass.run()).instrument(span.clone()).await;
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

pub fn error_policy(claim: Arc<SandboxClaim>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(claim = %key_of(&claim), error = %error, "SandboxClaim reconcile failed");
    Action::requeue(ctx.backoff(&key_of(&claim)))
}

/// The outcome of finding or making the claim's Sandbox.
enum Binding {
    Bound(Arc<Sandbox>),
    Missing,
    Failed(Failure),
    /// Wait briefly without touching status.
    Wait(Duration),
}

struct Pass<'a> {
    claim: &'a SandboxClaim,
    ctx: &'a Arc<Context>,
    namespace: String,
    name: String,
    uid: String,
    /// Responses decoded without managedFields.
    sandboxes: Api<Lean<Sandbox>>,
    now: Timestamp,
    /// Set when the status write hit a newer claim than the cached one.
    stale: std::sync::atomic::AtomicBool,
    /// The resourceVersion the status write is guarded by.
    rv: std::sync::Mutex<Option<String>>,
    /// The stored claim has no trace-context annotation (the view may carry an injected one).
    lacks_trace: bool,
    /// Where this claim's spans go (set by `reconcile`).
    trace: Option<super::trace::ClaimTrace>,
}

impl<'a> Pass<'a> {
    fn new(claim: &'a SandboxClaim, ctx: &'a Arc<Context>, lacks_trace: bool) -> Self {
        let namespace = claim.metadata.namespace.clone().unwrap_or_default();
        Pass {
            claim,
            lacks_trace,
            ctx,
            name: claim.metadata.name.clone().unwrap_or_default(),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            sandboxes: Api::namespaced(ctx.client.clone(), &namespace),
            namespace,
            now: Timestamp::now(),
            stale: std::sync::atomic::AtomicBool::new(false),
            rv: std::sync::Mutex::new(claim.metadata.resource_version.clone()),
            trace: None,
        }
    }

    fn domains(&self) -> &[String] {
        &self.ctx.claim.settings.allowed_label_domains
    }

    async fn run(&self) -> Result<Action, Error> {
        if self.name.is_empty() || self.namespace.is_empty() || self.uid.is_empty() {
            return Err(Error::MissingMetadata {
                kind: "SandboxClaim",
                field: "name/namespace/uid",
            });
        }
        if self.claim.metadata.deletion_timestamp.is_some() {
            self.ctx.claim.forget(&self.uid);
            super::trace::forget(&self.uid);
            return Ok(Action::await_change());
        }
        self.remove_legacy_network_policy().await;
        let claims_cached = self.ctx.stores.claims.len();
        if self.ctx.claim.tracked() > 2 * claims_cached + 64 {
            let live: std::collections::HashSet<String> = self
                .ctx
                .stores
                .claims
                .state()
                .iter()
                .filter_map(|c| c.metadata.uid.clone())
                .collect();
            self.ctx.claim.prune(|uid| live.contains(uid));
        }
        let first_seen = self.ctx.claim.first_seen(&self.uid, self.now);
        // The cache may not show our last status write yet; start from what we wrote.
        let (current, rv) = self.ctx.claim.latest_status(
            &self.uid,
            self.claim.metadata.resource_version.as_deref(),
            self.claim.status.clone().unwrap_or_default(),
        );
        *self.rv.lock().unwrap_or_else(|e| e.into_inner()) = rv;
        let expire_at = expires_at(self.claim, &current);
        let expired = expire_at.is_some_and(|at| self.now >= at);

        if expired
            && matches!(
                shutdown_policy(self.claim),
                ClaimShutdownPolicy::Delete | ClaimShutdownPolicy::DeleteForeground
            )
        {
            return self.delete_expired_claim().await;
        }

        let (binding, mut retry) = if expired {
            (self.expire_retained().await?, None)
        } else {
            self.bind().await?
        };
        let (sandbox, failure) = match binding {
            Binding::Wait(after) => return Ok(Action::requeue(after)),
            Binding::Bound(sb) => (Some(sb), None),
            Binding::Missing => (None, None),
            Binding::Failed(f) => (None, Some(f)),
        };
        let now_time = Time(self.now);
        let mut next = compute_status(
            self.claim,
            &current,
            &Observed {
                sandbox: sandbox.as_deref(),
                failure: failure.as_ref(),
                expired,
            },
            &now_time,
        );
        // The Finished condition just mirrored can make the claim expire now (TTL 0).
        let expire_after = expires_at(self.claim, &next);
        let newly_expired = !expired && expire_after.is_some_and(|at| self.now >= at);
        if newly_expired {
            retry = Some(Duration::from_millis(1));
        }
        let was_expired = find_condition(&current.conditions, READY)
            .is_some_and(|c| c.reason == REASON_CLAIM_EXPIRED);
        if failure.is_some()
            && let Some(ready) = find_condition(&next.conditions, READY)
        {
            let span = tracing::Span::current();
            span.record("error.reason", ready.reason.as_str());
            span.record("otel.status_code", "ERROR");
            span.record("otel.status_message", ready.message.as_str());
        }
        let wrote = self.write_status(&current, &next).await?;
        if expired && !was_expired {
            Context::event(
                self.ctx.claim_recorder.as_ref(),
                self.claim,
                EventType::Normal,
                REASON_CLAIM_EXPIRED,
                "Claim Expired",
                "Claim expired".into(),
            )
            .await;
        }
        if wrote {
            self.after_status_write(&current, &mut next, sandbox.as_deref(), first_seen)
                .await?;
        }

        if self.stale.load(std::sync::atomic::Ordering::Relaxed) {
            retry = Some(STALE_RECHECK);
        }
        if let Some(f) = &failure {
            let after = match f {
                Failure::TemplateNotFound { .. } | Failure::WarmPoolNotFound { .. } => {
                    Some(Duration::from_secs(60))
                }
                Failure::CreatePending => Some(Duration::from_millis(200)),
                Failure::AdoptionConflict(_) => Some(Duration::from_millis(100)),
                // Transient API failures, or a condition fixed elsewhere (a foreign Sandbox with
                // the claim's name deleted): look again without hammering the API.
                Failure::Reconciler(_) => Some(RECONCILER_ERROR_RECHECK),
                _ => None,
            };
            retry = retry.or(after);
        }
        if let Some(at) = expire_after.filter(|at| *at > self.now) {
            let left =
                Duration::try_from(at.duration_since(self.now)).unwrap_or(Duration::from_secs(1));
            retry = Some(retry.map_or(left, |r| r.min(left)));
        }
        Ok(retry.map_or_else(Action::await_change, Action::requeue))
    }

    /// Older releases made one NetworkPolicy per claim (`<claim>-network-policy`, owned by the
    /// claim); templates share one now. Ours is deleted; a same-named policy someone else owns
    /// is left alone. Read from the cache, so a pass costs no request when there is none.
    async fn remove_legacy_network_policy(&self) {
        let name = format!("{}-network-policy", self.name);
        let Some(np) = self
            .ctx
            .stores
            .policies
            .get(&kube::runtime::reflector::ObjectRef::new(&name).within(&self.namespace))
        else {
            return;
        };
        let owned = crate::ownership::controller_of(&np.metadata).is_some_and(|o| {
            o.uid == self.uid && crate::ownership::refers_to_kind(o, crate::ownership::CLAIM_KIND)
        });
        if !owned {
            return;
        }
        let api = Api::<k8s_openapi::api::networking::v1::NetworkPolicy>::namespaced(
            self.ctx.client.clone(),
            &self.namespace,
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: np.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                tracing::info!(policy = %format!("{}/{name}", self.namespace), "deleted legacy per-claim NetworkPolicy")
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                tracing::warn!(error = %e, policy = %name, "cannot delete legacy per-claim NetworkPolicy")
            }
        }
    }

    async fn delete_expired_claim(&self) -> Result<Action, Error> {
        let policy = shutdown_policy(self.claim);
        let label = if policy == ClaimShutdownPolicy::DeleteForeground {
            "DeleteForeground"
        } else {
            "Delete"
        };
        Context::event(
            self.ctx.claim_recorder.as_ref(),
            self.claim,
            EventType::Normal,
            REASON_CLAIM_EXPIRED,
            "Deleting",
            format!("Deleting Claim (ShutdownPolicy={label})"),
        )
        .await;
        let params = DeleteParams {
            propagation_policy: (policy == ClaimShutdownPolicy::DeleteForeground)
                .then_some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let claims = Api::<SandboxClaim>::namespaced(self.ctx.client.clone(), &self.namespace);
        match claims.delete(&self.name, &params).await {
            Ok(_) => Ok(Action::await_change()),
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(Action::await_change()),
            Err(e) => Err(Error::kube(
                format!(
                    "delete expired SandboxClaim {}/{}",
                    self.namespace, self.name
                ),
                e,
            )),
        }
    }

    /// Retain policy at expiry: delete the claim's Sandbox (if it is the claim's) and keep the claim.
    async fn expire_retained(&self) -> Result<Binding, Error> {
        let status_name = self
            .claim
            .status
            .as_ref()
            .map(|s| s.sandbox.name.clone())
            .unwrap_or_default();
        let sandbox_name = if status_name.is_empty() {
            self.name.clone()
        } else {
            status_name
        };
        let Some(sb) = self
            .ctx
            .stores
            .sandbox(&self.namespace, &sandbox_name)
            .or_else(|| self.owned_in_cache())
        else {
            return Ok(Binding::Missing);
        };
        if !is_controlled_by(&sb.metadata, &self.uid) {
            return Ok(Binding::Failed(Failure::ExpiredNotOwned(format!(
                "sandbox {sandbox_name:?} is not controlled by claim {:?}",
                self.name
            ))));
        }
        if sb.metadata.deletion_timestamp.is_none() {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: sb.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match self
                .sandboxes
                .delete(
                    sb.metadata.name.as_deref().unwrap_or(&sandbox_name),
                    &params,
                )
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(Binding::Missing),
                Err(e) => {
                    return Ok(Binding::Failed(Failure::Reconciler(format!(
                        "failed to delete sandbox: {e}"
                    ))));
                }
            }
        }
        Ok(Binding::Bound(sb))
    }

    /// A Sandbox in the cache whose controller is this claim.
    fn owned_in_cache(&self) -> Option<Arc<Sandbox>> {
        self.ctx
            .stores
            .sandboxes_controlled_by(&self.namespace, &self.uid)
            .into_iter()
            .next()
    }

    /// Finds the claim's Sandbox, or takes or makes one. The second value asks for a re-check.
    async fn bind(&self) -> Result<(Binding, Option<Duration>), Error> {
        if let Err(e) = validate(&self.claim.spec.additional_pod_metadata, self.domains()) {
            return Ok((
                Binding::Failed(Failure::InvalidMetadata(e.to_string())),
                None,
            ));
        }
        if let Some(found) = self.find_existing().await? {
            return match found {
                Ok(sb) => self.sync_metadata(sb).await,
                Err(failure) => Ok((Binding::Failed(failure), None)),
            };
        }
        let pool_name = self.claim.spec.warm_pool_ref.name.as_str();
        let Some(pool) = self.ctx.stores.pool(&self.namespace, pool_name) else {
            return Ok((
                Binding::Failed(Failure::WarmPoolNotFound {
                    pool: pool_name.to_owned(),
                }),
                None,
            ));
        };
        let template_name = pool.spec.sandbox_template_ref.name.clone();
        // Warm members can be taken even while the template is missing (their pod metadata is
        // kept); only a cold start needs the template.
        let template = self.ctx.stores.template(&self.namespace, &template_name);
        let customized =
            !self.claim.spec.env.is_empty() || !self.claim.spec.volume_claim_templates.is_empty();
        if !customized {
            match self
                .adopt(&pool, template.as_deref(), &template_name)
                .await?
            {
                Adoption::Adopted(sb) => return Ok((Binding::Bound(sb), None)),
                Adoption::Failed(f) => return Ok((Binding::Failed(f), None)),
                Adoption::PendingNetwork if self.is_young() => {
                    return Ok((Binding::Wait(NETWORK_RECHECK), None));
                }
                Adoption::PendingNetwork | Adoption::NoCandidate => {}
            }
        }
        let Some(template) = template else {
            return Ok((
                Binding::Failed(Failure::TemplateNotFound {
                    template: template_name,
                }),
                None,
            ));
        };
        Ok((
            self.create_cold(&template, &template_name, pool_name)
                .await?,
            None,
        ))
    }

    fn is_young(&self) -> bool {
        self.claim
            .metadata
            .creation_timestamp
            .as_ref()
            .is_some_and(|created| {
                let age = self
                    .now
                    .as_millisecond()
                    .saturating_sub(created.0.as_millisecond());
                age < i64::try_from(NETWORK_GRACE.as_millis()).unwrap_or(i64::MAX)
            })
    }

    /// The Sandbox this claim already has: the one this process bound (read from the API if
    /// the cache lags), the one in status, any Sandbox the claim controls, or one named after
    /// the claim (which must be the claim's).
    async fn find_existing(&self) -> Result<Option<Result<Arc<Sandbox>, Failure>>, Error> {
        let cache = &self.ctx.stores;
        let remembered = self.ctx.claim.binding(&self.uid);
        let status_name = self
            .claim
            .status
            .as_ref()
            .map(|s| s.sandbox.name.clone())
            .filter(|n| !n.is_empty());
        for candidate in remembered.iter().chain(status_name.iter()) {
            if let Some(sb) = cache.sandbox(&self.namespace, candidate)
                && is_controlled_by(&sb.metadata, &self.uid)
            {
                return Ok(Some(Ok(sb)));
            }
        }
        if let Some(sb) = self.owned_in_cache() {
            return Ok(Some(Ok(sb)));
        }
        if let Some(name) = &remembered {
            // We bound it, but the cache has not caught up: ask the API server.
            match self.sandboxes.get_opt(name).await {
                Ok(Some(Lean(sb))) if is_controlled_by(&sb.metadata, &self.uid) => {
                    return Ok(Some(Ok(Arc::new(sb))));
                }
                Ok(_) => {}
                Err(e) => {
                    return Err(Error::kube(
                        format!("get Sandbox {}/{name}", self.namespace),
                        e,
                    ));
                }
            }
        }
        if let Some(sb) = cache.sandbox(&self.namespace, &self.name) {
            if is_controlled_by(&sb.metadata, &self.uid) {
                return Ok(Some(Ok(sb)));
            }
            if controlling_pool(&sb.metadata).is_none() {
                return Ok(Some(Err(Failure::Reconciler(format!(
                    "sandbox {:?} is not controlled by claim {:?}. Please use a different claim name or delete the sandbox manually",
                    self.name, self.name
                )))));
            }
        }
        Ok(None)
    }

    /// Keeps a bound Sandbox's pod metadata in line with the template and the claim.
    async fn sync_metadata(&self, sb: Arc<Sandbox>) -> Result<(Binding, Option<Duration>), Error> {
        self.ctx
            .claim
            .bind(&self.uid, sb.metadata.name.as_deref().unwrap_or_default());
        if sb.metadata.deletion_timestamp.is_some() {
            return Ok((Binding::Bound(sb), None));
        }
        let template_name = sb
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SANDBOX_TEMPLATE_REF_ANNOTATION))
            .cloned()
            .or_else(|| {
                self.ctx
                    .stores
                    .pool(&self.namespace, &self.claim.spec.warm_pool_ref.name)
                    .map(|p| p.spec.sandbox_template_ref.name.clone())
            });
        let Some(template_name) = template_name else {
            return Ok((Binding::Bound(sb), None));
        };
        let Some(template) = self.ctx.stores.template(&self.namespace, &template_name) else {
            return Ok((Binding::Bound(sb), None));
        };
        let desired = match desired_pod_metadata(
            &template.spec.blueprint.pod_template.metadata,
            self.claim,
            &self.uid,
            Some(&template_name),
            self.domains(),
        ) {
            Ok(meta) => meta,
            Err(e) => return Ok((Binding::Failed(metadata_failure(e)), None)),
        };
        let current = &sb.spec.blueprint.pod_template.metadata;
        let mut top = Map::new();
        let have_labels = sb.metadata.labels.clone().unwrap_or_default();
        let mut want_labels = have_labels.clone();
        want_labels.insert(
            SANDBOX_TEMPLATE_REF_HASH_LABEL.into(),
            name_hash(&template_name),
        );
        want_labels
            .entry(SANDBOX_LAUNCH_TYPE_LABEL.into())
            .or_insert_with(|| {
                if sb.metadata.name.as_deref() == Some(self.name.as_str()) {
                    "cold".into()
                } else {
                    SANDBOX_LAUNCH_TYPE_WARM.into()
                }
            });
        let label_diff = map_diff(&have_labels, &want_labels);
        if !label_diff.is_empty() {
            top.insert("labels".into(), Value::Object(label_diff));
        }
        let pod_labels = map_diff(&current.labels, &desired.labels);
        let pod_annotations = map_diff(&current.annotations, &desired.annotations);
        if top.is_empty() && pod_labels.is_empty() && pod_annotations.is_empty() {
            return Ok((Binding::Bound(sb), None));
        }
        let mut patch = json!({"metadata": top});
        if !pod_labels.is_empty() || !pod_annotations.is_empty() {
            patch["spec"] = json!({"podTemplate": {"metadata": {"labels": pod_labels, "annotations": pod_annotations}}});
        }
        let sb_name = sb.metadata.name.clone().unwrap_or_default();
        match self
            .sandboxes
            .patch(&sb_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(Lean(updated)) => {
                self.ctx.claim.own_writes.record(&updated.metadata);
                Ok((Binding::Bound(Arc::new(updated)), None))
            }
            Err(e) if is_not_found(&e) => Ok((Binding::Missing, Some(Duration::from_millis(200)))),
            Err(e) => Err(Error::kube(
                format!("sync metadata of Sandbox {}/{sb_name}", self.namespace),
                e,
            )),
        }
    }
}

fn metadata_failure(e: MetadataError) -> Failure {
    match e {
        MetadataError::Invalid { .. } => Failure::InvalidMetadata(e.to_string()),
        MetadataError::Conflict { .. } => Failure::Reconciler(e.to_string()),
    }
}
