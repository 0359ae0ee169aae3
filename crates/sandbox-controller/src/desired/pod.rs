//! The backing Pod of a Sandbox: the object to create and the metadata repair of an existing one.
//!
//! Label-spoofing defence (operations.md section 2.2): keys under a reserved prefix are never
//! copied from `spec.podTemplate.metadata`, the tracking label is written after the user labels so
//! no user value can redirect the Service, and reserved keys an older controller recorded as
//! propagated are scrubbed. Pure functions, no I/O.

use std::collections::BTreeMap;

use api_types::Sandbox;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use serde_json::{Map, Value};

use crate::desired::pvc::merge_volume_claim_volumes;
use crate::keys::{
    CREATED_BY_LABEL, EXTENSIONS_GROUP, NAME_HASH_LABEL, POD_NAME_ANNOTATION,
    PROPAGATED_ANNOTATIONS_ANNOTATION, PROPAGATED_LABELS_ANNOTATION, RESERVED_PREFIXES,
    TEMPLATE_REF_HASH_LABEL, TRACE_CONTEXT_ANNOTATION, WARM_POOL_LABEL,
};

/// A label key the controller owns: never copied from a user template.
pub fn is_system_label(key: &str) -> bool {
    RESERVED_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// An annotation key the controller owns (reserved prefix or the trace-context carrier).
pub fn is_system_annotation(key: &str) -> bool {
    is_system_label(key) || key == TRACE_CONTEXT_ANNOTATION
}

/// `go-client`, `python-client` and `controller` are kept; anything else becomes `unknown`.
pub fn normalize_created_by(value: &str) -> &'static str {
    match value {
        "go-client" => "go-client",
        "python-client" => "python-client",
        "controller" => "controller",
        _ => "unknown",
    }
}

/// The name of the Pod that backs the Sandbox: the `pod-name` annotation when set and non-empty,
/// else the Sandbox's own name.
pub fn target_pod_name(sandbox: &Sandbox) -> String {
    sandbox
        .annotations()
        .get(POD_NAME_ANNOTATION)
        .filter(|v| !v.is_empty())
        .cloned()
        .unwrap_or_else(|| sandbox.name_any())
}

fn controller_group_kind(sandbox: &Sandbox) -> Option<(&str, &str)> {
    let owner = sandbox
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))?;
    let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
    Some((group, owner.kind.as_str()))
}

/// The extension labels the Pod carries: only when the Sandbox is controlled by an object in the
/// extensions group, and only the warm-pool label (pool owner) and the template-ref hash.
pub fn extension_labels(sandbox: &Sandbox) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some((group, kind)) = controller_group_kind(sandbox) else {
        return out;
    };
    if group != EXTENSIONS_GROUP {
        return out;
    }
    let labels = sandbox.labels();
    if kind == "SandboxWarmPool"
        && let Some(v) = labels.get(WARM_POOL_LABEL).filter(|v| !v.is_empty())
    {
        out.insert(WARM_POOL_LABEL.to_string(), v.clone());
    }
    if let Some(v) = labels
        .get(TEMPLATE_REF_HASH_LABEL)
        .filter(|v| !v.is_empty())
    {
        out.insert(TEMPLATE_REF_HASH_LABEL.to_string(), v.clone());
    }
    out
}

fn created_by(sandbox: &Sandbox) -> Option<&'static str> {
    sandbox
        .labels()
        .get(CREATED_BY_LABEL)
        .filter(|v| !v.is_empty())
        .map(|v| normalize_created_by(v))
}

fn template_labels(sandbox: &Sandbox) -> impl Iterator<Item = (&String, &String)> {
    sandbox
        .spec
        .blueprint
        .pod_template
        .metadata
        .labels
        .iter()
        .filter(|(k, _)| !is_system_label(k))
}

fn template_annotations(sandbox: &Sandbox) -> impl Iterator<Item = (&String, &String)> {
    sandbox
        .spec
        .blueprint
        .pod_template
        .metadata
        .annotations
        .iter()
        .filter(|(k, _)| !is_system_annotation(k))
}

fn join_keys<'a>(keys: impl Iterator<Item = &'a String>) -> String {
    let mut keys: Vec<&str> = keys.map(String::as_str).collect();
    keys.sort_unstable();
    keys.join(",")
}

/// The Pod to create: named after the Sandbox, user labels and annotations minus reserved keys,
/// then the tracking label, the extension labels and `created-by`; the template spec with one
/// volume per claim template.
pub fn desired_pod(sandbox: &Sandbox, name_hash: &str, owner: OwnerReference) -> Pod {
    desired_pod_with_spec(
        sandbox,
        sandbox.spec.blueprint.pod_template.spec.clone(),
        name_hash,
        owner,
    )
}

/// [`desired_pod`] with the template's spec given apart (a cached Sandbox keeps it as raw text,
/// not in its `Sandbox` form).
pub fn desired_pod_with_spec(
    sandbox: &Sandbox,
    mut spec: PodSpec,
    name_hash: &str,
    owner: OwnerReference,
) -> Pod {
    let mut labels: BTreeMap<String, String> = template_labels(sandbox)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let propagated_labels = join_keys(labels.keys());
    // Written after the user labels: a template value can never replace it.
    labels.insert(NAME_HASH_LABEL.to_string(), name_hash.to_string());
    labels.extend(extension_labels(sandbox));
    if let Some(v) = created_by(sandbox) {
        labels.insert(CREATED_BY_LABEL.to_string(), v.to_string());
    }

    let mut annotations: BTreeMap<String, String> = template_annotations(sandbox)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let propagated_annotations = join_keys(annotations.keys());
    if !propagated_labels.is_empty() {
        annotations.insert(PROPAGATED_LABELS_ANNOTATION.to_string(), propagated_labels);
    }
    if !propagated_annotations.is_empty() {
        annotations.insert(
            PROPAGATED_ANNOTATIONS_ANNOTATION.to_string(),
            propagated_annotations,
        );
    }

    let blueprint = &sandbox.spec.blueprint;
    spec.volumes = merge_volume_claim_volumes(
        spec.volumes.take(),
        &blueprint.volume_claim_templates,
        &sandbox.name_any(),
    );

    Pod {
        metadata: ObjectMeta {
            name: Some(sandbox.name_any()),
            namespace: sandbox.namespace(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

fn listed(annotations: &BTreeMap<String, String>, key: &str) -> Vec<String> {
    annotations
        .get(key)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The labels and annotations an existing Pod must carry for this Sandbox, computed from what it
/// carries now. Keys that nobody listed as propagated (set by third parties) are left alone.
pub fn desired_pod_metadata(
    pod: &ObjectMeta,
    sandbox: &Sandbox,
    name_hash: &str,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut labels = pod.labels.clone().unwrap_or_default();
    let mut annotations = pod.annotations.clone().unwrap_or_default();
    let old_annotations = annotations.clone();

    labels.insert(NAME_HASH_LABEL.to_string(), name_hash.to_string());
    let mut propagated_labels: Vec<String> = Vec::new();
    for (k, v) in template_labels(sandbox) {
        labels.insert(k.clone(), v.clone());
        propagated_labels.push(k.clone());
    }
    let template = &sandbox.spec.blueprint.pod_template.metadata;
    for key in listed(&old_annotations, PROPAGATED_LABELS_ANNOTATION) {
        let stale = if is_system_label(&key) {
            key != NAME_HASH_LABEL
        } else {
            !template.labels.contains_key(&key)
        };
        if stale {
            labels.remove(&key);
        }
    }
    let extension = extension_labels(sandbox);
    for key in [WARM_POOL_LABEL, TEMPLATE_REF_HASH_LABEL] {
        match extension.get(key) {
            Some(v) => labels.insert(key.to_string(), v.clone()),
            None => labels.remove(key),
        };
    }
    match created_by(sandbox) {
        Some(v) => labels.insert(CREATED_BY_LABEL.to_string(), v.to_string()),
        None => labels.remove(CREATED_BY_LABEL),
    };

    let mut propagated_annotations: Vec<String> = Vec::new();
    for (k, v) in template_annotations(sandbox) {
        annotations.insert(k.clone(), v.clone());
        propagated_annotations.push(k.clone());
    }
    for key in listed(&old_annotations, PROPAGATED_ANNOTATIONS_ANNOTATION) {
        let stale = if is_system_annotation(&key) {
            key != PROPAGATED_LABELS_ANNOTATION && key != PROPAGATED_ANNOTATIONS_ANNOTATION
        } else {
            !template.annotations.contains_key(&key)
        };
        if stale {
            annotations.remove(&key);
        }
    }
    for (key, keys) in [
        (PROPAGATED_LABELS_ANNOTATION, propagated_labels),
        (PROPAGATED_ANNOTATIONS_ANNOTATION, propagated_annotations),
    ] {
        let joined = join_keys(keys.iter());
        // An absent list reads as empty: no write just to record "nothing propagated".
        if annotations.get(key).map(String::as_str).unwrap_or("") != joined {
            annotations.insert(key.to_string(), joined);
        }
    }
    (labels, annotations)
}

/// The JSON merge patch object turning map `current` into `desired` (`null` deletes a key), or
/// `None` when they are equal.
pub fn map_patch(
    current: Option<&BTreeMap<String, String>>,
    desired: &BTreeMap<String, String>,
) -> Option<Value> {
    let empty = BTreeMap::new();
    let current = current.unwrap_or(&empty);
    let mut patch = Map::new();
    for (k, v) in desired {
        if current.get(k) != Some(v) {
            patch.insert(k.clone(), Value::String(v.clone()));
        }
    }
    for k in current.keys().filter(|k| !desired.contains_key(*k)) {
        patch.insert(k.clone(), Value::Null);
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// The metadata merge patch that brings an owned Pod in line (labels and annotations), or `None`
/// when nothing differs.
pub fn pod_metadata_patch(pod: &ObjectMeta, sandbox: &Sandbox, name_hash: &str) -> Option<Value> {
    let (labels, annotations) = desired_pod_metadata(pod, sandbox, name_hash);
    let mut meta = Map::new();
    if let Some(p) = map_patch(pod.labels.as_ref(), &labels) {
        meta.insert("labels".to_string(), p);
    }
    if let Some(p) = map_patch(pod.annotations.as_ref(), &annotations) {
        meta.insert("annotations".to_string(), p);
    }
    (!meta.is_empty()).then(|| serde_json::json!({ "metadata": meta }))
}

#[cfg(test)]
#[path = "pod_tests.rs"]
mod tests;
