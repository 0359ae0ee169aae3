//! Pool members whose Pods the scheduler cannot place are held, not replaced: a replacement
//! would be just as unschedulable, and churning them would only load the API server.

use crate::harness;

use std::collections::BTreeSet;
use std::time::Duration;

use e2e_tests::{DEADLINE, EnvOptions, Ground, wait_for};
use extensions_controller::Options;
use extensions_controller::warm_pool::state::PoolSettings;
use harness::ExtEnv;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::ListParams;
use serde_json::json;

fn quick_grace() -> Options {
    Options {
        pool: PoolSettings {
            readiness_grace_period: Duration::from_secs(2),
            unschedulable_recheck_interval: Duration::from_millis(500),
            ..PoolSettings::default()
        },
        ..Options::default()
    }
}

fn unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_members_are_held_and_reported_not_replaced() {
    let mut env_options = EnvOptions::default();
    if let Some(nodes) = env_options.nodes.as_mut() {
        nodes.unschedulable_fraction = 1.0;
    }
    let ext = ExtEnv::start_with(env_options, quick_grace()).await;
    // devcluster's nodes refuse every Pod (above); kube-scheduler finds no node with this label.
    let pod_spec = match e2e_tests::ground() {
        Ground::DevCluster => json!({"containers": [{"name": "main", "image": "busybox:1.36"}]}),
        Ground::Real => json!({
            "nodeSelector": {"agent-sandbox.test/no-such-node": "true"},
            "containers": [{"name": "main", "image": "busybox:1.36"}],
        }),
    };
    ext.create_template("big", json!({"podTemplate": {"spec": pod_spec}}))
        .await;
    let pool = ext.create_pool("pool", "big", 2).await;
    let pods = ext.api::<Pod>();
    let members: BTreeSet<String> =
        wait_for("two members with unschedulable pods", DEADLINE, || async {
            let names: BTreeSet<String> = ext
                .pool_members(&pool)
                .await
                .into_iter()
                .filter_map(|m| m.metadata.name)
                .collect();
            let listed = pods.list(&ListParams::default()).await.ok()?;
            let stuck = listed
                .items
                .iter()
                .filter(|p| unschedulable(p))
                .filter_map(|p| p.metadata.name.clone())
                .collect::<BTreeSet<_>>();
            (names.len() == 2 && stuck.is_superset(&names)).then_some(names)
        })
        .await;

    // Past the 2 s grace period the pool says why it is not progressing...
    let events = ext.api::<Event>();
    let event = wait_for("WarmPoolNotProgressing event", DEADLINE, || async {
        let listed = events.list(&ListParams::default()).await.ok()?;
        listed.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("WarmPoolNotProgressing")
                && e.involved_object.name.as_deref() == Some("pool")
        })
    })
    .await;
    // Sent once, by the first pass that finds a member past the grace period: the members were
    // created a moment apart, so it may count one or both.
    let message = event.message.unwrap_or_default();
    assert!(
        (message.starts_with("1/2 ") || message.starts_with("2/2 "))
            && message.contains("unschedulable"),
        "the event names how many members are unschedulable: {message}"
    );

    // ...and still holds the same members after three more passes (the recheck requeues it).
    let passes_at_event = ext.passes("sandboxwarmpool");
    wait_for("three more pool passes", DEADLINE, || async {
        (ext.passes("sandboxwarmpool") >= passes_at_event + 3).then_some(())
    })
    .await;
    let status = ext
        .api::<api_types::SandboxWarmPool>()
        .get("pool")
        .await
        .expect("get pool")
        .status
        .expect("pool status");
    assert_eq!((status.replicas, status.ready_replicas), (2, 0));
    let later: BTreeSet<String> = ext
        .pool_members(&pool)
        .await
        .into_iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter_map(|m| m.metadata.name)
        .collect();
    assert_eq!(
        later, members,
        "unschedulable members are kept, not churned"
    );
    ext.stop().await;
}
