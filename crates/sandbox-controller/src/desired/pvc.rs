//! PersistentVolumeClaims from `spec.volumeClaimTemplates`, and the Pod volumes that mount them.
//! Pure functions, no I/O.

use std::collections::{BTreeMap, HashSet};

use api_types::PersistentVolumeClaimTemplate;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::keys::NAME_HASH_LABEL;

/// `<template name>-<sandbox name>`.
pub fn pvc_name(template: &PersistentVolumeClaimTemplate, sandbox_name: &str) -> String {
    format!("{}-{}", template.metadata.name, sandbox_name)
}

/// The PVC to create for one template: its labels (plus the tracking label, which wins over a
/// user value), annotations and spec, owned by the Sandbox.
pub fn desired_pvc(
    template: &PersistentVolumeClaimTemplate,
    sandbox_name: &str,
    namespace: &str,
    name_hash: &str,
    owner: OwnerReference,
) -> PersistentVolumeClaim {
    let mut labels: BTreeMap<String, String> = template.metadata.labels.clone();
    labels.insert(NAME_HASH_LABEL.to_string(), name_hash.to_string());
    let annotations = template.metadata.annotations.clone();
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(pvc_name(template, sandbox_name)),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(template.spec.clone()),
        status: None,
    }
}

/// The Pod's volumes with one PVC volume per template appended: a user volume whose name clashes
/// with a template is replaced (StatefulSet-like precedence); surviving user volumes keep their
/// order.
pub fn merge_volume_claim_volumes(
    volumes: Option<Vec<Volume>>,
    templates: &[PersistentVolumeClaimTemplate],
    sandbox_name: &str,
) -> Option<Vec<Volume>> {
    if templates.is_empty() {
        return volumes;
    }
    let claimed: HashSet<&str> = templates.iter().map(|t| t.metadata.name.as_str()).collect();
    let mut merged: Vec<Volume> = volumes
        .unwrap_or_default()
        .into_iter()
        .filter(|v| !claimed.contains(v.name.as_str()))
        .collect();
    merged.extend(templates.iter().map(|t| Volume {
        name: t.metadata.name.clone(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: pvc_name(t, sandbox_name),
            read_only: None,
        }),
        ..Default::default()
    }));
    Some(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::EmbeddedObjectMetadata;
    use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, EmptyDirVolumeSource};

    fn template(name: &str) -> PersistentVolumeClaimTemplate {
        PersistentVolumeClaimTemplate {
            metadata: EmbeddedObjectMetadata {
                name: name.into(),
                labels: BTreeMap::from([
                    ("custom-label".to_string(), "v".to_string()),
                    (NAME_HASH_LABEL.to_string(), "spoofed".to_string()),
                ]),
                annotations: BTreeMap::from([("a".to_string(), "b".to_string())]),
            },
            spec: Default::default(),
        }
    }

    fn empty_dir(name: &str) -> Volume {
        Volume {
            name: name.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }
    }

    fn config(name: &str) -> Volume {
        Volume {
            name: name.into(),
            config_map: Some(ConfigMapVolumeSource::default()),
            ..Default::default()
        }
    }

    #[test]
    fn pvc_is_named_after_template_and_sandbox_and_tracks_the_sandbox() {
        let owner = crate::ownership::controller_ref("sb", "uid");
        let pvc = desired_pvc(&template("data"), "sb", "ns", "abcd0123", owner.clone());
        assert_eq!(pvc.metadata.name.as_deref(), Some("data-sb"));
        assert_eq!(pvc.metadata.namespace.as_deref(), Some("ns"));
        let labels = pvc.metadata.labels.unwrap();
        assert_eq!(
            labels.get(NAME_HASH_LABEL).map(String::as_str),
            Some("abcd0123")
        );
        assert_eq!(labels.get("custom-label").map(String::as_str), Some("v"));
        assert_eq!(
            pvc.metadata
                .annotations
                .unwrap()
                .get("a")
                .map(String::as_str),
            Some("b")
        );
        assert_eq!(pvc.metadata.owner_references, Some(vec![owner]));
    }

    #[test]
    fn clashing_user_volume_is_replaced_and_claims_go_last() {
        let merged = merge_volume_claim_volumes(
            Some(vec![empty_dir("data"), config("config")]),
            &[template("data")],
            "sb",
        )
        .unwrap();
        assert_eq!(
            merged.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["config", "data"]
        );
        assert_eq!(
            merged[1]
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some("data-sb")
        );
    }

    #[test]
    fn claims_are_appended_after_user_volumes() {
        let merged =
            merge_volume_claim_volumes(Some(vec![config("config")]), &[template("data")], "sb")
                .unwrap();
        assert_eq!(
            merged.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["config", "data"]
        );
    }

    #[test]
    fn no_templates_leave_volumes_unchanged() {
        let volumes = Some(vec![empty_dir("data")]);
        assert_eq!(
            merge_volume_claim_volumes(volumes.clone(), &[], "sb"),
            volumes
        );
        assert_eq!(merge_volume_claim_volumes(None, &[], "sb"), None);
    }
}
