//! The ownership transfer of a warm pool member to a claim, as one JSON merge patch guarded by
//! the member's `resourceVersion`: the API server applies it only if nobody changed the member
//! since we read it, so of two claims racing for the same member exactly one wins (the other
//! gets 409 Conflict and tries another candidate).

use std::collections::BTreeMap;

use api_types::keys::{
    CREATED_BY_LABEL, DEPRECATED_SANDBOX_POD_TEMPLATE_HASH_LABEL, SAFE_TO_EVICT_ANNOTATION,
    SANDBOX_ID_LABEL, SANDBOX_LAUNCH_TYPE_LABEL, SANDBOX_LAUNCH_TYPE_WARM,
    SANDBOX_POD_NAME_ANNOTATION, SANDBOX_TEMPLATE_HASH_LABEL, SANDBOX_TEMPLATE_REF_HASH_LABEL,
    SANDBOX_WARM_POOL_LABEL, TRACE_CONTEXT_ANNOTATION,
};
use api_types::{PodMetadata, Sandbox, SandboxClaim, SandboxTemplate, name_hash};
use serde_json::{Map, Value, json};

use super::metadata::MetadataError;
use super::pod_metadata::{claim_created_by, desired_pod_metadata};
use crate::ownership::controller_ref;

/// Pool bookkeeping labels a claimed Sandbox no longer carries.
pub const POOL_ONLY_LABELS: [&str; 3] = [
    SANDBOX_WARM_POOL_LABEL,
    DEPRECATED_SANDBOX_POD_TEMPLATE_HASH_LABEL,
    SANDBOX_TEMPLATE_HASH_LABEL,
];

/// A merge-patch map turning `current` into `desired` (removed keys become `null`).
pub fn map_diff(
    current: &BTreeMap<String, String>,
    desired: &BTreeMap<String, String>,
) -> Map<String, Value> {
    let mut patch = Map::new();
    for key in current.keys().filter(|k| !desired.contains_key(*k)) {
        patch.insert(key.clone(), Value::Null);
    }
    for (key, value) in desired {
        if current.get(key) != Some(value) {
            patch.insert(key.clone(), Value::String(value.clone()));
        }
    }
    patch
}

/// The pod-template metadata a member gets when `claim` takes it.
pub fn adopted_pod_metadata(
    sandbox: &Sandbox,
    claim: &SandboxClaim,
    claim_uid: &str,
    template: Option<&SandboxTemplate>,
    template_name: &str,
    allowed_domains: &[String],
) -> Result<PodMetadata, MetadataError> {
    let base = match template {
        Some(t) => t.spec.blueprint.pod_template.metadata.clone(),
        None => {
            // Template gone: keep what the member has, minus the pool's additions.
            let mut meta = sandbox.spec.blueprint.pod_template.metadata.clone();
            for key in POOL_ONLY_LABELS {
                meta.labels.remove(key);
            }
            if meta
                .annotations
                .get(SAFE_TO_EVICT_ANNOTATION)
                .map(String::as_str)
                == Some("true")
            {
                meta.annotations.remove(SAFE_TO_EVICT_ANNOTATION);
            }
            meta
        }
    };
    desired_pod_metadata(
        &base,
        claim,
        claim_uid,
        Some(template_name),
        allowed_domains,
    )
}

/// The adoption patch. Fails only when the claim's metadata cannot be merged.
pub fn adoption_patch(
    sandbox: &Sandbox,
    claim: &SandboxClaim,
    template: Option<&SandboxTemplate>,
    template_name: &str,
    allowed_domains: &[String],
) -> Result<Option<Value>, MetadataError> {
    let (Some(claim_uid), Some(owner), Some(sandbox_name)) = (
        claim.metadata.uid.as_deref(),
        controller_ref(claim),
        sandbox.metadata.name.as_deref(),
    ) else {
        return Ok(None);
    };
    let current_labels = sandbox.metadata.labels.clone().unwrap_or_default();
    let mut labels = current_labels.clone();
    for key in POOL_ONLY_LABELS {
        labels.remove(key);
    }
    labels.insert(
        SANDBOX_LAUNCH_TYPE_LABEL.into(),
        SANDBOX_LAUNCH_TYPE_WARM.into(),
    );
    labels.insert(SANDBOX_ID_LABEL.into(), claim_uid.to_owned());
    labels
        .entry(SANDBOX_TEMPLATE_REF_HASH_LABEL.into())
        .or_insert_with(|| name_hash(template_name));
    match claim_created_by(claim) {
        Some(value) => labels.insert(CREATED_BY_LABEL.into(), value.to_owned()),
        None => labels.remove(CREATED_BY_LABEL),
    };

    let current_annotations = sandbox.metadata.annotations.clone().unwrap_or_default();
    let mut annotations = current_annotations.clone();
    annotations.insert(SANDBOX_POD_NAME_ANNOTATION.into(), sandbox_name.to_owned());
    if let Some(trace) = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TRACE_CONTEXT_ANNOTATION))
    {
        annotations.insert(TRACE_CONTEXT_ANNOTATION.into(), trace.clone());
    }

    let pod_meta = adopted_pod_metadata(
        sandbox,
        claim,
        claim_uid,
        template,
        template_name,
        allowed_domains,
    )?;
    let current_pod = &sandbox.spec.blueprint.pod_template.metadata;

    let mut metadata = Map::new();
    metadata.insert(
        "resourceVersion".into(),
        json!(sandbox.metadata.resource_version),
    );
    metadata.insert(
        "labels".into(),
        Value::Object(map_diff(&current_labels, &labels)),
    );
    metadata.insert(
        "annotations".into(),
        Value::Object(map_diff(&current_annotations, &annotations)),
    );
    metadata.insert("ownerReferences".into(), json!([owner]));
    Ok(Some(json!({
        "metadata": metadata,
        "spec": {"podTemplate": {"metadata": {
            "labels": map_diff(&current_pod.labels, &pod_meta.labels),
            "annotations": map_diff(&current_pod.annotations, &pod_meta.annotations),
        }}},
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warm_pool::blueprint::{TemplateFacts, blueprint_hash, build_member};
    use api_types::{
        SandboxClaimSpec, SandboxTemplateRef, SandboxTemplateSpec, SandboxWarmPool,
        SandboxWarmPoolSpec, WarmPoolRef,
    };
    use std::sync::Arc;

    fn template() -> SandboxTemplate {
        let mut t = SandboxTemplate::new("tmpl", SandboxTemplateSpec::default());
        t.metadata.namespace = Some("ns".into());
        t.spec
            .blueprint
            .pod_template
            .metadata
            .labels
            .insert("team".into(), "a".into());
        t
    }

    fn member(template: &SandboxTemplate) -> Sandbox {
        let mut pool = SandboxWarmPool::new(
            "pool",
            SandboxWarmPoolSpec {
                replicas: Some(1),
                sandbox_template_ref: SandboxTemplateRef {
                    name: "tmpl".into(),
                },
                update_strategy: None,
            },
        );
        pool.metadata.namespace = Some("ns".into());
        pool.metadata.uid = Some("pool-uid".into());
        let facts = TemplateFacts {
            blueprint_hash: blueprint_hash(&template.spec.blueprint),
            template: Arc::new(template.clone()),
        };
        let mut sb = build_member(&pool, &facts, true).unwrap();
        sb.metadata.name = Some("pool-abcde".into());
        sb.metadata.resource_version = Some("42".into());
        sb
    }

    fn claim(created_by: Option<&str>) -> SandboxClaim {
        let mut c = SandboxClaim::new(
            "c",
            SandboxClaimSpec {
                warm_pool_ref: WarmPoolRef {
                    name: "pool".into(),
                },
                ..Default::default()
            },
        );
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("claim-uid".into());
        if let Some(v) = created_by {
            c.metadata.labels = Some(BTreeMap::from([(
                CREATED_BY_LABEL.to_owned(),
                v.to_owned(),
            )]));
        }
        c.metadata.annotations = Some(BTreeMap::from([(
            TRACE_CONTEXT_ANNOTATION.to_owned(),
            "{\"traceparent\":\"00-abc-def-01\"}".to_owned(),
        )]));
        c
    }

    /// Applies a JSON merge patch the way the API server does (RFC 7386).
    fn apply(target: &mut Value, patch: &Value) {
        json_patch::merge(target, patch);
    }

    fn adopted(created_by: Option<&str>, with_template: bool) -> Sandbox {
        let t = template();
        let sb = member(&t);
        let patch = adoption_patch(
            &sb,
            &claim(created_by),
            with_template.then_some(&t),
            "tmpl",
            &["sandbox.users.io".into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            patch["metadata"]["resourceVersion"], "42",
            "the patch is guarded"
        );
        let mut value = serde_json::to_value(&sb).unwrap();
        apply(&mut value, &patch);
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn ownership_moves_to_the_claim_and_pool_labels_go() {
        let sb = adopted(None, true);
        let owners = sb.metadata.owner_references.unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(
            (
                owners[0].kind.as_str(),
                owners[0].uid.as_str(),
                owners[0].controller
            ),
            ("SandboxClaim", "claim-uid", Some(true))
        );
        let labels = sb.metadata.labels.unwrap();
        for key in POOL_ONLY_LABELS {
            assert!(!labels.contains_key(key), "{key}");
        }
        assert_eq!(labels[SANDBOX_LAUNCH_TYPE_LABEL], "warm");
        assert_eq!(labels[SANDBOX_ID_LABEL], "claim-uid");
        assert_eq!(labels[SANDBOX_TEMPLATE_REF_HASH_LABEL], name_hash("tmpl"));
        assert!(
            !labels.contains_key(CREATED_BY_LABEL),
            "pool's created-by=controller removed"
        );
        let annotations = sb.metadata.annotations.unwrap();
        assert_eq!(annotations[SANDBOX_POD_NAME_ANNOTATION], "pool-abcde");
        assert_eq!(
            annotations[TRACE_CONTEXT_ANNOTATION],
            "{\"traceparent\":\"00-abc-def-01\"}"
        );
        let pod = sb.spec.blueprint.pod_template.metadata;
        assert_eq!(pod.labels["team"], "a");
        assert_eq!(pod.labels[SANDBOX_ID_LABEL], "claim-uid");
        assert!(!pod.labels.contains_key(SANDBOX_WARM_POOL_LABEL));
        assert!(
            !pod.annotations.contains_key(SAFE_TO_EVICT_ANNOTATION),
            "pool-added eviction mark removed"
        );
    }

    #[test]
    fn created_by_follows_the_claim() {
        let sb = adopted(Some("go-client"), true);
        assert_eq!(sb.metadata.labels.unwrap()[CREATED_BY_LABEL], "go-client");
        assert_eq!(
            sb.spec.blueprint.pod_template.metadata.labels[CREATED_BY_LABEL],
            "go-client"
        );
    }

    #[test]
    fn without_the_template_the_member_metadata_is_kept_minus_pool_marks() {
        let sb = adopted(None, false);
        let pod = sb.spec.blueprint.pod_template.metadata;
        assert_eq!(pod.labels["team"], "a");
        assert!(!pod.annotations.contains_key(SAFE_TO_EVICT_ANNOTATION));
        assert!(!pod.labels.contains_key(SANDBOX_TEMPLATE_HASH_LABEL));
    }

    #[test]
    fn claim_metadata_is_merged_and_conflicts_refused() {
        let t = template();
        let sb = member(&t);
        let mut c = claim(None);
        c.spec
            .additional_pod_metadata
            .annotations
            .insert(SAFE_TO_EVICT_ANNOTATION.into(), "true".into());
        let patch = adoption_patch(&sb, &c, Some(&t), "tmpl", &["sandbox.users.io".into()])
            .unwrap()
            .unwrap();
        assert_eq!(
            patch["spec"]["podTemplate"]["metadata"]["annotations"].get(SAFE_TO_EVICT_ANNOTATION),
            None,
            "already \"true\": unchanged"
        );
        c.spec
            .additional_pod_metadata
            .labels
            .insert("team".into(), "b".into());
        assert!(adoption_patch(&sb, &c, Some(&t), "tmpl", &["sandbox.users.io".into()]).is_err());
    }
}
