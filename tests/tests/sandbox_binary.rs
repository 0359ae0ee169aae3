//! The controller as its binary runs it (`sandbox_controller::run_with` on controller-common's
//! runtime): leader election, `/readyz` once the caches are synced, `/metrics` with the
//! reference's families, and a clean shutdown that releases the Lease.

use std::time::Duration;

use clap::Parser;
use controller_common::runtime::{RunSpec, Runtime};
use e2e_tests::http_probe::{free_port, http_get, wait_for_metrics};
use e2e_tests::{
    DEADLINE, Env, EnvOptions, sandbox, wait_for, wait_lease_holder, wait_ready_reason,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_wiring_leads_serves_probes_and_metrics_and_releases_the_lease() {
    let env = Env::start(EnvOptions {
        sandbox_controller: false,
        ..EnvOptions::default()
    })
    .await;
    let (metrics, probes) = (free_port(), free_port());
    let args = sandbox_controller::args::Args::try_parse_from([
        "sandbox-controller",
        &format!(
            "--leader-election-namespace={}",
            e2e_tests::lease_namespace()
        ),
        // devcluster calls no conversion webhook; tests/tests/conversion_webhook.rs covers it.
        "--enable-webhook=false",
        &format!("--metrics-bind-address=127.0.0.1:{metrics}"),
        &format!("--health-probe-bind-address=127.0.0.1:{probes}"),
    ])
    .unwrap();
    let shutdown = CancellationToken::new();
    let runtime = Runtime::with_client(
        &args.common,
        RunSpec::new("sandbox-controller", sandbox_controller::args::LEASE_NAME),
        env.controller_client.clone(),
        shutdown.clone(),
    );
    let task = tokio::spawn(async move { sandbox_controller::run_with(runtime, &args).await });

    wait_for("/readyz ok", DEADLINE, || async {
        http_get(probes, "/readyz").await.filter(|(c, _)| *c == 200)
    })
    .await;
    let (code, _) = http_get(probes, "/healthz").await.unwrap();
    assert_eq!(code, 200);

    // Ready does not wait for leadership (a standby replica is ready too): wait for the Lease.
    wait_lease_holder(&env, sandbox_controller::args::LEASE_NAME).await;

    let sandboxes = env.sandboxes("default");
    sandboxes
        .create(&PostParams::default(), &sandbox("metered", json!({})))
        .await
        .unwrap();
    wait_ready_reason(&sandboxes, "metered", "DependenciesReady").await;
    // The pass that made the Sandbox Ready is counted when it ends, which can come after its
    // status reached this test: scrape until every series is there.
    wait_for_metrics(
        metrics,
        &[
            r#"agent_sandboxes{namespace="default",ready_condition="true""#,
            "agent_sandbox_build_info",
            "agent_sandbox_creation_latency_ms_bucket",
            "controller_runtime_reconcile_total{controller=\"sandbox\",result=\"success\"}",
            "controller_runtime_reconcile_time_seconds",
        ],
        DEADLINE,
    )
    .await;

    shutdown.cancel();
    let result = tokio::time::timeout(DEADLINE, task)
        .await
        .expect("stops in time")
        .unwrap();
    assert!(result.is_ok(), "clean shutdown: {result:?}");
    let lease = env
        .api::<Lease>(e2e_tests::lease_namespace())
        .get(sandbox_controller::args::LEASE_NAME)
        .await
        .unwrap();
    assert!(
        lease
            .spec
            .unwrap()
            .holder_identity
            .unwrap_or_default()
            .is_empty(),
        "Lease released"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    env.stop().await;
}
