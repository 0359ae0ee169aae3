//! Warm claims end to end on devcluster with both controllers: a claim takes a Ready pool
//! member by ownership transfer, the pool refills, and the writes are counted.

use crate::harness;

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

    ext.wait_template_settled("tmpl").await;
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
    ext.settle().await;
    let all = ext.writes();
    let ours = ext.our_writes();
    eprintln!(
        "writes per warm claim, end to end incl. the refill: {all:#?}\nof which the extensions controller: {ours:#?}"
    );
    assert_eq!(
        claim_controller_writes(&ours),
        3,
        "default flags: the guarded adoption patch, the status patch and one annotation patch, \
         no SandboxAdopted Event: {ours:?}"
    );
    // The replacement was created with its `pod-name` annotation and the adopted member had
    // it too: the core controller patched no Sandbox's metadata, only the adoption did.
    assert_eq!(
        all.get("patch sandboxes").copied(),
        Some(1),
        "end to end: {all:?}"
    );
    let replacement = ext
        .pool_members(&pool)
        .await
        .into_iter()
        .find(|m| {
            !members
                .iter()
                .any(|old| old.metadata.name == m.metadata.name)
        })
        .expect("a replacement member");
    let replacement_name = replacement.metadata.name.clone().unwrap();
    assert!(replacement_name.starts_with("pool-"), "{replacement_name}");
    assert_eq!(
        replacement.metadata.annotations.as_ref().unwrap()["agents.x-k8s.io/pod-name"],
        replacement_name
    );
    let pod = ext
        .api::<k8s_openapi::api::core::v1::Pod>()
        .get(&replacement_name)
        .await
        .expect("the replacement's Pod is named after it");
    assert_eq!(
        pod.metadata.name.as_deref(),
        Some(replacement_name.as_str())
    );
    assert!(
        adoption_events(&ext, "c1").await.is_empty(),
        "SandboxAdopted is opt-in"
    );
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

/// The watch events of a claim pass's own writes (the adoption patch, the first-ready stamp)
/// start no claim pass. Without that, each warm claim takes 4 passes: its creation, the echo of
/// the adoption, the core controller's status write on the adopted Sandbox, the echo of the
/// stamp; with it, 2. On one thread the write's response is always read before the watch task
/// runs again; on several, an echo can be looked at before its write's response has been read,
/// and then still counts (see `controller_common::own_writes`).
#[tokio::test]
async fn the_echoes_of_a_claim_pass_own_writes_start_no_pass() {
    const CLAIMS: u64 = 5;
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", CLAIMS as i32).await;
    ext.wait_pool_ready("pool", CLAIMS as i32).await;
    ext.settle().await;
    let before = ext.passes("sandboxclaim");
    for i in 0..CLAIMS {
        let name = format!("c{i}");
        ext.create_claim(&name, "pool", json!({})).await;
        ext.wait_claim_reason(&name, "DependenciesReady").await;
    }
    ext.settle().await;
    let passes = ext.passes("sandboxclaim") - before;
    assert!(
        (CLAIMS..=3 * CLAIMS).contains(&passes),
        "claim passes for {CLAIMS} warm claims: {passes} (4 each without echo skipping)"
    );
    ext.stop().await;
}

/// Writes the claim controller sends for one warm claim: claims, the adopted Sandbox, Events.
fn claim_controller_writes(ours: &std::collections::BTreeMap<String, u64>) -> u64 {
    ours.iter()
        .filter(|(k, _)| {
            k.contains("sandboxclaims") || k.as_str() == "patch sandboxes" || k.contains("events")
        })
        .map(|(_, v)| *v)
        .sum()
}

/// Reasons of the `SandboxAdopted` Events about claim `name` (events.k8s.io/v1).
async fn adoption_events(ext: &ExtEnv, name: &str) -> Vec<String> {
    let events = ext
        .api::<k8s_openapi::api::events::v1::Event>()
        .list(&Default::default())
        .await
        .expect("list events");
    events
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("SandboxClaim") && r.name.as_deref() == Some(name)
            })
        })
        .filter_map(|e| e.reason)
        .filter(|r| r == "SandboxAdopted")
        .collect()
}

/// A controller started with `claim` settings binds one warm claim named `name` from a pool of
/// one; the writes are counted from the claim's creation on.
async fn bind_one_warm_claim(
    claim: extensions_controller::claim::state::ClaimSettings,
    name: &str,
) -> ExtEnv {
    let ext = ExtEnv::start(Options {
        claim,
        ..Options::default()
    })
    .await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 1).await;
    ext.wait_pool_ready("pool", 1).await;
    ext.wait_template_settled("tmpl").await;
    ext.reset_counts();
    ext.create_claim(name, "pool", json!({})).await;
    let bound = ext.wait_claim_reason(name, "DependenciesReady").await;
    assert_ne!(bound.status.unwrap().sandbox.name, name, "warm");
    ext
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_adoption_events_flag_restores_the_sandbox_adopted_event() {
    let claim = extensions_controller::claim::state::ClaimSettings {
        adoption_events: true,
        ..Default::default()
    };
    let ext = bind_one_warm_claim(claim, "loud").await;
    // The Event is published off the reconcile path.
    wait_for("the SandboxAdopted Event", DEADLINE, || async {
        (adoption_events(&ext, "loud").await.len() == 1).then_some(())
    })
    .await;
    ext.settle().await;
    let ours = ext.our_writes();
    assert_eq!(
        claim_controller_writes(&ours),
        4,
        "adoption patch, status patch, annotation patch and the Event: {ours:?}"
    );
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_annotations_off_a_warm_claim_costs_two_writes() {
    let claim = extensions_controller::claim::state::ClaimSettings {
        observability_annotations: false,
        ..Default::default()
    };
    let ext = bind_one_warm_claim(claim, "quiet").await;
    ext.settle().await;
    let ours = ext.our_writes();
    assert_eq!(
        claim_controller_writes(&ours),
        2,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_status_is_coalesced_during_a_burst_and_exact_after_it() {
    let ext = ExtEnv::start(Options::default()).await;
    let window = ext.options.pool.status_window;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 6).await;
    let pool = ext.wait_pool_ready("pool", 6).await;
    let before = ext.pool_members(&pool).await;
    ext.wait_template_settled("tmpl").await;
    ext.reset_counts();
    let started = std::time::Instant::now();
    let names: Vec<String> = (0..6).map(|i| format!("burst-{i}")).collect();
    futures::future::join_all(names.iter().map(|n| ext.create_claim(n, "pool", json!({})))).await;
    for n in &names {
        ext.wait_claim_reason(n, "DependenciesReady").await;
    }
    // Six fresh members, all Ready, and a status that says exactly that.
    wait_for("six fresh Ready members", DEADLINE, || async {
        let members = ext.pool_members(&pool).await;
        (members.len() == 6
            && members.iter().all(is_ready)
            && members
                .iter()
                .all(|m| !before.iter().any(|b| b.metadata.name == m.metadata.name)))
        .then_some(())
    })
    .await;
    ext.wait_pool_ready("pool", 6).await;
    let elapsed = started.elapsed();
    ext.settle().await;
    let status = ext
        .api::<api_types::SandboxWarmPool>()
        .get("pool")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!((status.replicas, status.ready_replicas), (6, 6));
    let ours = ext.our_writes();
    let status_writes = ours
        .get("patch sandboxwarmpools/status")
        .copied()
        .unwrap_or(0);
    // Count-only changes are written at most once per window (each write ends a hold that
    // began after the previous one), however many claims and refills moved the counts.
    let bound = (elapsed.as_secs_f64() / window.as_secs_f64()).floor() as u64 + 1;
    eprintln!("{status_writes} pool status writes in {elapsed:?}: {ours:?}");
    assert!(
        status_writes <= bound,
        "{status_writes} pool status writes in {elapsed:?} (at most {bound}): {ours:?}"
    );
    ext.stop().await;
}
