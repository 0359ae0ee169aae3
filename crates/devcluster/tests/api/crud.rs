//! Create/get/list/update/delete semantics through kube-rs `Api`.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

use super::{eventually, start, start_without_nodes, status_code};

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
    let notin = api
        .list(&ListParams::default().labels("tier notin (x),!missing"))
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
    assert!(
        !after.metadata.labels.unwrap().contains_key("y"),
        "status writes change only status"
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
    assert!(running.spec.unwrap().node_name.is_some());
    api.delete("p", &DeleteParams::default()).await.unwrap();
    eventually("pod deleted", || async {
        matches!(api.get("p").await, Err(ref e) if status_code(e) == 404).then_some(())
    })
    .await;
}
