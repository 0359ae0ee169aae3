//! The packaged chart on a real control plane (kube-apiserver, etcd, kwok from upstream/go.mod,
//! the `realcluster` crate) with the real `helm`: `helm install --wait`, `helm upgrade` to a
//! changed values file, `helm uninstall`, and what each leaves on the API server. kwok runs the
//! controllers' Pods as simulated Pods, so this checks what the API server accepts (RBAC,
//! PodSecurity `restricted` admission, CRDs with conversion webhooks) and what Helm creates,
//! changes and deletes, not the controllers themselves (tests/ runs those).
//!
//! Needs Go (the first run builds helm and the control plane; both are cached): without it the
//! test skips with one line, except under `CI` or `AGENT_SANDBOX_REQUIRE_GO=1`, where it fails.
//! `XTASK_SKIP_HELM=1` skips.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use xtask::chart::{chart_dir, package, package_file_name};
use xtask::release::ReleaseOptions;

const VERSION: &str = "v1.2.3";
const REGISTRY: &str = "registry.test/agent-sandbox";
const NAMESPACE: &str = "agent-sandbox-system";
const DEADLINE: Duration = Duration::from_secs(120);
const CRDS: [&str; 4] = [
    "sandboxes.agents.x-k8s.io",
    "sandboxtemplates.extensions.agents.x-k8s.io",
    "sandboxwarmpools.extensions.agents.x-k8s.io",
    "sandboxclaims.extensions.agents.x-k8s.io",
];

/// Runs helm against the cluster; panics with its output when it fails.
fn helm(kubeconfig: &Path, home: &Path, args: &[&str]) -> String {
    let binary = xtask::gotools::HELM.binary().expect("helm builds");
    let output = Command::new(binary)
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("helm runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "helm {args:?}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Polls `probe` every 200 ms until it is true, panicking with `what` after [`DEADLINE`].
async fn wait_until<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !probe().await {
        assert!(
            start.elapsed() < DEADLINE,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn args(deployment: &Deployment) -> Vec<String> {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers[0].args.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_installs_upgrades_and_uninstalls_on_a_real_api_server() {
    if std::env::var_os("XTASK_SKIP_HELM").is_some() {
        eprintln!("XTASK_SKIP_HELM is set: helm tests skipped");
        return;
    }
    if !realcluster::go_or_skip("the_chart_installs_upgrades_and_uninstalls_on_a_real_api_server") {
        return;
    }
    let cluster = realcluster::shared()
        .await
        .expect("the real cluster starts");
    let client = cluster.client().await.unwrap();
    let kubeconfig = cluster.kubeconfig_path();
    let work = tempfile::tempdir().unwrap();
    let options = ReleaseOptions::parse(VERSION, REGISTRY).unwrap();
    let chart = work.path().join(package_file_name(VERSION));
    std::fs::write(
        &chart,
        package(&chart_dir(), &options.chart_inputs(), 1_700_000_000).unwrap(),
    )
    .unwrap();
    let chart = chart.to_str().unwrap().to_string();
    let home = work.path().join("helm");

    // Install: everything, and Helm waits for both Deployments to be available.
    helm(
        &kubeconfig,
        &home,
        &[
            "install",
            "agent-sandbox",
            &chart,
            "--wait",
            "--timeout",
            "3m",
        ],
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    for name in ["sandbox-controller", "extensions-controller"] {
        let deployment = deployments.get(name).await.unwrap();
        let image = deployment
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .image
            .clone();
        assert_eq!(
            image.as_deref(),
            Some(&*format!("{REGISTRY}/{name}:{VERSION}"))
        );
        assert!(args(&deployment).contains(&format!("--webhook-namespace={NAMESPACE}")));
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in CRDS {
        let crd = crds.get(name).await.unwrap();
        let service = crd
            .spec
            .conversion
            .and_then(|c| c.webhook)
            .and_then(|w| w.client_config)
            .and_then(|c| c.service)
            .unwrap_or_else(|| panic!("{name} has no conversion webhook Service"));
        assert_eq!(service.namespace, NAMESPACE, "{name}");
    }

    // Upgrade to a changed values file: core only, two replicas, one more flag.
    let values = work.path().join("values.yaml");
    std::fs::write(
        &values,
        "extensions:\n  enabled: false\nsandboxController:\n  replicas: 2\n  flags:\n    sandboxConcurrentWorkers: 8\n",
    )
    .unwrap();
    helm(
        &kubeconfig,
        &home,
        &[
            "upgrade",
            "agent-sandbox",
            &chart,
            "--values",
            values.to_str().unwrap(),
            "--wait",
            "--timeout",
            "3m",
        ],
    );
    let core = deployments.get("sandbox-controller").await.unwrap();
    assert_eq!(core.spec.as_ref().unwrap().replicas, Some(2));
    assert!(args(&core).contains(&"--sandbox-concurrent-workers=8".to_string()));
    wait_until("the extensions Deployment to go", || async {
        deployments
            .get_opt("extensions-controller")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    let roles: Api<ClusterRole> = Api::all(client.clone());
    assert!(
        roles
            .get_opt("agent-sandbox-controller-extensions")
            .await
            .unwrap()
            .is_none()
    );
    // Its CRDs are kept, like at uninstall (and with them every object of those kinds).
    for name in CRDS {
        assert!(crds.get_opt(name).await.unwrap().is_some(), "{name}");
    }

    // Uninstall: the controllers and their RBAC go, the CRDs stay.
    let out = helm(
        &kubeconfig,
        &home,
        &["uninstall", "agent-sandbox", "--wait"],
    );
    assert!(out.contains("uninstalled"), "{out}");
    wait_until("the core Deployment to go", || async {
        deployments
            .get_opt("sandbox-controller")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    assert!(
        roles
            .get_opt("agent-sandbox-controller")
            .await
            .unwrap()
            .is_none()
    );
    for name in CRDS {
        assert!(crds.get_opt(name).await.unwrap().is_some(), "{name}");
    }
}
