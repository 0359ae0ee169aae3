//! Issue 21 items 1 and 9: claims deleted a few milliseconds after they are created must not
//! stop the controller. Every later claim is still bound, and the pool still follows its
//! members.

use crate::harness;

use std::time::Duration;

use api_types::SandboxClaim;
use extensions_controller::Options;
use harness::ExtEnv;
use kube::api::DeleteParams;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_deleted_right_after_create_do_not_stall_the_claims_after_them() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 2).await;
    ext.wait_pool_ready("pool", 2).await;

    let claims = ext.api::<SandboxClaim>();
    for i in 0..60u64 {
        let name = format!("churn-{i}");
        ext.create_claim(&name, "pool", json!({})).await;
        tokio::time::sleep(Duration::from_millis(i % 61)).await;
        claims
            .delete(&name, &DeleteParams::default())
            .await
            .expect("claim deleted");
    }
    // A claim created after the churn is bound, and the pool is back at its replicas.
    ext.create_claim("after", "pool", json!({})).await;
    ext.wait_claim_reason("after", "DependenciesReady").await;
    ext.wait_pool_ready("pool", 2).await;
    ext.stop().await;
}
