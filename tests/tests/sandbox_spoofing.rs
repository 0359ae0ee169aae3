//! The label-spoofing threat (operations.md section 2.2): a user template can never redirect a
//! Service or forge controller bookkeeping, and a Pod planted with a Sandbox's tracking label
//! (which its Service selects) makes that Sandbox not Ready until it is gone
//! (`docs/security.md`).

use e2e_tests::{DEADLINE, Env, EnvOptions, condition, sandbox, wait_for, wait_ready_reason};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, PostParams};
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

#[tokio::test]
async fn a_pod_planted_with_a_sandboxs_tracking_label_fails_its_readiness_until_removed() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    for (name, spec) in [
        ("victim", json!({"service": true})),
        ("no-service", json!({})),
    ] {
        sandboxes
            .create(&PostParams::default(), &sandbox(name, spec))
            .await
            .unwrap();
        wait_ready_reason(&sandboxes, name, "DependenciesReady").await;
    }

    // Another name, so nothing is adopted, but the label the victim's Service selects.
    let pods = env.api::<Pod>("default");
    for (intruder, target) in [("intruder", "victim"), ("bystander", "no-service")] {
        let planted: Pod = serde_json::from_value(json!({
            "metadata": {"name": intruder,
                         "labels": {"agents.x-k8s.io/sandbox-name-hash": api_types::name_hash(target)}},
            "spec": {"containers": [{"name": "c", "image": "planter.example/evil:1"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &planted).await.unwrap();
    }

    let sb = wait_ready_reason(&sandboxes, "victim", "ReconcilerError").await;
    let message = condition(&sb, "Ready").unwrap().message;
    assert!(
        message.contains(
            "service \"victim\" selects pod(s) not created by this sandbox: \"intruder\""
        ),
        "{message}"
    );
    let events = env.api::<Event>("default");
    wait_for("a Warning event naming the intruder", DEADLINE, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("victim")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("\"intruder\""))
            })
    })
    .await;
    // Without a Service nothing routes to the Sandbox by its label: it stays Ready.
    let bystander = sandboxes.get("no-service").await.unwrap();
    assert_eq!(
        condition(&bystander, "Ready").unwrap().reason,
        "DependenciesReady"
    );
    let intruder = pods.get("intruder").await.unwrap();
    assert!(
        intruder.metadata.owner_references.is_none(),
        "the intruder is neither adopted nor touched"
    );

    pods.delete("intruder", &DeleteParams::default())
        .await
        .unwrap();
    wait_ready_reason(&sandboxes, "victim", "DependenciesReady").await;
    env.stop().await;
}
