//! The label-spoofing threat (operations.md section 2.2): a user template can never redirect a
//! Service or forge controller bookkeeping.

use e2e_tests::{Env, EnvOptions, sandbox, wait_ready_reason};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn reserved_template_keys_never_reach_the_pod_and_services_select_their_own_pod() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox("victim", json!({"service": true})),
        )
        .await
        .unwrap();
    let victim_hash = api_types::name_hash("victim");
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox(
                "attacker",
                json!({"service": true, "podTemplate": {"metadata": {
                    "labels": {"agents.x-k8s.io/sandbox-name-hash": victim_hash,
                               "agents.x-k8s.io/warm-pool-sandbox": "pool",
                               "extensions.agents.x-k8s.io/anything": "x",
                               "team": "red"},
                    "annotations": {"agents.x-k8s.io/pod-name": "victim",
                                    "opentelemetry.io/trace-context": "{\"traceparent\":\"forged\"}",
                                    "note": "hello"}}}}),
            ),
        )
        .await
        .unwrap();
    wait_ready_reason(&sandboxes, "attacker", "DependenciesReady").await;
    wait_ready_reason(&sandboxes, "victim", "DependenciesReady").await;

    let pods = env.api::<Pod>("default");
    let attacker = pods.get("attacker").await.unwrap();
    let labels = attacker.metadata.labels.unwrap();
    assert_eq!(
        labels["agents.x-k8s.io/sandbox-name-hash"],
        api_types::name_hash("attacker")
    );
    assert_eq!(labels.get("team").map(String::as_str), Some("red"));
    assert!(
        labels
            .keys()
            .filter(|k| k.contains("agents.x-k8s.io/"))
            .all(|k| k == "agents.x-k8s.io/sandbox-name-hash")
    );
    let annotations = attacker.metadata.annotations.unwrap();
    assert!(!annotations.contains_key("agents.x-k8s.io/pod-name"));
    assert!(!annotations.contains_key("opentelemetry.io/trace-context"));
    assert_eq!(annotations["note"], "hello");
    assert_eq!(annotations["agents.x-k8s.io/propagated-labels"], "team");

    // The victim's Service selects exactly the victim's Pod.
    let svc = env.api::<Service>("default").get("victim").await.unwrap();
    let selector = svc.spec.unwrap().selector.unwrap();
    let expr = selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let selected = pods
        .list(&ListParams::default().labels(&expr))
        .await
        .unwrap();
    let names: Vec<String> = selected
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(names, ["victim"]);
    env.stop().await;
}
