//! The PVC and Service steps.

use std::sync::Arc;

use api_types::Sandbox;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;

use crate::context::{Context, FIELD_MANAGER};
use crate::desired::pvc::{desired_pvc, pvc_name};
use crate::desired::service::{desired_service, owned_service_repair, service_ports};
use crate::error::{Error, is_status};
use crate::ownership::{Ownership, controller_ref, describe_owner};

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

/// Creates the missing PVCs of `spec.volumeClaimTemplates` and refuses every existing one this
/// Sandbox does not own (it adopts nothing). Stops at the first error. PVCs are never deleted
/// here.
pub async fn reconcile_pvcs(sandbox: &Sandbox, ctx: &Context, hash: &str) -> Result<(), Error> {
    let templates = &sandbox.spec.blueprint.volume_claim_templates;
    if templates.is_empty() {
        return Ok(());
    }
    let ns = sandbox.namespace().unwrap_or_default();
    let sandbox_name = sandbox.name_any();
    let uid = sandbox.uid().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    for template in templates {
        let name = pvc_name(template, &sandbox_name);
        // The cache, or else a create of ours it does not show yet (`crate::created`).
        let cached = ctx
            .stores
            .pvcs
            .get(&ObjectRef::new(&name).within(&ns))
            .map(Arc::unwrap_or_clone)
            .or_else(|| ctx.created.pvcs.get(&ns, &name, &uid));
        let existing = match cached {
            Some(pvc) => pvc,
            None => {
                let pvc = desired_pvc(
                    template,
                    &sandbox_name,
                    &ns,
                    hash,
                    controller_ref(&sandbox_name, &uid),
                );
                match api.create(&post_params(), &pvc).await {
                    Ok(created) => {
                        ctx.created.pvcs.record(&created);
                        continue;
                    }
                    // Someone else's is refused below; ours is remembered as created.
                    Err(err) if is_status(&err, 409) => match api.get_opt(&name).await {
                        Ok(Some(pvc)) => {
                            if Ownership::of(&pvc.metadata, &uid).is_owned() {
                                ctx.created.pvcs.record(&pvc);
                            }
                            pvc
                        }
                        Ok(None) => continue,
                        Err(err) => {
                            return Err(Error::api(format!("failed to get PVC \"{name}\""), err));
                        }
                    },
                    Err(err) => {
                        return Err(Error::api(format!("failed to create PVC \"{name}\""), err));
                    }
                }
            }
        };
        match Ownership::of(&existing.metadata, &uid) {
            Ownership::OwnedBySandbox => {}
            Ownership::OwnedByOther(owner) => {
                return Err(Error::OwnedByOther {
                    kind: "PVC",
                    name,
                    owner: describe_owner(&owner),
                    sandbox: sandbox_name,
                });
            }
            Ownership::Unowned => {
                return Err(Error::NotAdoptable {
                    kind: "PVC",
                    name,
                    sandbox: sandbox_name,
                });
            }
        }
    }
    Ok(())
}

/// Manages the headless Service by the tri-state `spec.service`. Returns the Service's name when
/// one counts for this Sandbox.
pub async fn reconcile_service(
    sandbox: &Sandbox,
    ctx: &Context,
    hash: &str,
) -> Result<Option<String>, Error> {
    let ns = sandbox.namespace().unwrap_or_default();
    let name = sandbox.name_any();
    let uid = sandbox.uid().unwrap_or_default();
    let wanted = sandbox.spec.blueprint.service;
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    let desired_ports = service_ports(&sandbox.spec.blueprint.pod_template.spec);

    // The cache, or else a create of ours it does not show yet (`crate::created`).
    let cached = ctx
        .stores
        .services
        .get(&ObjectRef::new(&name).within(&ns))
        .map(Arc::unwrap_or_clone)
        .or_else(|| ctx.created.services.get(&ns, &name, &uid));
    let existing = match cached {
        Some(svc) => svc,
        None if wanted == Some(true) => {
            let svc = desired_service(
                &name,
                &ns,
                hash,
                desired_ports.clone(),
                controller_ref(&name, &uid),
            );
            match api.create(&post_params(), &svc).await {
                Ok(created) => {
                    ctx.created.services.record(&created);
                    return Ok(Some(name));
                }
                // Someone else's is refused below; ours is remembered as created.
                Err(err) if is_status(&err, 409) => match api.get_opt(&name).await {
                    Ok(Some(svc)) => {
                        if Ownership::of(&svc.metadata, &uid).is_owned() {
                            ctx.created.services.record(&svc);
                        }
                        svc
                    }
                    Ok(None) => return Ok(None),
                    Err(err) => {
                        return Err(Error::api(format!("failed to get service \"{name}\""), err));
                    }
                },
                Err(err) => {
                    return Err(Error::api(
                        format!("failed to create service \"{name}\""),
                        err,
                    ));
                }
            }
        }
        None => return Ok(None),
    };

    let ownership = Ownership::of(&existing.metadata, &uid);
    if wanted == Some(false) {
        if ownership.is_owned() {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => ctx.created.services.forget(&ns, &name),
                Err(err) if is_status(&err, 404) => ctx.created.services.forget(&ns, &name),
                Err(err) => {
                    return Err(Error::api(
                        format!("failed to delete service \"{name}\""),
                        err,
                    ));
                }
            }
        }
        return Ok(None);
    }
    match ownership {
        Ownership::OwnedByOther(owner) => Err(Error::OwnedByOther {
            kind: "service",
            name,
            owner: describe_owner(&owner),
            sandbox: sandbox.name_any(),
        }),
        Ownership::Unowned if wanted.is_none() => Ok(None),
        Ownership::Unowned => Err(Error::NotAdoptable {
            kind: "service",
            name,
            sandbox: sandbox.name_any(),
        }),
        Ownership::OwnedBySandbox => {
            if let Some(patch) = owned_service_repair(
                &existing,
                hash,
                desired_ports.as_ref(),
                wanted == Some(true),
            ) {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| {
                        Error::api(format!("failed to patch owned service \"{name}\""), e)
                    })?;
            }
            Ok(Some(name))
        }
    }
}
