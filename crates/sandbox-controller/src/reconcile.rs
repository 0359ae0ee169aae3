//! One Sandbox reconcile: observe (reflector stores), compute (pure `desired` and `status`
//! functions), write only the difference.
//!
//! Writes on the happy path of a new Sandbox (service unset): Pod create, one Sandbox metadata
//! patch (`pod-name` annotation), and one status patch when the Pod is Ready: status changes
//! that are only progress towards Ready (created, scheduled, running) are held for
//! `Settings::status_progress_window` and written only if the Pod is not Ready by then (see
//! `coalesce`). Status is never written when unchanged, a pass that runs before the watch
//! delivered our last status write starts from that write, and the controller ignores its own
//! status writes (the Sandbox watch is filtered to changes of generation, labels, annotations,
//! owner references and deletion).

mod children;
mod pod_step;

use std::sync::Arc;
use std::time::{Duration, Instant};

use api_types::{OperatingMode, Sandbox, SandboxStatus, ShutdownPolicy};
use controller_common::runner::Action;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::{Instrument, field};

use controller_common::lean::MetaOnly;

use crate::cached_sandbox::CachedSandbox;
use crate::context::Context;

/// How long a Sandbox whose Pod is not Ready waits for an event before it is looked at again.
///
/// Defence in depth only: Pod changes reach the reconciler through the Pod watch, including
/// those only a relist reveals (`triggers` emits them once the store holds them). This re-check
/// bounds the damage of a bug in that chain we do not know of, at a cost of one cache-only pass
/// per not-Ready Sandbox per interval (it writes nothing unless something changed).
const NOT_READY_RECHECK: Duration = Duration::from_secs(300);
use crate::error::{Error, is_status};
use crate::keys::{NAME_HASH_LABEL, name_hash};
use crate::metrics::CreationLatencyLabels;
use crate::ownership::Ownership;
use crate::pod_index::{foreign_labelled_pods, owned_pods};
use crate::status::{self, Expiry, Observation, ObservedPod, reason};

pub use pod_step::PodOutcome;

/// One pass over a Sandbox, as the reconcile loop (`controller_common::runner`) calls it.
pub async fn reconcile(cached: Arc<CachedSandbox>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let sandbox = cached.to_sandbox();
    let _worker = ctx.metrics.worker_started();
    let span = tracing::info_span!(
        "ReconcileSandbox",
        sandbox.name = sandbox.metadata.name.as_deref().unwrap_or_default(),
        sandbox.namespace = sandbox.metadata.namespace.as_deref().unwrap_or_default(),
        "agents.x-k8s.io/created-by" = field::Empty,
    );
    crate::tracing_context::attach_parent(&span, &sandbox, &ctx.traces);
    // The pass's state lives on the heap: the future the runtime moves around (into its task,
    // between queues) stays a few words instead of the whole pass (memmove was 7-11 % of the
    // process).
    let result = Box::pin(reconcile_sandbox(&sandbox, &cached, &ctx))
        .instrument(span)
        .await;
    let key = crate::context::memory_key(&sandbox);
    let label = match &result {
        Ok(_) => {
            ctx.reset_backoff(&key);
            "success"
        }
        Err(_) => "error",
    };
    ctx.metrics.observe_reconcile(
        label,
        result.as_ref().err().map(Error::metric_label),
        started.elapsed(),
    );
    result
}

/// Retry policy for a failed reconcile: exponential per Sandbox, starting from the error kind's
/// base delay, capped at five minutes, and never later than the Sandbox's `shutdownTime`.
pub fn error_policy(sandbox: Arc<CachedSandbox>, err: &Error, ctx: Arc<Context>) -> Action {
    let backoff = ctx.next_backoff(sandbox.object_ref(), err.retry_step(), err.base_backoff());
    let delay = match status::check_expiry(sandbox.spec.shutdown_time.as_ref(), Timestamp::now()) {
        Expiry::In(until_expiry) => backoff.min(until_expiry),
        _ => backoff,
    };
    tracing::warn!(
        sandbox = %format!("{}/{}", sandbox.namespace().unwrap_or_default(), sandbox.name_any()),
        error = %err,
        retry_in_ms = delay.as_millis() as u64,
        "reconcile failed"
    );
    Action::requeue(delay)
}

/// Sandbox writes (status patch, delete): of a response only the metadata is decoded (the new
/// resourceVersion is all a pass reads of it; the Pod template is stepped over).
fn sandbox_api(ctx: &Context, sandbox: &Sandbox) -> Api<MetaOnly<Sandbox>> {
    Api::namespaced(ctx.client.clone(), &sandbox.namespace().unwrap_or_default())
}

async fn reconcile_sandbox(
    cached: &Sandbox,
    snapshot: &CachedSandbox,
    ctx: &Context,
) -> Result<Action, Error> {
    let sandbox = &*ctx.with_own_writes(cached);
    if sandbox.metadata.deletion_timestamp.is_some() {
        // No finalizer: children go through garbage collection of their owner references.
        ctx.forget(sandbox);
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    match status::check_expiry(sandbox.spec.shutdown_time.as_ref(), now) {
        Expiry::Expired => expire(sandbox, ctx, now).await,
        expiry => {
            let key = crate::context::memory_key(sandbox);
            let current = ctx.base_status(sandbox);
            let (new_status, outcome) =
                reconcile_children(sandbox, snapshot, ctx, &current, now).await;
            let held = hold_progress(ctx, &key, &current, &new_status);
            if held.is_none() {
                write_status(sandbox, ctx, &current, &new_status).await?;
                ctx.progress.release(&key);
            }
            announce_new_error(sandbox, ctx, &current, &new_status).await;
            if outcome.multiple_pods
                && status::ready_condition_of(&current).map(|c| c.reason.as_str())
                    != Some(reason::MULTIPLE_PODS)
            {
                let msg = outcome
                    .errors
                    .iter()
                    .find(|e| matches!(e, Error::MultiplePods { .. }))
                    .map(ToString::to_string);
                ctx.event(
                    sandbox,
                    EventType::Warning,
                    reason::MULTIPLE_PODS,
                    "Reconciling",
                    msg.unwrap_or_default(),
                )
                .await;
            }
            if let Some(err) = outcome
                .errors
                .into_iter()
                .find(|e| !matches!(e, Error::MultiplePods { .. }))
            {
                return Err(err);
            }
            // A Sandbox still waiting for its Pod is looked at again after a while even without
            // an event (see NOT_READY_RECHECK).
            let waiting = status::ready_condition_of(&new_status)
                .is_some_and(|c| c.status != "True")
                && sandbox.spec.effective_operating_mode() != OperatingMode::Suspended;
            let wakeups = [
                // Wake up exactly at shutdownTime; no polling.
                match expiry {
                    Expiry::In(wait) => Some(wait),
                    _ => None,
                },
                waiting.then_some(NOT_READY_RECHECK),
                // Write the held progress when its window ends.
                held,
            ];
            Ok(match wakeups.into_iter().flatten().min() {
                Some(wait) => Action::requeue(wait),
                None => Action::await_change(),
            })
        }
    }
}

/// `Some(wait)` when the change from `current` to `desired` is only progress towards Ready and
/// its write is held back (see `coalesce`); `None` when it must be written now (or there is
/// nothing to write).
fn hold_progress(
    ctx: &Context,
    key: &ObjectRef<Sandbox>,
    current: &SandboxStatus,
    desired: &SandboxStatus,
) -> Option<Duration> {
    let window = ctx.settings.status_progress_window;
    if window.is_zero()
        || !status::needs_write(current, desired)
        || !crate::coalesce::is_progress_only(current, desired)
    {
        return None;
    }
    ctx.progress.hold(key.clone(), window, Instant::now())
}

/// A Warning event when Ready turns to `ReconcilerError` or its message changes (one event per
/// distinct error, not one per retry).
async fn announce_new_error(
    sandbox: &Sandbox,
    ctx: &Context,
    current: &SandboxStatus,
    new: &SandboxStatus,
) {
    let Some(ready) =
        status::ready_condition_of(new).filter(|c| c.reason == reason::RECONCILER_ERROR)
    else {
        return;
    };
    let before = status::ready_condition_of(current);
    if before.is_some_and(|c| c.reason == ready.reason && c.message == ready.message) {
        return;
    }
    ctx.event(
        sandbox,
        EventType::Warning,
        reason::RECONCILER_ERROR,
        "Reconciling",
        ready.message.clone(),
    )
    .await;
}

/// What one pass of child reconciliation produced, beyond the status.
#[derive(Default)]
struct PassOutcome {
    errors: Vec<Error>,
    multiple_pods: bool,
}

async fn reconcile_children(
    sandbox: &Sandbox,
    snapshot: &CachedSandbox,
    ctx: &Context,
    current: &SandboxStatus,
    now: Timestamp,
) -> (SandboxStatus, PassOutcome) {
    let hash = name_hash(&sandbox.name_any());
    let mut outcome = PassOutcome::default();

    if let Err(err) = children::reconcile_pvcs(sandbox, ctx, &hash)
        .instrument(tracing::info_span!("reconcilePVCs"))
        .await
    {
        outcome.errors.push(err);
    }
    let pod = pod_step::reconcile_pod(sandbox, snapshot, ctx, &hash)
        .instrument(tracing::info_span!("reconcilePod"))
        .await;
    let pod_step_failed = pod.error.is_some();
    if let Some(err) = pod.error {
        outcome.multiple_pods = matches!(err, Error::MultiplePods { .. });
        outcome.errors.push(err);
    }

    let mut new_status = current.clone();

    match &pod.pod {
        None => {
            new_status.pod_ips.clear();
            new_status.node_name.clear();
        }
        Some(p) => {
            new_status.label_selector = format!("{NAME_HASH_LABEL}={hash}");
            if pod.owned {
                new_status.pod_ips = status::pod_ips(p);
                new_status.node_name = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
            } else {
                new_status.pod_ips.clear();
                new_status.node_name.clear();
            }
        }
    }

    let mut service_present = false;
    if !outcome.multiple_pods {
        match children::reconcile_service(sandbox, ctx, &hash).await {
            Ok(Some(name)) => {
                new_status.service_fqdn = crate::desired::service::service_fqdn(
                    &name,
                    &sandbox.namespace().unwrap_or_default(),
                    &ctx.settings.cluster_domain,
                );
                new_status.service = name;
                service_present = true;
            }
            Ok(None) => {
                new_status.service.clear();
                new_status.service_fqdn.clear();
            }
            Err(err) => {
                // Leave the Service fields as they were; the error shows in Ready.
                service_present = !new_status.service.is_empty();
                outcome.errors.push(err);
            }
        }
    } else {
        service_present = !new_status.service.is_empty();
    }
    if service_present && let Some(err) = foreign_pods_selected(sandbox, ctx, &hash, &new_status) {
        outcome.errors.push(err);
    }

    let observation = Observation {
        generation: sandbox.metadata.generation,
        suspended: sandbox.spec.effective_operating_mode() == OperatingMode::Suspended,
        service_field: sandbox.spec.blueprint.service,
        pod: pod.pod.as_ref().map(|p| ObservedPod {
            pod: p,
            owned: pod.owned,
        }),
        pod_step_failed,
        errors: outcome.errors.iter().map(ToString::to_string).collect(),
        multiple_pods: outcome
            .errors
            .iter()
            .find(|e| matches!(e, Error::MultiplePods { .. }))
            .map(ToString::to_string),
        service_present,
    };
    new_status.conditions = status::merge_conditions(
        &current.conditions,
        status::compute_conditions(&observation),
        &[],
        now,
    );
    (new_status, outcome)
}

/// The Pods the Sandbox's Service selects (they carry its tracking label) although the Sandbox
/// did not create them, as an error: while they exist its traffic may reach them, so it is not
/// Ready (`docs/security.md`).
fn foreign_pods_selected(
    sandbox: &Sandbox,
    ctx: &Context,
    hash: &str,
    status: &SandboxStatus,
) -> Option<Error> {
    let ns = sandbox.namespace().unwrap_or_default();
    let uid = sandbox.uid().unwrap_or_default();
    let foreign = foreign_labelled_pods(&ctx.stores.pod_index, &ctx.stores.pods, &ns, &uid, hash);
    if foreign.is_empty() {
        return None;
    }
    let mut names: Vec<String> = foreign.iter().map(|p| p.name_any()).collect();
    names.sort();
    let pods = names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    tracing::warn!(
        sandbox = %format!("{ns}/{}", sandbox.name_any()),
        pods = %pods,
        "the Sandbox's Service selects Pods it did not create"
    );
    Some(Error::ForeignPodsSelected {
        service: status.service.clone(),
        hash: hash.to_owned(),
        pods,
    })
}

/// Writes `desired` on the status subresource when it differs from `current` (merge patch, no
/// precedence over a deleted Sandbox: NotFound is ignored).
async fn write_status(
    sandbox: &Sandbox,
    ctx: &Context,
    current: &SandboxStatus,
    desired: &SandboxStatus,
) -> Result<(), Error> {
    if !status::needs_write(current, desired) {
        return Ok(());
    }
    let api = sandbox_api(ctx, sandbox);
    let name = sandbox.name_any();
    match api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&status::status_patch(desired)),
        )
        .await
    {
        Ok(written) => {
            // Until the watch delivers this write, later passes start from it (no duplicate
            // write, no re-stamped transition times from a stale cached status).
            ctx.remember_written(
                sandbox,
                written.meta().resource_version.as_deref(),
                desired.clone(),
            );
        }
        Err(err) if is_status(&err, 404) => return Ok(()),
        Err(err) => {
            return Err(Error::api(
                format!("update status of sandbox \"{name}\""),
                err,
            ));
        }
    }
    if !status::is_ready(current) && status::is_ready(desired) {
        record_creation_latency(sandbox, ctx, desired);
        ctx.traces.pod_became_ready(sandbox);
    }
    Ok(())
}

/// `agent_sandbox_creation_latency_ms`: Ready's transition time minus the Sandbox's creation,
/// once per Sandbox per process.
fn record_creation_latency(sandbox: &Sandbox, ctx: &Context, status: &SandboxStatus) {
    let (Some(created), Some(ready)) = (
        sandbox.metadata.creation_timestamp.as_ref(),
        status::ready_condition_of(status),
    ) else {
        return;
    };
    let Ok(latency) = Duration::try_from(ready.last_transition_time.0.duration_since(created.0))
    else {
        return;
    };
    if !ctx.first_ready(&sandbox.uid().unwrap_or_default()) {
        return;
    }
    ctx.metrics.observe_creation_latency(
        CreationLatencyLabels {
            namespace: sandbox.namespace().unwrap_or_default(),
            launch_type: crate::metrics::launch_type(sandbox).to_string(),
            sandbox_template: crate::metrics::sandbox_template(sandbox),
        },
        latency,
    );
}

/// Expiry in one pass: for `Retain`, status reset to conditions only with
/// `Ready=False/SandboxExpired` (written first, so it is visible before the children go), then
/// every owned Pod and the owned Service deleted; for `Delete`, the children and then the Sandbox
/// itself. PVCs are left to garbage collection.
async fn expire(sandbox: &Sandbox, ctx: &Context, now: Timestamp) -> Result<Action, Error> {
    let policy = sandbox.spec.effective_shutdown_policy();
    let current = ctx.base_status(sandbox);
    let first_time = !status::is_marked_expired(&current);
    if policy == ShutdownPolicy::Retain {
        let desired = status::expired_status(&current, sandbox.metadata.generation, now);
        write_status(sandbox, ctx, &current, &desired).await?;
    }
    delete_owned_children(sandbox, ctx).await?;
    if policy == ShutdownPolicy::Delete {
        let name = sandbox.name_any();
        match sandbox_api(ctx, sandbox)
            .delete(&name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(err) if is_status(&err, 404) => {}
            Err(err) => {
                return Err(Error::api(
                    format!("delete expired sandbox \"{name}\""),
                    err,
                ));
            }
        }
    }
    if first_time {
        ctx.event(
            sandbox,
            EventType::Normal,
            reason::SANDBOX_EXPIRED,
            "Expire",
            format!("shutdownTime reached; shutdownPolicy {}", policy.as_str()),
        )
        .await;
    }
    Ok(Action::await_change())
}

/// Deletes every Pod this Sandbox controls (found by owner UID, whatever its name) and its owned
/// Service. Objects owned by others are never touched.
async fn delete_owned_children(sandbox: &Sandbox, ctx: &Context) -> Result<(), Error> {
    let ns = sandbox.namespace().unwrap_or_default();
    let uid = sandbox.uid().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    for pod in owned_pods(&ctx.stores.pod_index, &ctx.stores.pods, &ns, &uid, None) {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.name_any();
        match pods.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(err) if is_status(&err, 404) => {}
            Err(err) => return Err(Error::api(format!("delete pod \"{name}\""), err)),
        }
    }
    let svc_key = ObjectRef::<Service>::new(&sandbox.name_any()).within(&ns);
    if let Some(svc) = ctx.stores.services.get(&svc_key)
        && Ownership::of(&svc.metadata, &uid).is_owned()
    {
        let services: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
        match services
            .delete(&svc.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(err) if is_status(&err, 404) => {}
            Err(err) => {
                return Err(Error::api(
                    format!("delete service \"{}\"", svc.name_any()),
                    err,
                ));
            }
        }
    }
    Ok(())
}
