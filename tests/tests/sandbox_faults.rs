//! Bad input and faults: a Pod the API server rejects, several owned Pods, and a controller
//! killed in the middle of a burst.

use std::time::Duration;

use e2e_tests::{
    DEADLINE, Env, EnvOptions, condition, ready, sandbox, wait_for, wait_ready_reason,
};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn a_pod_the_server_rejects_is_reported_and_does_not_block_others() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    // Accepted by the Sandbox schema, rejected by the Pod API (containers: Required value).
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox(
                "broken",
                json!({"podTemplate": {"spec": {"containers": []}}}),
            ),
        )
        .await
        .unwrap();
    sandboxes
        .create(&PostParams::default(), &sandbox("fine", json!({})))
        .await
        .unwrap();
    let sb = wait_ready_reason(&sandboxes, "broken", "ReconcilerError").await;
    let msg = condition(&sb, "Ready").unwrap().message;
    assert!(msg.starts_with("Error seen: "), "{msg}");
    assert!(
        msg.contains("spec.containers"),
        "the server's message reaches the user: {msg}"
    );
    wait_ready_reason(&sandboxes, "fine", "DependenciesReady").await;

    // Fixing the spec recovers it.
    e2e_tests::update_sandbox(&sandboxes, "broken", |fixed| {
        fixed.spec.blueprint.pod_template.spec.containers =
            vec![k8s_openapi::api::core::v1::Container {
                name: "main".into(),
                image: Some("busybox:1.36".into()),
                ..Default::default()
            }];
    })
    .await;
    wait_ready_reason(&sandboxes, "broken", "DependenciesReady").await;
    env.stop().await;
}

#[tokio::test]
async fn two_owned_pods_are_refused_without_a_hot_loop() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    let created = sandboxes
        .create(&PostParams::default(), &sandbox("twin", json!({})))
        .await
        .unwrap();
    wait_ready_reason(&sandboxes, "twin", "DependenciesReady").await;
    let extra: Pod = serde_json::from_value(json!({
        "metadata": {"name": "twin-2", "labels": {"agents.x-k8s.io/sandbox-name-hash": api_types::name_hash("twin")},
                     "ownerReferences": [{"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "name": "twin",
                                          "uid": created.metadata.uid, "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}
    }))
    .unwrap();
    env.api::<Pod>("default")
        .create(&PostParams::default(), &extra)
        .await
        .unwrap();
    let sb = wait_ready_reason(&sandboxes, "twin", "MultiplePods").await;
    assert_eq!(
        condition(&sb, "Ready").unwrap().message,
        "multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod"
    );
    let rv = sb.metadata.resource_version.clone();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        sandboxes
            .get("twin")
            .await
            .unwrap()
            .metadata
            .resource_version,
        rv,
        "no further writes"
    );
    assert_eq!(
        env.api::<Pod>("default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2,
        "nothing deleted"
    );
    env.stop().await;
}

#[tokio::test]
async fn killed_mid_burst_the_controller_converges_after_restart() {
    const N: usize = 150;
    let mut env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    for i in 0..N {
        sandboxes
            .create(
                &PostParams::default(),
                &sandbox(&format!("b-{i}"), json!({"service": true})),
            )
            .await
            .unwrap();
    }
    let pods = env.api::<Pod>("default");
    wait_for("a part of the burst", DEADLINE, || async {
        let n = pods.list(&ListParams::default()).await.ok()?.items.len();
        (n >= N / 5).then_some(())
    })
    .await;
    env.kill_controller();
    env.start_controller();
    wait_for("every Sandbox ready", Duration::from_secs(120), || async {
        let all = sandboxes.list(&ListParams::default()).await.ok()?;
        all.items
            .iter()
            .all(|s| ready(s).is_some_and(|(st, _)| st == "True"))
            .then_some(())
    })
    .await;
    let pods = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(pods.len(), N, "one Pod per Sandbox, no duplicates");
    let services = env
        .api::<Service>("default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(
        services
            .iter()
            .filter(|s| s.metadata.name.as_deref() != Some("kubernetes"))
            .count(),
        N
    );
    for sb in sandboxes.list(&ListParams::default()).await.unwrap().items {
        let name = sb.metadata.name.clone().unwrap();
        let pod = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
            .expect("pod named after sandbox");
        assert_eq!(
            pod.metadata.owner_references.as_ref().unwrap()[0].uid,
            sb.metadata.uid.clone().unwrap()
        );
    }
    env.stop().await;
}

#[tokio::test]
async fn api_errors_throttling_and_dropped_watches_are_retried_until_converged() {
    if !e2e_tests::devcluster_only(
        "api_errors_throttling_and_dropped_watches_are_retried_until_converged",
        "it injects API errors and compacts the watch history through devcluster's observer",
    ) {
        return;
    }
    use devcluster::observe::{FaultConfig, FaultRule, WatchClose};

    const N: usize = 20;
    let env = Env::start(EnvOptions::default()).await;
    let rule = |verbs: &[&str], resources: &[&str], code: u16, rate: f64| FaultRule {
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        resources: resources.iter().map(|s| s.to_string()).collect(),
        error_rate: rate,
        error_code: code,
        ..FaultRule::default()
    };
    env.cluster
        .observer()
        .set_faults(FaultConfig {
            rules: vec![
                rule(&["create"], &["pods", "services"], 500, 0.4),
                rule(&["patch"], &["sandboxes.agents.x-k8s.io/status"], 429, 0.3),
                rule(&["patch"], &["sandboxes.agents.x-k8s.io"], 503, 0.3),
            ],
            watch_close: Some(WatchClose {
                probability: 0.5,
                min_after: Duration::from_millis(100),
                max_after: Duration::from_millis(800),
            }),
            seed: Some(7),
            retry_after_seconds: 0,
        })
        .unwrap();
    let sandboxes = env.sandboxes("default");
    for i in 0..N {
        sandboxes
            .create(
                &PostParams::default(),
                &sandbox(&format!("f-{i}"), json!({"service": true})),
            )
            .await
            .unwrap();
        if i == N / 2 {
            // Expire every watch's resourceVersion: watchers must relist (410 Gone).
            env.cluster.compact_history();
        }
    }
    wait_for(
        "every Sandbox ready despite the faults",
        Duration::from_secs(90),
        || async {
            let all = sandboxes.list(&ListParams::default()).await.ok()?;
            (all.items.len() == N
                && all
                    .items
                    .iter()
                    .all(|s| ready(s).is_some_and(|(st, _)| st == "True")))
            .then_some(())
        },
    )
    .await;
    env.cluster
        .observer()
        .set_faults(FaultConfig::default())
        .unwrap();
    let pods = env
        .api::<Pod>("default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(
        pods.len(),
        N,
        "one Pod each, no duplicates from retried creates"
    );
    env.stop().await;
}
