//! PATCH in its four flavours through kube-rs.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{start_without_nodes, status_code};

fn deployment() -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
                    {"name": "sidecar", "image": "side:1"}
                ]}
            }
        }
    })
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name_and_bumps_generation() {
    let dc = start_without_nodes().await;
    let api: Api<Deployment> = Api::default_namespaced(dc.client());
    let made = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(deployment()).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(made.metadata.generation, Some(1));
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "2"}]}
    ]}}}});
    let out = api
        .patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    assert_eq!(out.metadata.generation, Some(2));
    let containers = out.spec.unwrap().template.spec.unwrap().containers;
    assert_eq!(containers.len(), 2, "sidecar kept");
    assert_eq!(containers[0].image.as_deref(), Some("app:2"));
    let env: Vec<_> = containers[0]
        .env
        .clone()
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(env, ["A", "B"], "env merged by name");

    // Metadata-only changes leave generation alone.
    let labels = json!({"metadata": {"labels": {"team": "x"}}});
    let out = api
        .patch("web", &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .unwrap();
    assert_eq!(out.metadata.generation, Some(2));
}

#[tokio::test]
async fn server_side_apply_tracks_owners_and_conflicts_without_force() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1", "b": "1"}});
    let made = api
        .patch("cfg", &PatchParams::apply("alice"), &Patch::Apply(&applied))
        .await
        .expect("apply creates when missing");
    let managers: Vec<_> = made
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["alice"]);

    let bob = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "2"}});
    let e = api
        .patch("cfg", &PatchParams::apply("bob"), &Patch::Apply(&bob))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 409, "bob conflicts with alice on data.a");
    let forced = api
        .patch(
            "cfg",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(&bob),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["a"], "2");

    // alice stops applying b: the field goes.
    let alice2 =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {}});
    let out = api
        .patch("cfg", &PatchParams::apply("alice"), &Patch::Apply(&alice2))
        .await
        .unwrap();
    let data = out.data.unwrap_or_default();
    assert!(!data.contains_key("b"), "{data:?}");
    assert_eq!(data["a"], "2");
}

#[tokio::test]
async fn json_patch_test_of_missing_path_against_null_passes() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap(),
    )
    .await
    .unwrap();
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["x/y"]}
    ]))
    .unwrap();
    let out = api
        .patch("c", &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .unwrap();
    assert_eq!(out.metadata.finalizers.unwrap(), ["x/y"]);
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/metadata/name", "value": "other"}]))
            .unwrap();
    let e = api
        .patch("c", &PatchParams::default(), &Patch::<()>::Json(failing))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 422);
}
