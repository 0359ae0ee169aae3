//! The controller's child watches falling behind its own writes, as kube-apiserver's do under
//! load: a pass that runs before the cache shows the Pod, Service or PVC the controller just
//! created must not create it again (on the real control plane such a create is refused with
//! `409 AlreadyExists`, a wasted write), and a create refused that way because someone else's
//! object holds the name is reported, never adopted.

use crate::{cluster, harness};

use std::time::Duration;

use cluster::Cluster;
use harness::*;
use serde_json::json;

/// How long the controller's child watches hold each event.
const LAG: Duration = Duration::from_secs(2);
/// Every event of the Pod's start goes through the lagging watch one after the other.
const SLOW_DEADLINE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn children_created_while_their_watches_lag_are_created_once() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    api.delay_watch_events(&["pods", "services", "persistentvolumeclaims"], LAG);
    api.apply(
        "sandboxes",
        sandbox(
            "behind",
            json!({"service": true,
                   "volumeClaimTemplates": [{"metadata": {"name": "work"},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": "1Gi"}}}}]}),
        ),
    )
    .await;
    // The first pass creates the children and writes the `pod-name` annotation; that write's
    // event (the Sandbox watch does not lag) starts a second pass long before the child
    // watches deliver the creates.
    wait_for("pod-name annotation", || {
        api.get("sandboxes", NS, "behind")
            .filter(|s| s["metadata"]["annotations"]["agents.x-k8s.io/pod-name"] == "behind")
    })
    .await;
    make_pod_ready(&api, "behind", "node-1", "127.0.0.41").await;
    let sb = wait_for_within("Ready through the lagging watch", SLOW_DEADLINE, || {
        api.get("sandboxes", NS, "behind")
            .filter(|s| condition(s, "Ready").is_some_and(|c| c.0 == "True"))
    })
    .await;
    assert_eq!(sb["status"]["podIPs"], json!(["127.0.0.41"]));
    assert_eq!(sb["status"]["service"], "behind");
    let writes = api.writes();
    for create in ["POST pods", "POST services", "POST persistentvolumeclaims"] {
        assert_eq!(writes.get(create), Some(&1), "{create}: {writes:?}");
    }
    assert_eq!(
        api.answered_with(409),
        Default::default(),
        "no create refused as AlreadyExists"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_foreign_pod_the_lagging_cache_does_not_show_is_reported_not_adopted() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    api.delay_watch_events(&["pods", "services"], LAG);
    // Planted under the future Sandbox's name; the controller's cache has not seen it when the
    // Sandbox arrives, so its create is refused with 409 and the Pod is read back.
    let hash = sandbox_controller::keys::name_hash("squatted");
    let planted = json!({"metadata": {"name": "squatted", "namespace": NS,
                                      "labels": {HASH_LABEL: hash}},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}});
    api.apply("pods", planted).await;
    api.apply("sandboxes", sandbox("squatted", json!({}))).await;
    let sb = wait_for("refusal", || {
        api.get("sandboxes", NS, "squatted")
            .filter(|_| ready_reason(&api, "squatted").as_deref() == Some("ReconcilerError"))
    })
    .await;
    let msg = condition(&sb, "Ready").expect("Ready").2;
    assert!(
        msg.contains("pod \"squatted\" exists but was not created by sandbox \"squatted\""),
        "{msg}"
    );
    assert!(
        api.answered_with(409).contains_key("create pods"),
        "the Pod was found through a refused create (the cache did not show it)"
    );
    let pod = api.get("pods", NS, "squatted").expect("pod");
    assert!(
        pod["metadata"]["ownerReferences"].is_null(),
        "the planted Pod is not adopted"
    );
    assert!(sb["metadata"]["annotations"]["agents.x-k8s.io/pod-name"].is_null());
    ctl.stop().await;
}
