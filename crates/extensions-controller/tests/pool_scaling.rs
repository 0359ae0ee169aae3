//! SandboxWarmPool: the scale subresource, scale to zero, and the Recreate update strategy.

use crate::harness;

use api_types::{SandboxTemplate, SandboxWarmPool};
use e2e_tests::{DEADLINE, wait_for};
use extensions_controller::Options;
use harness::ExtEnv;
use kube::api::{Patch, PatchParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_subresource_drives_the_pool() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    let pool = ext.create_pool("pool", "tmpl", 1).await;
    ext.wait_pool_ready("pool", 1).await;
    let pools = ext.api::<SandboxWarmPool>();
    pools
        .patch_scale(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    ext.wait_pool_ready("pool", 3).await;
    let scale = pools.get_scale("pool").await.unwrap();
    assert_eq!(scale.status.as_ref().map(|s| s.replicas), Some(3));
    assert_eq!(
        scale.status.and_then(|s| s.selector),
        Some(format!(
            "agents.x-k8s.io/warm-pool-sandbox={}",
            api_types::name_hash("pool")
        ))
    );
    pools
        .patch_scale(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    wait_for("empty pool", DEADLINE, || async {
        let p = pools.get("pool").await.ok()?;
        let members = ext.pool_members(&pool).await;
        (p.status.as_ref().is_some_and(|s| s.replicas == 0)
            && members
                .iter()
                .all(|m| m.metadata.deletion_timestamp.is_some()))
        .then_some(())
    })
    .await;
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_replaces_stale_members_on_replenish_keeps_them() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    let recreate = ext.create_pool("recreate", "tmpl", 2).await;
    let pools = ext.api::<SandboxWarmPool>();
    pools
        .patch(
            "recreate",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"updateStrategy": {"type": "Recreate"}}})),
        )
        .await
        .unwrap();
    let keep = ext.create_pool("keep", "tmpl", 1).await;
    ext.wait_pool_ready("recreate", 2).await;
    ext.wait_pool_ready("keep", 1).await;
    let kept = ext.pool_members(&keep).await;

    let templates = ext.api::<SandboxTemplate>();
    let image = json!({"spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}}});
    templates
        .patch("tmpl", &PatchParams::default(), &Patch::Merge(&image))
        .await
        .unwrap();
    wait_for("recreated members", DEADLINE, || async {
        let members: Vec<_> = ext
            .pool_members(&recreate)
            .await
            .into_iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .collect();
        (members.len() == 2
            && members.iter().all(|m| {
                m.spec.blueprint.pod_template.spec.containers[0]
                    .image
                    .as_deref()
                    == Some("busybox:1.37")
            }))
        .then_some(())
    })
    .await;
    ext.wait_pool_ready("recreate", 2).await;
    let still: Vec<_> = ext
        .pool_members(&keep)
        .await
        .into_iter()
        .map(|m| m.metadata.name)
        .collect();
    assert_eq!(
        still,
        kept.into_iter()
            .map(|m| m.metadata.name)
            .collect::<Vec<_>>(),
        "OnReplenish leaves members alone"
    );
    ext.stop().await;
}
