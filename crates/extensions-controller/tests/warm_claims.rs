//! Warm claims end to end on devcluster with both controllers: a claim takes a Ready pool
//! member by ownership transfer, the pool refills, and the writes are counted.

#[path = "support/harness.rs"]
mod harness;

use api_types::keys::{SANDBOX_ID_LABEL, SANDBOX_LAUNCH_TYPE_LABEL, SANDBOX_WARM_POOL_LABEL};
use api_types::{Sandbox, SandboxClaim};
use e2e_tests::{DEADLINE, wait_for};
use extensions_controller::Options;
use harness::{ExtEnv, claim_ready};
use serde_json::json;

fn is_ready(sb: &Sandbox) -> bool {
    sb.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_claim_takes_a_ready_member_and_the_pool_refills() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 2).await;
    let pool = ext.wait_pool_ready("pool", 2).await;
    let members = ext.pool_members(&pool).await;
    assert_eq!(members.len(), 2);
    for m in &members {
        assert!(m.metadata.name.as_deref().unwrap().starts_with("pool-"));
        assert_eq!(
            m.metadata.labels.as_ref().unwrap()[SANDBOX_WARM_POOL_LABEL],
            api_types::name_hash("pool")
        );
    }
    let status = pool.status.clone().unwrap();
    assert_eq!(
        status.selector,
        format!(
            "agents.x-k8s.io/warm-pool-sandbox={}",
            api_types::name_hash("pool")
        )
    );
    assert_eq!(
        status.observed_generation,
        pool.metadata.generation.unwrap()
    );

    ext.reset_counts();
    let claim = ext.create_claim("c1", "pool", json!({})).await;
    let bound = ext.wait_claim_reason("c1", "DependenciesReady").await;
    let (ready, _, _) = claim_ready(&bound).unwrap();
    assert_eq!(ready, "True");
    let sandbox_name = bound.status.as_ref().unwrap().sandbox.name.clone();
    assert!(
        members
            .iter()
            .any(|m| m.metadata.name.as_deref() == Some(sandbox_name.as_str())),
        "a warm member was taken: {sandbox_name}"
    );
    assert!(!bound.status.as_ref().unwrap().sandbox.pod_ips.is_empty());

    let sb = ext.api::<Sandbox>().get(&sandbox_name).await.unwrap();
    let owner = &sb.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("SandboxClaim", claim.metadata.uid.as_deref().unwrap())
    );
    let labels = sb.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[SANDBOX_LAUNCH_TYPE_LABEL], "warm");
    assert_eq!(
        labels[SANDBOX_ID_LABEL],
        claim.metadata.uid.clone().unwrap()
    );
    assert!(!labels.contains_key(SANDBOX_WARM_POOL_LABEL));

    // The pool replaces the taken member.
    let pool = ext.wait_pool_ready("pool", 2).await;
    wait_for("two fresh members", DEADLINE, || async {
        let members = ext.pool_members(&pool).await;
        (members.len() == 2
            && members
                .iter()
                .all(|m| m.metadata.name.as_deref() != Some(sandbox_name.as_str()) && is_ready(m)))
        .then_some(())
    })
    .await;
    ext.wait_pool_ready("pool", 2).await;
    // Measurement window: let trailing writes (coalesced pool status, events) land.
    tokio::time::sleep(harness::SETTLE).await;
    let all = ext.writes();
    let ours = ext.our_writes();
    eprintln!(
        "writes per warm claim, end to end incl. the refill: {all:#?}\nof which the extensions controller: {ours:#?}"
    );
    let claim_controller: u64 = [
        "patch sandboxes",
        "patch sandboxclaims",
        "patch sandboxclaims/status",
        "create events",
        "patch events",
    ]
    .iter()
    .map(|k| ours.get(*k).copied().unwrap_or(0))
    .sum();
    assert!(claim_controller <= 4, "claim-controller writes: {ours:?}");
    let metrics = ext.metrics_text();
    assert!(metrics.contains("agent_sandbox_claim_creation_total{namespace=\"default\",sandbox_template=\"tmpl\",launch_type=\"warm\",warmpool_name=\"pool\",pod_condition=\"ready\",created_by=\"unknown\"} 1"), "{metrics}");
    let claims = ext.api::<SandboxClaim>();
    let annotated = claims.get("c1").await.unwrap();
    let annotations = annotated.metadata.annotations.unwrap_or_default();
    assert!(
        annotations.contains_key("agents.x-k8s.io/claim-first-ready-at"),
        "{annotations:?}"
    );
    assert!(annotations.contains_key("agents.x-k8s.io/controller-first-observed-at"));
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_events_and_annotations_off_a_warm_claim_costs_two_writes() {
    let options = Options {
        claim: extensions_controller::context::ClaimSettings {
            events: false,
            observability_annotations: false,
            ..Default::default()
        },
        ..Options::default()
    };
    let ext = ExtEnv::start(options).await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 1).await;
    ext.wait_pool_ready("pool", 1).await;
    ext.reset_counts();
    ext.create_claim("quiet", "pool", json!({})).await;
    let bound = ext.wait_claim_reason("quiet", "DependenciesReady").await;
    assert_ne!(bound.status.unwrap().sandbox.name, "quiet", "warm");
    tokio::time::sleep(harness::SETTLE).await;
    let ours = ext.our_writes();
    let claim_writes: u64 = ours
        .iter()
        .filter(|(k, _)| {
            k.contains("sandboxclaims") || k.as_str() == "patch sandboxes" || k.contains("events")
        })
        .map(|(_, v)| *v)
        .sum();
    assert_eq!(
        claim_writes, 2,
        "one guarded Sandbox patch and one status patch: {ours:?}"
    );
    let claim = ext.api::<SandboxClaim>().get("quiet").await.unwrap();
    assert!(
        !claim
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("agents.x-k8s.io/claim-first-ready-at"),
        "no annotations written"
    );
    ext.stop().await;
}
