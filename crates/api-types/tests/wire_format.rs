//! JSON our types put on the wire must be what the reference's Go types emit (api.md §2.6),
//! starting from the minimal valid objects of api.md.

use api_types::*;
use serde_json::{Value, json};

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap()
}

const MINIMAL_SANDBOX: &str = r#"
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: hello-world, namespace: default}
spec:
  podTemplate:
    spec:
      containers: [{name: my-container, image: "busybox:1.37.0"}]
      restartPolicy: Never
"#;

#[test]
fn minimal_sandbox_round_trips_with_pod_template_metadata_always_emitted() {
    let sandbox: Sandbox = serde_yaml::from_str(MINIMAL_SANDBOX).unwrap();
    assert_eq!(sandbox.spec.blueprint.service, None);
    assert_eq!(sandbox.spec.operating_mode, None);
    assert_eq!(
        sandbox.spec.effective_operating_mode(),
        OperatingMode::Running
    );
    assert_eq!(
        sandbox.spec.effective_shutdown_policy(),
        ShutdownPolicy::Retain
    );
    assert_eq!(
        to_json(&sandbox),
        json!({
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {"name": "hello-world", "namespace": "default"},
            "spec": {
                "podTemplate": {
                    "metadata": {},
                    "spec": {
                        "containers": [{"name": "my-container", "image": "busybox:1.37.0"}],
                        "restartPolicy": "Never",
                    },
                },
            },
        })
    );
}

#[test]
fn service_is_tri_state_on_the_wire() {
    let mut sandbox: Sandbox = serde_yaml::from_str(MINIMAL_SANDBOX).unwrap();
    assert!(
        to_json(&sandbox.spec).get("service").is_none(),
        "unset service is omitted"
    );
    sandbox.spec.blueprint.service = Some(false);
    assert_eq!(
        to_json(&sandbox.spec)["service"],
        json!(false),
        "explicit false is kept"
    );
    sandbox.spec.blueprint.service = Some(true);
    assert_eq!(to_json(&sandbox.spec)["service"], json!(true));
    let back: SandboxSpec = serde_json::from_value(json!({
        "podTemplate": {"spec": {"containers": []}},
        "service": false,
    }))
    .unwrap();
    assert_eq!(back.blueprint.service, Some(false));
}

#[test]
fn defaulted_sandbox_fields_read_back_as_set_by_the_api_server() {
    let spec: SandboxSpec = serde_json::from_value(json!({
        "podTemplate": {"spec": {"containers": [{"name": "c"}]}},
        "operatingMode": "Suspended",
        "shutdownPolicy": "Delete",
        "shutdownTime": "2026-01-02T03:04:05Z",
        "volumeClaimTemplates": [{"spec": {"accessModes": ["ReadWriteOnce"]}}],
    }))
    .unwrap();
    assert_eq!(spec.effective_operating_mode(), OperatingMode::Suspended);
    assert_eq!(spec.effective_shutdown_policy(), ShutdownPolicy::Delete);
    assert_eq!(
        spec.shutdown_time.as_ref().unwrap().0.to_string(),
        "2026-01-02T03:04:05Z"
    );
    let wire = to_json(&spec);
    assert_eq!(wire["operatingMode"], "Suspended");
    assert_eq!(wire["shutdownTime"], "2026-01-02T03:04:05Z");
    assert_eq!(
        wire["volumeClaimTemplates"],
        json!([{"metadata": {}, "spec": {"accessModes": ["ReadWriteOnce"]}}]),
        "volumeClaimTemplates[].metadata is always emitted"
    );
}

#[test]
fn unknown_enum_values_are_rejected_with_the_allowed_values() {
    let error = serde_json::from_value::<SandboxSpec>(json!({
        "podTemplate": {"spec": {"containers": []}},
        "operatingMode": "Paused",
    }))
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("Paused") && error.contains("Running") && error.contains("Suspended"),
        "{error}"
    );
}

#[test]
fn sandbox_status_omits_empty_strings_and_lists() {
    assert_eq!(to_json(&SandboxStatus::default()), json!({}));
    assert!(SandboxStatus::default().is_empty());
    let status = SandboxStatus {
        service_fqdn: "hello.default.svc.cluster.local".into(),
        service: "hello".into(),
        label_selector: keys::sandbox_pod_selector("hello"),
        pod_ips: vec!["127.0.0.5".into()],
        node_name: "node-1".into(),
        conditions: vec![],
    };
    assert_eq!(
        to_json(&status),
        json!({
            "serviceFQDN": "hello.default.svc.cluster.local",
            "service": "hello",
            "selector": format!("agents.x-k8s.io/sandbox-name-hash={}", name_hash("hello")),
            "podIPs": ["127.0.0.5"],
            "nodeName": "node-1",
        })
    );
}

#[test]
fn minimal_template_reads_policies_as_their_defaults() {
    let template: SandboxTemplate = serde_yaml::from_str(
        r#"
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: example-template, namespace: default}
spec:
  podTemplate:
    spec:
      containers: [{name: my-container, image: "busybox:1.37.0"}]
"#,
    )
    .unwrap();
    let spec = &template.spec;
    assert_eq!(
        spec.network_policy_management,
        NetworkPolicyManagement::Managed
    );
    assert_eq!(
        spec.env_vars_injection_policy,
        EnvVarsInjectionPolicy::Disallowed
    );
    assert_eq!(
        spec.volume_claim_templates_policy,
        VolumeClaimTemplatesPolicy::Disallowed
    );
    assert!(spec.network_policy.is_none());
    let wire = to_json(&template);
    assert_eq!(wire["spec"]["podTemplate"]["metadata"], json!({}));
    assert!(
        wire.get("status").is_none(),
        "SandboxTemplate has no status"
    );
}

#[test]
fn template_network_policy_keeps_rules_and_int_or_string_ports() {
    let spec: SandboxTemplateSpec = serde_json::from_value(json!({
        "podTemplate": {"spec": {"containers": []}},
        "networkPolicyManagement": "Unmanaged",
        "networkPolicy": {
            "ingress": [{"ports": [{"port": 8888, "protocol": "TCP"}, {"port": "http"}]}],
            "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]}],
        },
    }))
    .unwrap();
    assert_eq!(
        spec.network_policy_management,
        NetworkPolicyManagement::Unmanaged
    );
    let wire = to_json(&spec);
    assert_eq!(
        wire["networkPolicy"]["ingress"][0]["ports"][0]["port"],
        json!(8888)
    );
    assert_eq!(
        wire["networkPolicy"]["ingress"][0]["ports"][1]["port"],
        json!("http")
    );
    assert_eq!(
        wire["networkPolicy"]["egress"][0]["to"][0]["ipBlock"]["except"],
        json!(["10.0.0.0/8"])
    );
}

#[test]
fn minimal_warm_pool_keeps_template_ref_and_omits_zero_status() {
    let pool: SandboxWarmPool = serde_yaml::from_str(
        r#"
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: example-warmpool, namespace: default}
spec:
  replicas: 1
  sandboxTemplateRef: {name: example-template}
"#,
    )
    .unwrap();
    assert_eq!(pool.spec.desired_replicas(), 1);
    assert_eq!(
        pool.spec.effective_update_strategy(),
        UpdateStrategyType::OnReplenish
    );
    assert_eq!(
        to_json(&pool.spec),
        json!({"replicas": 1, "sandboxTemplateRef": {"name": "example-template"}})
    );
    assert_eq!(to_json(&SandboxWarmPoolStatus::default()), json!({}));
    let status = SandboxWarmPoolStatus {
        replicas: 3,
        ready_replicas: 0,
        selector: keys::warm_pool_selector("example-warmpool"),
        observed_generation: 2,
    };
    assert_eq!(
        to_json(&status),
        json!({
            "replicas": 3,
            "selector": "agents.x-k8s.io/warm-pool-sandbox=6680271f",
            "observedGeneration": 2,
        })
    );
}

#[test]
fn warm_pool_without_template_ref_is_rejected_and_unset_replicas_default_to_one() {
    let error = serde_json::from_value::<SandboxWarmPoolSpec>(json!({"replicas": 2})).unwrap_err();
    assert!(error.to_string().contains("sandboxTemplateRef"), "{error}");
    let spec: SandboxWarmPoolSpec = serde_json::from_value(json!({
        "sandboxTemplateRef": {"name": "t"},
        "updateStrategy": {},
    }))
    .unwrap();
    assert_eq!(spec.replicas, None);
    assert_eq!(spec.desired_replicas(), 1);
    assert_eq!(
        spec.effective_update_strategy(),
        UpdateStrategyType::OnReplenish
    );
    assert!(
        to_json(&spec).get("replicas").is_none(),
        "unset replicas are not invented"
    );
}

#[test]
fn minimal_claim_always_emits_additional_pod_metadata_and_status_sandbox() {
    let claim: SandboxClaim = serde_yaml::from_str(
        r#"
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: example-claim, namespace: default}
spec:
  warmPoolRef: {name: example-warmpool}
"#,
    )
    .unwrap();
    assert_eq!(
        to_json(&claim.spec),
        json!({"warmPoolRef": {"name": "example-warmpool"}, "additionalPodMetadata": {}})
    );
    assert_eq!(
        to_json(&SandboxClaimStatus::default()),
        json!({"sandbox": {}})
    );
}

#[test]
fn claim_lifecycle_env_and_volume_claim_templates_round_trip() {
    let wire = json!({
        "warmPoolRef": {"name": "pool"},
        "lifecycle": {
            "shutdownTime": "2026-05-06T07:08:09Z",
            "ttlSecondsAfterFinished": 0,
            "shutdownPolicy": "DeleteForeground",
        },
        "additionalPodMetadata": {"labels": {"sandbox.users.io/team": "a"}},
        "env": [{"name": "A", "value": ""}, {"name": "B", "value": "b", "containerName": "sidecar"}],
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"storageClassName": "fast"}}],
    });
    let spec: SandboxClaimSpec = serde_json::from_value(wire.clone()).unwrap();
    let lifecycle = spec.lifecycle.as_ref().unwrap();
    assert_eq!(
        lifecycle.shutdown_policy,
        ClaimShutdownPolicy::DeleteForeground
    );
    assert_eq!(
        lifecycle.ttl_seconds_after_finished,
        Some(0),
        "a zero TTL is kept, not dropped"
    );
    assert_eq!(spec.env[0].value, "", "an empty value is a value");
    assert_eq!(
        to_json(&spec),
        wire,
        "env values are emitted even when empty"
    );

    let defaulted: ClaimLifecycle = serde_json::from_value(json!({})).unwrap();
    assert_eq!(defaulted.shutdown_policy, ClaimShutdownPolicy::Retain);
}

#[test]
fn numeric_quantities_and_int_or_string_ports_survive_the_flattened_blueprint() {
    let spec: SandboxSpec = serde_json::from_value(json!({
        "podTemplate": {"spec": {"containers": [{
            "name": "c",
            "resources": {"limits": {"cpu": 2, "nvidia.com/gpu": 1, "memory": "1Gi"}},
            "readinessProbe": {"httpGet": {"port": 8080, "path": "/"}},
            "livenessProbe": {"tcpSocket": {"port": "http"}},
        }]}},
    }))
    .unwrap();
    let container = &spec.blueprint.pod_template.spec.containers[0];
    let limits = container
        .resources
        .as_ref()
        .unwrap()
        .limits
        .as_ref()
        .unwrap();
    assert_eq!(limits["cpu"].0, "2");
    assert_eq!(limits["nvidia.com/gpu"].0, "1");
    let wire = to_json(&spec);
    let container = &wire["podTemplate"]["spec"]["containers"][0];
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], json!(8080));
    assert_eq!(
        container["livenessProbe"]["tcpSocket"]["port"],
        json!("http")
    );
}

#[test]
fn warm_pool_always_emits_status_like_the_reference() {
    use kube::core::object::HasStatus;
    use kube::{CustomResourceExt, Resource};

    let mut pool = SandboxWarmPool::new(
        "example-warmpool",
        SandboxWarmPoolSpec {
            replicas: Some(2),
            sandbox_template_ref: SandboxTemplateRef {
                name: "example-template".into(),
            },
            update_strategy: Some(UpdateStrategy {
                type_: UpdateStrategyType::Recreate,
            }),
        },
    );
    assert_eq!(
        to_json(&pool),
        json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": "example-warmpool"},
            "spec": {
                "replicas": 2,
                "sandboxTemplateRef": {"name": "example-template"},
                "updateStrategy": {"type": "Recreate"},
            },
            "status": {},
        })
    );
    *pool.status_mut() = Some(SandboxWarmPoolStatus {
        ready_replicas: 1,
        ..Default::default()
    });
    assert_eq!(to_json(&pool)["status"], json!({"readyReplicas": 1}));

    let back: SandboxWarmPool = serde_json::from_value(to_json(&pool)).unwrap();
    assert_eq!(back, pool);
    let without_status: SandboxWarmPool = serde_json::from_value(json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": "p"},
        "spec": {"sandboxTemplateRef": {"name": "t"}},
    }))
    .unwrap();
    assert_eq!(without_status.status, None);

    assert_eq!(
        SandboxWarmPool::api_version(&()),
        "extensions.agents.x-k8s.io/v1beta1"
    );
    assert_eq!(SandboxWarmPool::plural(&()), "sandboxwarmpools");
    assert_eq!(
        SandboxWarmPool::crd_name(),
        "sandboxwarmpools.extensions.agents.x-k8s.io"
    );
    assert_eq!(SandboxWarmPool::shortnames(), &["swp"]);
    assert_eq!(SandboxWarmPool::api_resource().kind, "SandboxWarmPool");
}
