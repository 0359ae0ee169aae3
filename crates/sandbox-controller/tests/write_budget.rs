//! What the controller writes, counted by verb and resource, for the two paths that dominate a
//! busy cluster: a new Sandbox going to Ready, and a warm-pool Sandbox taken over by a claim.

use crate::{cluster, harness};

use std::collections::BTreeMap;
use std::time::Duration;

use cluster::Cluster;
use harness::*;
use serde_json::json;

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// The scheduler's and the kubelet's usual sequence, reported in quick succession: scheduled,
/// running, ready.
async fn start_pod(api: &Cluster, name: &str, ip: &str) {
    api.bind_pod(name, "node-1").await;
    api.patch_pod_status(name, json!({"phase": "Running"}))
        .await;
    api.patch_pod_status(
        name,
        json!({"podIP": ip, "podIPs": [{"ip": ip}], "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True"}
        ]}),
    )
    .await;
}

async fn wait_ready(api: &Cluster, name: &str) {
    wait_for("Ready", || {
        api.get("sandboxes", NS, name)
            .filter(|s| condition(s, "Ready").is_some_and(|c| c.0 == "True"))
    })
    .await;
}

const WINDOW: Duration = Duration::from_secs(2);

#[tokio::test]
async fn a_new_sandbox_reaches_ready_with_one_status_write() {
    let api = Cluster::start().await;
    let ctl = start_controller_with(&api, |s| s.status_progress_window = WINDOW);
    api.apply("sandboxes", sandbox("fresh", json!({}))).await;
    wait_for("pod", || api.get("pods", NS, "fresh")).await;
    start_pod(&api, "fresh", "127.0.0.31").await;
    wait_ready(&api, "fresh").await;
    // Whatever the controller still had scheduled (a held window) has run by now.
    tokio::time::sleep(WINDOW + Duration::from_millis(300)).await;
    assert_eq!(
        api.writes(),
        counts(&[
            ("POST pods", 1),
            // The pod-name annotation every running Sandbox carries.
            ("PATCH sandboxes", 1),
            ("PATCH sandboxes/status", 1),
        ])
    );
    // The Pod was built from the cached Sandbox: no read of it (nor of anything else).
    assert_eq!(api.reads(), BTreeMap::new());
    let sb = api.get("sandboxes", NS, "fresh").expect("sandbox");
    assert_eq!(sb["status"]["podIPs"], json!(["127.0.0.31"]));
    assert_eq!(sb["status"]["nodeName"], "node-1");
    assert_eq!(
        condition(&sb, "PodScheduled").map(|c| c.0),
        Some("True".into())
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_sandbox_created_with_its_pod_name_annotation_needs_no_metadata_patch() {
    // What a warm pool creates: the annotation already names the Pod (the Sandbox's own name).
    let api = Cluster::start().await;
    let ctl = start_controller_with(&api, |s| s.status_progress_window = WINDOW);
    let mut member = sandbox("member", json!({}));
    member["metadata"]["annotations"] = json!({"agents.x-k8s.io/pod-name": "member"});
    api.apply("sandboxes", member).await;
    wait_for("pod", || api.get("pods", NS, "member")).await;
    start_pod(&api, "member", "127.0.0.32").await;
    wait_ready(&api, "member").await;
    tokio::time::sleep(WINDOW + Duration::from_millis(300)).await;
    assert_eq!(
        api.writes(),
        counts(&[("POST pods", 1), ("PATCH sandboxes/status", 1)])
    );
    let sb = api.get("sandboxes", NS, "member").expect("sandbox");
    assert_eq!(
        sb["metadata"]["annotations"]["agents.x-k8s.io/pod-name"],
        "member"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_pod_that_stays_pending_is_reported_when_the_window_ends() {
    let api = Cluster::start().await;
    let ctl = start_controller_with(&api, |s| s.status_progress_window = WINDOW);
    api.apply("sandboxes", sandbox("slow", json!({}))).await;
    wait_for("pending status", || {
        api.get("sandboxes", NS, "slow")
            .and_then(|s| condition(&s, "Ready"))
            .filter(|c| c.2 == "Pod exists with phase: Pending")
    })
    .await;
    ctl.stop().await;
}

#[tokio::test]
async fn a_claimed_warm_sandbox_costs_one_pod_patch_and_no_sandbox_write() {
    let api = Cluster::start().await;
    let ctl = start_controller_with(&api, |s| s.status_progress_window = WINDOW);
    // The owners exist (the garbage collector takes what a missing owner owned).
    api.install_extension_crds().await;
    let pool = api
        .apply(
            "sandboxwarmpools",
            json!({"metadata": {"name": "pool", "namespace": NS},
                   "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "t"}}}),
        )
        .await;
    let claim = api
        .apply(
            "sandboxclaims",
            json!({"metadata": {"name": "claim", "namespace": NS},
                   "spec": {"warmPoolRef": {"name": "pool"}}}),
        )
        .await;
    let mut warm = sandbox(
        "warm",
        json!({"podTemplate": {"metadata": {"annotations": {
            "cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}}}}),
    );
    warm["metadata"]["labels"] = json!({
        "agents.x-k8s.io/warm-pool-sandbox": "0a1b2c3d",
        "agents.x-k8s.io/sandbox-template-ref-hash": "4e5f6a7b"});
    warm["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
        "name": "pool", "uid": pool["metadata"]["uid"], "controller": true}]);
    api.apply("sandboxes", warm).await;
    let pod = wait_for("pod", || api.get("pods", NS, "warm")).await;
    assert_eq!(
        pod["metadata"]["labels"]["agents.x-k8s.io/warm-pool-sandbox"],
        "0a1b2c3d"
    );
    start_pod(&api, "warm", "127.0.0.32").await;
    wait_ready(&api, "warm").await;
    tokio::time::sleep(WINDOW + Duration::from_millis(300)).await;
    let before = api.writes();

    // The claim takes the Sandbox over: new controller, pool label gone, claim label added.
    let mut claimed = api.get("sandboxes", NS, "warm").expect("sandbox");
    claimed["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
        "name": "claim", "uid": claim["metadata"]["uid"], "controller": true}]);
    claimed["metadata"]["labels"] = json!({
        "agents.x-k8s.io/sandbox-template-ref-hash": "4e5f6a7b",
        "agents.x-k8s.io/claim-uid": "claim-uid"});
    api.apply("sandboxes", claimed).await;
    wait_for("pod relabelled", || {
        api.get("pods", NS, "warm").filter(|p| {
            p["metadata"]["labels"]
                .get("agents.x-k8s.io/warm-pool-sandbox")
                .is_none()
        })
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = api.writes();
    let added: BTreeMap<String, usize> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect();
    assert_eq!(added, counts(&[("PATCH pods", 1)]), "before: {before:?}");
    let pod = api.get("pods", NS, "warm").expect("pod");
    assert_eq!(
        pod["metadata"]["labels"]["agents.x-k8s.io/sandbox-template-ref-hash"],
        "4e5f6a7b"
    );
    assert_eq!(
        condition(&api.get("sandboxes", NS, "warm").expect("sandbox"), "Ready").map(|c| c.0),
        Some("True".into())
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_pass_ahead_of_the_sandbox_cache_does_not_write_the_pod_name_again() {
    let api = Cluster::start().await;
    // From the Pod create on, the controller's Sandbox watch lags: it does not see its own
    // `pod-name` annotation write before the Pod's events trigger the next passes.
    api.pause_watches_after("create", "pods", "sandboxes");
    let ctl = start_controller_with(&api, |s| s.status_progress_window = WINDOW);
    api.apply("sandboxes", sandbox("lag", json!({}))).await;
    wait_for("pod", || api.get("pods", NS, "lag")).await;
    start_pod(&api, "lag", "127.0.0.33").await;
    wait_ready(&api, "lag").await;
    api.clear_pause_after();
    api.expire_watches("sandboxes");
    tokio::time::sleep(WINDOW + Duration::from_millis(300)).await;
    assert_eq!(
        api.writes(),
        counts(&[
            ("POST pods", 1),
            ("PATCH sandboxes", 1),
            ("PATCH sandboxes/status", 1),
        ])
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_pod_recreated_after_the_first_status_is_built_from_a_fresh_read() {
    // Once a status is written the cache drops the template spec: a Pod deleted later is
    // recreated from the Sandbox as the API server has it, template edits included.
    let api = Cluster::start().await;
    let ctl = start_controller_with(&api, |s| s.status_progress_window = WINDOW);
    api.apply("sandboxes", sandbox("again", json!({}))).await;
    wait_for("pod", || api.get("pods", NS, "again")).await;
    start_pod(&api, "again", "127.0.0.33").await;
    wait_ready(&api, "again").await;
    assert_eq!(api.reads(), BTreeMap::new());
    // An edit of the container the watch does not deliver before the Pod is gone.
    api.pause_watches("sandboxes");
    let mut sb = api.get("sandboxes", NS, "again").expect("sandbox");
    sb["spec"]["podTemplate"]["spec"]["containers"][0]["image"] = json!("busybox:edited");
    api.apply("sandboxes", sb).await;
    api.delete("pods", NS, "again").await;
    let pod = wait_for("recreated pod", || {
        api.get("pods", NS, "again")
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
    })
    .await;
    assert_eq!(pod["spec"]["containers"][0]["image"], "busybox:edited");
    assert!(
        api.reads().contains_key("sandboxes"),
        "the Sandbox is read before its Pod is recreated: {:?}",
        api.reads()
    );
    ctl.stop().await;
}

/// Passes the controller has finished (successful ones), from its metrics.
fn passes(ctl: &Running) -> u64 {
    ctl.scrape()
        .lines()
        .find(|l| {
            l.starts_with("controller_runtime_reconcile_total{") && l.contains("result=\"success\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn the_watch_events_of_its_own_pod_create_and_relabel_start_no_pass() {
    let api = Cluster::start().await;
    // No progress window: every pass that sees a Pod change writes it, so each one shows.
    let ctl = start_controller_with(&api, |s| s.status_progress_window = Duration::ZERO);
    let mut member = sandbox("member", json!({}));
    member["metadata"]["annotations"] = json!({"agents.x-k8s.io/pod-name": "member"});
    member["metadata"]["labels"] = json!({"agents.x-k8s.io/warm-pool-sandbox": "0a1b2c3d"});
    api.apply("sandboxes", member).await;
    wait_for("pod", || api.get("pods", NS, "member")).await;
    // On the Pod watch this change comes after the create's ADDED: once a pass wrote it, the
    // ADDED had been handled.
    api.bind_pod("member", "node-1").await;
    wait_for("scheduling reported", || {
        api.get("sandboxes", NS, "member")
            .filter(|s| condition(s, "PodScheduled").is_some_and(|c| c.0 == "True"))
    })
    .await;
    wait_for("two passes", || (passes(&ctl) >= 2).then_some(())).await;
    assert_eq!(
        passes(&ctl),
        2,
        "the Sandbox's creation and the scheduling; the Pod's ADDED (our create) started none"
    );

    // A claim takes the Sandbox over; the pass relabels the Pod.
    let mut claimed = api.get("sandboxes", NS, "member").expect("sandbox");
    claimed["metadata"]["labels"] = json!({"agents.x-k8s.io/claim-uid": "claim-uid"});
    api.apply("sandboxes", claimed).await;
    wait_for("pod relabelled", || {
        api.get("pods", NS, "member").filter(|p| {
            p["metadata"]["labels"]
                .get("agents.x-k8s.io/warm-pool-sandbox")
                .is_none()
        })
    })
    .await;
    // Again a later change on the Pod watch as the barrier: the Pod turns Ready.
    make_pod_ready(&api, "member", "node-1", "127.0.0.33").await;
    wait_ready(&api, "member").await;
    wait_for("four passes", || (passes(&ctl) >= 4).then_some(())).await;
    assert_eq!(
        passes(&ctl),
        4,
        "the take-over and the Pod turning Ready; the relabel's MODIFIED started none"
    );
    ctl.stop().await;
}
