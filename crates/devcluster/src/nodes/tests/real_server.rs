//! The node agent against the devcluster API server itself (over HTTP, through its kubeconfig
//! client), as it runs in end-to-end tests.

use super::*;
use crate::{Config, DevCluster, Running};

async fn cluster(cfg: NodeConfig) -> (Running, Harness) {
    let running = DevCluster::start(Config {
        // This test attaches its own agent, so the server must not run one.
        node_agent: false,
        ..Config::ephemeral()
    })
    .await
    .unwrap();
    let harness = Harness::with_client(running.client(), cfg);
    (running, harness)
}

#[tokio::test]
async fn pods_go_running_and_ready_on_the_real_server() {
    let (running, h) = cluster(NodeConfig::default()).await;
    let api = h.pods();
    create_pod(&api, "web").await;
    let pod = wait_running(&api, "web").await;
    let status = pod.status.as_ref().unwrap();
    let ip: Ipv4Addr = status.pod_ip.as_deref().unwrap().parse().unwrap();
    assert!(ip.is_loopback());
    for t in [
        "PodScheduled",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodReadyToStartContainers",
    ] {
        assert_eq!(condition_status(&pod, t).as_deref(), Some("True"), "{t}");
    }
    h.stop().await;
    running.shutdown().await;
}

#[tokio::test]
async fn conditions_of_other_writers_survive_the_kubelet_patch() {
    let (running, h) = cluster(NodeConfig {
        startup_delay: Delay::Fixed(Duration::from_millis(500)),
        ..NodeConfig::default()
    })
    .await;
    let api = h.pods();
    create_pod(&api, "gated").await;
    // Another controller sets its own condition before the pod starts.
    let patch = json!({ "status": { "conditions": [
        { "type": "example.com/Warm", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z" }
    ] } });
    api.patch_status("gated", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    let pod = wait_running(&api, "gated").await;
    assert_eq!(
        condition_status(&pod, "example.com/Warm").as_deref(),
        Some("True")
    );
    h.stop().await;
    running.shutdown().await;
}

#[tokio::test]
async fn unschedulable_pods_stay_pending_on_the_real_server() {
    let (running, h) = cluster(NodeConfig {
        unschedulable_fraction: 1.0,
        ..NodeConfig::default()
    })
    .await;
    let api = h.pods();
    create_pod(&api, "stuck").await;
    let pod = eventually("PodScheduled=False", || async {
        let pod = api.get("stuck").await.ok()?;
        (condition_status(&pod, "PodScheduled").as_deref() == Some("False")).then_some(pod)
    })
    .await;
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );
    assert!(pod.spec.as_ref().unwrap().node_name.is_none());
    h.stop().await;
    running.shutdown().await;
}

#[tokio::test]
async fn deletes_and_claims_complete_on_the_real_server() {
    let (running, h) = cluster(NodeConfig::default()).await;
    let api = h.pods();
    create_pod(&api, "doomed").await;
    wait_running(&api, "doomed").await;
    api.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    eventually("pod gone", || async {
        matches!(api.get("doomed").await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
    })
    .await;

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(h.client.clone(), "default");
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": { "name": "data" },
        "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "2Gi" } } }
    }))
    .unwrap();
    claims.create(&PostParams::default(), &pvc).await.unwrap();
    let bound = eventually("claim Bound", || async {
        let pvc = claims.get("data").await.ok()?;
        (pvc.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(pvc)
    })
    .await;
    assert_eq!(bound.status.unwrap().capacity.unwrap()["storage"].0, "2Gi");
    h.stop().await;
    running.shutdown().await;
}

#[tokio::test]
async fn many_pods_all_start_with_distinct_addresses() {
    const PODS: usize = 300;
    let (running, h) = cluster(NodeConfig::default()).await;
    let api = h.pods();
    let started = Instant::now();
    for i in 0..PODS {
        create_pod(&api, &format!("p{i}")).await;
    }
    let pods = eventually("every pod Running", || async {
        let list = api.list(&Default::default()).await.ok()?;
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == PODS).then_some(list.items)
    })
    .await;
    let elapsed = started.elapsed();
    let ips: std::collections::HashSet<_> = pods
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    assert_eq!(ips.len(), PODS, "every pod has its own IP");
    let nodes: std::collections::HashSet<_> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(nodes.len(), 3, "pods spread over the three nodes");
    // A figure for the docs, not an assertion (tests never assert a time).
    println!("{PODS} pods created and Running in {elapsed:?}");
    h.stop().await;
    running.shutdown().await;
}
