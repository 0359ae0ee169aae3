//! Suspend and resume through `spec.operatingMode` on devcluster.

use api_types::{OperatingMode, Sandbox};
use e2e_tests::{
    DEADLINE, Env, EnvOptions, condition, sandbox, wait_for, wait_ready_reason, wait_sandbox,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

async fn set_mode(api: &Api<Sandbox>, name: &str, mode: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"operatingMode": mode}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn suspend_deletes_the_pod_keeps_the_rest_and_resume_recreates_it() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    let pods = env.api::<Pod>("default");
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox(
                "nap",
                json!({"service": true, "volumeClaimTemplates": [{"metadata": {"name": "home"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}),
            ),
        )
        .await
        .unwrap();
    wait_ready_reason(&sandboxes, "nap", "DependenciesReady").await;
    let first_uid = pods.get("nap").await.unwrap().metadata.uid;

    set_mode(&sandboxes, "nap", "Suspended").await;
    let sb = wait_sandbox(&sandboxes, "nap", "suspended", |s| {
        condition(s, "Suspended").is_some_and(|c| c.status == "True")
    })
    .await;
    assert_eq!(sb.spec.effective_operating_mode(), OperatingMode::Suspended);
    let ready = condition(&sb, "Ready").unwrap();
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_str(),
            ready.message.as_str()
        ),
        ("False", "SandboxSuspended", "Sandbox is suspended")
    );
    assert_eq!(condition(&sb, "Suspended").unwrap().reason, "PodTerminated");
    assert!(
        condition(&sb, "PodScheduled").is_none(),
        "PodScheduled goes with the Pod"
    );
    let status = sb.status.unwrap();
    assert!(status.pod_ips.is_empty() && status.node_name.is_empty());
    assert!(pods.get_opt("nap").await.unwrap().is_none());
    assert!(
        env.api::<Service>("default")
            .get_opt("nap")
            .await
            .unwrap()
            .is_some(),
        "Service kept"
    );
    assert!(
        env.api::<PersistentVolumeClaim>("default")
            .get_opt("home-nap")
            .await
            .unwrap()
            .is_some(),
        "PVC kept"
    );

    set_mode(&sandboxes, "nap", "Running").await;
    let sb = wait_ready_reason(&sandboxes, "nap", "DependenciesReady").await;
    assert_eq!(condition(&sb, "Suspended").unwrap().reason, "NotSuspended");
    let pod = pods.get("nap").await.unwrap();
    assert_ne!(pod.metadata.uid, first_uid, "a new Pod");
    let claim = pod
        .spec
        .unwrap()
        .volumes
        .unwrap()
        .iter()
        .find_map(|v| v.persistent_volume_claim.clone())
        .unwrap();
    assert_eq!(claim.claim_name, "home-nap", "same PVC mounted again");
    env.stop().await;
}

#[tokio::test]
async fn suspend_never_deletes_a_pod_it_does_not_own() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    let pods = env.api::<Pod>("default");
    let foreign: Pod = serde_json::from_value(json!({
        "metadata": {"name": "squatter", "labels": {"app": "other"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &foreign).await.unwrap();
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox("squatter", json!({"operatingMode": "Suspended"})),
        )
        .await
        .unwrap();
    let sb = wait_sandbox(&sandboxes, "squatter", "PodNotOwned", |s| {
        condition(s, "Suspended").is_some_and(|c| c.reason == "PodNotOwned")
    })
    .await;
    assert_eq!(condition(&sb, "Suspended").unwrap().status, "False");
    assert_eq!(condition(&sb, "Ready").unwrap().reason, "SandboxSuspended");
    let status = sb.status.unwrap();
    assert!(
        status.pod_ips.is_empty() && status.node_name.is_empty(),
        "no IP or node of a foreign Pod"
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let pod = pods.get("squatter").await.unwrap();
    assert!(pod.metadata.deletion_timestamp.is_none() && pod.metadata.owner_references.is_none());
    wait_for("still there", DEADLINE, || async {
        pods.get_opt("squatter").await.ok().flatten()
    })
    .await;
    env.stop().await;
}
