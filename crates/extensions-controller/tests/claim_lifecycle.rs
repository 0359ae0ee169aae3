//! Claim lifecycle: expiry with Retain and Delete, and deletion cascading to Sandbox and Pod.

#[path = "support/harness.rs"]
mod harness;

use api_types::{Sandbox, SandboxClaim};
use e2e_tests::{DEADLINE, wait_for};
use extensions_controller::Options;
use harness::{ExtEnv, claim_ready};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retain_expiry_deletes_the_sandbox_and_keeps_the_claim() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 1).await;
    ext.wait_pool_ready("pool", 1).await;
    let soon =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(3);
    ext.create_claim(
        "short",
        "pool",
        json!({"lifecycle": {"shutdownTime": soon.to_string()}}),
    )
    .await;
    let bound = ext.wait_claim_reason("short", "DependenciesReady").await;
    let sb_name = bound.status.unwrap().sandbox.name;
    let c = ext.wait_claim_reason("short", "ClaimExpired").await;
    assert_eq!(
        claim_ready(&c).unwrap().2,
        "Claim expired. Sandbox cleanup initiated."
    );
    let sandboxes = ext.api::<Sandbox>();
    wait_for("expired sandbox deleted", DEADLINE, || async {
        sandboxes
            .get_opt(&sb_name)
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    let claims = ext.api::<SandboxClaim>();
    let kept = wait_for("binding cleared", DEADLINE, || async {
        claims
            .get("short")
            .await
            .ok()
            .filter(|c| c.status.as_ref().is_some_and(|s| s.sandbox.name.is_empty()))
    })
    .await;
    assert_eq!(claim_ready(&kept).unwrap().1, "ClaimExpired");
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_policy_removes_the_claim_and_deleting_a_claim_removes_sandbox_and_pod() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 0).await;
    let past = "2020-01-01T00:00:00Z";
    ext.create_claim(
        "gone",
        "pool",
        json!({"lifecycle": {"shutdownTime": past, "shutdownPolicy": "Delete"}}),
    )
    .await;
    let claims = ext.api::<SandboxClaim>();
    wait_for("expired claim deleted", DEADLINE, || async {
        claims
            .get_opt("gone")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;

    ext.create_claim("keep", "pool", json!({})).await;
    let c = ext.wait_claim_reason("keep", "DependenciesReady").await;
    let sb_name = c.status.unwrap().sandbox.name;
    let pods = ext.api::<Pod>();
    wait_for("pod exists", DEADLINE, || async {
        pods.get_opt(&sb_name).await.ok().flatten()
    })
    .await;
    claims
        .delete("keep", &DeleteParams::default())
        .await
        .unwrap();
    let sandboxes = ext.api::<Sandbox>();
    wait_for("sandbox and pod collected", DEADLINE, || async {
        let sb = sandboxes.get_opt(&sb_name).await.ok()?;
        let pod = pods.get_opt(&sb_name).await.ok()?;
        (sb.is_none() && pod.is_none()).then_some(())
    })
    .await;
    ext.stop().await;
}
