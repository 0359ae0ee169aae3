//! The Python `kubernetes` client (the package the agent-sandbox SDK is built on), unmodified,
//! against devcluster or, with `AGENT_SANDBOX_CLUSTER=real`, kube-apiserver, with the same
//! assertions. Each test starts its own cluster, then runs scenarios of
//! `tests/python/kube_scenarios.py`; the script first applies our CRDs (`deploy/crds`) through
//! the apiextensions API and waits for them to be Established.

#[path = "clients_support/python.rs"]
mod python;

use std::ffi::OsStr;
use std::time::Duration;

/// Starts a bare cluster of the ground (devcluster with `config`), runs `scenarios` and
/// asserts each reports `ok`.
async fn run(config: devcluster::Config, scenarios: &[&str]) {
    let cluster = e2e_tests::Cluster::start(config).await;
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let names: Vec<String> = scenarios.iter().map(|s| s.to_string()).collect();
    let run = tokio::task::spawn_blocking(move || {
        let crds = python::crd_dir();
        let mut args: Vec<&OsStr> = vec![kubeconfig.as_os_str(), crds.as_os_str()];
        args.extend(names.iter().map(OsStr::new));
        python::run_script("kube_scenarios.py", &args, Duration::from_secs(60))
    })
    .await
    .expect("script runner");
    cluster.shutdown().await;
    for name in scenarios {
        assert!(
            run.stdout.lines().any(|l| l == format!("ok {name}")),
            "scenario {name} did not pass\nstdout:\n{}\nstderr:\n{}",
            run.stdout,
            run.stderr
        );
    }
    assert!(
        run.success,
        "script failed\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
}

async fn run_default(scenario: &str) {
    run(devcluster::Config::ephemeral(), &[scenario]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_namespace_create_list_delete() {
    run_default("namespaces_lifecycle").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_pod_crud_and_error_statuses() {
    run_default("pods_crud_and_errors").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_events_v1_writes_are_listed_through_core_v1() {
    run_default("events_through_both_apis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_label_and_field_selectors_and_paging() {
    run_default("selectors").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_watch_from_resource_version_with_timeout() {
    run_default("watch_events_and_timeout").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_watch_from_compacted_resource_version_is_410() {
    // A short history: devcluster's of 10 events; on the real ground kube-apiserver compacts
    // etcd every second and watches ConfigMaps from etcd (realcluster::Options::short_history).
    let config = devcluster::Config {
        history_limit: 10,
        ..devcluster::Config::ephemeral()
    };
    run(config, &["watch_expired_resource_version"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_strategic_merge_and_json_patch() {
    run_default("patch_kinds").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_custom_objects_crud_status_validation_watch() {
    run_default("custom_objects").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_warm_pool_defaults_and_scale_subresource() {
    run_default("warm_pool_scale_subresource").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_delete_with_propagation_policies() {
    run_default("deletion_propagation").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_dynamic_client_discovers_our_kinds() {
    run_default("dynamic_client").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_claim_requests_as_the_sdk_sends_them() {
    run_default("sdk_claim_calls").await;
}
