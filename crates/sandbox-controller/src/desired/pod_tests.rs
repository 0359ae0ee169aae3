//! Unit tests of the Pod builders (core-controller.md section 4.1, TestReconcilePod items that
//! do not need a server).

use super::*;
use api_types::{PersistentVolumeClaimTemplate, SandboxSpec};
use k8s_openapi::api::core::v1::Container;

const HASH: &str = "name-hash";

fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sandbox() -> Sandbox {
    let mut spec = SandboxSpec::default();
    spec.blueprint.pod_template.spec.containers = vec![Container {
        name: "test-container".into(),
        ..Default::default()
    }];
    spec.blueprint.pod_template.metadata.labels = map(&[("custom-label", "label-val")]);
    spec.blueprint.pod_template.metadata.annotations = map(&[("custom-annotation", "anno-val")]);
    let mut sb = Sandbox::new("sandbox-name", spec);
    sb.metadata.namespace = Some("sandbox-ns".into());
    sb.metadata.uid = Some("sandbox-uid".into());
    sb
}

fn owner() -> OwnerReference {
    crate::ownership::controller_ref("sandbox-name", "sandbox-uid")
}

fn owned_by(sb: &mut Sandbox, api_version: &str, kind: &str) {
    sb.metadata.owner_references = Some(vec![OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: "owner".into(),
        uid: "owner-uid".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
}

fn pod_meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some("sandbox-name".into()),
        labels: Some(map(labels)),
        annotations: Some(map(annotations)),
        ..Default::default()
    }
}

#[test]
fn new_pod_carries_user_metadata_tracking_label_and_bookkeeping() {
    let pod = desired_pod(&sandbox(), HASH, owner());
    assert_eq!(pod.metadata.name.as_deref(), Some("sandbox-name"));
    assert_eq!(pod.metadata.namespace.as_deref(), Some("sandbox-ns"));
    assert_eq!(
        pod.metadata.labels.unwrap(),
        map(&[("custom-label", "label-val"), (NAME_HASH_LABEL, HASH)])
    );
    assert_eq!(
        pod.metadata.annotations.unwrap(),
        map(&[
            ("custom-annotation", "anno-val"),
            (PROPAGATED_LABELS_ANNOTATION, "custom-label"),
            (PROPAGATED_ANNOTATIONS_ANNOTATION, "custom-annotation"),
        ])
    );
    assert_eq!(pod.metadata.owner_references, Some(vec![owner()]));
    assert_eq!(pod.spec.unwrap().containers[0].name, "test-container");
}

#[test]
fn minimal_template_gives_only_the_tracking_label_and_no_annotations() {
    let mut sb = sandbox();
    sb.spec.blueprint.pod_template.metadata = Default::default();
    let pod = desired_pod(&sb, HASH, owner());
    assert_eq!(
        pod.metadata.labels.unwrap(),
        map(&[(NAME_HASH_LABEL, HASH)])
    );
    assert_eq!(pod.metadata.annotations, None);
}

#[test]
fn reserved_template_keys_never_reach_the_pod() {
    let mut sb = sandbox();
    let md = &mut sb.spec.blueprint.pod_template.metadata;
    md.labels
        .insert(NAME_HASH_LABEL.into(), "malicious-hijacked-hash".into());
    md.labels.insert(
        "extensions.agents.x-k8s.io/warm-pool-spoof".into(),
        "evil".into(),
    );
    md.labels.insert(WARM_POOL_LABEL.into(), "pool-hash".into());
    md.annotations
        .insert(POD_NAME_ANNOTATION.into(), "malicious-pod-name".into());
    md.annotations
        .insert(TRACE_CONTEXT_ANNOTATION.into(), "spoofed-trace".into());
    let pod = desired_pod(&sb, HASH, owner());
    assert_eq!(
        pod.metadata.labels.unwrap(),
        map(&[("custom-label", "label-val"), (NAME_HASH_LABEL, HASH)])
    );
    let annotations = pod.metadata.annotations.unwrap();
    assert_eq!(
        annotations.get(PROPAGATED_LABELS_ANNOTATION).unwrap(),
        "custom-label"
    );
    assert_eq!(
        annotations.get(PROPAGATED_ANNOTATIONS_ANNOTATION).unwrap(),
        "custom-annotation"
    );
    assert!(!annotations.contains_key(POD_NAME_ANNOTATION));
    assert!(!annotations.contains_key(TRACE_CONTEXT_ANNOTATION));
}

#[test]
fn sandbox_labels_are_not_copied_without_an_extension_owner() {
    let mut sb = sandbox();
    sb.spec.blueprint.pod_template.metadata.annotations.clear();
    sb.metadata.labels = Some(map(&[
        (WARM_POOL_LABEL, "pool-hash"),
        (TEMPLATE_REF_HASH_LABEL, "da1fd924"),
    ]));
    let pod = desired_pod(&sb, HASH, owner());
    let labels = pod.metadata.labels.unwrap();
    assert!(!labels.contains_key(WARM_POOL_LABEL));
    assert!(!labels.contains_key(TEMPLATE_REF_HASH_LABEL));
    assert_eq!(
        pod.metadata.annotations.unwrap(),
        map(&[(PROPAGATED_LABELS_ANNOTATION, "custom-label")])
    );
}

#[test]
fn warm_pool_owner_propagates_pool_and_template_labels() {
    let mut sb = sandbox();
    owned_by(
        &mut sb,
        "extensions.agents.x-k8s.io/v1beta1",
        "SandboxWarmPool",
    );
    sb.metadata.labels = Some(map(&[
        (WARM_POOL_LABEL, "pool-hash"),
        (TEMPLATE_REF_HASH_LABEL, "da1fd924"),
    ]));
    let labels = desired_pod(&sb, HASH, owner()).metadata.labels.unwrap();
    assert_eq!(
        labels.get(WARM_POOL_LABEL).map(String::as_str),
        Some("pool-hash")
    );
    assert_eq!(
        labels.get(TEMPLATE_REF_HASH_LABEL).map(String::as_str),
        Some("da1fd924")
    );
}

#[test]
fn claim_owner_propagates_only_the_template_ref_hash() {
    let mut sb = sandbox();
    owned_by(
        &mut sb,
        "extensions.agents.x-k8s.io/v1alpha1",
        "SandboxClaim",
    );
    sb.metadata.labels = Some(map(&[
        (WARM_POOL_LABEL, "pool-hash"),
        (TEMPLATE_REF_HASH_LABEL, "da1fd924"),
    ]));
    let labels = desired_pod(&sb, HASH, owner()).metadata.labels.unwrap();
    assert!(!labels.contains_key(WARM_POOL_LABEL));
    assert_eq!(
        labels.get(TEMPLATE_REF_HASH_LABEL).map(String::as_str),
        Some("da1fd924")
    );
}

#[test]
fn created_by_is_normalized() {
    let mut sb = sandbox();
    sb.metadata.labels = Some(map(&[(CREATED_BY_LABEL, "go-client")]));
    let labels = desired_pod(&sb, HASH, owner()).metadata.labels.unwrap();
    assert_eq!(
        labels.get(CREATED_BY_LABEL).map(String::as_str),
        Some("go-client")
    );
    sb.metadata.labels = Some(map(&[(
        CREATED_BY_LABEL,
        "invalid-user-value-which-is-too-long-or-custom",
    )]));
    let labels = desired_pod(&sb, HASH, owner()).metadata.labels.unwrap();
    assert_eq!(
        labels.get(CREATED_BY_LABEL).map(String::as_str),
        Some("unknown")
    );
}

#[test]
fn volume_claim_templates_become_pod_volumes() {
    let mut sb = sandbox();
    let mut vct = PersistentVolumeClaimTemplate::default();
    vct.metadata.name = "my-pvc".into();
    sb.spec.blueprint.volume_claim_templates = vec![vct];
    let volumes = desired_pod(&sb, HASH, owner())
        .spec
        .unwrap()
        .volumes
        .unwrap();
    assert_eq!(volumes[0].name, "my-pvc");
    assert_eq!(
        volumes[0]
            .persistent_volume_claim
            .as_ref()
            .unwrap()
            .claim_name,
        "my-pvc-sandbox-name"
    );
}

#[test]
fn target_pod_name_prefers_a_non_empty_annotation() {
    let mut sb = sandbox();
    assert_eq!(target_pod_name(&sb), "sandbox-name");
    sb.metadata.annotations = Some(map(&[("unrelated", "x")]));
    assert_eq!(target_pod_name(&sb), "sandbox-name");
    sb.metadata.annotations = Some(map(&[(POD_NAME_ANNOTATION, "")]));
    assert_eq!(target_pod_name(&sb), "sandbox-name");
    sb.metadata.annotations = Some(map(&[(POD_NAME_ANNOTATION, "warmpool-abc-xyz")]));
    assert_eq!(target_pod_name(&sb), "warmpool-abc-xyz");
}

#[test]
fn an_owned_pod_whose_metadata_matches_needs_no_patch() {
    let meta = pod_meta(
        &[(NAME_HASH_LABEL, HASH), ("custom-label", "label-val")],
        &[
            ("custom-annotation", "anno-val"),
            (PROPAGATED_LABELS_ANNOTATION, "custom-label"),
            (PROPAGATED_ANNOTATIONS_ANNOTATION, "custom-annotation"),
        ],
    );
    assert_eq!(pod_metadata_patch(&meta, &sandbox(), HASH), None);
}

#[test]
fn previously_propagated_reserved_keys_are_scrubbed() {
    let meta = pod_meta(
        &[
            (NAME_HASH_LABEL, HASH),
            ("custom-label", "label-val"),
            ("agents.x-k8s.io/evil", "x"),
        ],
        &[
            ("custom-annotation", "anno-val"),
            (POD_NAME_ANNOTATION, "leftover"),
            (TRACE_CONTEXT_ANNOTATION, "spoofed-trace"),
            (
                PROPAGATED_LABELS_ANNOTATION,
                "custom-label,agents.x-k8s.io/evil",
            ),
            (
                PROPAGATED_ANNOTATIONS_ANNOTATION,
                "custom-annotation,agents.x-k8s.io/pod-name,opentelemetry.io/trace-context",
            ),
        ],
    );
    let (labels, annotations) = desired_pod_metadata(&meta, &sandbox(), HASH);
    assert_eq!(
        labels,
        map(&[(NAME_HASH_LABEL, HASH), ("custom-label", "label-val")])
    );
    assert_eq!(
        annotations,
        map(&[
            ("custom-annotation", "anno-val"),
            (PROPAGATED_LABELS_ANNOTATION, "custom-label"),
            (PROPAGATED_ANNOTATIONS_ANNOTATION, "custom-annotation"),
        ])
    );
}

#[test]
fn removed_template_keys_are_pruned_and_unlisted_keys_kept() {
    let mut sb = sandbox();
    sb.spec.blueprint.pod_template.metadata.labels = map(&[("keep-label", "v")]);
    sb.spec.blueprint.pod_template.metadata.annotations = map(&[("keep-annotation", "v")]);
    let meta = pod_meta(
        &[
            (NAME_HASH_LABEL, HASH),
            ("remove-label", "v"),
            ("keep-label", "v"),
            ("agents.x-k8s.io/system-label", "v"),
        ],
        &[
            ("remove-annotation", "v"),
            ("keep-annotation", "v"),
            ("kubernetes.io/system-annotation", "v"),
            (PROPAGATED_LABELS_ANNOTATION, "remove-label,keep-label"),
            (
                PROPAGATED_ANNOTATIONS_ANNOTATION,
                "remove-annotation,keep-annotation",
            ),
        ],
    );
    let (labels, annotations) = desired_pod_metadata(&meta, &sb, HASH);
    assert_eq!(
        labels,
        map(&[
            (NAME_HASH_LABEL, HASH),
            ("keep-label", "v"),
            ("agents.x-k8s.io/system-label", "v")
        ])
    );
    assert_eq!(
        annotations,
        map(&[
            ("keep-annotation", "v"),
            ("kubernetes.io/system-annotation", "v"),
            (PROPAGATED_LABELS_ANNOTATION, "keep-label"),
            (PROPAGATED_ANNOTATIONS_ANNOTATION, "keep-annotation"),
        ])
    );
    let patch = pod_metadata_patch(&meta, &sb, HASH).unwrap();
    assert_eq!(patch["metadata"]["labels"]["remove-label"], Value::Null);
    assert_eq!(
        patch["metadata"]["annotations"]["remove-annotation"],
        Value::Null
    );
}

#[test]
fn extension_labels_follow_the_sandbox_owner() {
    // Pod from a warm pool, Sandbox no longer pool-owned: the pool label goes.
    let meta = pod_meta(
        &[(NAME_HASH_LABEL, HASH), (WARM_POOL_LABEL, "pool-hash")],
        &[],
    );
    let (labels, _) = desired_pod_metadata(&meta, &sandbox(), HASH);
    assert!(!labels.contains_key(WARM_POOL_LABEL));
    // Pool-owned Sandbox with the label: it is added.
    let mut sb = sandbox();
    owned_by(
        &mut sb,
        "extensions.agents.x-k8s.io/v1beta1",
        "SandboxWarmPool",
    );
    sb.metadata.labels = Some(map(&[(WARM_POOL_LABEL, "pool-hash")]));
    let (labels, _) = desired_pod_metadata(&pod_meta(&[], &[]), &sb, HASH);
    assert_eq!(
        labels.get(WARM_POOL_LABEL).map(String::as_str),
        Some("pool-hash")
    );
    // Claim-owned Sandbox without a template-ref hash: a stale one on the Pod is removed.
    let mut sb = sandbox();
    owned_by(
        &mut sb,
        "extensions.agents.x-k8s.io/v1beta1",
        "SandboxClaim",
    );
    let meta = pod_meta(&[(TEMPLATE_REF_HASH_LABEL, "da1fd924")], &[]);
    let (labels, _) = desired_pod_metadata(&meta, &sb, HASH);
    assert!(!labels.contains_key(TEMPLATE_REF_HASH_LABEL));
}

#[test]
fn created_by_on_an_existing_pod_follows_the_sandbox() {
    let mut sb = sandbox();
    sb.metadata.labels = Some(map(&[(CREATED_BY_LABEL, "python-client")]));
    let meta = pod_meta(&[(CREATED_BY_LABEL, "controller")], &[]);
    let (labels, _) = desired_pod_metadata(&meta, &sb, HASH);
    assert_eq!(
        labels.get(CREATED_BY_LABEL).map(String::as_str),
        Some("python-client")
    );
    let meta = pod_meta(&[(CREATED_BY_LABEL, "go-client")], &[]);
    let (labels, _) = desired_pod_metadata(&meta, &sandbox(), HASH);
    assert!(!labels.contains_key(CREATED_BY_LABEL));
}

#[test]
fn empty_propagated_lists_are_not_written_when_absent() {
    let mut sb = sandbox();
    sb.spec.blueprint.pod_template.metadata = Default::default();
    let meta = pod_meta(&[("app", "x")], &[]);
    let patch = pod_metadata_patch(&meta, &sb, HASH).unwrap();
    assert!(patch["metadata"].get("annotations").is_none());
    assert_eq!(
        patch["metadata"]["labels"],
        serde_json::json!({ NAME_HASH_LABEL: HASH })
    );
}

#[test]
fn map_patch_sets_changed_and_nulls_removed_keys() {
    let current = map(&[("a", "1"), ("b", "2")]);
    let desired = map(&[("a", "1"), ("c", "3")]);
    assert_eq!(
        map_patch(Some(&current), &desired),
        Some(serde_json::json!({"b": null, "c": "3"}))
    );
    assert_eq!(map_patch(Some(&current), &current), None);
}
