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
    // kube-apiserver puts the patch's new element before the live one it did not name.
    assert_eq!(env, ["B", "A"], "env merged by name");

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

/// The managers of `path`'s owners in `managedFields`, sorted.
fn owners_of(
    managed: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry],
    needle: &str,
) -> Vec<String> {
    let mut owners: Vec<String> = managed
        .iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.to_string().contains(needle))
        })
        .filter_map(|m| m.manager.clone())
        .collect();
    owners.sort();
    owners
}

#[tokio::test]
async fn server_side_apply_keeps_a_shared_field_while_another_manager_still_applies_it() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let cm = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": data});
    api.patch(
        "shared",
        &PatchParams::apply("alice"),
        &Patch::Apply(&cm(json!({"a": "1", "b": "1"}))),
    )
    .await
    .unwrap();
    // bob applies the same value: no conflict, and both own data.a.
    let both = api
        .patch(
            "shared",
            &PatchParams::apply("bob"),
            &Patch::Apply(&cm(json!({"a": "1"}))),
        )
        .await
        .expect("the same value is no conflict");
    let managed = both.metadata.managed_fields.clone().unwrap_or_default();
    assert_eq!(owners_of(&managed, "f:a"), ["alice", "bob"]);

    // alice stops applying a: bob still applies it, so it stays (and b, alice's alone, stays too).
    let out = api
        .patch(
            "shared",
            &PatchParams::apply("alice"),
            &Patch::Apply(&cm(json!({"b": "1"}))),
        )
        .await
        .unwrap();
    let data = out.data.clone().unwrap_or_default();
    assert_eq!(data.get("a").map(String::as_str), Some("1"), "{data:?}");
    assert_eq!(data.get("b").map(String::as_str), Some("1"), "{data:?}");
    let managed = out.metadata.managed_fields.clone().unwrap_or_default();
    assert_eq!(owners_of(&managed, "f:a"), ["bob"]);

    // Then bob stops too: nobody owns it any more, so it goes.
    let out = api
        .patch(
            "shared",
            &PatchParams::apply("bob"),
            &Patch::Apply(&cm(json!({}))),
        )
        .await
        .unwrap();
    let data = out.data.unwrap_or_default();
    assert!(!data.contains_key("a"), "{data:?}");
    assert_eq!(data.get("b").map(String::as_str), Some("1"));
}

#[tokio::test]
async fn server_side_apply_keeps_a_shared_list_element_while_another_manager_still_applies_it() {
    let dc = start_without_nodes().await;
    let api: Api<Deployment> = Api::default_namespaced(dc.client());
    let deploy = |env: serde_json::Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "app:1", "env": env}]}
                }
            }
        })
    };
    let env_names = |d: &Deployment| -> Vec<String> {
        d.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.name)
            .collect()
    };
    api.patch(
        "web",
        &PatchParams::apply("alice"),
        &Patch::Apply(&deploy(
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "1"}]),
        )),
    )
    .await
    .unwrap();
    api.patch(
        "web",
        &PatchParams::apply("bob"),
        &Patch::Apply(&deploy(json!([{"name": "A", "value": "1"}]))),
    )
    .await
    .expect("the same element is no conflict");
    let out = api
        .patch(
            "web",
            &PatchParams::apply("alice"),
            &Patch::Apply(&deploy(json!([{"name": "B", "value": "1"}]))),
        )
        .await
        .unwrap();
    assert_eq!(env_names(&out), ["A", "B"], "bob still applies A");
    let out = api
        .patch(
            "web",
            &PatchParams::apply("bob"),
            &Patch::Apply(&deploy(json!([]))),
        )
        .await
        .unwrap();
    assert_eq!(env_names(&out), ["B"], "nobody applies A any more");
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
