//! Expiry by `spec.shutdownTime` under both shutdown policies, on devcluster and on the real
//! control plane (where the pod finisher ends Pods whose commands end).

use e2e_tests::{
    DEADLINE, Env, EnvOptions, condition, sandbox, wait_for, wait_ready_reason, wait_sandbox,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams, PostParams};
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
                json!({"service": true, "shutdownTime": in_ms(3_600_000),
                       "volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}),
            ),
        )
        .await
        .unwrap();
    // Ready first (however long the ground takes); then the shutdown time moves to 2 s from now
    // and, with no other event, the controller wakes up at it.
    let ready = wait_ready_reason(&sandboxes, "ttl", "DependenciesReady").await;
    assert!(condition(&ready, "Ready").is_some_and(|c| c.status == "True"));
    sandboxes
        .patch(
            "ttl",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shutdownTime": in_ms(2000)}})),
        )
        .await
        .unwrap();
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
    // The Pod usually shows up first; on a slow ground the Sandbox can expire before its first
    // pass, and then no Pod is ever made (the expiry wins), so either counts here.
    wait_for("pod, or the sandbox already gone", DEADLINE, || async {
        let pod = env.api::<Pod>("default").get_opt("bye").await.ok()?;
        let sandbox = sandboxes.get_opt("bye").await.ok()?;
        (pod.is_some() || sandbox.is_none()).then_some(())
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

/// A Sandbox whose one container runs `script` under the Pod restart policy `policy`.
fn finishing(
    name: &str,
    policy: &str,
    script: &str,
    extra: serde_json::Value,
) -> api_types::Sandbox {
    let mut spec = json!({"podTemplate": {"spec": {
        "restartPolicy": policy,
        "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script]}],
    }}});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    sandbox(name, spec)
}

#[tokio::test]
async fn a_finished_sandbox_keeps_finished_through_retain_expiry() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    sandboxes
        .create(
            &PostParams::default(),
            &finishing("job", "Never", "sleep 1; exit 0", json!({"service": true})),
        )
        .await
        .unwrap();
    let done = wait_ready_reason(&sandboxes, "job", "PodSucceeded").await;
    let finished = condition(&done, "Finished").expect("Finished once the Pod succeeded");
    assert_eq!(
        (
            finished.status.as_str(),
            finished.reason.as_str(),
            finished.message.as_str()
        ),
        ("True", "PodSucceeded", "Pod completed successfully")
    );
    let ready = condition(&done, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.message.as_str()),
        ("False", "Pod completed successfully")
    );
    let pod = env.api::<Pod>("default").get("job").await.unwrap();
    assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Succeeded"));

    // Retain expiry after the finish: children go, Finished stays.
    e2e_tests::update_sandbox(&sandboxes, "job", |sb| {
        sb.spec.shutdown_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::now() - SignedDuration::from_secs(1),
        ));
    })
    .await;
    let expired = wait_ready_reason(&sandboxes, "job", "SandboxExpired").await;
    let kept = condition(&expired, "Finished").expect("Finished kept across expiry");
    assert_eq!(
        (kept.status.as_str(), kept.reason.as_str()),
        ("True", "PodSucceeded")
    );
    assert_eq!(kept.last_transition_time, finished.last_transition_time);
    assert!(condition(&expired, "PodScheduled").is_none());
    wait_for("pod and service deleted", DEADLINE, || async {
        let pod = env.api::<Pod>("default").get_opt("job").await.ok()?;
        let svc = env.api::<Service>("default").get_opt("job").await.ok()?;
        (pod.is_none() && svc.is_none()).then_some(())
    })
    .await;
    let sb = sandboxes.get("job").await.unwrap();
    assert!(condition(&sb, "Finished").is_some_and(|c| c.reason == "PodSucceeded"));
    env.stop().await;
}

#[tokio::test]
async fn a_failed_sandbox_finishes_and_its_delete_policy_removes_it_at_shutdown() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    sandboxes
        .create(
            &PostParams::default(),
            &finishing(
                "crash",
                "Never",
                "exit 2",
                json!({"shutdownPolicy": "Delete"}),
            ),
        )
        .await
        .unwrap();
    let failed = wait_ready_reason(&sandboxes, "crash", "PodFailed").await;
    let finished = condition(&failed, "Finished").unwrap();
    assert_eq!(
        (
            finished.status.as_str(),
            finished.reason.as_str(),
            finished.message.as_str()
        ),
        ("True", "PodFailed", "Pod failed")
    );
    e2e_tests::update_sandbox(&sandboxes, "crash", |sb| {
        sb.spec.shutdown_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::now() - SignedDuration::from_secs(1),
        ));
    })
    .await;
    wait_for("sandbox and pod deleted", DEADLINE, || async {
        let sb = sandboxes.get_opt("crash").await.ok()?;
        let pod = env.api::<Pod>("default").get_opt("crash").await.ok()?;
        (sb.is_none() && pod.is_none()).then_some(())
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn a_pod_restarted_always_never_finishes_its_sandbox() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    sandboxes
        .create(
            &PostParams::default(),
            &finishing("loop", "Always", "exit 0", json!({})),
        )
        .await
        .unwrap();
    // The container exits, is restarted at once, exits again and waits out the back-off.
    let pods = env.api::<Pod>("default");
    let restarted = wait_for("container in back-off", DEADLINE, || async {
        let pod = pods.get_opt("loop").await.ok()??;
        let cs = pod
            .status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .first()?
            .clone();
        let waiting = cs.state?.waiting?;
        (waiting.reason.as_deref() == Some("CrashLoopBackOff")).then_some(pod)
    })
    .await;
    assert_eq!(restarted.status.unwrap().phase.as_deref(), Some("Running"));
    let sb = wait_sandbox(&sandboxes, "loop", "Ready reflects the unready Pod", |sb| {
        condition(sb, "Ready")
            .is_some_and(|c| c.message.starts_with("Pod is Running but not Ready"))
    })
    .await;
    assert!(
        condition(&sb, "Finished").is_none(),
        "a restarting Pod is not finished"
    );
    env.stop().await;
}
