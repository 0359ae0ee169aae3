//! Create/get/list/update/delete semantics through kube-rs `Api`.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

use super::{devcluster_only, eventually, start, start_without_nodes, status_code};

fn configmap(name: &str, data: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "demo", "tier": data}},
        "data": {"k": data},
    }))
    .unwrap()
}

#[tokio::test]
async fn create_fills_server_fields_and_generate_name() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let made = api
        .create(&PostParams::default(), &configmap("a", "1"))
        .await
        .unwrap();
    let meta = &made.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    let rv: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();
    assert!(rv > 0);

    let mut generated = configmap("", "2");
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let g = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let name = g.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    let grv: u64 = g.metadata.resource_version.unwrap().parse().unwrap();
    assert!(grv > rv, "one global, increasing resourceVersion");
}

#[tokio::test]
async fn errors_are_status_objects_with_real_reasons() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    api.create(&PostParams::default(), &configmap("a", "1"))
        .await
        .unwrap();
    let dup = api
        .create(&PostParams::default(), &configmap("a", "1"))
        .await
        .unwrap_err();
    assert_eq!(status_code(&dup), 409);
    let kube::Error::Api(s) = &dup else {
        unreachable!()
    };
    assert_eq!(s.reason, "AlreadyExists");
    assert_eq!(s.message, "configmaps \"a\" already exists");

    let missing = api.get("nope").await.unwrap_err();
    assert_eq!(status_code(&missing), 404);

    let bad = api
        .create(&PostParams::default(), &configmap("Bad_Name", "1"))
        .await
        .unwrap_err();
    assert_eq!(status_code(&bad), 422);

    let mut bad_label = configmap("labelled", "1");
    bad_label.metadata.labels = Some([("app".to_string(), "not valid!".to_string())].into());
    let e = api
        .create(&PostParams::default(), &bad_label)
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 422);
    let kube::Error::Api(s) = &e else {
        unreachable!()
    };
    assert!(s.message.contains("metadata.labels"), "{}", s.message);

    let elsewhere: Api<ConfigMap> = Api::namespaced(dc.client(), "no-such-ns");
    let e = elsewhere
        .create(&PostParams::default(), &configmap("a", "1"))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 404, "creating in a missing namespace");
}

#[tokio::test]
async fn stale_update_conflicts_and_no_op_keeps_resource_version() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let first = api
        .create(&PostParams::default(), &configmap("a", "1"))
        .await
        .unwrap();
    let mut changed = first.clone();
    changed.data = Some([("k".to_string(), "2".to_string())].into());
    let second = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_ne!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );

    // `first` carries the old resourceVersion.
    let stale = api
        .replace("a", &PostParams::default(), &first)
        .await
        .unwrap_err();
    assert_eq!(status_code(&stale), 409);

    // A merge patch carrying a stale resourceVersion is a precondition too.
    let patch = json!({"metadata": {"resourceVersion": first.metadata.resource_version}, "data": {"k": "3"}});
    let e = api
        .patch("a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 409);

    // Writing the same content again changes nothing.
    let same = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"k": "2"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version,
        second.metadata.resource_version
    );
}

#[tokio::test]
async fn list_selectors_and_pagination() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    for (name, tier) in [("a", "x"), ("b", "y"), ("c", "z"), ("d", "x")] {
        api.create(&PostParams::default(), &configmap(name, tier))
            .await
            .unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    let eq = api
        .list(&ListParams::default().labels("tier=x"))
        .await
        .unwrap();
    assert_eq!(names(eq), ["a", "d"]);
    let set = api
        .list(&ListParams::default().labels("tier in (y,z),app"))
        .await
        .unwrap();
    assert_eq!(names(set), ["b", "c"]);
    // `notin` and `!key` also match objects without the label (a real cluster's
    // `kube-root-ca.crt` here), so the selector keeps to the test's own `app` objects.
    let notin = api
        .list(&ListParams::default().labels("app,tier notin (x),!missing"))
        .await
        .unwrap();
    assert_eq!(names(notin), ["b", "c"]);
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=c"))
        .await
        .unwrap();
    assert_eq!(names(by_name), ["c"]);
    let bad = api
        .list(&ListParams::default().fields("data.k=x"))
        .await
        .unwrap_err();
    assert_eq!(status_code(&bad), 400, "unsupported field label");

    let page1 = api
        .list(&ListParams::default().labels("app=demo").limit(3))
        .await
        .unwrap();
    let token = page1.metadata.continue_.clone().expect("continue token");
    assert_eq!(page1.items.len(), 3);
    let page2 = api
        .list(
            &ListParams::default()
                .labels("app=demo")
                .limit(3)
                .continue_token(&token),
        )
        .await
        .unwrap();
    assert_eq!(names(page2), ["d"]);
    assert_eq!(
        page1.metadata.remaining_item_count, None,
        "like the apiserver, not counted under a selector"
    );
    let total = api.list(&ListParams::default()).await.unwrap().items.len();
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(
        first.metadata.remaining_item_count,
        Some(total as i64 - 2),
        "counted without selectors"
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let mut cm = configmap("held", "1");
    cm.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.delete("held", &DeleteParams::default()).await.unwrap();
    let terminating = api.get("held").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    // No new finalizers while terminating.
    let add = json!({"metadata": {"finalizers": ["example.com/hold", "example.com/other"]}});
    let e = api
        .patch("held", &PatchParams::default(), &Patch::Merge(&add))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 422);
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(status_code(&api.get("held").await.unwrap_err()), 404);
}

#[tokio::test]
async fn delete_preconditions_are_checked() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    api.create(&PostParams::default(), &configmap("a", "1"))
        .await
        .unwrap();
    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let e = api.delete("a", &wrong).await.unwrap_err();
    assert_eq!(status_code(&e), 409);
    assert!(api.get("a").await.is_ok());
}

#[tokio::test]
async fn status_subresource_is_separate_for_pods() {
    let dc = start_without_nodes().await;
    let api: Api<Pod> = Api::default_namespaced(dc.client());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
        "status": {"phase": "Running"},
    }))
    .unwrap();
    let made = api.create(&PostParams::default(), &pod).await.unwrap();
    let status = made.status.unwrap();
    assert_eq!(
        status.phase.as_deref(),
        Some("Pending"),
        "create resets status"
    );
    assert_eq!(made.spec.unwrap().restart_policy.as_deref(), Some("Always"));

    let main = json!({"status": {"phase": "Failed"}, "metadata": {"labels": {"x": "1"}}});
    let after = api
        .patch("p", &PatchParams::default(), &Patch::Merge(&main))
        .await
        .unwrap();
    assert_eq!(
        after.status.unwrap().phase.as_deref(),
        Some("Pending"),
        "main writes ignore status"
    );
    let st = json!({"status": {"phase": "Running"}, "metadata": {"labels": {"y": "2"}}});
    let after = api
        .patch_status("p", &PatchParams::default(), &Patch::Merge(&st))
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().phase.as_deref(), Some("Running"));
    // The Pod status strategy resets the spec, not the labels (kube-apiserver's, and so
    // devcluster's): a kubelet may label its Pod through pods/status.
    assert_eq!(
        after.metadata.labels.unwrap().get("y").map(String::as_str),
        Some("2"),
        "labels written through pods/status stay"
    );
}

#[tokio::test]
async fn services_get_cluster_ips_and_namespaces_terminate_with_their_contents() {
    let dc = start().await;
    let ns_api: Api<Namespace> = Api::all(dc.client());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "scratch"}})).unwrap();
    ns_api.create(&PostParams::default(), &ns).await.unwrap();
    let svcs: Api<Service> = Api::namespaced(dc.client(), "scratch");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}},
    }))
    .unwrap();
    let made = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let ip = made.spec.unwrap().cluster_ip.unwrap();
    assert!(ip.starts_with("10.96."), "{ip}");
    let headless: Service = serde_json::from_value(json!({
        "metadata": {"name": "headless"},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
    }))
    .unwrap();
    let h = svcs
        .create(&PostParams::default(), &headless)
        .await
        .unwrap();
    assert_eq!(h.spec.unwrap().cluster_ip.as_deref(), Some("None"));

    ns_api
        .delete("scratch", &DeleteParams::default())
        .await
        .unwrap();
    eventually("namespace gone", || async {
        match ns_api.get("scratch").await {
            Err(e) if status_code(&e) == 404 => Some(()),
            _ => None,
        }
    })
    .await;
    assert!(
        svcs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let e = ns_api
        .delete("default", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 403);
}

#[tokio::test]
async fn pods_become_running_on_simulated_nodes() {
    let dc = start().await;
    let api: Api<Pod> = Api::default_namespaced(dc.client());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))
    .unwrap();
    api.create(&PostParams::default(), &pod).await.unwrap();
    let running = eventually("pod running", || async {
        let p = api.get("p").await.ok()?;
        let st = p.status.clone()?;
        (st.phase.as_deref() == Some("Running")).then_some(p)
    })
    .await;
    let st = running.status.unwrap();
    assert!(st.pod_ip.unwrap().starts_with("127."));
    let node = running.spec.unwrap().node_name.expect("bound to a node");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(dc.client());
    assert!(
        nodes.get(&node).await.is_ok(),
        "the simulated node {node} is a Node object"
    );
    api.delete("p", &DeleteParams::default()).await.unwrap();
    eventually("pod deleted", || async {
        matches!(api.get("p").await, Err(ref e) if status_code(e) == 404).then_some(())
    })
    .await;
}

#[tokio::test]
async fn dry_run_writes_store_nothing_and_terminating_namespaces_refuse_content() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let answered = api.create(&pp, &configmap("dry", "1")).await.unwrap();
    assert_eq!(answered.metadata.name.as_deref(), Some("dry"));
    assert_eq!(status_code(&api.get("dry").await.unwrap_err()), 404);

    let ns_api: Api<Namespace> = Api::all(dc.client());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "closing"}})).unwrap();
    ns_api.create(&PostParams::default(), &ns).await.unwrap();
    let inside: Api<ConfigMap> = Api::namespaced(dc.client(), "closing");
    let mut held = configmap("held", "1");
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    inside.create(&PostParams::default(), &held).await.unwrap();
    ns_api
        .delete("closing", &DeleteParams::default())
        .await
        .unwrap();
    let phase = ns_api.get("closing").await.unwrap().status.unwrap().phase;
    assert_eq!(phase.as_deref(), Some("Terminating"));
    let e = inside
        .create(&PostParams::default(), &configmap("late", "1"))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 403);
    // The namespace waits for its last object's finalizer.
    eventually("held object terminating", || async {
        inside
            .get("held")
            .await
            .ok()?
            .metadata
            .deletion_timestamp
            .map(|_| ())
    })
    .await;
    assert!(ns_api.get("closing").await.is_ok());
    let release = json!({"metadata": {"finalizers": null}});
    inside
        .patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    eventually("namespace gone", || async {
        matches!(ns_api.get("closing").await, Err(ref e) if status_code(e) == 404).then_some(())
    })
    .await;
}

#[tokio::test]
async fn immutable_configmaps_keep_their_data() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let mut cm = configmap("frozen", "1");
    cm.immutable = Some(true);
    api.create(&PostParams::default(), &cm).await.unwrap();
    let change = json!({"data": {"k": "2"}});
    let e = api
        .patch("frozen", &PatchParams::default(), &Patch::Merge(&change))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 422);
    let relabel = json!({"metadata": {"labels": {"still": "ok"}}});
    assert!(
        api.patch("frozen", &PatchParams::default(), &Patch::Merge(&relabel))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn pod_deletion_honours_the_grace_period_and_the_node_finishes_it() {
    if !devcluster_only(
        "pod_deletion_honours_the_grace_period_and_the_node_finishes_it",
        "kwok does not simulate graceful termination (docs/cluster.md)",
    ) {
        return;
    }
    let dc = devcluster::DevCluster::start(devcluster::Config {
        nodes: devcluster::nodes::NodeConfig {
            termination_delay: std::time::Duration::from_millis(800),
            ..Default::default()
        },
        ..devcluster::Config::ephemeral()
    })
    .await
    .unwrap();
    let api: Api<Pod> = Api::default_namespaced(dc.client());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))
    .unwrap();
    api.create(&PostParams::default(), &pod).await.unwrap();
    eventually("pod scheduled", || async {
        api.get("p").await.ok()?.spec?.node_name.map(|_| ())
    })
    .await;
    api.delete("p", &DeleteParams::default()).await.unwrap();
    let terminating = api
        .get("p")
        .await
        .expect("still there while its grace period runs");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    eventually("pod deleted by the node", || async {
        matches!(api.get("p").await, Err(ref e) if status_code(e) == 404).then_some(())
    })
    .await;
}

#[tokio::test]
async fn unknown_fields_are_dropped_or_refused_with_strict_validation() {
    let dc = start_without_nodes().await;
    let post = |query: &str, name: &str| {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "datta": {"a": "b"}});
        http::Request::post(format!("/api/v1/namespaces/default/configmaps{query}"))
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap()
    };
    let e = dc
        .client()
        .request::<serde_json::Value>(post("?fieldValidation=Strict", "strict"))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 400);
    let kube::Error::Api(s) = &e else {
        unreachable!()
    };
    assert!(
        s.message.contains("unknown field \"datta\""),
        "{}",
        s.message
    );
    let stored: serde_json::Value = dc.client().request(post("", "lenient")).await.unwrap();
    assert!(stored.get("datta").is_none(), "unknown field dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_concurrency_loses_no_update() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let mut counter = configmap("counter", "1");
    counter.data = Some([("n".to_string(), "0".to_string())].into());
    api.create(&PostParams::default(), &counter).await.unwrap();
    let workers = 8;
    let increments = 10;
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0u32;
            for _ in 0..increments {
                loop {
                    let mut cm = api.get("counter").await.unwrap();
                    let data = cm.data.get_or_insert_with(Default::default);
                    let n: u64 = data["n"].parse().unwrap();
                    data.insert("n".into(), (n + 1).to_string());
                    match api.replace("counter", &PostParams::default(), &cm).await {
                        Ok(_) => break,
                        Err(e) if status_code(&e) == 409 => conflicts += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            conflicts
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let final_value = api.get("counter").await.unwrap().data.unwrap()["n"].clone();
    assert_eq!(final_value, (workers * increments).to_string());
}

#[tokio::test]
async fn put_creates_leases_but_not_configmaps() {
    use k8s_openapi::api::coordination::v1::Lease;
    let dc = start_without_nodes().await;
    let leases: Api<Lease> = Api::default_namespaced(dc.client());
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
    }))
    .unwrap();
    let made = leases
        .replace("leader", &PostParams::default(), &lease)
        .await
        .unwrap();
    assert!(made.metadata.uid.is_some());
    assert_eq!(made.spec.unwrap().holder_identity.as_deref(), Some("me"));
    let cms: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let e = cms
        .replace(
            "missing",
            &PostParams::default(),
            &configmap("missing", "1"),
        )
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 404);
}

#[tokio::test]
async fn the_kubeconfig_it_wrote_to_the_temp_dir_goes_when_it_stops_or_is_dropped() {
    let stopped = start().await;
    let first = stopped.kubeconfig_path().to_path_buf();
    assert!(first.is_file(), "{}", first.display());
    stopped.shutdown().await;
    assert!(!first.exists(), "{} left behind", first.display());
    assert!(!first.parent().unwrap().exists());

    let dropped = start().await;
    let second = dropped.kubeconfig_path().to_path_buf();
    assert!(second.is_file());
    drop(dropped);
    assert!(
        !second.parent().unwrap().exists(),
        "{} left behind",
        second.display()
    );
}
