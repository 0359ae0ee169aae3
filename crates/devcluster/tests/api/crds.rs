//! CustomResourceDefinitions: the reference CRDs are served at once, with defaulting, schema
//! validation, the CEL rule, status separation, generation, printer columns, and clean-up.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use serde_json::json;

use super::{eventually, install_reference_crds, sandboxes, start_without_nodes, status_code};

fn sandbox(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}},
    }))
    .unwrap()
}

#[tokio::test]
async fn reference_crds_are_established_and_discoverable() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    let dc = start_without_nodes().await;
    install_reference_crds(&dc.client(), &crds).await;
    let crds: Api<CustomResourceDefinition> = Api::all(dc.client());
    let crd = crds.get("sandboxes.agents.x-k8s.io").await.unwrap();
    let conditions = crd.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    let discovery = kube::discovery::Discovery::new(dc.client())
        .run()
        .await
        .unwrap();
    let group = discovery
        .get("extensions.agents.x-k8s.io")
        .expect("group discovered");
    let kinds: Vec<String> = group
        .recommended_resources()
        .into_iter()
        .map(|(ar, _)| ar.kind)
        .collect();
    for k in ["SandboxClaim", "SandboxTemplate", "SandboxWarmPool"] {
        assert!(kinds.contains(&k.to_string()), "{k} in {kinds:?}");
    }
}

#[tokio::test]
async fn custom_resources_are_defaulted_validated_and_status_is_separate() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    let dc = start_without_nodes().await;
    install_reference_crds(&dc.client(), &crds).await;
    let api = sandboxes(&dc.client(), "default");
    let made = api
        .create(&PostParams::default(), &sandbox("box"))
        .await
        .unwrap();
    assert_eq!(
        made.data["spec"]["operatingMode"], "Running",
        "schema default applied"
    );
    assert_eq!(made.metadata.generation, Some(1));

    let mut missing = sandbox("bad");
    missing.data["spec"] = json!({});
    let e = api
        .create(&PostParams::default(), &missing)
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 422);
    let kube::Error::Api(s) = &e else {
        unreachable!()
    };
    assert!(s.message.contains("spec.podTemplate"), "{}", s.message);

    let mut wrong_enum = sandbox("bad2");
    wrong_enum.data["spec"]["operatingMode"] = json!("Sideways");
    let e = api
        .create(&PostParams::default(), &wrong_enum)
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 422);

    // Main-resource writes ignore status; /status writes change only status.
    let with_status =
        json!({"status": {"podIPs": ["127.0.0.9"]}, "metadata": {"labels": {"a": "b"}}});
    let out = api
        .patch("box", &PatchParams::default(), &Patch::Merge(&with_status))
        .await
        .unwrap();
    assert!(
        out.data
            .get("status")
            .is_none_or(|s| s.get("podIPs").is_none())
    );
    assert_eq!(
        out.metadata.generation,
        Some(1),
        "labels do not bump generation"
    );
    let out = api
        .patch_status(
            "box",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"podIPs": ["127.0.0.9"]}})),
        )
        .await
        .unwrap();
    assert_eq!(out.data["status"]["podIPs"], json!(["127.0.0.9"]));
    assert_eq!(out.metadata.generation, Some(1));
    let spec_change = json!({"spec": {"operatingMode": "Suspended"}});
    let out = api
        .patch("box", &PatchParams::default(), &Patch::Merge(&spec_change))
        .await
        .unwrap();
    assert_eq!(out.metadata.generation, Some(2));

    // The CRD's CEL rule: volumeClaimTemplates is immutable.
    let add_vct = json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}});
    let e = api
        .patch("box", &PatchParams::default(), &Patch::Merge(&add_vct))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 422);
    let kube::Error::Api(s) = &e else {
        unreachable!()
    };
    assert!(
        s.message.contains("volumeClaimTemplates is immutable"),
        "{}",
        s.message
    );
}

#[tokio::test]
async fn kubectl_tables_use_printer_columns() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    let dc = start_without_nodes().await;
    install_reference_crds(&dc.client(), &crds).await;
    sandboxes(&dc.client(), "default")
        .create(&PostParams::default(), &sandbox("box"))
        .await
        .unwrap();
    let req = http::Request::get("/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes")
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    let table: serde_json::Value = dc.client().request(req).await.unwrap();
    assert_eq!(table["kind"], "Table");
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Ready", "Reason", "Age"]);
    assert_eq!(table["rows"][0]["cells"][0], "box");
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_and_stops_serving_it() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    let dc = start_without_nodes().await;
    install_reference_crds(&dc.client(), &crds).await;
    let api = sandboxes(&dc.client(), "default");
    api.create(&PostParams::default(), &sandbox("box"))
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(dc.client());
    crds.delete("sandboxes.agents.x-k8s.io", &DeleteParams::default())
        .await
        .unwrap();
    eventually("CRD gone", || async {
        matches!(crds.get("sandboxes.agents.x-k8s.io").await, Err(ref e) if status_code(e) == 404)
            .then_some(())
    })
    .await;
    // kube-apiserver stops serving the resource a moment after the CRD is gone (devcluster
    // at once).
    eventually("the resource no longer served", || async {
        matches!(api.list(&Default::default()).await, Err(ref e) if status_code(e) == 404)
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn table_watches_send_headers_once() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    use futures::StreamExt;
    let dc = start_without_nodes().await;
    install_reference_crds(&dc.client(), &crds).await;
    let api = sandboxes(&dc.client(), "default");
    api.create(&PostParams::default(), &sandbox("one"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &sandbox("two"))
        .await
        .unwrap();
    let req = http::Request::get(
        "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes?watch=true&timeoutSeconds=1",
    )
    .header(
        "Accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    .body(Vec::new())
    .unwrap();
    let stream = dc
        .client()
        .request_events::<serde_json::Value>(req)
        .await
        .unwrap();
    let events: Vec<kube::api::WatchEvent<serde_json::Value>> = stream
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    let tables: Vec<serde_json::Value> = events
        .into_iter()
        .filter_map(|e| match e {
            kube::api::WatchEvent::Added(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(tables.len(), 2);
    assert_eq!(tables[0]["kind"], "Table");
    assert_eq!(tables[0]["columnDefinitions"][1]["name"], "Ready");
    assert!(
        tables[1]["columnDefinitions"].is_null(),
        "headers only in the first event"
    );
    assert_eq!(tables[1]["rows"][0]["cells"][0], "two");
}

#[tokio::test]
async fn subresources_follow_each_served_version() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    let dc = start_without_nodes().await;
    install_reference_crds(&dc.client(), &crds).await;
    let api = sandboxes(&dc.client(), "default");
    api.create(&PostParams::default(), &sandbox("box"))
        .await
        .unwrap();
    let get = |path: &str| {
        http::Request::get(path.to_string())
            .body(Vec::new())
            .unwrap()
    };
    // The reference Sandbox CRD declares scale only for v1alpha1, at `.spec.replicas`, which
    // a Sandbox stored at v1beta1 does not have once read at v1alpha1 (conversion `None`
    // prunes it): kube-apiserver answers that with a 500 naming the path.
    let e = dc
        .client()
        .request::<serde_json::Value>(get(
            "/apis/agents.x-k8s.io/v1alpha1/namespaces/default/sandboxes/box/scale",
        ))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 500);
    let kube::Error::Api(status) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        status.message,
        "Internal error occurred: the spec replicas field \".spec.replicas\" does not exist"
    );
    assert_eq!(status.reason, "InternalError");
    let e = dc
        .client()
        .request::<serde_json::Value>(get(
            "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/box/scale",
        ))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 404);
    let discovery: serde_json::Value = dc
        .client()
        .request(get("/apis/agents.x-k8s.io/v1alpha1"))
        .await
        .unwrap();
    let names: Vec<&str> = discovery["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(names.contains(&"sandboxes/scale"), "{names:?}");
}

#[tokio::test]
async fn rewriting_a_defaulted_spec_is_a_no_op() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    // A port written without `protocol` is stored with the schema default `TCP`; sending the
    // same spec again (as `kubectl apply` does) must not bump generation or resourceVersion.
    let dc = start_without_nodes().await;
    install_reference_crds(&dc.client(), &crds).await;
    let api = sandboxes(&dc.client(), "default");
    let spec = json!({"podTemplate": {"spec": {"containers": [
        {"name": "c", "image": "busybox:1.36", "ports": [{"containerPort": 80}]}
    ]}}});
    let mut obj = sandbox("ports");
    obj.data["spec"] = spec.clone();
    let made = api.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(
        made.data["spec"]["podTemplate"]["spec"]["containers"][0]["ports"][0]["protocol"],
        "TCP"
    );
    let patched = api
        .patch(
            "ports",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(1));
    assert_eq!(
        patched.metadata.resource_version, made.metadata.resource_version,
        "a no-op merge patch must not write"
    );
    let mut replaced = patched.clone();
    replaced.data["spec"] = spec;
    let put = api
        .replace("ports", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(put.metadata.generation, Some(1));
    assert_eq!(
        put.metadata.resource_version,
        made.metadata.resource_version
    );
}

/// Write responses and watch events of a custom resource are the object at the version they
/// were requested at: at the storage version the stored JSON as is (shared by the response and
/// the watchers), at another served version with that version's apiVersion, pruned by that
/// version's schema (conversion `None`, as the tests install the CRDs).
#[tokio::test]
async fn responses_and_watch_events_carry_the_requested_version() {
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    use futures::StreamExt;
    let dc = start_without_nodes().await;
    install_reference_crds(&dc.client(), &crds).await;
    let client = dc.client();
    let base = "/apis/agents.x-k8s.io";
    let path =
        |version: &str, name: &str| format!("{base}/{version}/namespaces/default/sandboxes{name}");
    let created: serde_json::Value = client
        .request(
            http::Request::post(path("v1beta1", ""))
                .header("Content-Type", "application/json")
                .body(serde_json::to_vec(&sandbox("box")).unwrap())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(created["apiVersion"], "agents.x-k8s.io/v1beta1");
    let watch = |version: &str| {
        http::Request::get(format!(
            "{}?watch=true&timeoutSeconds=60&resourceVersion={}",
            path(version, ""),
            created["metadata"]["resourceVersion"].as_str().unwrap()
        ))
        .body(Vec::new())
        .unwrap()
    };
    let stored_watch = client
        .request_events::<serde_json::Value>(watch("v1beta1"))
        .await
        .unwrap();
    let other_watch = client
        .request_events::<serde_json::Value>(watch("v1alpha1"))
        .await
        .unwrap();
    let patch = |version: &str, value: &str| {
        http::Request::patch(path(version, "/box"))
            .header("Content-Type", "application/merge-patch+json")
            .body(
                serde_json::to_vec(&json!({"metadata": {"labels": {"written-at": value}}}))
                    .unwrap(),
            )
            .unwrap()
    };
    let at_storage: serde_json::Value = client.request(patch("v1beta1", "beta")).await.unwrap();
    let at_other: serde_json::Value = client.request(patch("v1alpha1", "alpha")).await.unwrap();
    assert_eq!(at_storage["apiVersion"], "agents.x-k8s.io/v1beta1");
    assert_eq!(at_other["apiVersion"], "agents.x-k8s.io/v1alpha1");
    assert_eq!(at_other["metadata"]["labels"]["written-at"], "alpha");
    let fetched: serde_json::Value = client
        .request(
            http::Request::get(path("v1alpha1", "/box"))
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        fetched, at_other,
        "a GET at v1alpha1 serves what the write answered"
    );

    // The first two modifications each watch delivers (the two patches), waited for with a
    // deadline rather than by letting a short server-side timeout end the watch: on a loaded
    // machine the patches can land after such a timeout.
    async fn modified<S>(events: S) -> Vec<serde_json::Value>
    where
        S: futures::Stream<Item = Result<kube::api::WatchEvent<serde_json::Value>, kube::Error>>,
    {
        let wanted = events
            .filter_map(|e| async move {
                match e {
                    Ok(kube::api::WatchEvent::Modified(o)) => Some(o),
                    _ => None,
                }
            })
            .take(2)
            .collect::<Vec<_>>();
        tokio::time::timeout(std::time::Duration::from_secs(30), wanted)
            .await
            .expect("two MODIFIED events within 30 s")
    }
    let stored_events = modified(stored_watch).await;
    let other_events = modified(other_watch).await;
    assert_eq!(stored_events.len(), 2, "{stored_events:?}");
    assert_eq!(other_events.len(), 2, "{other_events:?}");
    assert_eq!(
        stored_events[0], at_storage,
        "the response is the watched object"
    );
    assert_eq!(stored_events[1]["apiVersion"], "agents.x-k8s.io/v1beta1");
    assert_eq!(
        stored_events[1]["metadata"]["resourceVersion"],
        at_other["metadata"]["resourceVersion"]
    );
    // At v1alpha1 the object is pruned by that version's schema: v1beta1's defaulted
    // `operatingMode` is not served there; v1alpha1's own default (`replicas: 1`) is not
    // applied on the way out either.
    assert_eq!(at_storage["spec"]["operatingMode"], "Running");
    let mut expected_other = at_storage.clone();
    expected_other["apiVersion"] = json!("agents.x-k8s.io/v1alpha1");
    expected_other["spec"]
        .as_object_mut()
        .unwrap()
        .remove("operatingMode");
    assert_eq!(other_events[0], expected_other);
    assert_eq!(other_events[1], at_other);
}
