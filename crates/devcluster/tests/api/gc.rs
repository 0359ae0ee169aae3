//! Owner-reference garbage collection: background chains, foreground, orphan.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use super::{eventually, start_without_nodes, status_code};

async fn make(
    api: &Api<ConfigMap>,
    name: &str,
    owner: Option<&ConfigMap>,
    block: bool,
) -> ConfigMap {
    let mut v = json!({"metadata": {"name": name}});
    if let Some(o) = owner {
        v["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "ConfigMap",
            "name": o.metadata.name, "uid": o.metadata.uid,
            "blockOwnerDeletion": block,
        }]);
    }
    api.create(&PostParams::default(), &serde_json::from_value(v).unwrap())
        .await
        .unwrap()
}

async fn gone(api: &Api<ConfigMap>, name: &str) {
    eventually(&format!("{name} deleted"), || async {
        matches!(api.get(name).await, Err(ref e) if status_code(e) == 404).then_some(())
    })
    .await;
}

#[tokio::test]
async fn background_deletion_removes_a_chain_of_dependents() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let claim = make(&api, "claim", None, false).await;
    let sandbox = make(&api, "sandbox", Some(&claim), true).await;
    make(&api, "pod", Some(&sandbox), true).await;
    make(&api, "bystander", None, false).await;
    api.delete("claim", &DeleteParams::default()).await.unwrap();
    gone(&api, "sandbox").await;
    gone(&api, "pod").await;
    assert!(api.get("bystander").await.is_ok());
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let owner = make(&api, "owner", None, false).await;
    let mut dep = make(&api, "dep", Some(&owner), true).await;
    // The dependent holds a finalizer, so the owner must wait.
    dep.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.replace("dep", &PostParams::default(), &dep)
        .await
        .unwrap();
    api.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let o = api.get("owner").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert!(
        o.metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    eventually("dependent terminating", || async {
        api.get("dep")
            .await
            .ok()?
            .metadata
            .deletion_timestamp
            .map(|_| ())
    })
    .await;
    assert!(
        api.get("owner").await.is_ok(),
        "owner waits for its blocking dependent"
    );
    let release = json!({"metadata": {"finalizers": null}});
    api.patch(
        "dep",
        &Default::default(),
        &kube::api::Patch::Merge(&release),
    )
    .await
    .unwrap();
    gone(&api, "dep").await;
    gone(&api, "owner").await;
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_and_drops_their_owner_reference() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let owner = make(&api, "owner", None, false).await;
    make(&api, "dep", Some(&owner), false).await;
    api.delete("owner", &DeleteParams::orphan()).await.unwrap();
    gone(&api, "owner").await;
    let dep = api.get("dep").await.unwrap();
    assert!(dep.metadata.owner_references.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn dependents_of_an_owner_that_never_existed_are_collected() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let ghost: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "ghost", "uid": "00000000-0000-4000-8000-000000000000"}
    }))
    .unwrap();
    make(&api, "orphaned", Some(&ghost), false).await;
    gone(&api, "orphaned").await;
}
