//! The controller as its binary runs it (`run_with` on controller-common's runtime): leader
//! election on its own Lease, `/readyz` once the caches are synced, `/metrics` with the
//! reference's claim families, a clean shutdown; and a bad allow-list file is refused.

use crate::harness;

use clap::Parser;
use controller_common::runtime::{RunSpec, Runtime};
use e2e_tests::http_probe::{free_port, http_get, wait_for_metrics};
use e2e_tests::{
    DEADLINE, Env, EnvOptions, install_crds, lease_namespace, release_rbac, wait_for,
    wait_lease_holder,
};
use extensions_controller::args::{Args, LEASE_NAME};
use kube::Api;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_leads_serves_probes_and_claim_metrics() {
    let env = Env::start(EnvOptions::default()).await;
    install_crds(&env.client, api_types::extension_crds()).await;
    let dir = tempfile::tempdir().unwrap();
    // Its own ServiceAccount's token on the real control plane, as the release runs it.
    let kubeconfig = env
        .controller_kubeconfig(&release_rbac::EXTENSIONS_CONTROLLER, dir.path())
        .await;
    let client = realcluster::client_from_kubeconfig(&kubeconfig)
        .await
        .expect("the controller's client");
    let domains = dir.path().join("allowed-label-domains");
    std::fs::write(&domains, "custom.company.com\n").unwrap();
    let (metrics, probes) = (free_port(), free_port());
    let args = Args::try_parse_from([
        "extensions-controller".to_owned(),
        format!("--leader-election-namespace={}", lease_namespace()),
        // The test installs CRDs without conversion webhooks; tests/tests/conversion_webhook.rs
        // covers them.
        "--enable-webhook=false".to_owned(),
        format!("--metrics-bind-address=127.0.0.1:{metrics}"),
        format!("--health-probe-bind-address=127.0.0.1:{probes}"),
        format!("--allowed-label-domains-file={}", domains.display()),
    ])
    .unwrap();
    let shutdown = CancellationToken::new();
    let runtime = Runtime::with_client(
        &args.common,
        RunSpec::new("extensions-controller", LEASE_NAME),
        client,
        shutdown.clone(),
    );
    let task = tokio::spawn(async move { extensions_controller::run_with(runtime, &args).await });

    wait_for("/readyz ok", DEADLINE, || async {
        http_get(probes, "/readyz").await.filter(|(c, _)| *c == 200)
    })
    .await;
    // Ready does not wait for leadership (a standby replica is ready too): wait for the Lease.
    wait_lease_holder(&env, LEASE_NAME).await;

    // A claim using the configured domain is served (cold, from an empty pool).
    let pp = Default::default();
    let template: api_types::SandboxTemplate = serde_json::from_value(json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}}}))
    .unwrap();
    let pool: api_types::SandboxWarmPool = serde_json::from_value(json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
        "metadata": {"name": "p", "namespace": "default"}, "spec": {"replicas": 0, "sandboxTemplateRef": {"name": "t"}}}))
    .unwrap();
    let claim: api_types::SandboxClaim = serde_json::from_value(json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"warmPoolRef": {"name": "p"}, "additionalPodMetadata": {"labels": {"custom.company.com/team": "a"}}}}))
    .unwrap();
    Api::<api_types::SandboxTemplate>::namespaced(env.client.clone(), "default")
        .create(&pp, &template)
        .await
        .unwrap();
    Api::<api_types::SandboxWarmPool>::namespaced(env.client.clone(), "default")
        .create(&pp, &pool)
        .await
        .unwrap();
    Api::<api_types::SandboxClaim>::namespaced(env.client.clone(), "default")
        .create(&pp, &claim)
        .await
        .unwrap();
    let claims = Api::<api_types::SandboxClaim>::namespaced(env.client.clone(), "default");
    wait_for("claim Ready", DEADLINE, || async {
        claims
            .get("c")
            .await
            .ok()
            .filter(|c| harness::claim_ready(c).is_some_and(|(s, _, _)| s == "True"))
    })
    .await;
    // The startup latency is observed once the controller has read the response of its Ready
    // status write, which can come after this test's read saw Ready: scrape until it is there.
    wait_for_metrics(
        metrics,
        &[
            "agent_sandbox_claim_creation_total{namespace=\"default\",sandbox_template=\"t\",launch_type=\"cold\",warmpool_name=\"p\",pod_condition=\"not_ready\",created_by=\"unknown\"} 1",
            "agent_sandbox_claim_controller_startup_latency_ms_bucket",
            "agent_sandbox_creation_latency_ms_bucket",
            "controller_runtime_reconcile_total{controller=\"sandboxclaim\"",
            "workqueue_adds_total{name=\"sandboxclaim\",controller=\"sandboxclaim\"}",
            "workqueue_adds_total{name=\"sandboxwarmpool\",controller=\"sandboxwarmpool\"}",
            "workqueue_adds_total{name=\"sandboxtemplate\",controller=\"sandboxtemplate\"}",
            "workqueue_queue_duration_seconds_count{name=\"sandboxclaim\",controller=\"sandboxclaim\"}",
            "workqueue_work_duration_seconds_count{name=\"sandboxclaim\",controller=\"sandboxclaim\"}",
        ],
        DEADLINE,
    )
    .await;

    // The claim is bound and nothing else changes: its controller's queue drains to zero.
    wait_for("an empty claim queue", DEADLINE, || async {
        http_get(metrics, "/metrics").await.filter(|(_, b)| {
            b.contains("workqueue_depth{name=\"sandboxclaim\",controller=\"sandboxclaim\"} 0\n")
                && b.contains(
                    "workqueue_unfinished_work_seconds{name=\"sandboxclaim\",controller=\"sandboxclaim\"} 0.0\n",
                )
        })
    })
    .await;

    shutdown.cancel();
    let result = tokio::time::timeout(DEADLINE, task)
        .await
        .expect("stops in time")
        .unwrap();
    assert!(result.is_ok(), "clean shutdown: {result:?}");
    env.stop().await;
}

#[test]
fn an_unreadable_allow_list_is_an_error_a_missing_one_the_default() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        extensions_controller::load_allowed_domains(&dir.path().join("absent")).unwrap(),
        ["sandbox.users.io"]
    );
    // A directory cannot be read as a file.
    let err = extensions_controller::load_allowed_domains(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains("allowed label domains file"),
        "{err}"
    );
}
