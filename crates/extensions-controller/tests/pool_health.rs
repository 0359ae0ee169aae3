//! Pool members that never become Ready are replaced after the readiness grace period.
//! (Unschedulable members are held instead: `pool_unschedulable.rs`.)

use crate::harness;

use std::collections::BTreeSet;
use std::time::Duration;

use e2e_tests::{DEADLINE, wait_for};
use extensions_controller::Options;
use extensions_controller::warm_pool::state::PoolSettings;
use harness::ExtEnv;
use serde_json::json;

fn quick_grace() -> Options {
    Options {
        pool: PoolSettings {
            readiness_grace_period: Duration::from_secs(2),
            unschedulable_recheck_interval: Duration::from_secs(1),
            ..PoolSettings::default()
        },
        ..Options::default()
    }
}

async fn live_member_names(ext: &ExtEnv, pool: &api_types::SandboxWarmPool) -> BTreeSet<String> {
    ext.pool_members(pool)
        .await
        .into_iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter_map(|m| m.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_members_are_replaced_after_the_grace_period() {
    let ext = ExtEnv::start(quick_grace()).await;
    // No scheduler serves this name: the pods stay Pending without a scheduling verdict.
    ext.create_template(
        "stuck",
        json!({"podTemplate": {"spec": {"schedulerName": "nobody", "containers": [{"name": "main", "image": "busybox:1.36"}]}}}),
    )
    .await;
    let pool = ext.create_pool("pool", "stuck", 2).await;
    let first = wait_for("two members", DEADLINE, || async {
        let names = live_member_names(&ext, &pool).await;
        (names.len() == 2).then_some(names)
    })
    .await;
    wait_for("stuck members replaced", DEADLINE, || async {
        let names = live_member_names(&ext, &pool).await;
        assert!(names.len() <= 2, "never more than replicas: {names:?}");
        (names.len() == 2 && names.is_disjoint(&first)).then_some(())
    })
    .await;
    ext.stop().await;
}
