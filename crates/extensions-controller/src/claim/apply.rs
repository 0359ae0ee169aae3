//! Step 3 of a claim pass: perform the [`Plan`], in order. Every API write of a claim pass is
//! here, in [`apply`]:
//!
//! 1. the older release's per-claim NetworkPolicy, if any (delete; errors only logged);
//! 2. the Sandbox step: the guarded adoption patch of a warm member (candidates in turn), or the
//!    cold Sandbox's create, or the metadata sync patch of a bound Sandbox, or the Retain
//!    expiry's delete; or the claim's own deletion at a Delete expiry. A take (adoption patch,
//!    cold create) is sent only while the cache still holds the claim it was decided on
//!    ([`take_check`], right before each request); otherwise the pass ends there;
//! 3. the claim's annotation stamp (`sandbox-name`, `controller-first-observed-at`, the trace
//!    context, `claim-first-ready-at`), before the status that makes it Ready;
//! 4. the claim's status, guarded by the resourceVersion the pass worked from;
//! 5. the claim's Events.
//!
//! Each write is awaited here (none is sent from a detached task), its error returned to the
//! runner, and what it wrote recorded: in [`OwnWrites`](controller_common::own_writes) (its
//! watch event starts no pass) and in the claim's ledger (a later pass on a cache that lags
//! works from it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use api_types::conditions::{READY, STATUS_TRUE, find_condition};
use api_types::keys::{
    CLIENT_FIRST_REQUESTED_AT_ANNOTATION, CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION,
    WEBHOOK_FIRST_OBSERVED_AT_ANNOTATION,
};
use api_types::{Sandbox, SandboxClaim, SandboxClaimStatus};
use controller_common::lean::Lean;
use controller_common::metrics::current_trace_exemplar;
use controller_common::runner::Action;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::runtime::events::EventType;
use serde_json::json;
use tracing::Instrument;

use super::candidate::{PoolRef, is_member};
use super::observe::{MAX_ADOPTION_ATTEMPTS, Observation};
use super::plan::{
    Adopt, ClaimEvent, Fallback, FirstReady, How, Outcome, Plan, STALE_RECHECK, SandboxStep, Step,
    TakeCheck, cold, launch_type_of, metadata_failure, report, take_check, template_of,
};
use super::pod_metadata::claim_created_by;
use super::status::Failure;
use super::trace::{Bound, ClaimTrace};
use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, is_already_exists, is_conflict, is_not_found};
use crate::metrics::{
    ClaimCreationLabels, CreationLatencyLabels, StartupLabels, UNKNOWN_TEMPLATE,
    normalize_created_by,
};
use crate::ownership::controlling_pool;

/// Performs `plan` for the claim of `o`.
pub async fn apply(
    ctx: &Context,
    o: &Observation,
    plan: Plan,
    trace: &ClaimTrace,
) -> Result<Action, Error> {
    let writer = Writer { ctx, o };
    if let Some(name) = &plan.legacy_policy {
        writer.delete_legacy_policy(name).await;
    }
    let step = match plan.step {
        Step::Nothing { requeue, forget } => {
            if forget {
                ctx.claim.ledger.forget(&o.uid);
            }
            return Ok(requeue.map_or_else(Action::await_change, Action::requeue));
        }
        Step::DeleteClaim { foreground } => return writer.delete_claim(foreground).await,
        Step::Sandbox(step) => step,
    };
    let outcome = match writer.sandbox_step(step).await? {
        Stepped::Done(outcome) => outcome,
        // Nothing was taken and nothing more is written: the claim's deletion (or its new
        // version) starts the pass that acts on it.
        Stepped::Abandoned(TakeCheck::Changed) => return Ok(Action::requeue(STALE_RECHECK)),
        Stepped::Abandoned(_) => return Ok(Action::await_change()),
    };
    let report = report(o, &outcome, &ctx.claim.settings, Timestamp::now());
    if let Some(after) = report
        .requeue
        .filter(|_| matches!(outcome, Outcome::Wait(_)))
    {
        return Ok(Action::requeue(after));
    }
    if let Outcome::Failed(_) = &outcome
        && let Some(ready) = report
            .status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, READY))
    {
        let span = tracing::Span::current();
        span.record("error.reason", ready.reason.as_str());
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_message", ready.message.as_str());
    }

    let mut rv = o.claim.metadata.resource_version.clone();
    let mut annotations = o.claim.metadata.annotations.clone().unwrap_or_default();
    if !report.stamp.is_empty() {
        match writer.stamp(&report.stamp).await? {
            Some(stamped) => {
                rv = stamped.metadata.resource_version.clone();
                annotations = stamped.metadata.annotations.clone().unwrap_or_default();
            }
            // The claim is gone.
            None => return Ok(Action::await_change()),
        }
    }
    let mut requeue = report.requeue;
    let stored = match &report.status {
        None => true,
        Some(next) => match writer.status(rv.as_deref(), next).await? {
            Written::Stored => true,
            Written::Stale => {
                requeue = Some(STALE_RECHECK);
                false
            }
            Written::Gone => return Ok(Action::await_change()),
        },
    };
    if stored {
        for event in &report.events {
            writer.event(event).await;
        }
        let sandbox = match &outcome {
            Outcome::Bound { sandbox, .. } => Some(sandbox.as_ref()),
            _ => None,
        };
        let status = report.status.clone().unwrap_or_else(|| o.status());
        writer.first_ready(report.first_ready, &status, sandbox, &annotations, trace);
    } else if let Some(event) = report
        .events
        .iter()
        .find(|e| e.reason == "SandboxProvisioned")
    {
        // The create happened whatever became of the status.
        writer.event(event).await;
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// How the Sandbox step ended.
enum Stepped {
    Done(Outcome),
    /// A take was not sent: the cache showed the claim deleted or changed right before it
    /// (see [`take_check`]).
    Abandoned(TakeCheck),
}

/// How the warm path ended.
enum Taken {
    Done(Outcome),
    /// No candidate was taken.
    None,
    Abandoned(TakeCheck),
}

/// How a guarded status write ended.
enum Written {
    Stored,
    /// A newer claim than the pass worked from (409): look again soon.
    Stale,
    /// The claim is gone (404).
    Gone,
}

struct Writer<'a> {
    ctx: &'a Context,
    o: &'a Observation,
}

impl Writer<'_> {
    fn sandboxes(&self) -> Api<Lean<Sandbox>> {
        Api::namespaced(self.ctx.client.clone(), &self.o.namespace)
    }

    fn claims(&self) -> Api<Lean<SandboxClaim>> {
        Api::namespaced(self.ctx.client.clone(), &self.o.namespace)
    }

    fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.o.namespace)
    }

    /// The claim's resourceVersion this pass acted on: logged with each Sandbox a claim takes,
    /// so a chaos run can tell a take decided before the claim's deletion (a race no write
    /// order avoids) from one decided after it.
    fn claim_version(&self) -> &str {
        self.o
            .claim
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    }

    async fn delete_legacy_policy(&self, name: &str) {
        let api = Api::<k8s_openapi::api::networking::v1::NetworkPolicy>::namespaced(
            self.ctx.client.clone(),
            &self.o.namespace,
        );
        let Some(uid) = self
            .ctx
            .stores
            .policies
            .get(&kube::runtime::reflector::ObjectRef::new(name).within(&self.o.namespace))
            .and_then(|np| np.metadata.uid.clone())
        else {
            return;
        };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {
                tracing::info!(policy = %self.key(name), "deleted legacy per-claim NetworkPolicy")
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                tracing::warn!(error = %e, policy = %name, "cannot delete legacy per-claim NetworkPolicy")
            }
        }
    }

    async fn delete_claim(&self, foreground: bool) -> Result<Action, Error> {
        let label = if foreground {
            "DeleteForeground"
        } else {
            "Delete"
        };
        self.event(&ClaimEvent {
            type_: EventType::Normal,
            reason: api_types::conditions::REASON_CLAIM_EXPIRED,
            action: "Deleting",
            note: format!("Deleting Claim (ShutdownPolicy={label})"),
        })
        .await;
        let params = DeleteParams {
            propagation_policy: foreground.then_some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: Some(self.o.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.claims().delete(&self.o.name, &params).await {
            Ok(_) => Ok(Action::await_change()),
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(Action::await_change()),
            Err(e) => Err(Error::kube(
                format!("delete expired SandboxClaim {}", self.key(&self.o.name)),
                e,
            )),
        }
    }

    async fn sandbox_step(&self, step: SandboxStep) -> Result<Stepped, Error> {
        match step {
            SandboxStep::Settled(outcome) => Ok(Stepped::Done(outcome)),
            SandboxStep::Sync { sandbox, patch } => {
                self.sync(&sandbox, &patch).await.map(Stepped::Done)
            }
            SandboxStep::Adopt(adopt) => match self.adopt(&adopt).await? {
                Taken::Done(outcome) => Ok(Stepped::Done(outcome)),
                Taken::Abandoned(check) => Ok(Stepped::Abandoned(check)),
                Taken::None => match adopt.otherwise {
                    Fallback::Wait(after) => Ok(Stepped::Done(Outcome::Wait(after))),
                    Fallback::Cold => {
                        Box::pin(self.sandbox_step(cold(self.o, &self.ctx.claim.settings))).await
                    }
                },
            },
            SandboxStep::Create { sandbox, pool } => self.create(*sandbox, pool).await,
            SandboxStep::DeleteExpired(sandbox) => {
                self.delete_expired(sandbox).await.map(Stepped::Done)
            }
        }
    }

    /// [`take_check`] against the claim in the cache now; logs a take it stops.
    fn may_take(&self, sandbox: &str) -> TakeCheck {
        let current =
            self.ctx.stores.claims.get(
                &kube::runtime::reflector::ObjectRef::new(&self.o.name).within(&self.o.namespace),
            );
        let check = take_check(self.o, current.as_deref());
        if check != TakeCheck::Send {
            tracing::info!(
                sandbox = %self.key(sandbox),
                claim.resource_version = self.claim_version(),
                reason = check.reason(),
                "take abandoned"
            );
        }
        check
    }

    async fn sync(&self, sb: &Arc<Sandbox>, patch: &serde_json::Value) -> Result<Outcome, Error> {
        let name = sb.metadata.name.clone().unwrap_or_default();
        match self
            .sandboxes()
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(Lean(updated)) => {
                self.ctx.claim.own_writes.record(&updated.metadata);
                Ok(Outcome::Bound {
                    sandbox: Arc::new(updated),
                    how: How::Kept,
                })
            }
            Err(e) if is_not_found(&e) => Ok(Outcome::Missing { name: Some(name) }),
            Err(e) => Err(Error::kube(
                format!("sync metadata of Sandbox {}", self.key(&name)),
                e,
            )),
        }
    }

    /// The warm path.
    async fn adopt(&self, adopt: &Adopt) -> Result<Taken, Error> {
        let state = &self.ctx.claim;
        let pool_ref = PoolRef {
            namespace: &self.o.namespace,
            name: adopt.pool.metadata.name.as_deref().unwrap_or_default(),
            uid: adopt.pool.metadata.uid.as_deref(),
        };
        let mut attempts = 0;
        for candidate in &adopt.candidates {
            if attempts >= MAX_ADOPTION_ATTEMPTS {
                break;
            }
            let Some(sb_name) = candidate.metadata.name.clone() else {
                continue;
            };
            let key = self.key(&sb_name);
            if !state.reservations.reserve(&key, Instant::now()) {
                continue;
            }
            attempts += 1;
            let mut current = candidate.clone();
            // One fresh read per candidate: a 409 from an unrelated write (e.g. the core
            // controller's status update) should not cost the member.
            for fresh_read in [false, true] {
                let patch = match adopt.patch_for(&current) {
                    Ok(Some(p)) => p,
                    Ok(None) => break,
                    Err(e) => {
                        state.reservations.release(&key);
                        return Ok(Taken::Done(Outcome::Failed(metadata_failure(e))));
                    }
                };
                // Right before the patch leaves, after every await of this pass (the legacy
                // policy's delete, earlier candidates, the fresh read).
                let check = self.may_take(&sb_name);
                if check != TakeCheck::Send {
                    state.reservations.release(&key);
                    return Ok(Taken::Abandoned(check));
                }
                let write = tracing::info_span!(
                    "adoptSandbox",
                    sandbox.name = %sb_name,
                    attempt = attempts,
                    fresh_read,
                    error.reason = tracing::field::Empty,
                );
                let written = self
                    .sandboxes()
                    .patch(&sb_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .instrument(write.clone())
                    .await;
                match written {
                    Ok(Lean(adopted)) => {
                        state.own_writes.record(&adopted.metadata);
                        state.ledger.bind(&self.o.uid, &sb_name, Instant::now());
                        let was_ready = current
                            .status
                            .as_ref()
                            .is_some_and(|s| api_types::conditions::is_true(&s.conditions, READY));
                        let pool = controlling_pool(&current.metadata)
                            .map(|o| o.name.clone())
                            .unwrap_or_else(|| "none".into());
                        self.count_creation(
                            &adopted,
                            "warm",
                            pool.clone(),
                            if was_ready { "ready" } else { "not_ready" },
                        );
                        tracing::info!(
                            sandbox = %key,
                            claim.resource_version = self.claim_version(),
                            "adopted warm pool Sandbox"
                        );
                        return Ok(Taken::Done(Outcome::Bound {
                            sandbox: Arc::new(adopted),
                            how: How::Adopted { pool, was_ready },
                        }));
                    }
                    Err(e) if is_conflict(&e) || is_not_found(&e) => {
                        write.record(
                            "error.reason",
                            if is_conflict(&e) {
                                "Conflict"
                            } else {
                                "NotFound"
                            },
                        );
                        state.ledger.count_adoption_conflict(&self.o.uid);
                        if fresh_read {
                            break;
                        }
                        match self.sandboxes().get_opt(&sb_name).await {
                            Ok(Some(Lean(fresh))) if is_member(&fresh, &pool_ref) => {
                                current = Arc::new(fresh);
                            }
                            Ok(_) => break,
                            Err(e) => {
                                state.reservations.release(&key);
                                return Err(Error::kube(format!("get Sandbox {key}"), e));
                            }
                        }
                    }
                    Err(e) => {
                        write.record("error.reason", "APIError");
                        state.reservations.release(&key);
                        return Err(Error::kube(format!("adopt Sandbox {key}"), e));
                    }
                }
            }
            state.reservations.release(&key);
        }
        Ok(Taken::None)
    }

    async fn create(&self, sandbox: Sandbox, pool: String) -> Result<Stepped, Error> {
        let name = sandbox.metadata.name.clone().unwrap_or_default();
        let check = self.may_take(&name);
        if check != TakeCheck::Send {
            return Ok(Stepped::Abandoned(check));
        }
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let write = tracing::info_span!(
            "createSandbox",
            sandbox.name = %name,
            sandbox.template = template_of(Some(&sandbox)).unwrap_or_default(),
            error.reason = tracing::field::Empty,
        );
        let created = self
            .sandboxes()
            .create(&params, &Lean(sandbox))
            .instrument(write.clone())
            .await;
        match created {
            Ok(Lean(created)) => {
                self.ctx.claim.own_writes.record(&created.metadata);
                self.ctx
                    .claim
                    .ledger
                    .bind(&self.o.uid, &name, Instant::now());
                self.count_creation(&created, "cold", pool.clone(), "not_ready");
                tracing::info!(
                    sandbox = %self.key(&name),
                    claim.resource_version = self.claim_version(),
                    "created cold Sandbox"
                );
                Ok(Stepped::Done(Outcome::Bound {
                    sandbox: Arc::new(created),
                    how: How::Created { pool },
                }))
            }
            Err(e) if is_already_exists(&e) => {
                write.record("error.reason", "AlreadyExists");
                Ok(Stepped::Done(Outcome::Failed(Failure::CreatePending)))
            }
            Err(e) => {
                write.record("error.reason", "APIError");
                Ok(Stepped::Done(Outcome::Failed(Failure::Reconciler(
                    format!("sandbox create error: {e}"),
                ))))
            }
        }
    }

    async fn delete_expired(&self, sb: Arc<Sandbox>) -> Result<Outcome, Error> {
        let name = sb.metadata.name.clone().unwrap_or_default();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: sb.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.sandboxes().delete(&name, &params).await {
            Ok(_) => Ok(Outcome::Bound {
                sandbox: sb,
                how: How::Kept,
            }),
            Err(e) if is_not_found(&e) => Ok(Outcome::Missing { name: None }),
            Err(e) => Ok(Outcome::Failed(Failure::Reconciler(format!(
                "failed to delete sandbox: {e}"
            )))),
        }
    }

    /// Adds `stamp` to the claim's annotations; `None` when the claim is gone.
    async fn stamp(
        &self,
        stamp: &BTreeMap<String, String>,
    ) -> Result<Option<Arc<SandboxClaim>>, Error> {
        // The UID guards against a namesake created since the pass read the claim.
        let patch = json!({"metadata": {"uid": self.o.uid, "annotations": stamp}});
        let ledger = &self.ctx.claim.ledger;
        ledger.sending(&self.o.uid);
        let result = self
            .claims()
            .patch(&self.o.name, &PatchParams::default(), &Patch::Merge(&patch))
            .instrument(tracing::info_span!("stampClaimAnnotations"))
            .await;
        let stored = result.as_ref().ok().map(|Lean(c)| Arc::new(c.clone()));
        ledger.sent(&self.o.uid, stored.clone(), Instant::now());
        match result {
            Ok(Lean(stamped)) => {
                self.ctx.claim.own_writes.record(&stamped.metadata);
                ledger.first_seen_stamped(&self.o.uid);
                Ok(stored)
            }
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(None),
            Err(e) => Err(Error::kube(
                format!(
                    "stamp annotations of SandboxClaim {}",
                    self.key(&self.o.name)
                ),
                e,
            )),
        }
    }

    async fn status(&self, rv: Option<&str>, next: &SandboxClaimStatus) -> Result<Written, Error> {
        let patch = claim_status_patch(rv, next);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let ledger = &self.ctx.claim.ledger;
        ledger.sending(&self.o.uid);
        let result = self
            .claims()
            .patch_status(&self.o.name, &params, &Patch::Merge(&patch))
            .instrument(tracing::info_span!("updateClaimStatus"))
            .await;
        ledger.sent(
            &self.o.uid,
            result.as_ref().ok().map(|Lean(c)| Arc::new(c.clone())),
            Instant::now(),
        );
        match result {
            Ok(_) => Ok(Written::Stored),
            // A newer claim than the one the pass worked from.
            Err(e) if is_conflict(&e) => {
                ledger.stale(&self.o.uid);
                Ok(Written::Stale)
            }
            Err(e) if is_not_found(&e) => Ok(Written::Gone),
            Err(e) => Err(Error::kube(
                format!("patch status of SandboxClaim {}", self.key(&self.o.name)),
                e,
            )),
        }
    }

    /// Publishes an Event about the claim; failures are logged, never fatal.
    async fn event(&self, event: &ClaimEvent) {
        crate::context::Context::event(
            self.ctx.claim_recorder.as_ref(),
            self.o.claim.as_ref(),
            event.type_,
            event.reason,
            event.action,
            event.note.clone(),
        )
        .await;
    }

    fn count_creation(&self, sandbox: &Sandbox, launch_type: &str, pool: String, pod: &str) {
        self.ctx
            .claim
            .metrics
            .claim_creation
            .get_or_create(&ClaimCreationLabels {
                namespace: self.o.namespace.clone(),
                sandbox_template: template_of(Some(sandbox))
                    .unwrap_or(UNKNOWN_TEMPLATE)
                    .to_owned(),
                launch_type: launch_type.into(),
                warmpool_name: pool,
                pod_condition: pod.into(),
                created_by: normalize_created_by(claim_created_by(&self.o.claim)).into(),
            })
            .inc();
    }

    /// At the claim's first Ready (once per claim and process): the latency metrics (until the
    /// Ready status was stored) and the claim's `claim-to-bound` span (ending at the claim's
    /// `claim-first-ready-at`, the moment the pass found it Ready).
    fn first_ready(
        &self,
        first: Option<FirstReady>,
        status: &SandboxClaimStatus,
        sandbox: Option<&Sandbox>,
        annotations: &BTreeMap<String, String>,
        trace: &ClaimTrace,
    ) {
        let Some(first) = first else { return };
        if !self.ctx.claim.ledger.mark_ready_recorded(&self.o.uid) {
            return;
        }
        let end = match first {
            FirstReady::Transition { at } => {
                self.record_latencies(annotations, sandbox, Timestamp::now());
                at
            }
            FirstReady::Backfill { at } => at,
        };
        if status.sandbox.name.is_empty() {
            return;
        }
        let created_by = normalize_created_by(claim_created_by(&self.o.claim));
        trace.emit_bound(
            &self.o.claim,
            &Bound {
                sandbox: &status.sandbox.name,
                template: template_of(sandbox).unwrap_or(UNKNOWN_TEMPLATE),
                launch_type: launch_type_of(sandbox),
                created_by,
            },
            self.ctx.claim.ledger.take_progress(&self.o.uid),
            std::time::SystemTime::from(end),
        );
    }

    fn record_latencies(
        &self,
        annotations: &BTreeMap<String, String>,
        sandbox: Option<&Sandbox>,
        ready_at: Timestamp,
    ) {
        let launch_type = launch_type_of(sandbox);
        let template = template_of(sandbox).unwrap_or(UNKNOWN_TEMPLATE).to_owned();
        let labels = StartupLabels {
            launch_type: launch_type.into(),
            sandbox_template: template.clone(),
        };
        let since = |ts: Timestamp| -> Option<f64> {
            let ms = ready_at.as_millisecond() - ts.as_millisecond();
            (ms >= 0).then_some(ms as f64)
        };
        let parsed = |key: &str| {
            annotations
                .get(key)
                .and_then(|v| v.parse::<Timestamp>().ok())
        };
        let metrics = &self.ctx.claim.metrics;
        if let Some(ms) = parsed(WEBHOOK_FIRST_OBSERVED_AT_ANNOTATION).and_then(since) {
            metrics
                .claim_startup_latency
                .get_or_create(&labels)
                .observe(ms, current_trace_exemplar(), None);
        }
        let observed = parsed(CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION).unwrap_or(self.o.first_seen);
        if let Some(ms) = since(observed) {
            metrics
                .controller_startup_latency
                .get_or_create(&labels)
                .observe(ms, current_trace_exemplar(), None);
        }
        if let Some(ms) = parsed(CLIENT_FIRST_REQUESTED_AT_ANNOTATION).and_then(since) {
            metrics
                .client_startup_latency
                .get_or_create(&labels)
                .observe(ms, current_trace_exemplar(), None);
        }
        if let Some(sb) = sandbox
            && let (Some(ready), Some(created)) = (
                sb.status
                    .as_ref()
                    .and_then(|s| find_condition(&s.conditions, READY))
                    .filter(|c| c.status == STATUS_TRUE),
                sb.metadata.creation_timestamp.as_ref(),
            )
        {
            let ms = ready.last_transition_time.0.as_millisecond() - created.0.as_millisecond();
            if ms >= 0 {
                metrics
                    .creation_latency
                    .get_or_create(&CreationLatencyLabels {
                        namespace: self.o.namespace.clone(),
                        launch_type: launch_type.into(),
                        sandbox_template: template,
                    })
                    .observe(ms as f64, current_trace_exemplar(), None);
            }
        }
    }
}

/// The guarded merge patch of a claim's status: the resourceVersion it is guarded by, the
/// conditions and the bound Sandbox, `null` for what must be cleared. Serialized straight from
/// the status it borrows (no intermediate `serde_json::Value` tree).
pub fn claim_status_patch<'a>(
    resource_version: Option<&'a str>,
    next: &'a SandboxClaimStatus,
) -> ClaimStatusPatch<'a> {
    ClaimStatusPatch {
        metadata: GuardedMetadata { resource_version },
        status: ClaimStatusFields {
            conditions: (!next.conditions.is_empty()).then_some(next.conditions.as_slice()),
            sandbox: ClaimSandboxFields {
                name: (!next.sandbox.name.is_empty()).then_some(next.sandbox.name.as_str()),
                pod_ips: (!next.sandbox.pod_ips.is_empty())
                    .then_some(next.sandbox.pod_ips.as_slice()),
            },
        },
    }
}

/// See [`claim_status_patch`]; `None` is written as `null`.
#[derive(Debug, serde::Serialize)]
pub struct ClaimStatusPatch<'a> {
    metadata: GuardedMetadata<'a>,
    status: ClaimStatusFields<'a>,
}

#[derive(Debug, serde::Serialize)]
struct GuardedMetadata<'a> {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<&'a str>,
}

#[derive(Debug, serde::Serialize)]
struct ClaimStatusFields<'a> {
    conditions: Option<&'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]>,
    sandbox: ClaimSandboxFields<'a>,
}

#[derive(Debug, serde::Serialize)]
struct ClaimSandboxFields<'a> {
    name: Option<&'a str>,
    #[serde(rename = "podIPs")]
    pod_ips: Option<&'a [String]>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use serde_json::Value;

    /// The body as it was built before it was serialized directly (the oracle).
    fn as_value_tree(rv: Option<&str>, next: &SandboxClaimStatus) -> Value {
        let sandbox = json!({
            "name": if next.sandbox.name.is_empty() { Value::Null } else { json!(next.sandbox.name) },
            "podIPs": if next.sandbox.pod_ips.is_empty() { Value::Null } else { json!(next.sandbox.pod_ips) },
        });
        json!({
            "metadata": {"resourceVersion": rv.map(str::to_owned)},
            "status": {
                "conditions": if next.conditions.is_empty() { Value::Null } else { json!(next.conditions) },
                "sandbox": sandbox,
            },
        })
    }

    #[test]
    fn the_serialized_status_patch_is_the_value_tree_it_replaced() {
        let mut rng = fastrand::Rng::with_seed(9);
        let word = |rng: &mut fastrand::Rng| -> String {
            match rng.u8(..4) {
                0 => String::new(),
                1 => "a \"quoted\" \\ value".into(),
                2 => "ünïcode-\u{1F600}".into(),
                _ => format!("v{}", rng.u32(..)),
            }
        };
        for _ in 0..500 {
            let next = SandboxClaimStatus {
                conditions: (0..rng.usize(..3))
                    .map(|i| Condition {
                        type_: ["Ready", "Finished", "Other"][i].into(),
                        status: ["True", "False", "Unknown"][rng.usize(..3)].into(),
                        reason: word(&mut rng),
                        message: word(&mut rng),
                        last_transition_time: Time(
                            Timestamp::from_second(rng.i64(0..1_000_000)).unwrap(),
                        ),
                        observed_generation: rng.bool().then(|| rng.i64(..)),
                    })
                    .collect(),
                sandbox: api_types::ClaimSandboxStatus {
                    name: word(&mut rng),
                    pod_ips: (0..rng.usize(..3)).map(|_| word(&mut rng)).collect(),
                },
            };
            let rv = rng.bool().then(|| word(&mut rng));
            assert_eq!(
                serde_json::to_value(claim_status_patch(rv.as_deref(), &next)).unwrap(),
                as_value_tree(rv.as_deref(), &next),
                "{next:?}"
            );
        }
    }
}
