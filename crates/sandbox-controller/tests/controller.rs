//! The Sandbox controller running against devcluster in process: each test drives it through
//! the API and asserts what a user would see (objects, status, conditions).

use crate::{cluster, harness};

use std::time::Duration;

use cluster::Cluster;
use harness::*;
use serde_json::{Value, json};

#[tokio::test]
async fn new_sandbox_gets_an_owned_pod_and_status() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    api.apply("sandboxes", sandbox("sb1", json!({}))).await;

    let pod = wait_for("pod", || api.get("pods", NS, "sb1")).await;
    let sb = api.get("sandboxes", NS, "sb1").unwrap();
    let uid = sb["metadata"]["uid"].as_str().unwrap();
    let hash = sandbox_controller::keys::name_hash("sb1");
    assert_eq!(pod["metadata"]["labels"], json!({ HASH_LABEL: hash }));
    assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], uid);
    assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        true
    );
    assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "Sandbox");
    assert_eq!(pod["spec"]["containers"][0]["image"], "busybox");

    let sb = wait_for("status", || {
        api.get("sandboxes", NS, "sb1")
            .filter(|s| condition(s, "Ready").is_some() && s["metadata"]["annotations"].is_object())
    })
    .await;
    assert_eq!(
        sb["metadata"]["annotations"]["agents.x-k8s.io/pod-name"],
        "sb1"
    );
    assert_eq!(sb["status"]["selector"], format!("{HASH_LABEL}={hash}"));
    assert_eq!(
        condition(&sb, "Ready").unwrap(),
        (
            "False".into(),
            "DependenciesNotReady".into(),
            "Pod exists with phase: Pending".into()
        )
    );
    assert_eq!(condition(&sb, "Suspended").unwrap().1, "NotSuspended");
    assert_eq!(
        condition(&sb, "PodScheduled").unwrap().1,
        "PodSchedulingUnknown"
    );
    assert!(
        api.get("services", NS, "sb1").is_none(),
        "no Service unless asked for"
    );

    make_pod_ready(&api, "sb1", "node-1", "127.0.0.5").await;
    let sb = wait_for("ready", || {
        api.get("sandboxes", NS, "sb1")
            .filter(|s| condition(s, "Ready").is_some_and(|c| c.0 == "True"))
    })
    .await;
    assert_eq!(condition(&sb, "Ready").unwrap().2, "Pod is Ready");
    assert_eq!(sb["status"]["podIPs"], json!(["127.0.0.5"]));
    assert_eq!(sb["status"]["nodeName"], "node-1");
    ctl.stop().await;
}

#[tokio::test]
async fn requested_service_is_headless_and_reported() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    let mut sb = sandbox("web", json!({"service": true}));
    sb["spec"]["podTemplate"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": 8080}]);
    api.apply("sandboxes", sb).await;

    let svc = wait_for("service", || api.get("services", NS, "web")).await;
    let hash = sandbox_controller::keys::name_hash("web");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["selector"], json!({ HASH_LABEL: hash }));
    assert_eq!(svc["spec"]["ports"][0]["name"], "p-8080-tcp");
    let sb = wait_for("service status", || {
        api.get("sandboxes", NS, "web")
            .filter(|s| s["status"]["service"] == "web")
    })
    .await;
    assert_eq!(sb["status"]["serviceFQDN"], "web.default.svc.cluster.local");
    make_pod_ready(&api, "web", "node-1", "127.0.0.6").await;
    let sb = wait_for("ready", || {
        api.get("sandboxes", NS, "web")
            .filter(|s| condition(s, "Ready").is_some_and(|c| c.0 == "True"))
    })
    .await;
    assert_eq!(
        condition(&sb, "Ready").unwrap().2,
        "Pod is Ready; Service Exists"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn volume_claim_templates_create_owned_pvcs_mounted_by_the_pod() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    api.apply(
        "sandboxes",
        sandbox(
            "data-sb",
            json!({"volumeClaimTemplates": [{"metadata": {"name": "work", "labels": {"tier": "x"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}),
        ),
    ).await;
    let pvc = wait_for("pvc", || {
        api.get("persistentvolumeclaims", NS, "work-data-sb")
    })
    .await;
    assert_eq!(pvc["metadata"]["labels"]["tier"], "x");
    assert_eq!(
        pvc["metadata"]["labels"][HASH_LABEL],
        sandbox_controller::keys::name_hash("data-sb")
    );
    assert_eq!(pvc["metadata"]["ownerReferences"][0]["kind"], "Sandbox");
    let pod = wait_for("pod", || api.get("pods", NS, "data-sb")).await;
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    assert_eq!(volumes[0]["name"], "work");
    assert_eq!(
        volumes[0]["persistentVolumeClaim"]["claimName"],
        "work-data-sb"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn suspend_deletes_the_pod_and_resume_brings_it_back() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    api.apply(
        "sandboxes",
        sandbox(
            "sus",
            json!({"service": true, "volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}),
        ),
    ).await;
    wait_for("pod", || api.get("pods", NS, "sus")).await;
    let first_uid = api.get("pods", NS, "sus").unwrap()["metadata"]["uid"].clone();

    let mut sb = api.get("sandboxes", NS, "sus").unwrap();
    sb["spec"]["operatingMode"] = json!("Suspended");
    api.apply("sandboxes", sb).await;
    wait_for("pod deleted", || {
        api.get("pods", NS, "sus").is_none().then_some(())
    })
    .await;
    let sb = wait_for("suspended", || {
        api.get("sandboxes", NS, "sus")
            .filter(|s| condition(s, "Suspended").is_some_and(|c| c.0 == "True"))
    })
    .await;
    assert_eq!(
        condition(&sb, "Ready").unwrap(),
        (
            "False".into(),
            "SandboxSuspended".into(),
            "Sandbox is suspended".into()
        )
    );
    assert_eq!(condition(&sb, "Suspended").unwrap().1, "PodTerminated");
    assert!(
        api.get("services", NS, "sus").is_some(),
        "Service kept while suspended"
    );
    assert!(
        api.get("persistentvolumeclaims", NS, "d-sus").is_some(),
        "PVC kept while suspended"
    );
    assert!(sb["status"]["podIPs"].is_null());

    let mut sb = api.get("sandboxes", NS, "sus").unwrap();
    sb["spec"]["operatingMode"] = json!("Running");
    api.apply("sandboxes", sb).await;
    let pod = wait_for("pod back", || api.get("pods", NS, "sus")).await;
    assert_ne!(pod["metadata"]["uid"], first_uid);
    assert_eq!(
        pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "d-sus"
    );
    wait_for("not suspended", || {
        api.get("sandboxes", NS, "sus")
            .filter(|s| condition(s, "Suspended").is_some_and(|c| c.1 == "NotSuspended"))
    })
    .await;
    ctl.stop().await;
}

#[tokio::test]
async fn retain_expiry_removes_children_and_keeps_the_sandbox() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    let at =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_millis(1500);
    api.apply(
        "sandboxes",
        sandbox("exp", json!({"service": true, "shutdownTime": at.strftime("%Y-%m-%dT%H:%M:%S%.fZ").to_string()})),
    ).await;
    wait_for("pod", || api.get("pods", NS, "exp")).await;
    wait_for("service", || api.get("services", NS, "exp")).await;
    // No other event happens: the controller must wake up at shutdownTime by itself.
    let sb = wait_for("expired", || {
        api.get("sandboxes", NS, "exp")
            .filter(|_| ready_reason(&api, "exp").as_deref() == Some("SandboxExpired"))
    })
    .await;
    assert_eq!(condition(&sb, "Ready").unwrap().2, "Sandbox has expired");
    wait_for("children gone", || {
        (api.get("pods", NS, "exp").is_none() && api.get("services", NS, "exp").is_none())
            .then_some(())
    })
    .await;
    let sb = api.get("sandboxes", NS, "exp").unwrap();
    let status = sb["status"].as_object().unwrap();
    assert_eq!(
        status.keys().collect::<Vec<_>>(),
        ["conditions"],
        "status reset to conditions only"
    );
    assert!(condition(&sb, "PodScheduled").is_none());
    ctl.stop().await;
}

#[tokio::test]
async fn delete_expiry_removes_the_sandbox() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    api.apply(
        "sandboxes",
        sandbox(
            "gone",
            json!({"shutdownTime": "2020-01-01T00:00:00Z", "shutdownPolicy": "Delete"}),
        ),
    )
    .await;
    wait_for("sandbox deleted", || {
        api.get("sandboxes", NS, "gone").is_none().then_some(())
    })
    .await;
    assert!(api.get("pods", NS, "gone").is_none());
    ctl.stop().await;
}

fn foreign_pod(name: &str, labels: Value, owner: Option<Value>) -> Value {
    let mut pod = json!({"metadata": {"name": name, "namespace": NS, "labels": labels},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}});
    if let Some(o) = owner {
        pod["metadata"]["ownerReferences"] = json!([o]);
    }
    pod
}

#[tokio::test]
async fn planted_pods_are_never_adopted_whatever_their_labels() {
    let api = Cluster::start().await;
    // Unowned, named like the future Sandbox, with every label the reference accepted as
    // authorization: the tracking label and `adoptable`.
    api.apply(
        "pods",
        foreign_pod(
            "planted",
            json!({"agents.x-k8s.io/adoptable": "true",
                   HASH_LABEL: sandbox_controller::keys::name_hash("planted")}),
            None,
        ),
    )
    .await;
    let web = api
        .apply(
            "deployments",
            json!({"metadata": {"name": "web", "namespace": NS}, "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
        )
        .await;
    let dep_uid = web["metadata"]["uid"].as_str().expect("uid").to_string();
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": dep_uid, "controller": true});
    api.apply(
        "pods",
        foreign_pod("taken", json!({}), Some(deployment.clone())),
    )
    .await;
    let ctl = start_controller(&api);
    api.apply("sandboxes", sandbox("planted", json!({}))).await;
    api.apply("sandboxes", sandbox("taken", json!({}))).await;

    let sb = wait_for("refusal", || {
        api.get("sandboxes", NS, "planted")
            .filter(|_| ready_reason(&api, "planted").as_deref() == Some("ReconcilerError"))
    })
    .await;
    let msg = condition(&sb, "Ready").unwrap().2;
    assert!(
        msg.contains("pod \"planted\" exists but was not created by sandbox \"planted\""),
        "{msg}"
    );
    let pod = api.get("pods", NS, "planted").unwrap();
    assert!(
        pod["metadata"]["ownerReferences"].is_null(),
        "planted pod untouched"
    );

    let sb = wait_for("refusal", || {
        api.get("sandboxes", NS, "taken")
            .filter(|_| ready_reason(&api, "taken").as_deref() == Some("ReconcilerError"))
    })
    .await;
    let msg = condition(&sb, "Ready").unwrap().2;
    assert!(
        msg.contains(&format!("is owned by Deployment/web (UID: {dep_uid})")),
        "{msg}"
    );
    let pod = api.get("pods", NS, "taken").unwrap();
    assert_eq!(
        pod["metadata"]["ownerReferences"],
        json!([deployment]),
        "foreign pod untouched"
    );
    assert!(pod["metadata"]["labels"].as_object().unwrap().is_empty());
    ctl.stop().await;
}

#[tokio::test]
async fn template_labels_cannot_spoof_the_tracking_label() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    let victim_hash = sandbox_controller::keys::name_hash("victim");
    api.apply(
        "sandboxes",
        sandbox(
            "attacker",
            json!({"service": true, "podTemplate": {"metadata": {
                "labels": {HASH_LABEL: victim_hash, "extensions.agents.x-k8s.io/x": "evil", "team": "a"},
                "annotations": {"agents.x-k8s.io/pod-name": "victim", "opentelemetry.io/trace-context": "x", "note": "n"}}}}),
        ),
    ).await;
    let pod = wait_for("pod", || api.get("pods", NS, "attacker")).await;
    let own_hash = sandbox_controller::keys::name_hash("attacker");
    assert_eq!(
        pod["metadata"]["labels"],
        json!({HASH_LABEL: own_hash, "team": "a"})
    );
    let annotations = pod["metadata"]["annotations"].as_object().unwrap();
    assert!(!annotations.contains_key("agents.x-k8s.io/pod-name"));
    assert!(!annotations.contains_key("opentelemetry.io/trace-context"));
    assert_eq!(annotations["note"], "n");
    let svc = wait_for("service", || api.get("services", NS, "attacker")).await;
    assert_eq!(svc["spec"]["selector"], json!({ HASH_LABEL: own_hash }));
    ctl.stop().await;
}

#[tokio::test]
async fn removed_template_label_is_pruned_but_third_party_labels_stay() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    api.apply(
        "sandboxes",
        sandbox(
            "prune",
            json!({"podTemplate": {"metadata": {"labels": {"a": "1", "b": "2"}}}}),
        ),
    )
    .await;
    let mut pod = wait_for("pod", || api.get("pods", NS, "prune")).await;
    pod["metadata"]["labels"]["third-party"] = json!("keep");
    api.apply("pods", pod).await;
    let mut sb = api.get("sandboxes", NS, "prune").unwrap();
    sb["spec"]["podTemplate"]["metadata"]["labels"] = json!({"a": "1"});
    api.apply("sandboxes", sb).await;
    let pod = wait_for("pruned", || {
        api.get("pods", NS, "prune")
            .filter(|p| p["metadata"]["labels"].get("b").is_none())
    })
    .await;
    assert_eq!(pod["metadata"]["labels"]["third-party"], "keep");
    assert_eq!(pod["metadata"]["labels"]["a"], "1");
    assert_eq!(
        pod["metadata"]["annotations"]["agents.x-k8s.io/propagated-labels"],
        "a"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn multiple_owned_pods_are_reported_without_a_hot_loop() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    api.apply("sandboxes", sandbox("multi", json!({}))).await;
    wait_for("pod", || api.get("pods", NS, "multi")).await;
    let sb = api.get("sandboxes", NS, "multi").unwrap();
    let owner = json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "name": "multi",
                       "uid": sb["metadata"]["uid"], "controller": true});
    let hash = sandbox_controller::keys::name_hash("multi");
    api.apply(
        "pods",
        foreign_pod("multi-extra", json!({ HASH_LABEL: hash }), Some(owner)),
    )
    .await;
    let sb = wait_for("multiple pods", || {
        api.get("sandboxes", NS, "multi")
            .filter(|_| ready_reason(&api, "multi").as_deref() == Some("MultiplePods"))
    })
    .await;
    assert_eq!(
        condition(&sb, "Ready").unwrap().2,
        "multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod"
    );
    let writes_before = api.writes_to("sandboxes");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        api.writes_to("sandboxes"),
        writes_before,
        "no further writes"
    );
    assert!(api.get("pods", NS, "multi").is_some() && api.get("pods", NS, "multi-extra").is_some());
    ctl.stop().await;
}

#[tokio::test]
async fn rejected_pod_create_is_reported_and_retried() {
    let api = Cluster::start().await;
    api.reject(
        "create",
        "pods",
        422,
        "Pod \"bad\" is invalid: spec.containers[0].image: Required value",
    );
    let ctl = start_controller(&api);
    api.apply("sandboxes", sandbox("bad", json!({}))).await;
    api.apply(
        "sandboxes",
        sandbox("good-neighbour", json!({"operatingMode": "Suspended"})),
    )
    .await;
    let sb = wait_for("error condition", || {
        api.get("sandboxes", NS, "bad")
            .filter(|_| ready_reason(&api, "bad").as_deref() == Some("ReconcilerError"))
    })
    .await;
    let msg = condition(&sb, "Ready").unwrap().2;
    assert!(
        msg.contains("spec.containers[0].image: Required value"),
        "{msg}"
    );
    // Another Sandbox is not blocked.
    wait_for("neighbour reconciled", || {
        (ready_reason(&api, "good-neighbour").as_deref() == Some("SandboxSuspended")).then_some(())
    })
    .await;
    api.clear_faults();
    wait_for("retried with backoff and recovered", || {
        api.get("pods", NS, "bad")
    })
    .await;
    ctl.stop().await;
}

#[tokio::test]
async fn restart_in_the_middle_of_a_burst_converges_without_duplicates() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    for i in 0..60 {
        api.apply(
            "sandboxes",
            sandbox(&format!("burst-{i}"), json!({"service": true})),
        )
        .await;
    }
    wait_for("some progress", || {
        (api.list("pods").len() >= 10).then_some(())
    })
    .await;
    ctl.stop().await;
    let ctl = start_controller(&api);
    wait_for("all pods", || (api.list("pods").len() == 60).then_some(())).await;
    // The cluster's own `kubernetes` Service aside.
    let services = || {
        api.list("services")
            .iter()
            .filter(|s| s["metadata"]["name"] != "kubernetes")
            .count()
    };
    wait_for("all services", || (services() == 60).then_some(())).await;
    for i in 0..60 {
        let name = format!("burst-{i}");
        let uid = api.get("sandboxes", NS, &name).unwrap()["metadata"]["uid"].clone();
        let pod = api.get("pods", NS, &name).unwrap();
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], uid);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(api.list("pods").len(), 60, "no duplicate pods");
    ctl.stop().await;
}

#[tokio::test]
async fn happy_path_write_count_is_small_and_idle_sandboxes_cost_nothing() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    api.apply("sandboxes", sandbox("count", json!({}))).await;
    wait_for("pod", || api.get("pods", NS, "count")).await;
    make_pod_ready(&api, "count", "node-1", "127.0.0.9").await;
    wait_for("ready", || {
        (ready_reason(&api, "count").as_deref() == Some("DependenciesReady")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sandbox_writes = api.writes_to("sandboxes");
    let pod_writes = api.writes_to("pods");
    // 1 Pod create; on the Sandbox: the pod-name annotation and at most 3 status writes
    // (created, the Pod observed, Ready).
    assert_eq!(pod_writes, 1, "{:?}", api.writes());
    assert!(sandbox_writes <= 4, "{:?}", api.writes());
    let settled = api.writes_to("sandboxes");
    // An unrelated change of the Pod (a third-party annotation) costs no Sandbox write.
    let mut pod = api.get("pods", NS, "count").unwrap();
    pod["metadata"]["annotations"]["x"] = json!("y");
    api.apply("pods", pod).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(api.writes_to("sandboxes"), settled);
    ctl.stop().await;
}

#[tokio::test]
async fn a_deleted_pod_is_recreated_and_a_deleted_sandbox_takes_its_children() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    api.apply("sandboxes", sandbox("heal", json!({"service": true})))
        .await;
    let first = wait_for("pod", || api.get("pods", NS, "heal")).await;
    api.delete("pods", NS, "heal").await;
    let second = wait_for("pod recreated", || {
        api.get("pods", NS, "heal")
            .filter(|p| p["metadata"]["uid"] != first["metadata"]["uid"])
    })
    .await;
    assert_eq!(second["metadata"]["ownerReferences"][0]["kind"], "Sandbox");
    wait_for("service", || api.get("services", NS, "heal")).await;
    api.delete("sandboxes", NS, "heal").await;
    wait_for("children collected", || {
        (api.get("pods", NS, "heal").is_none() && api.get("services", NS, "heal").is_none())
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        api.get("pods", NS, "heal").is_none(),
        "nothing recreated for a deleted Sandbox"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn resume_waits_for_a_terminating_pod_before_creating_a_new_one() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    api.apply("sandboxes", sandbox("slow", json!({}))).await;
    let mut pod = wait_for("pod", || api.get("pods", NS, "slow")).await;
    let first_uid = pod["metadata"]["uid"].clone();
    pod["metadata"]["finalizers"] = json!(["example.com/hold"]);
    api.apply("pods", pod).await;

    let mut sb = api.get("sandboxes", NS, "slow").unwrap();
    sb["spec"]["operatingMode"] = json!("Suspended");
    api.apply("sandboxes", sb).await;
    let sb = wait_for("suspending", || {
        api.get("sandboxes", NS, "slow")
            .filter(|s| condition(s, "Suspended").is_some_and(|c| c.1 == "PodTerminating"))
    })
    .await;
    assert_eq!(condition(&sb, "Ready").unwrap().2, "Sandbox is suspending");
    assert_eq!(
        sb["metadata"]["annotations"]["agents.x-k8s.io/pod-name"], "slow",
        "kept while terminating"
    );
    assert!(!api.get("pods", NS, "slow").unwrap()["metadata"]["deletionTimestamp"].is_null());

    // Resume while the old Pod is still terminating: no second Pod.
    let mut sb = api.get("sandboxes", NS, "slow").unwrap();
    sb["spec"]["operatingMode"] = json!("Running");
    api.apply("sandboxes", sb).await;
    wait_for("not suspended", || {
        api.get("sandboxes", NS, "slow")
            .filter(|s| condition(s, "Suspended").is_some_and(|c| c.1 == "NotSuspended"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        api.list("pods").len(),
        1,
        "no overlap while the old Pod terminates"
    );

    // The finalizer goes, the old Pod disappears, and a fresh one is created.
    let mut pod = api.get("pods", NS, "slow").unwrap();
    pod["metadata"]["finalizers"] = json!([]);
    api.apply("pods", pod).await;
    let fresh = wait_for("fresh pod", || {
        api.get("pods", NS, "slow")
            .filter(|p| p["metadata"]["uid"] != first_uid)
    })
    .await;
    assert!(fresh["metadata"]["deletionTimestamp"].is_null());
    ctl.stop().await;
}

#[tokio::test]
async fn events_are_published_unless_disabled() {
    for events in [true, false] {
        let api = Cluster::start().await;
        let ctl = start_controller_with_events(&api, events);
        // Creating a Sandbox publishes nothing (as the reference); expiring it does.
        api.apply("sandboxes", sandbox("ev", json!({}))).await;
        wait_for("pod", || api.get("pods", NS, "ev")).await;
        wait_for("annotation", || {
            api.get("sandboxes", NS, "ev")
                .filter(|s| s["metadata"]["annotations"].is_object())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(api.event_writes(), 0, "no event for a Pod creation");
        api.apply(
            "sandboxes",
            sandbox("ev", json!({"shutdownTime": "2020-01-01T00:00:00Z"})),
        )
        .await;
        wait_for("expired", || {
            (ready_reason(&api, "ev").as_deref() == Some("SandboxExpired")).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let published = api.event_writes();
        if events {
            assert!(published >= 1, "a SandboxExpired event");
        } else {
            assert_eq!(published, 0, "--disable-sandbox-events publishes nothing");
        }
        ctl.stop().await;
    }
}
