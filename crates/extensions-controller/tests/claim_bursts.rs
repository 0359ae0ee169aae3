//! Many claims at once against a small pool, with and without a controller restart in the
//! middle: every claim gets exactly one Sandbox, no Sandbox serves two claims, the pool never
//! holds more than `replicas` members, and nothing leaks.

use crate::harness;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use api_types::{Sandbox, SandboxClaim};
use e2e_tests::{DEADLINE, wait_for};
use extensions_controller::Options;
use futures::future::join_all;
use harness::{ExtEnv, claim_ready};
use kube::api::ListParams;
use serde_json::json;

/// Samples the pool's member count until `stop`, keeping the maximum.
fn watch_pool_size(
    ext: &ExtEnv,
    pool_uid: String,
    stop: tokio_util::sync::CancellationToken,
) -> (Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let max = Arc::new(AtomicUsize::new(0));
    let seen = max.clone();
    let api = ext.api::<Sandbox>();
    let task = tokio::spawn(async move {
        while !stop.is_cancelled() {
            if let Ok(list) = api.list(&ListParams::default()).await {
                let members = list
                    .items
                    .iter()
                    .filter(|s| s.metadata.deletion_timestamp.is_none())
                    .filter(|s| {
                        s.metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .any(|o| o.controller == Some(true) && o.uid == pool_uid)
                    })
                    .count();
                seen.fetch_max(members, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    (max, task)
}

async fn assert_each_claim_has_its_own_sandbox(ext: &ExtEnv, names: &[String]) {
    let claims = ext.api::<SandboxClaim>();
    let sandboxes = ext.api::<Sandbox>();
    let mut bound = HashSet::new();
    for name in names {
        let c = claims.get(name).await.unwrap();
        let sb_name = c.status.as_ref().unwrap().sandbox.name.clone();
        assert!(bound.insert(sb_name.clone()), "{sb_name} serves two claims");
        let sb = sandboxes.get(&sb_name).await.unwrap();
        let owners: Vec<_> = sb.metadata.owner_references.unwrap_or_default();
        assert_eq!(owners.len(), 1, "{sb_name}: {owners:?}");
        assert_eq!(
            owners[0].uid,
            c.metadata.uid.clone().unwrap(),
            "{sb_name} is owned by its claim"
        );
    }
}

async fn burst(claims: usize, replicas: usize, restart_midway: bool) {
    let mut ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    let pool = ext.create_pool("pool", "tmpl", replicas as i32).await;
    ext.wait_pool_ready("pool", replicas as i32).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (max_members, sampler) =
        watch_pool_size(&ext, pool.metadata.uid.clone().unwrap(), stop.clone());

    let names: Vec<String> = (0..claims).map(|i| format!("burst-{i}")).collect();
    let (first, second) = names.split_at(names.len() / 2);
    join_all(first.iter().map(|n| ext.create_claim(n, "pool", json!({})))).await;
    if restart_midway {
        // Killed while the first half is being bound, then restarted with empty memory.
        tokio::time::sleep(Duration::from_millis(150)).await;
        ext.kill_controller();
        join_all(
            second
                .iter()
                .map(|n| ext.create_claim(n, "pool", json!({}))),
        )
        .await;
        ext.start_controller();
    } else {
        join_all(
            second
                .iter()
                .map(|n| ext.create_claim(n, "pool", json!({}))),
        )
        .await;
    }

    let claims = ext.api::<SandboxClaim>();
    wait_for("every claim Ready", DEADLINE * 2, || async {
        let list = claims.list(&ListParams::default()).await.ok()?;
        (list.items.len() == names.len()
            && list
                .items
                .iter()
                .all(|c| claim_ready(c).is_some_and(|(s, _, _)| s == "True")))
        .then_some(())
    })
    .await;
    assert_each_claim_has_its_own_sandbox(&ext, &names).await;

    // The pool refills to exactly `replicas`; no Sandbox is left without a live owner.
    let pool = ext.wait_pool_ready("pool", replicas as i32).await;
    wait_for("no leaked sandboxes", DEADLINE, || async {
        let all = ext
            .api::<Sandbox>()
            .list(&ListParams::default())
            .await
            .ok()?
            .items;
        let live: Vec<_> = all
            .iter()
            .filter(|s| s.metadata.deletion_timestamp.is_none())
            .collect();
        (live.len() == names.len() + replicas).then_some(())
    })
    .await;
    assert_eq!(ext.pool_members(&pool).await.len(), replicas);
    stop.cancel();
    let _ = sampler.await;
    let max = max_members.load(Ordering::Relaxed);
    assert!(
        max <= replicas,
        "the pool held {max} members at some point (replicas {replicas})"
    );
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_claims_race_for_four_members() {
    burst(16, 4, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_claims_at_once_against_a_pool_of_ten() {
    burst(100, 10, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_in_the_middle_of_a_burst_converges() {
    burst(16, 4, true).await;
}
