//! Claim lifecycle: expiry with Retain and Delete, and deletion cascading to Sandbox and Pod.

use crate::harness;

use api_types::{Sandbox, SandboxClaim};
use e2e_tests::{DEADLINE, GC_DEADLINE, wait_for};
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
    // Garbage collection by kube-controller-manager on the real control plane.
    wait_for("sandbox and pod collected", GC_DEADLINE, || async {
        let sb = sandboxes.get_opt(&sb_name).await.ok()?;
        let pod = pods.get_opt(&sb_name).await.ok()?;
        (sb.is_none() && pod.is_none()).then_some(())
    })
    .await;
    ext.stop().await;
}

/// `(status, reason, lastTransitionTime)` of a claim's Finished condition.
fn claim_finished(claim: &SandboxClaim) -> Option<(String, String, String)> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Finished")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone(),
                c.last_transition_time.0.to_string(),
            )
        })
}

/// A template whose one container runs `script` once (`restartPolicy: Never`), and an empty
/// pool drawing from it, so claims get cold Sandboxes whose Pod finishes.
async fn finishing_template_and_pool(ext: &ExtEnv, script: &str) {
    ext.create_template(
        "job",
        json!({"podTemplate": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script]}],
        }}}),
    )
    .await;
    ext.create_pool("jobs", "job", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_after_finished_expires_the_claim_and_retain_keeps_its_finished_condition() {
    let ext = ExtEnv::start(Options::default()).await;
    finishing_template_and_pool(&ext, "sleep 1; exit 0").await;
    ext.create_claim(
        "once",
        "jobs",
        json!({"lifecycle": {"ttlSecondsAfterFinished": 2}}),
    )
    .await;
    let claims = ext.api::<SandboxClaim>();
    let finished = wait_for("claim mirrors Finished", DEADLINE, || async {
        let claim = claims.get_opt("once").await.ok()??;
        claim_finished(&claim).map(|f| (claim, f))
    })
    .await;
    let (claim, (status, reason, finished_at)) = finished;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "PodSucceeded"));
    assert_ne!(
        claim_ready(&claim).unwrap().1,
        "ClaimExpired",
        "not before the TTL has passed"
    );
    let sb_name = claim.status.unwrap().sandbox.name;
    assert!(!sb_name.is_empty());

    let expired = ext.wait_claim_reason("once", "ClaimExpired").await;
    let observed = k8s_openapi::jiff::Timestamp::now();
    let finished_at: k8s_openapi::jiff::Timestamp = finished_at.parse().unwrap();
    assert!(
        observed >= finished_at + k8s_openapi::jiff::SignedDuration::from_secs(2),
        "expired at {observed}, finished at {finished_at}, TTL 2 s"
    );
    assert_eq!(
        claim_finished(&expired).map(|f| f.1).as_deref(),
        Some("PodSucceeded")
    );
    let sandboxes = ext.api::<Sandbox>();
    wait_for(
        "Retain: the finished Sandbox is deleted",
        DEADLINE,
        || async {
            sandboxes
                .get_opt(&sb_name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    let kept = wait_for("binding cleared", DEADLINE, || async {
        claims
            .get("once")
            .await
            .ok()
            .filter(|c| c.status.as_ref().is_some_and(|s| s.sandbox.name.is_empty()))
    })
    .await;
    assert_eq!(claim_ready(&kept).unwrap().1, "ClaimExpired");
    let still = claim_finished(&kept).expect("Retain keeps the Finished condition");
    assert_eq!(
        (still.0.as_str(), still.1.as_str()),
        ("True", "PodSucceeded")
    );
    ext.stop().await;
}

/// One watch event, as far as the foreground test looks at it.
#[derive(Debug, Clone)]
struct Seen {
    kind: &'static str,
    event: &'static str,
    name: String,
    resource_version: u64,
    deleting: bool,
    foreground: bool,
    phase: Option<String>,
}

/// Every change of `K` in `default` after now, as [`Seen`] events.
async fn changes<K>(
    api: kube::Api<K>,
    kind: &'static str,
    phase: fn(&K) -> Option<String>,
) -> impl futures::Stream<Item = Seen>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    use futures::StreamExt as _;
    let listed = api
        .list_metadata(&kube::api::ListParams::default())
        .await
        .unwrap();
    let from = listed.metadata.resource_version.unwrap_or_default();
    let stream = api
        .watch(&kube::api::WatchParams::default(), &from)
        .await
        .unwrap();
    stream.filter_map(move |event| {
        let seen = match event {
            Ok(kube::api::WatchEvent::Added(o)) => Some(("ADDED", o)),
            Ok(kube::api::WatchEvent::Modified(o)) => Some(("MODIFIED", o)),
            Ok(kube::api::WatchEvent::Deleted(o)) => Some(("DELETED", o)),
            _ => None,
        }
        .map(|(event, o)| {
            let meta = o.meta();
            Seen {
                kind,
                event,
                name: meta.name.clone().unwrap_or_default(),
                // devcluster's resourceVersions, like etcd's revisions behind kube-apiserver,
                // are one increasing counter: they order changes across kinds.
                resource_version: meta
                    .resource_version
                    .as_deref()
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or_default(),
                deleting: meta.deletion_timestamp.is_some(),
                foreground: meta
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == "foregroundDeletion"),
                phase: phase(&o),
            }
        });
        std::future::ready(seen)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_foreground_after_finish_removes_pod_then_sandbox_then_claim() {
    use futures::StreamExt as _;

    let ext = ExtEnv::start(Options::default()).await;
    finishing_template_and_pool(&ext, "exit 1").await;
    let claims = changes(ext.api::<SandboxClaim>(), "claim", |_| None).await;
    let sandboxes = changes(ext.api::<Sandbox>(), "sandbox", |_| None).await;
    let pods = changes(ext.api::<Pod>(), "pod", |p: &Pod| {
        p.status.as_ref().and_then(|s| s.phase.clone())
    })
    .await;
    let mut all = futures::stream::select_all([claims.boxed(), sandboxes.boxed(), pods.boxed()]);
    ext.create_claim(
        "fails",
        "jobs",
        json!({"lifecycle": {"ttlSecondsAfterFinished": 0, "shutdownPolicy": "DeleteForeground"}}),
    )
    .await;
    let mut seen: Vec<Seen> = Vec::new();
    // Foreground deletion is kube-controller-manager's garbage collector on the real ground.
    let deadline = tokio::time::Instant::now() + GC_DEADLINE;
    // The three watches are separate streams: the claim's deletion can be read before the
    // Pod's and the Sandbox's, which the API server committed earlier. Read until all three.
    let gone = |seen: &[Seen], kind: &str| {
        seen.iter()
            .any(|s| s.kind == kind && s.event == "DELETED" && s.name == "fails")
    };
    while !["claim", "sandbox", "pod"]
        .iter()
        .all(|kind| gone(&seen, kind))
    {
        let next = tokio::time::timeout_at(deadline, all.next())
            .await
            .unwrap_or_else(|_| panic!("claim not deleted in time; seen: {seen:#?}"))
            .expect("watches end only when the test does");
        seen.push(next);
    }
    let first = |kind: &str, pred: &dyn Fn(&Seen) -> bool| {
        seen.iter()
            .find(|s| s.kind == kind && pred(s))
            .unwrap_or_else(|| panic!("no {kind} event as expected in {seen:#?}"))
            .resource_version
    };
    let pod_failed = first("pod", &|s| s.phase.as_deref() == Some("Failed"));
    let claim_deleting = first("claim", &|s| s.deleting && s.foreground);
    let sandbox_deleting = first("sandbox", &|s| s.deleting && s.foreground);
    let pod_gone = first("pod", &|s| s.event == "DELETED");
    let sandbox_gone = first("sandbox", &|s| s.event == "DELETED");
    let claim_gone = first("claim", &|s| s.event == "DELETED");
    assert!(
        pod_failed < claim_deleting,
        "finished, then expired: {seen:#?}"
    );
    assert!(
        claim_deleting < sandbox_deleting
            && sandbox_deleting < pod_gone
            && pod_gone < sandbox_gone
            && sandbox_gone < claim_gone,
        "the claim waits (foregroundDeletion) for its Sandbox, which waits for its Pod: {seen:#?}"
    );
    ext.stop().await;
}
