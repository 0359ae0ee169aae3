//! The controller adopts nothing it did not create (`docs/security.md`): a Pod, Service or PVC
//! planted under the name a Sandbox needs, whatever its labels (the tracking label,
//! `agents.x-k8s.io/adoptable`), is refused and left untouched, the Sandbox says so (Ready
//! False, a Warning Event), and it recovers once the object is gone. On devcluster.

use e2e_tests::{DEADLINE, Env, EnvOptions, condition, sandbox, wait_for, wait_ready_reason};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

fn pod(name: &str, labels: serde_json::Value, owner: Option<serde_json::Value>) -> Pod {
    let mut v = json!({"metadata": {"name": name, "labels": labels},
                       "spec": {"containers": [{"name": "c", "image": "planter.example/evil:1"}]}});
    if let Some(o) = owner {
        v["metadata"]["ownerReferences"] = json!([o]);
    }
    serde_json::from_value(v).unwrap()
}

/// Every label the reference accepts as authorization to adopt `sandbox`'s children.
fn authorization_labels(sandbox: &str) -> serde_json::Value {
    json!({"agents.x-k8s.io/adoptable": "true",
           "agents.x-k8s.io/sandbox-name-hash": api_types::name_hash(sandbox),
           "keep": "me"})
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

/// Waits for a Warning Event on the Sandbox `name` whose note contains `text`.
async fn wait_warning(env: &Env, name: &str, text: &str) -> Event {
    let events = env.api::<Event>("default");
    wait_for(
        &format!("a Warning event on {name} saying {text:?}"),
        DEADLINE,
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.note.as_deref().is_some_and(|n| n.contains(text))
                })
        },
    )
    .await
}

#[tokio::test]
async fn a_pod_planted_before_its_sandbox_is_refused_until_deleted() {
    let env = Env::start(EnvOptions::default()).await;
    let pods = env.api::<Pod>("default");
    pods.create(
        &PostParams::default(),
        &pod("target", authorization_labels("target"), None),
    )
    .await
    .unwrap();

    let sandboxes = env.sandboxes("default");
    sandboxes
        .create(&PostParams::default(), &sandbox("target", json!({})))
        .await
        .unwrap();
    let sb = wait_ready_reason(&sandboxes, "target", "ReconcilerError").await;
    let message = condition(&sb, "Ready").unwrap().message;
    assert!(
        message.contains(
            "pod \"target\" exists but was not created by sandbox \"target\" (it has no controller owner reference)"
        ),
        "{message}"
    );
    let status = sb.status.unwrap();
    assert!(
        status.pod_ips.is_empty(),
        "the planted Pod's address is not reported: {status:?}"
    );
    wait_warning(&env, "target", "pod \"target\" exists but was not created").await;
    let planted = pods.get("target").await.unwrap();
    assert!(
        planted.metadata.owner_references.is_none(),
        "planted Pod untouched"
    );
    assert_eq!(
        planted.spec.unwrap().containers[0].image.as_deref(),
        Some("planter.example/evil:1")
    );

    // Once the planted Pod is gone, the Sandbox gets a Pod of its own.
    pods.delete("target", &DeleteParams::default())
        .await
        .unwrap();
    let sb = wait_ready_reason(&sandboxes, "target", "DependenciesReady").await;
    let own = pods.get("target").await.unwrap();
    let refs = own.metadata.owner_references.unwrap();
    assert_eq!(refs[0].uid, sb.metadata.uid.unwrap());
    assert_eq!(
        own.spec.unwrap().containers[0].image.as_deref(),
        Some("busybox:1.36")
    );
    env.stop().await;
}

#[tokio::test]
async fn a_planted_service_or_pvc_is_refused_and_untouched() {
    let env = Env::start(EnvOptions::default()).await;
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "svc-target", "labels": authorization_labels("svc-target")},
        "spec": {"clusterIP": "None", "selector": {"app": "planter"}, "ports": [{"port": 9090}]}
    }))
    .unwrap();
    env.api::<Service>("default")
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data-pvc-target", "labels": authorization_labels("pvc-target")},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    env.api::<PersistentVolumeClaim>("default")
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();

    let sandboxes = env.sandboxes("default");
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox("svc-target", json!({"service": true})),
        )
        .await
        .unwrap();
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox(
                "pvc-target",
                json!({"volumeClaimTemplates": [{"metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}),
            ),
        )
        .await
        .unwrap();
    let sb = wait_ready_reason(&sandboxes, "svc-target", "ReconcilerError").await;
    let message = condition(&sb, "Ready").unwrap().message;
    assert!(
        message.contains("service \"svc-target\" exists but was not created by sandbox"),
        "{message}"
    );
    let sb = wait_ready_reason(&sandboxes, "pvc-target", "ReconcilerError").await;
    let message = condition(&sb, "Ready").unwrap().message;
    assert!(
        message.contains("PVC \"data-pvc-target\" exists but was not created by sandbox"),
        "{message}"
    );

    let svc = env
        .api::<Service>("default")
        .get("svc-target")
        .await
        .unwrap();
    assert!(svc.metadata.owner_references.is_none());
    assert_eq!(
        svc.spec.unwrap().selector.unwrap(),
        [("app".to_string(), "planter".to_string())].into(),
        "its selector is not rewritten"
    );
    let pvc = env
        .api::<PersistentVolumeClaim>("default")
        .get("data-pvc-target")
        .await
        .unwrap();
    assert!(pvc.metadata.owner_references.is_none());
    env.stop().await;
}

#[tokio::test]
async fn objects_owned_by_others_are_refused_and_untouched() {
    let env = Env::start(EnvOptions::default()).await;
    let pods = env.api::<Pod>("default");
    let owner = foreign_owner(&env).await;
    pods.create(
        &PostParams::default(),
        &pod("owned-elsewhere", json!({}), Some(owner.clone())),
    )
    .await
    .unwrap();

    let sandboxes = env.sandboxes("default");
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox("owned-elsewhere", json!({})),
        )
        .await
        .unwrap();
    let sb = wait_ready_reason(&sandboxes, "owned-elsewhere", "ReconcilerError").await;
    let msg = condition(&sb, "Ready").unwrap().message;
    let expected = format!(
        "pod \"owned-elsewhere\" is owned by ConfigMap/web (UID: {})",
        owner["uid"].as_str().unwrap()
    );
    assert!(msg.contains(&expected), "{msg}");

    let p = pods.get("owned-elsewhere").await.unwrap();
    assert_eq!(p.metadata.owner_references.unwrap()[0].kind, "ConfigMap");
    assert!(
        !p.metadata
            .labels
            .unwrap_or_default()
            .contains_key("agents.x-k8s.io/sandbox-name-hash")
    );
    env.stop().await;
}
