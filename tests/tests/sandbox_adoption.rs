//! Adoption of pre-existing Pods, Services and PVCs (authorized by `agents.x-k8s.io/adoptable`
//! or the Sandbox's tracking label) and refusal of everything else, on devcluster.

use e2e_tests::{Env, EnvOptions, condition, sandbox, wait_ready_reason};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service};
use kube::api::PostParams;
use serde_json::json;

fn pod(name: &str, labels: serde_json::Value, owner: Option<serde_json::Value>) -> Pod {
    let mut v = json!({"metadata": {"name": name, "labels": labels},
                       "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}});
    if let Some(o) = owner {
        v["metadata"]["ownerReferences"] = json!([o]);
    }
    serde_json::from_value(v).unwrap()
}

/// A controller owner that really exists (garbage collection removes objects whose owner does
/// not).
async fn foreign_owner(env: &Env) -> serde_json::Value {
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "web"}})).unwrap();
    let cm = env
        .api::<ConfigMap>("default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "web", "uid": cm.metadata.uid, "controller": true})
}

#[tokio::test]
async fn authorized_pod_and_service_and_pvc_are_adopted() {
    let env = Env::start(EnvOptions::default()).await;
    let pods = env.api::<Pod>("default");
    pods.create(
        &PostParams::default(),
        &pod(
            "warm",
            json!({"agents.x-k8s.io/adoptable": "true", "keep": "me"}),
            None,
        ),
    )
    .await
    .unwrap();
    let hash = api_types::name_hash("warm");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "warm", "labels": {"agents.x-k8s.io/sandbox-name-hash": hash}},
        "spec": {"clusterIP": "None", "selector": {"app": "old"}, "ports": [{"port": 9090}]}
    }))
    .unwrap();
    env.api::<Service>("default")
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data-warm", "labels": {"agents.x-k8s.io/adoptable": "true"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    env.api::<PersistentVolumeClaim>("default")
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();

    let sandboxes = env.sandboxes("default");
    let created = sandboxes
        .create(
            &PostParams::default(),
            &sandbox(
                "warm",
                json!({"service": true, "volumeClaimTemplates": [{"metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}),
            ),
        )
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let sb = wait_ready_reason(&sandboxes, "warm", "DependenciesReady").await;
    assert_eq!(
        condition(&sb, "Ready").unwrap().message,
        "Pod is Ready; Service Exists"
    );

    let adopted = pods.get("warm").await.unwrap();
    let refs = adopted.metadata.owner_references.unwrap();
    assert_eq!(
        (refs.len(), refs[0].uid.as_str(), refs[0].controller),
        (1, uid.as_str(), Some(true))
    );
    let labels = adopted.metadata.labels.unwrap();
    assert_eq!(labels["agents.x-k8s.io/sandbox-name-hash"], hash);
    assert_eq!(
        labels["agents.x-k8s.io/adoptable"], "true",
        "authorization label left as is"
    );
    assert_eq!(labels["keep"], "me", "third-party label untouched");

    let svc = env.api::<Service>("default").get("warm").await.unwrap();
    assert_eq!(svc.metadata.owner_references.unwrap()[0].uid, uid);
    let spec = svc.spec.unwrap();
    assert_eq!(
        spec.selector.unwrap(),
        [(
            "agents.x-k8s.io/sandbox-name-hash".to_string(),
            hash.clone()
        )]
        .into()
    );
    assert_eq!(spec.ports, None, "ports follow the Sandbox (none declared)");
    let pvc = env
        .api::<PersistentVolumeClaim>("default")
        .get("data-warm")
        .await
        .unwrap();
    assert_eq!(pvc.metadata.owner_references.unwrap()[0].uid, uid);
    env.stop().await;
}

#[tokio::test]
async fn objects_owned_by_others_or_unauthorized_are_refused_and_untouched() {
    let env = Env::start(EnvOptions::default()).await;
    let pods = env.api::<Pod>("default");
    let owner = foreign_owner(&env).await;
    pods.create(
        &PostParams::default(),
        &pod("owned-elsewhere", json!({}), Some(owner.clone())),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &pod("no-label", json!({"app": "x"}), None),
    )
    .await
    .unwrap();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "has-ip", "labels": {"agents.x-k8s.io/adoptable": "true"}},
        "spec": {"ports": [{"port": 80}]}
    }))
    .unwrap();
    env.api::<Service>("default")
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();

    let sandboxes = env.sandboxes("default");
    for (name, spec) in [
        ("owned-elsewhere", json!({})),
        ("no-label", json!({})),
        ("has-ip", json!({"service": true})),
    ] {
        sandboxes
            .create(&PostParams::default(), &sandbox(name, spec))
            .await
            .unwrap();
    }
    let sb = wait_ready_reason(&sandboxes, "owned-elsewhere", "ReconcilerError").await;
    let msg = condition(&sb, "Ready").unwrap().message;
    let expected = format!(
        "pod \"owned-elsewhere\" is owned by ConfigMap/web (UID: {})",
        owner["uid"].as_str().unwrap()
    );
    assert!(msg.contains(&expected), "{msg}");
    let sb = wait_ready_reason(&sandboxes, "no-label", "ReconcilerError").await;
    let msg = condition(&sb, "Ready").unwrap().message;
    assert!(
        msg.contains("cannot adopt unowned pod \"no-label\""),
        "{msg}"
    );
    assert!(msg.contains("agents.x-k8s.io/adoptable"), "{msg}");
    let sb = wait_ready_reason(&sandboxes, "has-ip", "ReconcilerError").await;
    let msg = condition(&sb, "Ready").unwrap().message;
    assert!(
        msg.contains("cannot adopt service \"has-ip\": ClusterIP is"),
        "{msg}"
    );
    assert!(msg.contains("field is immutable"), "{msg}");

    let p = pods.get("owned-elsewhere").await.unwrap();
    assert_eq!(p.metadata.owner_references.unwrap()[0].kind, "ConfigMap");
    assert!(
        !p.metadata
            .labels
            .unwrap_or_default()
            .contains_key("agents.x-k8s.io/sandbox-name-hash")
    );
    assert!(
        pods.get("no-label")
            .await
            .unwrap()
            .metadata
            .owner_references
            .is_none()
    );
    assert!(
        env.api::<Service>("default")
            .get("has-ip")
            .await
            .unwrap()
            .metadata
            .owner_references
            .is_none()
    );
    env.stop().await;
}
