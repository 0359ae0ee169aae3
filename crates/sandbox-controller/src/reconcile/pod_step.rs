//! The Pod step: find the backing Pod (owner UID first, then the `pod-name` annotation, then the
//! Sandbox name), repair metadata, create, or delete it on suspend. A Pod this Sandbox does not
//! own is never adopted (see `crate::ownership`).

use std::collections::BTreeMap;

use api_types::{OperatingMode, Sandbox};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::Instrument;

use controller_common::lean::{Lean, MetaOnly};

use crate::cached_pod::CachedPod;
use crate::cached_sandbox::CachedSandbox;
use crate::context::{Context, FIELD_MANAGER};
use crate::desired::pod::{
    desired_pod, desired_pod_metadata, desired_pod_with_spec, pod_metadata_patch, target_pod_name,
};
use crate::error::{Error, is_status};
use crate::keys::POD_NAME_ANNOTATION;
use crate::ownership::{Ownership, controller_ref, describe_owner};
use crate::pod_index::owned_pods;

/// What the Pod step settled on.
#[derive(Debug, Default)]
pub struct PodOutcome {
    /// The Pod that backs (or blocks) the Sandbox, with the metadata it now carries.
    pub pod: Option<Pod>,
    /// The Pod is controlled by this Sandbox.
    pub owned: bool,
    pub error: Option<Error>,
}

/// The desired value of the Sandbox's `pod-name` annotation after this pass.
enum PodNameAnnotation {
    Keep,
    Set(String),
    Clear,
}

/// `snapshot` is the cached object `sandbox` was made from: a Pod create takes the template's
/// spec from it when it still holds one (see `cached_sandbox`).
pub async fn reconcile_pod(
    sandbox: &Sandbox,
    snapshot: &CachedSandbox,
    ctx: &Context,
    hash: &str,
) -> PodOutcome {
    let mut annotation = PodNameAnnotation::Keep;
    let mut outcome = pod_pass(sandbox, snapshot, ctx, hash, &mut annotation).await;
    if let Err(err) = write_pod_name_annotation(sandbox, ctx, annotation).await
        && outcome.error.is_none()
    {
        outcome.error = Some(err);
    }
    outcome
}

/// Pod reads, decoded in the cached form (what a pass reads of a Pod: metadata, node, status).
fn pods_api(ctx: &Context, sandbox: &Sandbox) -> Api<CachedPod> {
    Api::namespaced(ctx.client.clone(), &sandbox.namespace().unwrap_or_default())
}

/// Pod writes whose response is not read (metadata patch, delete): only its metadata is decoded.
fn pod_writes_api(ctx: &Context, sandbox: &Sandbox) -> Api<MetaOnly<Pod>> {
    Api::namespaced(ctx.client.clone(), &sandbox.namespace().unwrap_or_default())
}

/// Creates `pod`; the response is decoded in the cached form (the created Pod's spec, the bulk
/// of the response, is stepped over).
async fn post_pod(
    ctx: &Context,
    sandbox: &Sandbox,
    pod: &Pod,
    params: &PostParams,
) -> Result<Pod, kube::Error> {
    let ns = sandbox.namespace().unwrap_or_default();
    let body = serde_json::to_vec(pod).map_err(kube::Error::SerdeError)?;
    let mut request = kube::core::Request::new(Pod::url_path(&(), Some(&ns)))
        .create(params, body)
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("create");
    let mut created: CachedPod = ctx.client.request(request).await?;
    created.slim();
    Ok(created.to_pod())
}

/// Reads a Pod by name from the cache, or else from this process's creates the cache does not
/// show yet (`crate::created`); with `confirm_miss`, a miss is confirmed with the API server (a
/// miss would clear the Sandbox's `pod-name` annotation).
async fn get_pod(
    ctx: &Context,
    sandbox: &Sandbox,
    name: &str,
    confirm_miss: bool,
) -> Result<Option<Pod>, Error> {
    let ns = sandbox.namespace().unwrap_or_default();
    if let Some(p) = ctx.stores.pods.get(&ObjectRef::new(name).within(&ns)) {
        return Ok(Some(p.to_pod()));
    }
    let uid = sandbox.uid().unwrap_or_default();
    if let Some(created) = ctx.created.pods.get(&ns, name, &uid) {
        return Ok(Some(created));
    }
    if !confirm_miss {
        return Ok(None);
    }
    pods_api(ctx, sandbox)
        .get_opt(name)
        .await
        .map(|pod| pod.map(|p| p.to_pod()))
        .map_err(|e| Error::api(format!("pod get failed for \"{name}\""), e))
}

async fn pod_pass(
    sandbox: &Sandbox,
    snapshot: &CachedSandbox,
    ctx: &Context,
    hash: &str,
    annotation: &mut PodNameAnnotation,
) -> PodOutcome {
    let ns = sandbox.namespace().unwrap_or_default();
    let uid = sandbox.uid().unwrap_or_default();
    let has_annotation = sandbox.annotations().contains_key(POD_NAME_ANNOTATION);

    // Owned candidates: same namespace, controlled by our UID (a label alone proves nothing).
    // Found through the owner-UID index, not by scanning every cached Pod; converted to a `Pod`
    // only when one of them becomes the pass's Pod.
    let owned = owned_pods(
        &ctx.stores.pod_index,
        &ctx.stores.pods,
        &ns,
        &uid,
        Some(hash),
    );

    let target = target_pod_name(sandbox);
    // An annotation naming the Sandbox itself (pool members get it at creation) points where
    // the default does: a cache miss then needs no confirming read and clears nothing (a Pod
    // this process created is observed through `ctx.created` until the cache shows it; one
    // someone else made answers the create with 409 and is read back there).
    let names_other_pod = has_annotation && target != sandbox.name_any();
    let mut pod = match get_pod(ctx, sandbox, &target, names_other_pod).await {
        Ok(p) => p,
        Err(err) => {
            return PodOutcome {
                error: Some(err),
                ..Default::default()
            };
        }
    };
    if pod.is_none() && names_other_pod {
        *annotation = PodNameAnnotation::Clear;
    }
    // The named Pod counts as one more owned Pod when we control it and the index did not
    // list it (the cache has not shown our ownership yet, or it came from the API server).
    let named_owned_extra = pod.as_ref().is_some_and(|p| {
        Ownership::of(&p.metadata, &uid).is_owned()
            && !owned.iter().any(|o| o.metadata.name == p.metadata.name)
    });
    let owned_count = owned.len() + usize::from(named_owned_extra);
    if owned_count > 1 {
        return PodOutcome {
            error: Some(Error::MultiplePods { count: owned_count }),
            ..Default::default()
        };
    }
    if let [only] = owned.as_slice()
        && pod
            .as_ref()
            .is_none_or(|p| p.metadata.name != only.metadata.name)
    {
        // The owner UID wins over a stale annotation.
        pod = Some(only.to_pod());
        if has_annotation {
            *annotation = PodNameAnnotation::Clear;
        }
    }

    if sandbox.spec.effective_operating_mode() == OperatingMode::Suspended {
        return suspend(sandbox, ctx, pod, &uid, annotation).await;
    }
    match pod {
        Some(p) => existing_pod(sandbox, ctx, hash, p, annotation).await,
        None => create_pod(sandbox, snapshot, ctx, hash, annotation).await,
    }
}

async fn suspend(
    sandbox: &Sandbox,
    ctx: &Context,
    pod: Option<Pod>,
    uid: &str,
    annotation: &mut PodNameAnnotation,
) -> PodOutcome {
    let Some(pod) = pod else {
        if sandbox.annotations().contains_key(POD_NAME_ANNOTATION) {
            *annotation = PodNameAnnotation::Clear;
        }
        return PodOutcome::default();
    };
    if !Ownership::of(&pod.metadata, uid).is_owned() {
        // Never delete what we do not own.
        if sandbox.annotations().contains_key(POD_NAME_ANNOTATION) {
            *annotation = PodNameAnnotation::Clear;
        }
        return PodOutcome {
            pod: Some(pod),
            owned: false,
            error: None,
        };
    }
    // Keep the annotation while the Pod terminates.
    *annotation = PodNameAnnotation::Keep;
    let mut error = None;
    if pod.metadata.deletion_timestamp.is_none() {
        let name = pod.name_any();
        match pod_writes_api(ctx, sandbox)
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => {
                ctx.created
                    .pods
                    .forget(&sandbox.namespace().unwrap_or_default(), &name);
                ctx.event(
                    sandbox,
                    EventType::Normal,
                    "Suspended",
                    "DeletePod",
                    format!("Deleted pod {name} to suspend the sandbox"),
                )
                .await;
            }
            // Already gone: the suspension is achieved.
            Err(err) if is_status(&err, 404) => {
                ctx.created
                    .pods
                    .forget(&sandbox.namespace().unwrap_or_default(), &name);
                return PodOutcome::default();
            }
            Err(err) => error = Some(Error::api(format!("failed to delete pod \"{name}\""), err)),
        }
    }
    PodOutcome {
        pod: Some(pod),
        owned: true,
        error,
    }
}

async fn existing_pod(
    sandbox: &Sandbox,
    ctx: &Context,
    hash: &str,
    mut pod: Pod,
    annotation: &mut PodNameAnnotation,
) -> PodOutcome {
    let uid = sandbox.uid().unwrap_or_default();
    let sandbox_name = sandbox.name_any();
    let pod_name = pod.name_any();
    match Ownership::of(&pod.metadata, &uid) {
        Ownership::OwnedByOther(owner) => {
            if sandbox.annotations().contains_key(POD_NAME_ANNOTATION) {
                *annotation = PodNameAnnotation::Clear;
            }
            return PodOutcome {
                error: Some(Error::OwnedByOther {
                    kind: "pod",
                    name: pod_name,
                    owner: describe_owner(&owner),
                    sandbox: sandbox_name,
                }),
                ..Default::default()
            };
        }
        Ownership::Unowned => {
            // Planted or orphaned: its labels (the tracking label, `adoptable`) prove nothing.
            tracing::warn!(
                sandbox = %format!("{}/{sandbox_name}", sandbox.namespace().unwrap_or_default()),
                pod = %pod_name,
                "refusing to adopt a Pod this Sandbox did not create"
            );
            return PodOutcome {
                error: Some(Error::NotAdoptable {
                    kind: "pod",
                    name: pod_name,
                    sandbox: sandbox_name,
                }),
                ..Default::default()
            };
        }
        Ownership::OwnedBySandbox => {}
    }
    if let Some(patch) = pod_metadata_patch(&pod.metadata, sandbox, hash) {
        let params = PatchParams::default();
        match pod_writes_api(ctx, sandbox)
            .patch(&pod_name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(written) => ctx.own_pod_writes.record(written.meta()),
            Err(err) => {
                return PodOutcome {
                    error: Some(Error::api(
                        format!("failed to patch pod \"{pod_name}\""),
                        err,
                    )),
                    ..Default::default()
                };
            }
        }
        // Reflect what was written in the copy used for status (and in the remembered create,
        // when the cache does not show the Pod yet).
        let (labels, annotations) = desired_pod_metadata(&pod.metadata, sandbox, hash);
        pod.metadata.labels = Some(labels);
        pod.metadata.annotations = Some(annotations);
        ctx.created.pods.refresh(&pod);
    }
    set_annotation_to(sandbox, annotation, &pod_name);
    PodOutcome {
        pod: Some(pod),
        owned: true,
        error: None,
    }
}

fn set_annotation_to(sandbox: &Sandbox, annotation: &mut PodNameAnnotation, pod_name: &str) {
    let current = sandbox
        .annotations()
        .get(POD_NAME_ANNOTATION)
        .map(String::as_str);
    *annotation = if current == Some(pod_name) {
        PodNameAnnotation::Keep
    } else {
        PodNameAnnotation::Set(pod_name.to_string())
    };
}

/// The template spec of `snapshot`, when it carries one (a Sandbox without status yet) and the
/// cache still holds that very snapshot. A newer one in the cache may have a changed template:
/// then `None`, and the create reads the Sandbox (as it does when no spec is cached).
fn cached_pod_spec(ctx: &Context, snapshot: &CachedSandbox) -> Option<PodSpec> {
    let text = snapshot.pending_pod_spec()?;
    let latest = ctx.stores.sandboxes.get(&snapshot.cache_key())?;
    if latest.metadata.resource_version != snapshot.metadata.resource_version
        || latest.metadata.uid != snapshot.metadata.uid
    {
        return None;
    }
    serde_json::from_str(text).ok()
}

async fn create_pod(
    sandbox: &Sandbox,
    snapshot: &CachedSandbox,
    ctx: &Context,
    hash: &str,
    annotation: &mut PodNameAnnotation,
) -> PodOutcome {
    let sandbox_name = sandbox.name_any();
    let owner = controller_ref(&sandbox_name, &sandbox.uid().unwrap_or_default());
    let pod = match cached_pod_spec(ctx, snapshot) {
        // Built from the object this pass reconciles: the spec was decoded from the same watch
        // event as the metadata and labels the Pod takes.
        Some(spec) => desired_pod_with_spec(sandbox, spec, hash, owner),
        None => match read_sandbox(sandbox, ctx).await {
            Ok(Some(full)) => desired_pod(&full, hash, owner),
            // Deleted (or replaced by a namesake) meanwhile: its own events take it from here.
            Ok(None) => return PodOutcome::default(),
            Err(err) => {
                return PodOutcome {
                    error: Some(err),
                    ..Default::default()
                };
            }
        },
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    };
    let created = post_pod(ctx, sandbox, &pod, &params)
        .instrument(tracing::info_span!("createPod", pod.name = %sandbox_name))
        .await;
    match created {
        Ok(created) => {
            ctx.own_pod_writes.record(&created.metadata);
            // Until the cache shows it, later passes observe it there (no second create).
            ctx.created.pods.record(&created);
            ctx.traces.pod_created(sandbox);
            tracing::info!(pod = %format!("{}/{}", sandbox.namespace().unwrap_or_default(), sandbox_name), "created pod");
            // No Event here, as in the reference: a creation is the normal path and an Event
            // would cost one API write per Sandbox (the Pod itself is the record).
            set_annotation_to(sandbox, annotation, &sandbox_name);
            PodOutcome {
                pod: Some(created),
                owned: true,
                error: None,
            }
        }
        Err(err) if is_status(&err, 409) => {
            // It exists although neither the cache nor `ctx.created` shows it (another replica
            // or an earlier process created it, or someone else did): read it back. Ours is
            // remembered like a create of this pass; any other is refused in `existing_pod`.
            match pods_api(ctx, sandbox).get_opt(&sandbox_name).await {
                Ok(Some(existing)) => {
                    let existing = existing.to_pod();
                    if Ownership::of(&existing.metadata, &sandbox.uid().unwrap_or_default())
                        .is_owned()
                    {
                        ctx.created.pods.record(&existing);
                    }
                    existing_pod(sandbox, ctx, hash, existing, annotation).await
                }
                Ok(None) => PodOutcome {
                    error: Some(Error::PodVanished(format!(
                        "pod \"{sandbox_name}\" not found"
                    ))),
                    ..Default::default()
                },
                Err(e) => PodOutcome {
                    error: Some(Error::PodVanished(e.to_string())),
                    ..Default::default()
                },
            }
        }
        Err(err) => PodOutcome {
            error: Some(Error::api(
                format!("failed to create pod \"{sandbox_name}\""),
                err,
            )),
            ..Default::default()
        },
    }
}

/// The whole Sandbox from the API server, for a create whose template spec the cache does not
/// hold (`None`: deleted or replaced by a namesake meanwhile).
async fn read_sandbox(sandbox: &Sandbox, ctx: &Context) -> Result<Option<Sandbox>, Error> {
    let name = sandbox.name_any();
    let api: Api<Lean<Sandbox>> =
        Api::namespaced(ctx.client.clone(), &sandbox.namespace().unwrap_or_default());
    match api.get_opt(&name).await {
        Ok(Some(Lean(read))) if read.uid() == sandbox.uid() => Ok(Some(read)),
        Ok(_) => Ok(None),
        Err(err) => Err(Error::api(
            format!("failed to read sandbox \"{name}\" to create its pod"),
            err,
        )),
    }
}

async fn write_pod_name_annotation(
    sandbox: &Sandbox,
    ctx: &Context,
    annotation: PodNameAnnotation,
) -> Result<(), Error> {
    let value = match annotation {
        PodNameAnnotation::Keep => return Ok(()),
        PodNameAnnotation::Set(name) => Some(name),
        PodNameAnnotation::Clear => None,
    };
    let patch = json!({ "metadata": { "annotations": BTreeMap::from([(POD_NAME_ANNOTATION, value.clone())]) } });
    let name = sandbox.name_any();
    let api: Api<MetaOnly<Sandbox>> =
        Api::namespaced(ctx.client.clone(), &sandbox.namespace().unwrap_or_default());
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(written) => {
            ctx.remember_pod_name(sandbox, written.resource_version(), value);
            Ok(())
        }
        Err(err) if is_status(&err, 404) => Ok(()),
        Err(err) => Err(Error::api(
            format!("failed to set pod name annotation on sandbox \"{name}\""),
            err,
        )),
    }
}

#[cfg(test)]
#[path = "pod_step_tests.rs"]
mod tests;
