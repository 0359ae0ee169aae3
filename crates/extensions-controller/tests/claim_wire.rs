//! What clients of the reference read on the wire: every version of a claim that shows
//! `Ready=True` already carries the observability annotations and `agents.x-k8s.io/sandbox-name`,
//! and the Ready condition's `lastTransitionTime` is when the claim became Ready (never before
//! the claim existed).

use crate::harness;

use std::sync::{Arc, Mutex};

use api_types::SandboxClaim;
use api_types::keys::{
    ASSIGNED_SANDBOX_NAME_ANNOTATION, CLAIM_FIRST_READY_AT_ANNOTATION,
    CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION,
};
use e2e_tests::{DEADLINE, wait_for};
use extensions_controller::Options;
use futures::StreamExt;
use harness::{ExtEnv, NS};
use kube::runtime::watcher;
use serde_json::json;

/// Every version of claim `name` the watch delivers, in order, until the task is aborted.
fn record_versions(
    ext: &ExtEnv,
    name: &str,
) -> (Arc<Mutex<Vec<SandboxClaim>>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<Vec<SandboxClaim>>> = Arc::default();
    let sink = seen.clone();
    let api = kube::Api::<SandboxClaim>::namespaced(ext.env.client.clone(), NS);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let task = tokio::spawn(async move {
        let mut events = watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) = event {
                sink.lock().unwrap().push(c);
            }
        }
    });
    (seen, task)
}

fn is_ready(c: &SandboxClaim) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_claim_always_carries_its_annotations_and_sandbox_name() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 1).await;
    ext.wait_pool_ready("pool", 1).await;
    // The member became Ready before the claim exists: its Ready transition time is older than
    // the claim (creation timestamps have whole seconds, so make the gap at least one).
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (versions, watch) = record_versions(&ext, "wire");
    // The watch is established before the create (its initial list is empty).
    wait_for("the claim watch", DEADLINE, || async {
        Some(()).filter(|_| !watch.is_finished())
    })
    .await;
    ext.create_claim("wire", "pool", json!({})).await;
    let bound = ext.wait_claim_reason("wire", "DependenciesReady").await;
    wait_for("the Ready version through the watch", DEADLINE, || async {
        versions.lock().unwrap().iter().any(is_ready).then_some(())
    })
    .await;
    watch.abort();
    let sandbox = bound.status.as_ref().unwrap().sandbox.name.clone();
    assert_ne!(sandbox, "wire", "warm");
    for version in versions.lock().unwrap().iter().filter(|c| is_ready(c)) {
        let annotations = version.metadata.annotations.clone().unwrap_or_default();
        for key in [
            CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION,
            CLAIM_FIRST_READY_AT_ANNOTATION,
        ] {
            assert!(
                annotations.contains_key(key),
                "Ready at resourceVersion {:?} without {key}: {annotations:?}",
                version.metadata.resource_version
            );
        }
        assert_eq!(
            annotations.get(ASSIGNED_SANDBOX_NAME_ANNOTATION),
            Some(&sandbox),
            "Ready at resourceVersion {:?} without the sandbox-name annotation",
            version.metadata.resource_version
        );
        let created = version.metadata.creation_timestamp.clone().unwrap().0;
        let ready = version
            .status
            .as_ref()
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert!(
            ready.last_transition_time.0 >= created,
            "Ready lastTransitionTime {} is before the claim's creation {created}",
            ready.last_transition_time.0
        );
    }
    ext.stop().await;
}
