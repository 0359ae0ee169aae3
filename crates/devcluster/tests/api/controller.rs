//! A kube-runtime `Controller` runs against devcluster: initial list, watch, writes.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;

use super::{eventually, start_without_nodes};

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ReconcileError(#[from] kube::Error);

async fn reconcile(cm: Arc<ConfigMap>, api: Arc<Api<ConfigMap>>) -> Result<Action, ReconcileError> {
    let name = cm.metadata.name.clone().unwrap_or_default();
    let patch = json!({"data": {"reconciled": "true"}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(Action::await_change())
}

fn error_policy(_: Arc<ConfigMap>, _: &ReconcileError, _: Arc<Api<ConfigMap>>) -> Action {
    Action::requeue(Duration::from_millis(100))
}

#[tokio::test]
async fn controller_reconciles_existing_and_new_objects() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let make = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"managed": "yes"}}}))
            .unwrap()
    };
    api.create(&PostParams::default(), &make("before"))
        .await
        .unwrap();
    let ctx = Arc::new(api.clone());
    let controller = Controller::new(
        api.clone(),
        watcher::Config::default().labels("managed=yes"),
    )
    .run(reconcile, error_policy, ctx)
    .for_each(|_| async {});
    let handle = tokio::spawn(controller);
    let reconciled = |name: &'static str| {
        let api = api.clone();
        async move {
            eventually(&format!("{name} reconciled"), || async {
                let cm = api.get(name).await.ok()?;
                (cm.data?.get("reconciled")? == "true").then_some(())
            })
            .await
        }
    };
    reconciled("before").await;
    api.create(&PostParams::default(), &make("after"))
        .await
        .unwrap();
    reconciled("after").await;
    handle.abort();
}
