//! Claims never take more than they may: a bound claim whose Sandbox disappears is told so and
//! not silently given another; a claim asking for metadata the API would refuse takes no warm
//! Sandbox; a template whose NetworkPolicy cannot be made, or does not carry the template's
//! current rules, hands out no Sandbox; a template with the longest name the API allows still
//! gets its policy.

use std::time::Duration;

use crate::harness;

use api_types::{Sandbox, SandboxClaim, SandboxWarmPool};
use devcluster::observe::{FaultConfig, FaultRule};
use e2e_tests::{DEADLINE, wait_for};
use extensions_controller::Options;
use harness::{ExtEnv, claim_ready};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;
use serde_json::json;

/// `(type, reason, note)` of the Events about claim `name` (events.k8s.io/v1).
async fn claim_events(ext: &ExtEnv, name: &str) -> Vec<(String, String, String)> {
    ext.api::<k8s_openapi::api::events::v1::Event>()
        .list(&Default::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("SandboxClaim") && r.name.as_deref() == Some(name)
            })
        })
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// Names of the Sandboxes whose controller is `uid`.
async fn controlled_by(ext: &ExtEnv, uid: &str) -> Vec<String> {
    ext.api::<Sandbox>()
        .list(&ListParams::default())
        .await
        .expect("list sandboxes")
        .items
        .into_iter()
        .filter(|s| {
            s.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .filter_map(|s| s.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deleted_sandbox_of_a_ready_claim_is_reported_not_replaced() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    let pool = ext.create_pool("pool", "tmpl", 2).await;
    ext.wait_pool_ready("pool", 2).await;
    let claim = ext.create_claim("kept", "pool", json!({})).await;
    let uid = claim.metadata.uid.clone().unwrap();
    let bound = ext.wait_claim_reason("kept", "DependenciesReady").await;
    let first = bound.status.unwrap().sandbox.name;
    ext.api::<Sandbox>()
        .delete(&first, &Default::default())
        .await
        .expect("sandbox deleted");
    let missing = ext.wait_claim_reason("kept", "SandboxMissing").await;
    let (status, _, message) = claim_ready(&missing).unwrap();
    assert_eq!(status, "False");
    assert!(message.contains(&first), "{message}");
    assert_eq!(
        missing.status.as_ref().unwrap().sandbox.name,
        first,
        "the claim still names the Sandbox it lost"
    );
    wait_for("a Warning Event SandboxMissing", DEADLINE, || async {
        claim_events(&ext, "kept")
            .await
            .into_iter()
            .find(|(t, r, _)| t == "Warning" && r == "SandboxMissing")
    })
    .await;
    // Nothing takes its place: no Sandbox is the claim's, and the pool keeps its members.
    ext.wait_pool_ready("pool", 2).await;
    ext.settle().await;
    assert!(controlled_by(&ext, &uid).await.is_empty());
    let claim = ext.api::<SandboxClaim>().get("kept").await.unwrap();
    assert_eq!(claim_ready(&claim).unwrap().1, "SandboxMissing");
    assert_eq!(ext.pool_members(&pool).await.len(), 2);
    ext.stop().await;
}

/// Requests this controller sent to the `sandboxes` main resource with `verb`, answered `code`.
fn sandbox_requests(ext: &ExtEnv, verb: &str, code: u16) -> u64 {
    ext.env
        .cluster
        .observer()
        .counts()
        .into_iter()
        .filter(|(k, _)| {
            k.verb == verb
                && k.resource == "sandboxes"
                && k.subresource.is_empty()
                && k.code == code
                && k.user_agent == harness::USER_AGENT
        })
        .map(|(_, n)| n)
        .sum()
}

/// Template `tmpl` (its policy in place) and its pool `pool` of one Ready member: the pool as
/// created and its members.
async fn settled_pool_of_one(ext: &ExtEnv) -> (SandboxWarmPool, Vec<Sandbox>) {
    ext.create_template("tmpl", json!({})).await;
    let pool = ext.create_pool("pool", "tmpl", 1).await;
    let ready = ext.wait_pool_ready("pool", 1).await;
    ext.wait_template_settled("tmpl").await;
    let members = ext.pool_members(&ready).await;
    (pool, members)
}

/// Issue 21 item 2 (chaos `churn-fast`): a claim deleted while its take is under way takes
/// nothing. The adoption patch of the pool's only member is refused (409) and the fresh read of
/// the member that follows is held for 5 s, while the claim is deleted. A retried patch would
/// adopt the member for a claim that is gone, and garbage collection would then delete the
/// member and its Pod; the controller sees the deletion in its cache and leaves the member in
/// the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_deleted_while_its_take_is_under_way_leaves_the_member_in_the_pool() {
    if !e2e_tests::devcluster_only(
        "a_claim_deleted_while_its_take_is_under_way_leaves_the_member_in_the_pool",
        "it refuses and holds requests with devcluster's fault injection",
    ) {
        return;
    }
    let ext = ExtEnv::start(Options::default()).await;
    let (pool, members) = settled_pool_of_one(&ext).await;
    assert_eq!(members.len(), 1);
    // `sandboxes/`: the main resource only (not the core controller's status writes).
    let held_read = FaultRule {
        verbs: vec!["get".into()],
        resources: vec!["sandboxes/".into()],
        latency: Duration::from_secs(5),
        ..FaultRule::default()
    };
    let refused_patch = FaultRule {
        verbs: vec!["patch".into()],
        resources: vec!["sandboxes/".into()],
        error_rate: 1.0,
        error_code: 409,
        ..FaultRule::default()
    };
    let observer = ext.env.cluster.observer();
    observer
        .set_faults(FaultConfig {
            rules: vec![refused_patch, held_read.clone()],
            ..FaultConfig::default()
        })
        .expect("faults");
    let claim = ext.create_claim("late", "pool", json!({})).await;
    let uid = claim.metadata.uid.clone().unwrap();
    wait_for("the adoption patch refused", DEADLINE, || async {
        (sandbox_requests(&ext, "patch", 409) > 0).then_some(())
    })
    .await;
    // The controller is now reading the member afresh (held); the claim goes meanwhile.
    observer
        .set_faults(FaultConfig {
            rules: vec![held_read],
            ..FaultConfig::default()
        })
        .expect("faults");
    ext.api::<SandboxClaim>()
        .delete("late", &Default::default())
        .await
        .expect("claim deleted");
    wait_for(
        "the fresh read of the member answered",
        DEADLINE,
        || async { (sandbox_requests(&ext, "get", 200) > 0).then_some(()) },
    )
    .await;
    observer.set_faults(FaultConfig::default()).expect("faults");
    ext.settle().await;
    assert!(
        controlled_by(&ext, &uid).await.is_empty(),
        "a Sandbox was adopted for the deleted claim: {}",
        ext.describe_sandboxes().await
    );
    let now = ext.pool_members(&pool).await;
    assert_eq!(
        now.iter().map(|m| &m.metadata.uid).collect::<Vec<_>>(),
        members.iter().map(|m| &m.metadata.uid).collect::<Vec<_>>(),
        "the warm member stays in the pool: {}",
        ext.describe_sandboxes().await
    );
    assert_eq!(
        sandbox_requests(&ext, "patch", 200),
        0,
        "no adoption patch after the claim's deletion"
    );
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_asking_for_oversized_annotations_takes_no_warm_sandbox() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    let pool = ext.create_pool("pool", "tmpl", 1).await;
    let ready = ext.wait_pool_ready("pool", 1).await;
    let members = ext.pool_members(&ready).await;
    // Over the API's 256 KiB limit for all of an object's annotations together.
    let big = "x".repeat(300 * 1024);
    ext.create_claim(
        "greedy",
        "pool",
        json!({"additionalPodMetadata": {"annotations": {"note": big}}}),
    )
    .await;
    let refused = ext.wait_claim_reason("greedy", "InvalidMetadata").await;
    let message = claim_ready(&refused).unwrap().2;
    assert!(message.contains("262144"), "{message}");
    ext.settle().await;
    let now = ext.pool_members(&pool).await;
    assert_eq!(
        now.iter().map(|m| &m.metadata.name).collect::<Vec<_>>(),
        members.iter().map(|m| &m.metadata.name).collect::<Vec<_>>(),
        "the warm member stays in the pool"
    );
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_template_name_gets_its_network_policy() {
    let ext = ExtEnv::start(Options::default()).await;
    // 253 characters: the longest name a SandboxTemplate may have.
    let name = format!("t{}", "-long".repeat(50)) + "-a";
    assert_eq!(name.len(), 253);
    let template = ext.create_template(&name, json!({})).await;
    let policies = ext.api::<NetworkPolicy>();
    let np = wait_for("the template's NetworkPolicy", DEADLINE, || async {
        policies
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|np| {
                np.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| Some(&o.uid) == template.metadata.uid.as_ref())
            })
    })
    .await;
    let np_name = np.metadata.name.unwrap();
    assert!(np_name.len() <= 253, "{np_name}");
    assert_eq!(
        np.spec.unwrap().pod_selector.unwrap().match_labels.unwrap()
            [api_types::keys::SANDBOX_TEMPLATE_REF_HASH_LABEL],
        api_types::name_hash(&name)
    );
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_whose_policy_cannot_be_made_hands_out_no_sandbox() {
    let ext = ExtEnv::start(Options::default()).await;
    // Someone else's NetworkPolicy holds the name the template's would have.
    let foreign: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "tmpl-network-policy"},
        "spec": {"podSelector": {"matchLabels": {"app": "other"}}},
    }))
    .unwrap();
    ext.api::<NetworkPolicy>()
        .create(&Default::default(), &foreign)
        .await
        .expect("foreign policy created");
    ext.create_template("tmpl", json!({})).await;
    let pool = ext.create_pool("pool", "tmpl", 1).await;
    let ready = ext.wait_pool_ready("pool", 1).await;
    let members = ext.pool_members(&ready).await;
    ext.create_claim("exposed", "pool", json!({})).await;
    let held = ext
        .wait_claim_reason("exposed", "NetworkPolicyNotReady")
        .await;
    let message = claim_ready(&held).unwrap().2;
    assert!(message.contains("tmpl-network-policy"), "{message}");
    ext.settle().await;
    assert_eq!(
        ext.pool_members(&pool).await.len(),
        members.len(),
        "the member was not handed out"
    );
    let claim = ext.api::<SandboxClaim>().get("exposed").await.unwrap();
    assert!(
        claim
            .status
            .as_ref()
            .is_none_or(|s| s.sandbox.name.is_empty()),
        "no Sandbox bound"
    );
    // The user removes the squatter: the template's policy is made and the claim is served.
    ext.api::<NetworkPolicy>()
        .delete("tmpl-network-policy", &Default::default())
        .await
        .unwrap();
    ext.wait_claim_reason("exposed", "DependenciesReady").await;
    ext.stop().await;
}

/// A template's rules tightened while the API server refuses to apply them (found on the real
/// control plane, where the release's RBAC lacked `patch` on NetworkPolicies): until its policy
/// carries them, no Sandbox of the template is handed out under the looser rules in force, and
/// the template gets a Warning Event saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_that_cannot_be_applied_hand_out_no_sandbox_under_the_old_ones() {
    if !e2e_tests::devcluster_only(
        "rules_that_cannot_be_applied_hand_out_no_sandbox_under_the_old_ones",
        "it refuses the policy's apply with devcluster's fault injection",
    ) {
        return;
    }
    let ext = ExtEnv::start(Options::default()).await;
    let (pool, members) = settled_pool_of_one(&ext).await;
    let observer = ext.env.cluster.observer();
    observer
        .set_faults(FaultConfig {
            rules: vec![FaultRule {
                verbs: vec!["patch".into()],
                resources: vec!["networkpolicies/".into()],
                error_rate: 1.0,
                error_code: 403,
                message: Some("networkpolicies is forbidden: cannot patch".into()),
                ..FaultRule::default()
            }],
            ..FaultConfig::default()
        })
        .expect("faults");
    // Deny all ingress from now on.
    ext.api::<api_types::SandboxTemplate>()
        .patch(
            "tmpl",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"spec": {"networkPolicy": {"ingress": []}}})),
        )
        .await
        .expect("template rules tightened");
    let events = ext.api::<k8s_openapi::api::events::v1::Event>();
    let note = wait_for("a Warning Event NetworkPolicyFailed", DEADLINE, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find_map(|e| {
            (e.reason.as_deref() == Some("NetworkPolicyFailed")
                && e.regarding.as_ref()?.name.as_deref() == Some("tmpl"))
            .then(|| e.note.unwrap_or_default())
        })
    })
    .await;
    assert!(note.contains("forbidden"), "{note}");
    ext.create_claim("strict", "pool", json!({})).await;
    let held = ext
        .wait_claim_reason("strict", "NetworkPolicyNotReady")
        .await;
    let message = claim_ready(&held).unwrap().2;
    assert!(
        message.contains("tmpl-network-policy") && message.contains("forbidden"),
        "{message}"
    );
    ext.settle().await;
    let claim = ext.api::<SandboxClaim>().get("strict").await.unwrap();
    assert!(
        claim
            .status
            .as_ref()
            .is_none_or(|s| s.sandbox.name.is_empty()),
        "no Sandbox bound under the old rules: {:?}",
        claim.status
    );
    assert_eq!(ext.pool_members(&pool).await.len(), members.len());
    // The API server takes the apply again: the policy carries the rules, the claim is served.
    observer.set_faults(FaultConfig::default()).expect("faults");
    ext.wait_claim_reason("strict", "DependenciesReady").await;
    let np = ext
        .api::<NetworkPolicy>()
        .get("tmpl-network-policy")
        .await
        .unwrap();
    assert_eq!(np.spec.unwrap().ingress, Some(vec![]));
    ext.stop().await;
}
