//! Expiry by `spec.shutdownTime` under both shutdown policies, on devcluster.

use e2e_tests::{DEADLINE, Env, EnvOptions, condition, sandbox, wait_for, wait_ready_reason};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use serde_json::json;

fn in_ms(ms: i64) -> String {
    (Timestamp::now() + SignedDuration::from_millis(ms)).to_string()
}

#[tokio::test]
async fn retain_policy_clears_children_and_status_at_shutdown_time() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox(
                "ttl",
                json!({"service": true, "shutdownTime": in_ms(3000),
                       "volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}),
            ),
        )
        .await
        .unwrap();
    // Ready first; then, with no other event, the controller wakes up at shutdownTime.
    let ready = wait_ready_reason(&sandboxes, "ttl", "DependenciesReady").await;
    assert!(condition(&ready, "Ready").is_some_and(|c| c.status == "True"));
    let sb = wait_ready_reason(&sandboxes, "ttl", "SandboxExpired").await;
    let cond = condition(&sb, "Ready").unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.message.as_str()),
        ("False", "Sandbox has expired")
    );
    wait_for("pod and service deleted", DEADLINE, || async {
        let pod = env.api::<Pod>("default").get_opt("ttl").await.ok()?;
        let svc = env.api::<Service>("default").get_opt("ttl").await.ok()?;
        (pod.is_none() && svc.is_none()).then_some(())
    })
    .await;
    let sb = sandboxes.get("ttl").await.unwrap();
    let status = sb.status.clone().unwrap();
    assert!(
        status.service.is_empty()
            && status.service_fqdn.is_empty()
            && status.label_selector.is_empty()
    );
    assert!(status.pod_ips.is_empty() && status.node_name.is_empty());
    assert!(condition(&sb, "PodScheduled").is_none());
    assert!(
        env.api::<PersistentVolumeClaim>("default")
            .get_opt("d-ttl")
            .await
            .unwrap()
            .is_some(),
        "PVC kept"
    );
    // Nothing comes back later.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        env.api::<Pod>("default")
            .get_opt("ttl")
            .await
            .unwrap()
            .is_none()
    );
    env.stop().await;
}

#[tokio::test]
async fn delete_policy_removes_the_sandbox() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox(
                "bye",
                json!({"shutdownTime": in_ms(1500), "shutdownPolicy": "Delete"}),
            ),
        )
        .await
        .unwrap();
    wait_for("pod", DEADLINE, || async {
        env.api::<Pod>("default")
            .get_opt("bye")
            .await
            .ok()
            .flatten()
    })
    .await;
    wait_for("sandbox deleted", DEADLINE, || async {
        sandboxes
            .get_opt("bye")
            .await
            .ok()
            .filter(Option::is_none)
            .map(|_| ())
    })
    .await;
    wait_for("pod deleted", DEADLINE, || async {
        env.api::<Pod>("default")
            .get_opt("bye")
            .await
            .ok()
            .filter(Option::is_none)
            .map(|_| ())
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn extending_shutdown_time_revives_an_expired_sandbox() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox("again", json!({"shutdownTime": "2020-01-01T00:00:00Z"})),
        )
        .await
        .unwrap();
    wait_ready_reason(&sandboxes, "again", "SandboxExpired").await;
    e2e_tests::update_sandbox(&sandboxes, "again", |sb| sb.spec.shutdown_time = None).await;
    wait_ready_reason(&sandboxes, "again", "DependenciesReady").await;
    env.stop().await;
}
