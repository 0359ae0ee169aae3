//! The reference's conversion test cases (`v1alpha1-conversion.md` §10.1, items 1–12), one named
//! test each, plus the error cases and the places where a round trip loses data (on purpose,
//! like the reference).

use api_types::conversion::{self, ConversionError, claim, sandbox, template, warm_pool};
use api_types::keys::{
    V1ALPHA1_SANDBOX_STATE_ANNOTATION as SANDBOX_STATE,
    V1ALPHA1_SANDBOXCLAIM_STATE_ANNOTATION as CLAIM_STATE,
    V1ALPHA1_SANDBOXTEMPLATE_STATE_ANNOTATION as TEMPLATE_STATE,
    V1ALPHA1_SANDBOXWARMPOOL_STATE_ANNOTATION as POOL_STATE,
    V1BETA1_VOLUME_CLAIM_TEMPLATES_POLICY_ANNOTATION as POLICY,
};
use serde_json::{Value, json};

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// The state annotation parsed; asserts it holds no state annotation itself.
fn state(object: &Value, key: &str) -> Value {
    let text = annotation(object, key).unwrap_or_else(|| panic!("no {key} on {object}"));
    assert!(
        !text.contains("v1alpha1-sandbox"),
        "snapshots never nest: {text}"
    );
    serde_json::from_str(text).unwrap()
}

fn alpha_sandbox(replicas: Option<i64>, status_replicas: i64) -> Value {
    let mut spec = json!({
        "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox:1.37.0"}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                  "spec": {"accessModes": ["ReadWriteOnce"]}}],
        "shutdownPolicy": "Delete",
    });
    if let Some(replicas) = replicas {
        spec["replicas"] = json!(replicas);
    }
    let mut status = json!({"serviceFQDN": "sb.ns.svc.cluster.local", "selector": "a=b"});
    if status_replicas != 0 {
        status["replicas"] = json!(status_replicas);
    }
    json!({
        "apiVersion": "agents.x-k8s.io/v1alpha1",
        "kind": "Sandbox",
        "metadata": {
            "name": "sb", "namespace": "ns",
            "labels": {"team": "a"},
            "annotations": {"note": "kept", SANDBOX_STATE: "{\"stale\":true}"},
        },
        "spec": spec,
        "status": status,
    })
}

fn beta_sandbox(mode: Option<&str>) -> Value {
    let mut sandbox = json!({
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": "sb", "namespace": "ns"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
        "status": {"nodeName": "node-1"},
    });
    if let Some(mode) = mode {
        sandbox["spec"]["operatingMode"] = json!(mode);
    }
    sandbox
}

// --- Sandbox (items 1–5) ---------------------------------------------------------------------

#[test]
fn item_01_sandbox_up_maps_replicas_to_operating_mode_and_carries_the_rest() {
    for (replicas, status, mode) in [
        (None, 1, "Running"),
        (Some(1), 1, "Running"),
        (Some(0), 0, "Suspended"),
    ] {
        let beta = sandbox::up(&alpha_sandbox(replicas, status)).unwrap();
        assert_eq!(beta["apiVersion"], "agents.x-k8s.io/v1beta1");
        assert_eq!(beta["spec"]["operatingMode"], mode, "replicas {replicas:?}");
        assert!(beta["spec"].get("replicas").is_none());
        assert!(beta["status"].get("replicas").is_none());
        assert!(beta["status"].get("nodeName").is_none());
        assert_eq!(
            beta["spec"]["podTemplate"]["spec"]["containers"][0]["image"],
            "busybox:1.37.0"
        );
        assert_eq!(
            beta["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
            "data"
        );
        assert_eq!(beta["spec"]["shutdownPolicy"], "Delete");
        assert_eq!(beta["status"]["serviceFQDN"], "sb.ns.svc.cluster.local");
    }
}

#[test]
fn item_02_sandbox_up_does_not_mutate_its_input() {
    let input = alpha_sandbox(Some(0), 0);
    let before = input.clone();
    let beta = sandbox::up(&input).unwrap();
    assert_eq!(input, before);
    let annotations = input["metadata"]["annotations"].as_object().unwrap();
    assert_eq!(annotations.len(), 2, "the input keeps its two annotations");
    assert_eq!(input["metadata"]["labels"], json!({"team": "a"}));
    // The output keeps the other annotation and the label, and replaces the stale snapshot.
    assert_eq!(annotation(&beta, "note"), Some("kept"));
    assert_eq!(beta["metadata"]["labels"], json!({"team": "a"}));
    assert_ne!(annotation(&beta, SANDBOX_STATE), Some("{\"stale\":true}"));
}

#[test]
fn item_03_sandbox_up_snapshot_is_a_v1alpha1_sandbox_without_the_state_key() {
    for (replicas, status) in [(None, 1), (Some(1), 1), (Some(0), 0)] {
        let beta = sandbox::up(&alpha_sandbox(replicas, status)).unwrap();
        let snapshot = state(&beta, SANDBOX_STATE);
        assert_eq!(snapshot["apiVersion"], "agents.x-k8s.io/v1alpha1");
        assert_eq!(snapshot["kind"], "Sandbox");
        assert_eq!(
            snapshot["metadata"],
            json!({"name": "sb", "namespace": "ns"})
        );
        assert_eq!(
            snapshot.pointer("/spec/replicas"),
            replicas.map(Value::from).as_ref()
        );
        assert_eq!(
            snapshot.pointer("/status/replicas").cloned(),
            (status != 0).then(|| json!(status))
        );
        assert!(!snapshot.to_string().contains(SANDBOX_STATE));
    }
}

#[test]
fn item_04_sandbox_down_of_the_up_output_restores_replicas_exactly() {
    for (replicas, status) in [(None, 1), (Some(1), 1), (Some(0), 0)] {
        let input = alpha_sandbox(replicas, status);
        let alpha = sandbox::down(&sandbox::up(&input).unwrap()).unwrap();
        assert_eq!(alpha["apiVersion"], "agents.x-k8s.io/v1alpha1");
        assert!(
            annotation(&alpha, SANDBOX_STATE).is_none(),
            "state key stripped"
        );
        assert_eq!(alpha["spec"].get("replicas"), input["spec"].get("replicas"));
        assert_eq!(
            alpha["status"].get("replicas"),
            input["status"].get("replicas")
        );
        assert!(alpha["spec"].get("operatingMode").is_none());
        assert_eq!(
            alpha["spec"]["podTemplate"]["spec"]["containers"][0]["image"],
            "busybox:1.37.0"
        );
        assert_eq!(
            alpha["spec"]["volumeClaimTemplates"],
            input["spec"]["volumeClaimTemplates"]
        );
        assert_eq!(alpha["spec"]["shutdownPolicy"], "Delete");
    }
}

#[test]
fn item_05_sandbox_down_without_snapshot_derives_replicas_from_the_mode() {
    for (mode, replicas, status) in [
        (Some("Running"), 1, Some(1)),
        (Some("Suspended"), 0, None),
        (None, 1, Some(1)),
    ] {
        let alpha = sandbox::down(&beta_sandbox(mode)).unwrap();
        assert_eq!(
            alpha["spec"]["replicas"], replicas,
            "{mode:?}: never absent"
        );
        assert_eq!(
            alpha["status"].get("replicas").cloned(),
            status.map(Value::from),
            "{mode:?}: 0 is omitted"
        );
        assert!(
            alpha["status"].get("nodeName").is_none(),
            "nodeName dropped"
        );
    }
}

#[test]
fn sandbox_down_under_running_does_not_restore_a_stale_zero() {
    let beta = sandbox::up(&alpha_sandbox(Some(0), 0)).unwrap();
    let mut resumed = beta.clone();
    resumed["spec"]["operatingMode"] = json!("Running");
    let alpha = sandbox::down(&resumed).unwrap();
    assert_eq!(alpha["spec"]["replicas"], 1);
    let mut suspended = sandbox::up(&alpha_sandbox(Some(1), 1)).unwrap();
    suspended["spec"]["operatingMode"] = json!("Suspended");
    let alpha = sandbox::down(&suspended).unwrap();
    assert_eq!(alpha["spec"]["replicas"], 0);
    assert_eq!(
        alpha["status"]["replicas"], 1,
        "status.replicas is the snapshot's, not recomputed"
    );
}

#[test]
fn sandbox_down_reads_a_snapshot_the_reference_wrote() {
    // The reference's webhook stores the whole input object, managed fields included.
    let reference_snapshot = json!({
        "apiVersion": "agents.x-k8s.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": "sb", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                     "managedFields": [{"manager": "kubectl", "operation": "Apply",
                                        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": "x"}]},
                                 "metadata": {}},
                 "replicas": 1, "shutdownPolicy": "Retain", "futureField": {"a": 1}},
        "status": {"replicas": 1, "serviceFQDN": "x"},
    });
    let mut beta = beta_sandbox(Some("Running"));
    beta["metadata"]["annotations"] = json!({SANDBOX_STATE: reference_snapshot.to_string()});
    let alpha = sandbox::down(&beta).unwrap();
    assert_eq!(alpha["spec"]["replicas"], 1);
    assert_eq!(alpha["status"]["replicas"], 1);
    assert!(alpha["metadata"].get("annotations").is_none());
}

#[test]
fn sandbox_down_fails_clearly_on_a_snapshot_that_is_not_json() {
    let mut beta = beta_sandbox(Some("Running"));
    beta["metadata"]["annotations"] = json!({SANDBOX_STATE: "{not json"});
    let error = sandbox::down(&beta).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("failed to unmarshal v1alpha1 Sandbox state: "),
        "{error}"
    );
    beta["metadata"]["annotations"] = json!({SANDBOX_STATE: "{\"spec\":{\"replicas\":\"one\"}}"});
    let error = sandbox::down(&beta).unwrap_err();
    assert!(error.to_string().contains("spec.replicas"), "{error}");
}

// --- SandboxClaim (items 6–8) ------------------------------------------------------------------

fn alpha_claim(warmpool: Option<&str>, bound: &str) -> Value {
    let mut spec = json!({
        "sandboxTemplateRef": {"name": "my-template"},
        "lifecycle": {"shutdownPolicy": "DeleteForeground", "ttlSecondsAfterFinished": 30},
        "additionalPodMetadata": {"labels": {"sandbox.users.io/x": "y"}},
        "env": [{"name": "A", "value": "1", "containerName": "main"}],
    });
    if let Some(warmpool) = warmpool {
        spec["warmpool"] = json!(warmpool);
    }
    let mut claim = json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
        "kind": "SandboxClaim",
        "metadata": {"name": "my-claim", "namespace": "ns", "labels": {"l": "v"},
                     "annotations": {"a": "b"}},
        "spec": spec,
    });
    if !bound.is_empty() {
        claim["status"] = json!({"sandbox": {"name": bound, "podIPs": ["127.0.0.9"]},
                                 "conditions": []});
    }
    claim
}

/// The seven up-conversion cases of §6.4: `(warmpool, status.sandbox.name, warmPoolRef.name)`.
const CLAIM_CASES: [(Option<&str>, &str, &str); 7] = [
    (Some("my-pool"), "my-claim", "my-pool"),
    (Some("none"), "my-claim", "shadow-pool-my-template"),
    (Some("default"), "my-claim", "shadow-pool-my-template"),
    (Some("my-pool"), "my-pool-abcde", "my-pool"),
    (Some("default"), "my-pool-abcde", "my-pool"),
    (Some("my-pool"), "", "my-pool"),
    (None, "", "shadow-pool-my-template"),
];

#[test]
fn item_06_claim_up_picks_the_pool_by_rules_a_b_c() {
    for (warmpool, bound, pool) in CLAIM_CASES {
        let beta = claim::up(&alpha_claim(warmpool, bound)).unwrap();
        assert_eq!(
            beta["spec"]["warmPoolRef"],
            json!({"name": pool}),
            "warmpool {warmpool:?}, bound to {bound:?}"
        );
        assert!(beta["spec"].get("sandboxTemplateRef").is_none());
        assert!(beta["spec"].get("warmpool").is_none());
        assert_eq!(
            beta["spec"]["lifecycle"]["shutdownPolicy"],
            "DeleteForeground"
        );
        assert_eq!(beta["spec"]["env"][0]["containerName"], "main");
    }
}

#[test]
fn item_07_claim_round_trip_restores_template_and_policy() {
    for (warmpool, bound, _) in CLAIM_CASES {
        let input = alpha_claim(warmpool, bound);
        let before = input.clone();
        let beta = claim::up(&input).unwrap();
        assert_eq!(input, before, "input not mutated");
        let snapshot = state(&beta, CLAIM_STATE);
        assert_eq!(snapshot["kind"], "SandboxClaim");
        assert!(!snapshot.to_string().contains(CLAIM_STATE), "not nested");
        let alpha = claim::down(&beta).unwrap();
        assert!(
            annotation(&alpha, CLAIM_STATE).is_none(),
            "state key stripped"
        );
        assert_eq!(
            alpha["spec"]["sandboxTemplateRef"],
            json!({"name": "my-template"})
        );
        assert_eq!(
            alpha["spec"].get("warmpool"),
            input["spec"].get("warmpool"),
            "warmpool restored ({warmpool:?}, {bound:?})"
        );
        assert_eq!(alpha, input, "the whole claim comes back");
    }
}

#[test]
fn item_08_claim_down_without_snapshot() {
    for (pool, warmpool, template) in [
        ("my-pool", "my-pool", json!({"name": "my-pool"})),
        ("", "", json!({})),
        (
            "shadow-pool-my-template",
            "default",
            json!({"name": "my-template"}),
        ),
    ] {
        let beta = json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"warmPoolRef": {"name": pool}},
        });
        let alpha = claim::down(&beta).unwrap();
        assert_eq!(
            alpha["spec"]["warmpool"], warmpool,
            "{pool:?}: always emitted"
        );
        assert_eq!(alpha["spec"]["sandboxTemplateRef"], template, "{pool:?}");
        assert!(alpha["spec"].get("warmPoolRef").is_none());
    }
}

#[test]
fn claim_down_with_a_pool_changed_through_v1beta1_names_the_new_pool() {
    let mut beta = claim::up(&alpha_claim(Some("my-pool"), "")).unwrap();
    beta["spec"]["warmPoolRef"]["name"] = json!("other-pool");
    let alpha = claim::down(&beta).unwrap();
    assert_eq!(alpha["spec"]["warmpool"], "other-pool");
    assert_eq!(
        alpha["spec"]["sandboxTemplateRef"],
        json!({"name": "my-template"}),
        "the original template is kept as the best guess"
    );
}

#[test]
fn claim_re_pointed_to_a_pool_named_like_its_template_survives_a_v1alpha1_write() {
    // Created through v1alpha1 as a cold-start claim, then re-pointed through v1beta1 at a pool
    // named like the template. The reference's loose match would read it back as
    // `warmpool: default` and convert it back up to `shadow-pool-my-template`.
    let mut beta = claim::up(&alpha_claim(Some("default"), "")).unwrap();
    assert_eq!(
        beta["spec"]["warmPoolRef"]["name"],
        "shadow-pool-my-template"
    );
    beta["spec"]["warmPoolRef"]["name"] = json!("my-template");
    let alpha = claim::down(&beta).unwrap();
    assert_eq!(alpha["spec"]["warmpool"], "my-template");
    let back = claim::up(&alpha).unwrap();
    assert_eq!(back["spec"]["warmPoolRef"]["name"], "my-template");
}

#[test]
fn lossy_like_the_reference_claim_volume_claim_templates_have_no_v1alpha1_field() {
    let beta = json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"warmPoolRef": {"name": "p"},
                 "volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {}}]},
    });
    let back = claim::up(&claim::down(&beta).unwrap()).unwrap();
    assert!(
        back["spec"].get("volumeClaimTemplates").is_none(),
        "a v1alpha1 read-modify-write erases them, as with the reference"
    );
}

#[test]
fn lossy_like_the_reference_a_pool_named_default_or_none_reads_back_as_a_policy() {
    for name in ["default", "none"] {
        let beta = json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"warmPoolRef": {"name": name}},
        });
        let back = claim::up(&claim::down(&beta).unwrap()).unwrap();
        assert_eq!(
            back["spec"]["warmPoolRef"]["name"],
            format!("shadow-pool-{name}")
        );
    }
}

#[test]
fn lossy_like_the_reference_a_warm_claim_re_pointed_at_a_shadow_pool() {
    let beta = json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"warmPoolRef": {"name": "shadow-pool-t"}},
        "status": {"sandbox": {"name": "warm-pool-abcde"}},
    });
    let alpha = claim::down(&beta).unwrap();
    assert_eq!(alpha["spec"]["warmpool"], "default");
    let back = claim::up(&alpha).unwrap();
    assert_eq!(
        back["spec"]["warmPoolRef"]["name"], "warm-pool",
        "rule B finds the bound Sandbox's pool"
    );
}

// --- SandboxTemplate (items 9–11) --------------------------------------------------------------

fn alpha_template() -> Value {
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "t", "namespace": "ns", "labels": {"x": "y"}},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                      "spec": {"resources": {"requests": {"storage": "1Gi"}}}}],
            "networkPolicy": {"ingress": [{}]},
            "networkPolicyManagement": "Managed",
            "envVarsInjectionPolicy": "Allowed",
            "service": true,
        },
    })
}

#[test]
fn item_09_template_round_trip_keeps_everything() {
    let input = alpha_template();
    let before = input.clone();
    let beta = template::up(&input).unwrap();
    assert_eq!(input, before, "input not mutated");
    assert_eq!(
        beta["spec"]["podTemplate"]["spec"]["containers"][0]["image"],
        "python:3.12"
    );
    assert_eq!(beta["spec"]["networkPolicyManagement"], "Managed");
    assert_eq!(beta["spec"]["envVarsInjectionPolicy"], "Allowed");
    assert_eq!(beta["spec"]["service"], true);
    assert_eq!(beta["spec"]["networkPolicy"], json!({"ingress": [{}]}));
    assert!(beta["spec"].get("volumeClaimTemplatesPolicy").is_none());
    let snapshot = state(&beta, TEMPLATE_STATE);
    assert_eq!(snapshot["kind"], "SandboxTemplate");
    let alpha = template::down(&beta).unwrap();
    assert!(
        annotation(&alpha, TEMPLATE_STATE).is_none(),
        "state key stripped"
    );
    assert_eq!(alpha, input);
}

#[test]
fn item_10_template_policy_travels_as_an_annotation_on_v1alpha1() {
    let mut beta = template::up(&alpha_template()).unwrap();
    beta["spec"]["volumeClaimTemplatesPolicy"] = json!("Allowed");
    let alpha = template::down(&beta).unwrap();
    assert_eq!(annotation(&alpha, POLICY), Some("Allowed"));
    assert!(alpha["spec"].get("volumeClaimTemplatesPolicy").is_none());
    let back = template::up(&alpha).unwrap();
    assert_eq!(back["spec"]["volumeClaimTemplatesPolicy"], "Allowed");
    assert!(
        annotation(&back, POLICY).is_none(),
        "the annotation leaves v1beta1"
    );
}

#[test]
fn item_11_template_stale_policy_annotation_does_not_resurrect_a_cleared_policy() {
    let mut stale = alpha_template();
    stale["metadata"]["annotations"] = json!({POLICY: "Allowed"});
    let mut beta = template::up(&stale).unwrap();
    assert_eq!(beta["spec"]["volumeClaimTemplatesPolicy"], "Allowed");
    beta["spec"]
        .as_object_mut()
        .unwrap()
        .remove("volumeClaimTemplatesPolicy");
    let alpha = template::down(&beta).unwrap();
    assert!(annotation(&alpha, POLICY).is_none());
    let back = template::up(&alpha).unwrap();
    assert!(back["spec"].get("volumeClaimTemplatesPolicy").is_none());
}

#[test]
fn template_up_refuses_an_invalid_policy_annotation() {
    for value in ["Sometimes", ""] {
        let mut alpha = alpha_template();
        alpha["metadata"]["annotations"] = json!({POLICY: value});
        assert_eq!(
            template::up(&alpha).unwrap_err().to_string(),
            format!("invalid VolumeClaimTemplatesPolicy annotation value: {value:?}")
        );
    }
}

// --- SandboxWarmPool (item 12) -----------------------------------------------------------------

#[test]
fn item_12_warm_pool_round_trip_with_and_without_update_strategy() {
    for strategy in [Some(json!({"type": "Recreate"})), None] {
        let mut input = json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"replicas": 3, "sandboxTemplateRef": {"name": "t"}},
            "status": {"replicas": 3, "readyReplicas": 2, "selector": "k=v"},
        });
        if let Some(strategy) = &strategy {
            input["spec"]["updateStrategy"] = strategy.clone();
        }
        let before = input.clone();
        let beta = warm_pool::up(&input).unwrap();
        assert_eq!(input, before, "input not mutated");
        assert_eq!(beta["spec"]["replicas"], 3);
        assert_eq!(beta["spec"].get("updateStrategy"), strategy.as_ref());
        assert!(beta["status"].get("observedGeneration").is_none());
        assert_eq!(state(&beta, POOL_STATE)["kind"], "SandboxWarmPool");
        let alpha = warm_pool::down(&beta).unwrap();
        assert!(
            annotation(&alpha, POOL_STATE).is_none(),
            "state key stripped"
        );
        assert_eq!(alpha, input);
    }
}

#[test]
fn warm_pool_down_defaults_unset_replicas_to_one_and_drops_observed_generation() {
    let beta = json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
        "metadata": {"name": "p"},
        "spec": {"sandboxTemplateRef": {"name": "t"}},
        "status": {"observedGeneration": 4},
    });
    let alpha = warm_pool::down(&beta).unwrap();
    assert_eq!(alpha["spec"]["replicas"], 1);
    assert_eq!(alpha["status"], json!({}));
}

// --- Dispatch and wire format ------------------------------------------------------------------

#[test]
fn convert_dispatches_by_kind_and_passes_the_same_version_through() {
    let alpha = alpha_sandbox(Some(0), 0);
    let beta = conversion::convert(&alpha, "agents.x-k8s.io/v1beta1").unwrap();
    assert_eq!(beta, sandbox::up(&alpha).unwrap());
    assert_eq!(
        conversion::convert(&alpha, "agents.x-k8s.io/v1alpha1").unwrap(),
        alpha
    );
    let pool = json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                      "kind": "SandboxWarmPool", "metadata": {}, "spec": {}});
    let alpha_pool = conversion::convert(&pool, "extensions.agents.x-k8s.io/v1alpha1").unwrap();
    assert_eq!(alpha_pool["spec"]["replicas"], 1);
}

#[test]
fn convert_refuses_what_it_cannot_convert() {
    let alpha = alpha_sandbox(None, 0);
    assert!(matches!(
        conversion::convert(&alpha, "agents.x-k8s.io/v2").unwrap_err(),
        ConversionError::UnsupportedVersion { .. }
    ));
    assert!(matches!(
        conversion::convert(&alpha, "extensions.agents.x-k8s.io/v1beta1").unwrap_err(),
        ConversionError::GroupMismatch { .. }
    ));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}});
    assert_eq!(
        conversion::convert(&pod, "v1").unwrap_err().to_string(),
        "Pod of apiVersion v1 is not a kind this API converts"
    );
    assert_eq!(
        conversion::convert(&json!([1]), "agents.x-k8s.io/v1beta1").unwrap_err(),
        ConversionError::NotAnObject
    );
    let mut bad = alpha_sandbox(None, 0);
    bad["spec"]["replicas"] = json!("one");
    assert_eq!(
        conversion::convert(&bad, "agents.x-k8s.io/v1beta1")
            .unwrap_err()
            .to_string(),
        "spec.replicas must be an integer, got the string \"one\""
    );
    let mut bad = alpha_sandbox(None, 0);
    bad["spec"] = json!("x");
    assert!(sandbox::up(&bad).is_err());
}

#[test]
fn wire_format_is_kept_outside_the_converted_fields() {
    let mut alpha = alpha_sandbox(Some(1), 1);
    alpha["spec"]["shutdownTime"] = json!("2026-01-01T10:00:00.250+02:00");
    alpha["spec"]["podTemplate"]["metadata"] = json!({"labels": {}});
    let beta = sandbox::up(&alpha).unwrap();
    assert_eq!(
        beta["spec"]["shutdownTime"],
        "2026-01-01T10:00:00.250+02:00"
    );
    assert_eq!(
        beta["spec"]["podTemplate"]["metadata"],
        json!({"labels": {}})
    );

    // What a typed round trip through the v1beta1 struct would have written instead.
    let typed: api_types::Sandbox = serde_json::from_value(beta.clone()).unwrap();
    let retyped = serde_json::to_value(&typed).unwrap();
    assert_ne!(
        retyped["spec"]["shutdownTime"],
        beta["spec"]["shutdownTime"]
    );
    assert_ne!(
        retyped["spec"]["podTemplate"]["metadata"],
        json!({"labels": {}})
    );
}

#[test]
fn the_claim_pool_rules_strip_only_the_last_suffix() {
    assert_eq!(claim::strip_suffix("my-pool-abcde"), "my-pool");
    assert_eq!(claim::strip_suffix("pool"), "pool");
    assert_eq!(
        claim::derive_pool_name("c", "", None, ""),
        "shadow-pool-",
        "an empty template gives the bare prefix"
    );
}
