//! The reference CRDs and the example manifests, kept outside the repository: each test skips
//! with a printed line when they are absent (see the `reference-spec` crate).

use std::path::Path;

use super::*;

/// The repository's own generated CRDs (`deploy/crds`), always present.
pub(super) fn own_crds() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

fn load_yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|doc| {
            let v: Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (!v.is_null()).then_some(v)
        })
        .collect()
}

/// The v1beta1 schema of `kind` in the CRD files of `crds` (the reference CRDs, or the repo's
/// own `deploy/crds`, which match them path by path); `None` for a kind not ours.
pub(super) fn reference_schema(crds: &Path, kind: &str) -> Option<StructuralSchema> {
    let file = match kind {
        "Sandbox" => "agents.x-k8s.io_sandboxes.yaml",
        "SandboxClaim" => "extensions.agents.x-k8s.io_sandboxclaims.yaml",
        "SandboxTemplate" => "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
        "SandboxWarmPool" => "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
        _ => return None,
    };
    let crd = load_yaml_docs(&crds.join(file)).remove(0);
    let versions = crd["spec"]["versions"].as_array().unwrap();
    let (i, version) = versions
        .iter()
        .enumerate()
        .find(|(_, v)| v["name"] == "v1beta1")
        .unwrap();
    Some(
        StructuralSchema::from_openapi_at(
            &version["schema"]["openAPIV3Schema"],
            &format!("spec.versions[{i}].schema.openAPIV3Schema"),
        )
        .unwrap_or_else(|e| panic!("{file}: {e}")),
    )
}

fn admit(s: &StructuralSchema, mut obj: Value) -> (Value, Vec<crate::schema::FieldError>) {
    let errs = s.admit(&mut obj, None);
    (obj, errs)
}

#[test]
fn every_version_of_every_reference_crd_compiles() {
    let mut compiled = 0;
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    for entry in std::fs::read_dir(crds).unwrap() {
        let path = entry.unwrap().path();
        for crd in load_yaml_docs(&path) {
            for (i, version) in crd["spec"]["versions"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
            {
                if let Err(e) =
                    StructuralSchema::from_openapi(&version["schema"]["openAPIV3Schema"])
                {
                    panic!("{} versions[{i}]: {e}", path.display());
                }
                compiled += 1;
            }
        }
    }
    assert_eq!(compiled, 8, "four CRDs with two versions each");
}

#[test]
fn every_example_of_our_kinds_validates_clean_after_defaulting() {
    let Some(dir) = reference_spec::examples() else {
        return;
    };
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        for doc in load_yaml_docs(&path) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let Some(s) = reference_schema(&crds, &kind) else {
                continue;
            };
            let (_, errs) = admit(&s, doc);
            assert!(
                errs.is_empty(),
                "{}: {kind}: {:?}",
                path.display(),
                messages(&errs)
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} examples of our kinds found");
}

#[test]
fn sandbox_defaults_and_pruning_follow_the_reference_crd() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    let s = reference_schema(&crds, "Sandbox").unwrap();
    let (obj, errs) = admit(
        &s,
        json!({
            "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
            "metadata": {"name": "a"},
            "spec": {
                "unknownField": 1,
                "podTemplate": {
                    "metadata": {"labels": {"a": "b"}, "name": "dropped"},
                    "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}
                }
            }
        }),
    );
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(obj["spec"]["operatingMode"], "Running");
    assert!(obj["spec"].get("unknownField").is_none());
    assert!(obj["spec"]["podTemplate"]["metadata"].get("name").is_none());
    assert_eq!(
        obj["spec"]["podTemplate"]["spec"]["containers"][0]["ports"][0]["protocol"],
        "TCP"
    );
}

#[test]
fn broken_sandboxes_fail_at_the_right_path() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    let s = reference_schema(&crds, "Sandbox").unwrap();
    let cases = [
        (json!({"spec": {}}), "spec.podTemplate: Required value"),
        (
            json!({"spec": {"operatingMode": "Paused", "podTemplate": {"spec": {"containers": [{"name": "c"}]}}}}),
            "spec.operatingMode: Unsupported value: \"Paused\": supported values: \"Running\", \"Suspended\"",
        ),
        (
            json!({"spec": {"podTemplate": {"spec": {}}}}),
            "spec.podTemplate.spec.containers: Required value",
        ),
        (
            json!({"spec": {"podTemplate": {"spec": {"containers": [{"image": "x"}]}}}}),
            "spec.podTemplate.spec.containers[0].name: Required value",
        ),
        (
            json!({"spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": "eighty"}]}]}}}}),
            "spec.podTemplate.spec.containers[0].ports[0].containerPort: Invalid value: \"string\": spec.podTemplate.spec.containers[0].ports[0].containerPort in body must be of type integer: \"string\"",
        ),
        (
            json!({"spec": {"shutdownTime": "tomorrow", "podTemplate": {"spec": {"containers": [{"name": "c"}]}}}}),
            "spec.shutdownTime: Invalid value: \"tomorrow\": spec.shutdownTime in body must be of type date-time: \"tomorrow\"",
        ),
    ];
    for (obj, expected) in cases {
        let (_, errs) = admit(&s, obj.clone());
        assert!(
            messages(&errs).iter().any(|m| m == expected),
            "{obj}: want {expected:?}, got {:?}",
            messages(&errs)
        );
    }
}

#[test]
fn broken_warm_pools_claims_and_templates_fail_at_the_right_path() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    let pool = reference_schema(&crds, "SandboxWarmPool").unwrap();
    let (_, errs) = admit(
        &pool,
        json!({"spec": {"replicas": "three", "sandboxTemplateRef": {"name": "t"}}}),
    );
    assert!(
        messages(&errs).contains(&"spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"".to_string()),
        "{errs:?}"
    );
    let (_, errs) = admit(
        &pool,
        json!({"spec": {"replicas": -1, "sandboxTemplateRef": {"name": "t"}}}),
    );
    assert_eq!(
        messages(&errs),
        vec![
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
        ]
    );
    let (defaulted, errs) = admit(
        &pool,
        json!({"spec": {"sandboxTemplateRef": {"name": "t"}}}),
    );
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(defaulted["spec"]["replicas"], 1);
    let claim = reference_schema(&crds, "SandboxClaim").unwrap();
    let (_, errs) = admit(&claim, json!({"spec": {}}));
    assert_eq!(messages(&errs), vec!["spec.warmPoolRef: Required value"]);
    let template = reference_schema(&crds, "SandboxTemplate").unwrap();
    let (_, errs) = admit(
        &template,
        json!({"spec": {"envVarsInjectionPolicy": "Sometimes", "podTemplate": {"spec": {"containers": []}}}}),
    );
    assert!(
        messages(&errs).iter().any(|m| m.starts_with("spec.envVarsInjectionPolicy: Unsupported value: \"Sometimes\"")),
        "{errs:?}"
    );
}

#[test]
fn the_reference_sandbox_rule_blocks_volume_claim_template_changes() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    let s = reference_schema(&crds, "Sandbox").unwrap();
    let base = json!({"spec": {
        "podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]
    }});
    let (old, errs) = admit(&s, base.clone());
    assert!(errs.is_empty(), "{errs:?}");
    let mut changed = base.clone();
    changed["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"] = json!(["ReadWriteMany"]);
    s.prune(&mut changed);
    s.apply_defaults(&mut changed);
    assert_eq!(
        messages(&s.validate_update(&changed, &old)),
        vec!["spec: Invalid value: \"object\": volumeClaimTemplates is immutable"]
    );
    let mut replicas_only = old.clone();
    replicas_only["spec"]["replicas"] = json!(0);
    assert!(s.validate_update(&replicas_only, &old).is_empty());
}
