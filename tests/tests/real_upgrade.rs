//! The upgrade from a v1alpha1 install on kube-apiserver, which (unlike devcluster) calls the
//! conversion webhooks: the reference's CRDs as v0.4.x shipped them (v1alpha1 only, stored;
//! from `../shared/spec/reference-crds/`), objects created as v1alpha1, `cargo xtask migrate
//! --phase=bootstrap`, our CRDs and both controllers on their ServiceAccount tokens, both
//! versions read back through the webhooks, `cargo xtask migrate --phase=migrate` and the
//! CRDs' `storedVersions`, and the error a client sees while a webhook is down.
//!
//! How the API server reaches a webhook on loopback: the CRDs keep the release's `service`
//! reference (`<controller>-webhook.agent-sandbox-system`, path `/convert`) with the port the
//! test's controller serves on, and that Service is of type `ExternalName` with
//! `externalName: 127.0.0.1`. kube-apiserver resolves an ExternalName Service to that host
//! and the given port, and still checks the certificate against the Service's DNS name, which
//! the controller's managed certificate carries. (A ClusterIP Service does not route here: no
//! kube-proxy; Endpoints may not name a loopback address.)
//!
//! Needs `go` (skip with one line unless `CI`/`AGENT_SANDBOX_REQUIRE_GO=1`) and the reference
//! CRDs (`AGENT_SANDBOX_SPEC_DIR`, else the nearest `shared/spec` above the workspace; skip with
//! one line unless `CI` is set).

#[path = "clients_support/cargo.rs"]
mod cargo;

use std::path::{Path, PathBuf};
use std::time::Duration;

use e2e_tests::controller_process::Running;
use e2e_tests::http_probe::free_port;
use e2e_tests::release_rbac::{self, SYSTEM_NAMESPACE};
use e2e_tests::{DEADLINE, wait_for};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const NS: &str = "upgrade";
const GROUP: &str = "agents.x-k8s.io";
const EXT_GROUP: &str = "extensions.agents.x-k8s.io";

/// `(group, kind, plural)` of the four kinds.
const KINDS: [(&str, &str, &str); 4] = [
    (GROUP, "Sandbox", "sandboxes"),
    (EXT_GROUP, "SandboxTemplate", "sandboxtemplates"),
    (EXT_GROUP, "SandboxWarmPool", "sandboxwarmpools"),
    (EXT_GROUP, "SandboxClaim", "sandboxclaims"),
];

fn reference_crds_dir() -> Option<PathBuf> {
    let spec = std::env::var_os("AGENT_SANDBOX_SPEC_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            cargo::workspace_root()
                .ancestors()
                .map(|a| a.join("shared/spec"))
                .find(|p| p.is_dir())
        })?;
    Some(spec.join("reference-crds")).filter(|d| d.is_dir())
}

/// The reference's CRD as v0.4.x installed it: only v1alpha1, stored, no conversion.
fn v1alpha1_only(path: &Path) -> CustomResourceDefinition {
    let text = std::fs::read_to_string(path).expect("read a reference CRD");
    let mut crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("a CRD");
    crd.spec.versions.retain(|v| v.name == "v1alpha1");
    assert_eq!(
        crd.spec.versions.len(),
        1,
        "{}: no v1alpha1",
        path.display()
    );
    crd.spec.versions[0].storage = true;
    crd.spec.conversion = None;
    crd.metadata.annotations = None;
    crd
}

fn api(
    client: &kube::Client,
    (group, kind, plural): (&str, &str, &str),
    version: &str,
) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), NS, &resource)
}

async fn create(api: &Api<DynamicObject>, object: Value) {
    let object: DynamicObject = serde_json::from_value(object).expect("an object");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {:?}: {e}", object.metadata.name));
}

/// `cargo xtask migrate ARGS` as admin; its output (stdout and stderr), and whether it passed.
fn xtask_migrate(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["xtask", "migrate"];
    all.extend_from_slice(args);
    let out = cargo::cargo(&all)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("cargo xtask migrate runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn build_binaries() -> PathBuf {
    cargo::cargo_ok(&[
        "build",
        "--quiet",
        "-p",
        "sandbox-controller",
        "--bin",
        "sandbox-controller",
        "-p",
        "extensions-controller",
        "--bin",
        "extensions-controller",
        "-p",
        "xtask",
    ]);
    e2e_tests::controller_process::profile_dir()
}

fn stored_versions(crd: &CustomResourceDefinition) -> Vec<String> {
    crd.status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha1_install_upgrades_through_the_webhooks_and_migrates_storage() {
    const TEST: &str = "a_v1alpha1_install_upgrades_through_the_webhooks_and_migrates_storage";
    if !realcluster::go_or_skip(TEST) {
        return;
    }
    let Some(reference) = reference_crds_dir() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "{TEST}: the reference CRDs (shared/spec/reference-crds) are missing, and CI requires them"
        );
        eprintln!("skipping {TEST}: no shared/spec/reference-crds (set AGENT_SANDBOX_SPEC_DIR)");
        return;
    };
    let binaries = tokio::task::spawn_blocking(build_binaries)
        .await
        .expect("build task");
    let cluster = realcluster::shared()
        .await
        .expect("the real cluster starts");
    let admin = cluster.client().await.expect("admin client");
    let kubeconfig = cluster.kubeconfig_path();

    // The v0.4.x install: v1alpha1 CRDs and objects.
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&reference)
        .expect("list reference-crds")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        4,
        "four reference CRDs in {}",
        reference.display()
    );
    for file in &files {
        crds.create(&PostParams::default(), &v1alpha1_only(file))
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", file.display()));
    }
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .expect("namespace");
    for kind in KINDS {
        let api = api(&admin, kind, "v1alpha1");
        wait_for(&format!("{} v1alpha1 served", kind.2), DEADLINE, || async {
            api.list(&ListParams::default()).await.ok().map(|_| ())
        })
        .await;
    }
    let containers = json!([{"name": "main", "image": "busybox:1.36"}]);
    create(
        &api(&admin, KINDS[1], "v1alpha1"),
        json!({"apiVersion": "extensions.agents.x-k8s.io/v1alpha1", "kind": "SandboxTemplate",
               "metadata": {"name": "tpl"}, "spec": {"podTemplate": {"spec": {"containers": containers}}}}),
    )
    .await;
    create(
        &api(&admin, KINDS[3], "v1alpha1"),
        json!({"apiVersion": "extensions.agents.x-k8s.io/v1alpha1", "kind": "SandboxClaim",
               "metadata": {"name": "cold"},
               "spec": {"sandboxTemplateRef": {"name": "tpl"}, "warmpool": "none"}}),
    )
    .await;
    create(
        &api(&admin, KINDS[0], "v1alpha1"),
        json!({"apiVersion": "agents.x-k8s.io/v1alpha1", "kind": "Sandbox",
               "metadata": {"name": "napping"},
               "spec": {"replicas": 0, "podTemplate": {"spec": {"containers": containers}}}}),
    )
    .await;

    // Bootstrap: the shadow pool the cold claim will convert to.
    let (ok, out) = tokio::task::spawn_blocking({
        let kubeconfig = kubeconfig.clone();
        move || xtask_migrate(&kubeconfig, &["--phase=bootstrap"])
    })
    .await
    .unwrap();
    assert!(ok, "bootstrap failed:\n{out}");
    let pools = api(&admin, KINDS[2], "v1alpha1");
    pools
        .get("shadow-pool-tpl")
        .await
        .unwrap_or_else(|e| panic!("bootstrap made no shadow pool ({e}):\n{out}"));

    // The upgrade: the release's RBAC, the webhook Services (ExternalName to loopback), our
    // CRDs pointing at them with the port each controller serves on, and the controllers.
    release_rbac::install(&admin).await;
    let ports = [free_port(), free_port()];
    let services: Api<Service> = Api::namespaced(admin.clone(), SYSTEM_NAMESPACE);
    for c in &release_rbac::CONTROLLERS {
        services
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": format!("{}-webhook", c.binary)},
                    "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
                }))
                .unwrap(),
            )
            .await
            .expect("webhook Service");
    }
    let ours = api_types::core_crds()
        .into_iter()
        .map(|crd| (crd, ports[0]))
        .chain(
            api_types::extension_crds()
                .into_iter()
                .map(|crd| (crd, ports[1])),
        );
    for (mut crd, port) in ours {
        let name = crd.metadata.name.clone().unwrap();
        let webhook = crd
            .spec
            .conversion
            .as_mut()
            .and_then(|c| c.webhook.as_mut())
            .and_then(|w| w.client_config.as_mut())
            .and_then(|c| c.service.as_mut())
            .expect("our CRDs convert through a Service");
        webhook.port = Some(i32::from(port));
        crd.metadata.resource_version = crds.get(&name).await.unwrap().metadata.resource_version;
        crds.replace(&name, &PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("replace CRD {name}: {e}"));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut running = Vec::new();
    for (c, port) in release_rbac::CONTROLLERS.iter().zip(ports) {
        let text = cluster
            .service_account_kubeconfig(SYSTEM_NAMESPACE, c.account, Duration::from_secs(3600))
            .await
            .expect("a ServiceAccount token");
        let path = dir.path().join(format!("{}.kubeconfig", c.account));
        std::fs::write(&path, text).expect("write kubeconfig");
        running.push(Running::start(&binaries, c, &path, port));
    }

    // Both versions read through the webhooks, once they answer.
    for kind in KINDS {
        let api = api(&admin, kind, "v1beta1");
        wait_for(
            &format!("{} readable as v1beta1", kind.2),
            DEADLINE,
            || async { api.list(&ListParams::default()).await.ok().map(|_| ()) },
        )
        .await;
    }
    let napping = api(&admin, KINDS[0], "v1beta1")
        .get("napping")
        .await
        .unwrap();
    assert_eq!(napping.data["spec"]["operatingMode"], "Suspended");
    let napping = api(&admin, KINDS[0], "v1alpha1")
        .get("napping")
        .await
        .unwrap();
    assert_eq!(napping.data["spec"]["replicas"], 0);
    let cold = api(&admin, KINDS[3], "v1beta1").get("cold").await.unwrap();
    assert_eq!(cold.data["spec"]["warmPoolRef"]["name"], "shadow-pool-tpl");
    let cold = api(&admin, KINDS[3], "v1alpha1").get("cold").await.unwrap();
    assert_eq!(cold.data["spec"]["sandboxTemplateRef"]["name"], "tpl");

    // Storage migration: every object rewritten as v1beta1, storedVersions cleaned.
    let (ok, out) = tokio::task::spawn_blocking({
        let kubeconfig = kubeconfig.clone();
        move || xtask_migrate(&kubeconfig, &["--phase=migrate"])
    })
    .await
    .unwrap();
    assert!(ok, "migrate failed:\n{out}");
    for file in &files {
        let name = v1alpha1_only(file).metadata.name.unwrap();
        let crd = crds.get(&name).await.unwrap();
        assert_eq!(stored_versions(&crd), ["v1beta1"], "{name}:\n{out}");
    }

    // The core webhook down: v1alpha1 needs it and fails, naming it; v1beta1 does not.
    drop(running.remove(0));
    let alpha = api(&admin, KINDS[0], "v1alpha1");
    let message = wait_for(
        "a v1alpha1 read failing without its webhook",
        DEADLINE,
        || async {
            match alpha.get("napping").await {
                Err(kube::Error::Api(status)) => Some(status.message),
                _ => None,
            }
        },
    )
    .await;
    eprintln!("a v1alpha1 read while the webhook is down: {message}");
    assert!(
        message.contains("conversion webhook for agents.x-k8s.io/v1beta1, Kind=Sandbox failed"),
        "{message}"
    );
    api(&admin, KINDS[0], "v1beta1")
        .get("napping")
        .await
        .expect("v1beta1 needs no conversion");
    drop(running);
}
