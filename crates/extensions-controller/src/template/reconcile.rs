//! SandboxTemplate reconcile: stamp the template-ref-hash label on the template, then make the
//! shared NetworkPolicy match the template (or delete ours when Unmanaged).

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
use crate::error::{Error, is_already_exists, is_not_found};
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
                "refusing to update NetworkPolicy {np_name:?} as it is not controlled by SandboxTemplate {name:?}; rename or delete it, or set networkPolicyManagement: Unmanaged"
            );
            tracing::warn!(policy = %np_key, "{message}");
            Context::event(
                ctx.template_recorder.as_ref(),
                template,
                EventType::Warning,
                "NetworkPolicyConflict",
                "Reconciling",
                message,
            )
            .await;
            Ok(Action::await_change())
        }
        Some(np) => {
            let written = ctx
                .policy_writes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&np_key)
                .cloned();
            let unchanged_since_our_write = written.as_ref().is_some_and(|(rv, spec)| {
                Some(rv.as_str()) == np.metadata.resource_version.as_deref() && *spec == desired
            });
            if np.spec.as_ref() == Some(&desired) || unchanged_since_our_write {
                return Ok(Action::await_change());
            }
            let mut updated = (*np).clone();
            updated.spec = Some(desired.clone());
            updated.metadata.managed_fields = None;
            match api
                .replace(
                    &np_name,
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.into()),
                        ..PostParams::default()
                    },
                    &updated,
                )
                .await
            {
                Ok(stored) => {
                    remember(ctx, np_key, &stored, desired);
                    Ok(Action::await_change())
                }
                Err(e) if e_is_conflict(&e) => Ok(Action::requeue(Duration::from_millis(200))),
                Err(e) => Err(Error::kube(format!("update NetworkPolicy {np_key}"), e)),
            }
        }
        None => {
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
                    remember(ctx, np_key, &stored, desired);
                    Ok(Action::await_change())
                }
                // Our cache has not seen it yet; look again once it has.
                Err(e) if is_already_exists(&e) => Ok(Action::requeue(Duration::from_millis(500))),
                Err(e) => Err(Error::kube(format!("create NetworkPolicy {np_key}"), e)),
            }
        }
    }
}

fn e_is_conflict(e: &kube::Error) -> bool {
    crate::error::is_conflict(e)
}

fn remember(
    ctx: &Context,
    key: String,
    stored: &NetworkPolicy,
    desired: k8s_openapi::api::networking::v1::NetworkPolicySpec,
) {
    if let Some(rv) = stored.metadata.resource_version.clone() {
        ctx.policy_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (rv, desired));
    }
}
