//! SandboxTemplate reconcile: stamp the template-ref-hash label on the template, then make the
//! shared NetworkPolicy match the template (or delete ours when Unmanaged).
//!
//! Writes: the label (a merge patch); the policy's create (a plain create, so it fails on a
//! policy of that name instead of taking it over); its updates (server-side apply of the spec
//! and owner reference under the field manager `extensions-controller`, guarded by the
//! resourceVersion the pass found to be the template's). When the policy cannot be made (a
//! foreign policy holds its name, or the API refuses it), the failure is kept in
//! [`super::state::TemplateState`] and told in a Warning Event; claims hand out no Sandbox of
//! the template meanwhile (`claim::observe::Policy`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use api_types::keys::SANDBOX_TEMPLATE_REF_HASH_LABEL;
use api_types::{NetworkPolicyManagement, SandboxTemplate, name_hash};
use controller_common::runner::Action;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use tracing::Instrument;

use super::network_policy::{desired_spec, policy_name};
use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, api_status, is_already_exists, is_conflict, is_not_found};
use crate::ownership::{controller_ref, is_controlled_by};

pub const CONTROLLER_NAME: &str = "sandboxtemplate";

fn key(template: &SandboxTemplate) -> String {
    format!(
        "{}/{}",
        template.metadata.namespace.as_deref().unwrap_or_default(),
        template.metadata.name.as_deref().unwrap_or_default()
    )
}

pub async fn reconcile(template: Arc<SandboxTemplate>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.is_synced() {
        return Ok(Action::requeue(crate::context::SYNC_RECHECK));
    }
    let started = Instant::now();
    let span = tracing::info_span!("ReconcileSandboxTemplate", template = %key(&template));
    let result = reconcile_inner(&template, &ctx).instrument(span).await;
    ctx.observe(CONTROLLER_NAME, started, &result);
    if result.is_ok() {
        ctx.succeeded(&key(&template));
    }
    result
}

pub fn error_policy(template: Arc<SandboxTemplate>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(template = %key(&template), error = %error, "SandboxTemplate reconcile failed");
    Action::requeue(ctx.backoff(&key(&template)))
}

async fn reconcile_inner(template: &SandboxTemplate, ctx: &Context) -> Result<Action, Error> {
    let missing = |field| Error::MissingMetadata {
        kind: "SandboxTemplate",
        field,
    };
    let name = template.metadata.name.as_deref().ok_or(missing("name"))?;
    let namespace = template
        .metadata
        .namespace
        .as_deref()
        .ok_or(missing("namespace"))?;
    let uid = template.metadata.uid.as_deref().ok_or(missing("uid"))?;

    let hash = name_hash(name);
    let deleting = template.metadata.deletion_timestamp.is_some();
    let labelled = template
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SANDBOX_TEMPLATE_REF_HASH_LABEL))
        == Some(&hash);
    if !deleting && !labelled {
        let api = Api::<SandboxTemplate>::namespaced(ctx.client.clone(), namespace);
        let patch = json!({"metadata": {"labels": {SANDBOX_TEMPLATE_REF_HASH_LABEL: hash}}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => {
                return Err(Error::kube(
                    format!("label SandboxTemplate {namespace}/{name}"),
                    e,
                ));
            }
        }
    }
    if deleting {
        return Ok(Action::await_change());
    }

    let np_name = policy_name(name);
    let np_key = format!("{namespace}/{np_name}");
    let existing = ctx
        .stores
        .policies
        .get(&ObjectRef::new(&np_name).within(namespace));
    let api = Api::<NetworkPolicy>::namespaced(ctx.client.clone(), namespace);

    if template.spec.network_policy_management == NetworkPolicyManagement::Unmanaged {
        ctx.template.succeeded(namespace, name);
        if let Some(np) = existing {
            if is_controlled_by(&np.metadata, uid) {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: np.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match api.delete(&np_name, &params).await {
                    Ok(_) => {
                        tracing::info!(policy = %np_key, "deleted the NetworkPolicy of an Unmanaged template")
                    }
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(Error::kube(format!("delete NetworkPolicy {np_key}"), e)),
                }
            } else {
                tracing::info!(policy = %np_key, "leaving a NetworkPolicy this template does not own");
            }
        }
        return Ok(Action::await_change());
    }

    let desired = desired_spec(name, &template.spec);
    match existing {
        Some(np) if !is_controlled_by(&np.metadata, uid) => {
            let message = format!(
                "refusing to update NetworkPolicy {np_name:?} as it is not controlled by SandboxTemplate {name:?}; rename or delete it, or set networkPolicyManagement: Unmanaged. No Sandbox of this template is handed out until its policy is in place"
            );
            tracing::warn!(policy = %np_key, "{message}");
            // Claims read the conflict from the cache themselves; this is for the Event.
            if ctx.template.failed(namespace, name, message.clone()) {
                Context::event(
                    ctx.template_recorder.as_ref(),
                    template,
                    EventType::Warning,
                    "NetworkPolicyConflict",
                    "Reconciling",
                    message,
                )
                .await;
            }
            Ok(Action::await_change())
        }
        Some(np) => {
            if ctx.template.in_place(&np_key, &np, &desired) {
                ctx.template.succeeded(namespace, name);
                return Ok(Action::await_change());
            }
            // Server-side apply of the fields this controller owns, guarded by the version
            // just checked to be the template's (an apply never lands on someone else's).
            let applied = NetworkPolicy {
                metadata: ObjectMeta {
                    name: Some(np_name.clone()),
                    namespace: Some(namespace.to_owned()),
                    resource_version: np.metadata.resource_version.clone(),
                    owner_references: controller_ref(template).map(|r| vec![r]),
                    ..ObjectMeta::default()
                },
                spec: Some(desired.clone()),
            };
            match api
                .patch(
                    &np_name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&applied),
                )
                .await
            {
                Ok(stored) => {
                    ctx.template.succeeded(namespace, name);
                    remember(ctx, np_key, &stored, desired);
                    Ok(Action::await_change())
                }
                Err(e) if is_conflict(&e) => Ok(Action::requeue(Duration::from_millis(200))),
                Err(e) => {
                    // Until the policy carries the template's rules, its claims get nothing
                    // (fail closed: the rules in force may be looser than the ones asked for).
                    let why = format!("applying the template's rules to it failed: {e}");
                    policy_failed(ctx, template, &why, &e, &format!(
                        "cannot apply the template's rules to NetworkPolicy {np_name:?}: {e}; no Sandbox of this template is handed out until it carries them"
                    ))
                    .await;
                    Err(Error::kube(format!("apply NetworkPolicy {np_key}"), e))
                }
            }
        }
        None => {
            // A create, not an apply: it fails on a policy of that name the cache has not
            // shown yet instead of taking someone else's over.
            let np = NetworkPolicy {
                metadata: ObjectMeta {
                    name: Some(np_name.clone()),
                    namespace: Some(namespace.to_owned()),
                    owner_references: controller_ref(template).map(|r| vec![r]),
                    ..ObjectMeta::default()
                },
                spec: Some(desired.clone()),
            };
            match api
                .create(
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.into()),
                        ..PostParams::default()
                    },
                    &np,
                )
                .await
            {
                Ok(stored) => {
                    ctx.template.succeeded(namespace, name);
                    remember(ctx, np_key, &stored, desired);
                    Ok(Action::await_change())
                }
                // Our cache has not seen it yet; look again once it has.
                Err(e) if is_already_exists(&e) => Ok(Action::requeue(Duration::from_millis(500))),
                Err(e) => {
                    let why = format!("creating it failed: {e}");
                    policy_failed(ctx, template, &why, &e, &format!(
                        "cannot create NetworkPolicy {np_name:?}: {e}; no Sandbox of this template is handed out until it exists"
                    ))
                    .await;
                    Err(Error::kube(format!("create NetworkPolicy {np_key}"), e))
                }
            }
        }
    }
}

/// Records why the template's policy is not in place (claims of the template say it and get
/// nothing: fail closed); a refusal the user must fix (4xx) is also a Warning Event on the
/// template, once per distinct reason.
async fn policy_failed(
    ctx: &Context,
    template: &SandboxTemplate,
    why: &str,
    error: &kube::Error,
    note: &str,
) {
    let namespace = template.metadata.namespace.as_deref().unwrap_or_default();
    let name = template.metadata.name.as_deref().unwrap_or_default();
    let user_error = api_status(error).is_some_and(|c| (400..500).contains(&c));
    if ctx.template.failed(namespace, name, why.to_owned()) && user_error {
        Context::event(
            ctx.template_recorder.as_ref(),
            template,
            EventType::Warning,
            "NetworkPolicyFailed",
            "Reconciling",
            note.to_owned(),
        )
        .await;
    }
}

fn remember(
    ctx: &Context,
    key: String,
    stored: &NetworkPolicy,
    desired: k8s_openapi::api::networking::v1::NetworkPolicySpec,
) {
    if let Some(rv) = stored.metadata.resource_version.clone() {
        ctx.template.remember_written(key, rv, desired);
    }
}
