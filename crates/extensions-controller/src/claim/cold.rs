//! The cold path: a Sandbox named after the claim, built from the pool's template with the
//! claim's policies applied.

use std::collections::BTreeMap;

use api_types::keys::{
    CREATED_BY_LABEL, SANDBOX_ID_LABEL, SANDBOX_LAUNCH_TYPE_COLD, SANDBOX_LAUNCH_TYPE_LABEL,
    SANDBOX_POD_NAME_ANNOTATION, SANDBOX_TEMPLATE_REF_ANNOTATION, SANDBOX_TEMPLATE_REF_HASH_LABEL,
    TRACE_CONTEXT_ANNOTATION,
};
use api_types::{Sandbox, SandboxClaim, SandboxSpec, SandboxTemplate, name_hash};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::injection::{EnvError, inject_env, merge_volume_claim_templates};
use super::metadata::MetadataError;
use super::pod_metadata::{claim_created_by, desired_pod_metadata};
use crate::ownership::controller_ref;
use crate::template::apply_secure_defaults;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ColdError {
    #[error("{0}")]
    VolumeClaimTemplates(String),
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("claim has no name or uid")]
    Incomplete,
}

/// The cold Sandbox for `claim` from `template` (checks in the reference's order: volume claim
/// templates, metadata, env).
pub fn build_cold_sandbox(
    claim: &SandboxClaim,
    template: &SandboxTemplate,
    template_name: &str,
    allowed_domains: &[String],
) -> Result<Sandbox, ColdError> {
    let (Some(name), Some(uid), Some(owner)) = (
        claim.metadata.name.as_deref(),
        claim.metadata.uid.as_deref(),
        controller_ref(claim),
    ) else {
        return Err(ColdError::Incomplete);
    };
    let mut blueprint = template.spec.blueprint.clone();
    blueprint.volume_claim_templates = merge_volume_claim_templates(
        template.spec.volume_claim_templates_policy,
        &template.spec.blueprint.volume_claim_templates,
        &claim.spec.volume_claim_templates,
    )
    .map_err(ColdError::VolumeClaimTemplates)?;

    let mut labels = BTreeMap::from([
        (SANDBOX_ID_LABEL.to_owned(), uid.to_owned()),
        (
            SANDBOX_LAUNCH_TYPE_LABEL.to_owned(),
            SANDBOX_LAUNCH_TYPE_COLD.to_owned(),
        ),
        (
            SANDBOX_TEMPLATE_REF_HASH_LABEL.to_owned(),
            name_hash(template_name),
        ),
    ]);
    if let Some(created_by) = claim_created_by(claim) {
        labels.insert(CREATED_BY_LABEL.to_owned(), created_by.to_owned());
    }
    blueprint.pod_template.metadata = desired_pod_metadata(
        &template.spec.blueprint.pod_template.metadata,
        claim,
        uid,
        Some(template_name),
        allowed_domains,
    )?;
    inject_env(
        template.spec.env_vars_injection_policy,
        &mut blueprint.pod_template.spec,
        &claim.spec.env,
    )?;
    apply_secure_defaults(&template.spec, &mut blueprint.pod_template.spec);

    // The core controller names the Pod after the Sandbox and records it in `pod-name`; set
    // here, it needs no metadata patch of its own.
    let mut annotations = BTreeMap::from([
        (
            SANDBOX_TEMPLATE_REF_ANNOTATION.to_owned(),
            template_name.to_owned(),
        ),
        (SANDBOX_POD_NAME_ANNOTATION.to_owned(), name.to_owned()),
    ]);
    if let Some(trace) = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TRACE_CONTEXT_ANNOTATION))
    {
        annotations.insert(TRACE_CONTEXT_ANNOTATION.to_owned(), trace.clone());
    }
    Ok(Sandbox {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: claim.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: SandboxSpec {
            blueprint,
            ..SandboxSpec::default()
        },
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::{
        ClaimEnvVar, EnvVarsInjectionPolicy, SandboxClaimSpec, SandboxTemplateSpec, WarmPoolRef,
    };
    use k8s_openapi::api::core::v1::Container;

    fn template() -> SandboxTemplate {
        let mut t = SandboxTemplate::new("tmpl", SandboxTemplateSpec::default());
        t.spec.blueprint.pod_template.spec.containers = vec![Container {
            name: "main".into(),
            ..Container::default()
        }];
        t
    }

    fn claim() -> SandboxClaim {
        let mut c = SandboxClaim::new(
            "my-claim",
            SandboxClaimSpec {
                warm_pool_ref: WarmPoolRef {
                    name: "pool".into(),
                },
                ..Default::default()
            },
        );
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    #[test]
    fn cold_sandbox_is_named_after_the_claim_owned_and_secured() {
        let mut c = claim();
        c.metadata.annotations = Some(BTreeMap::from([(
            TRACE_CONTEXT_ANNOTATION.to_owned(),
            "ctx".to_owned(),
        )]));
        c.spec
            .additional_pod_metadata
            .labels
            .insert("sandbox.users.io/user-label".into(), "v".into());
        let sb = build_cold_sandbox(&c, &template(), "tmpl", &["sandbox.users.io".into()]).unwrap();
        assert_eq!(sb.metadata.name.as_deref(), Some("my-claim"));
        let labels = sb.metadata.labels.unwrap();
        assert_eq!(labels[SANDBOX_LAUNCH_TYPE_LABEL], "cold");
        assert_eq!(labels[SANDBOX_ID_LABEL], "uid-1");
        assert_eq!(labels[SANDBOX_TEMPLATE_REF_HASH_LABEL], name_hash("tmpl"));
        assert!(!labels.contains_key(CREATED_BY_LABEL));
        let annotations = sb.metadata.annotations.unwrap();
        assert_eq!(annotations[TRACE_CONTEXT_ANNOTATION], "ctx");
        assert_eq!(annotations[SANDBOX_TEMPLATE_REF_ANNOTATION], "tmpl");
        assert_eq!(annotations[SANDBOX_POD_NAME_ANNOTATION], "my-claim");
        assert_eq!(
            sb.metadata.owner_references.unwrap()[0].kind,
            "SandboxClaim"
        );
        let pod = sb.spec.blueprint.pod_template;
        assert_eq!(pod.metadata.labels["sandbox.users.io/user-label"], "v");
        assert_eq!(pod.spec.automount_service_account_token, Some(false));
        assert_eq!(pod.spec.dns_policy.as_deref(), Some("None"));
    }

    #[test]
    fn policy_errors_surface_by_kind() {
        let mut c = claim();
        c.spec.env = vec![ClaimEnvVar {
            name: "A".into(),
            value: "1".into(),
            container_name: String::new(),
        }];
        assert!(matches!(
            build_cold_sandbox(&c, &template(), "tmpl", &[]),
            Err(ColdError::Env(EnvError::Rejected(_)))
        ));
        let mut t = template();
        t.spec.env_vars_injection_policy = EnvVarsInjectionPolicy::Overrides;
        let sb = build_cold_sandbox(&c, &t, "tmpl", &[]).unwrap();
        assert_eq!(
            sb.spec.blueprint.pod_template.spec.containers[0]
                .env
                .as_ref()
                .unwrap()[0]
                .name,
            "A"
        );
        let mut bad = claim();
        bad.spec
            .additional_pod_metadata
            .labels
            .insert("nodomain".into(), "v".into());
        assert!(matches!(
            build_cold_sandbox(&bad, &template(), "tmpl", &[]),
            Err(ColdError::Metadata(MetadataError::Invalid { .. }))
        ));
    }
}
