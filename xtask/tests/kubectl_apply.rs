//! The release files applied with the real `kubectl` (1.32 on these machines) to devcluster,
//! the project's local API server, and to the real control plane (kube-apiserver, etcd,
//! kube-controller-manager; the `realcluster` crate). It checks what a user running
//! `kubectl apply -f` on an empty cluster would get: `sandbox.yaml` creates exactly the core objects; `extensions.yaml`
//! applied afterwards creates only its own objects and changes none of the core ones; and
//! `sandbox-with-extensions.yaml` applied over both leaves every object unchanged.
//!
//! What changed is read back from the server: every object of the kinds the release uses, with
//! its `generation` (its resourceVersion for kinds without one), before and after each apply.
//! The generation, because on a real cluster controllers write status (a Deployment's replicas,
//! a CRD's conditions) while the test runs: that is not the apply changing an object.
//!
//! kubectl is required: set `XTASK_SKIP_KUBECTL=1` to skip on a machine without it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use xtask::release::{ReleaseOptions, render_release, write_release};
use xtask::workspace::deploy_dir;

/// (group, version, plural, kind) of every kind the release contains.
const RESOURCES: &[(&str, &str, &str, &str)] = &[
    ("", "v1", "namespaces", "Namespace"),
    ("", "v1", "serviceaccounts", "ServiceAccount"),
    ("", "v1", "services", "Service"),
    ("apps", "v1", "deployments", "Deployment"),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
    ),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
    ),
];

const NS: &str = "agent-sandbox-system";

/// Whether `obj`, of `kind`, is one of the release's objects (the `part-of` label, or one of our CRDs). The
/// others are left out: on a real cluster the system's controllers write their own objects while
/// the test runs (the ServiceAccount controller creates a `default` ServiceAccount in the new
/// namespace, the ClusterRole aggregation controller fills in `admin`, `edit` and `view` after
/// the start), and the release touching one of them would show in kubectl's output, which every
/// step checks line by line.
fn is_ours(kind: &str, obj: &DynamicObject) -> bool {
    let labelled = obj
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get("app.kubernetes.io/part-of"))
        .is_some_and(|v| v == "agent-sandbox");
    let our_crd = kind == "CustomResourceDefinition"
        && obj
            .metadata
            .name
            .as_deref()
            .is_some_and(|name| name.ends_with("agents.x-k8s.io"));
    labelled || our_crd
}

/// `Kind namespace/name` (namespace empty for cluster-scoped objects) -> its generation (or
/// resourceVersion), of every object of the release's kinds that is the release's ([`is_ours`]).
async fn snapshot(client: &kube::Client) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (group, version, plural, kind) in RESOURCES {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        for obj in api.list(&ListParams::default()).await.expect("list").items {
            let key = format!(
                "{kind} {}/{}",
                obj.metadata.namespace.as_deref().unwrap_or(""),
                obj.metadata.name.as_deref().unwrap_or("")
            );
            if !is_ours(kind, &obj) {
                continue;
            }
            let version = match obj.metadata.generation {
                Some(generation) => format!("generation {generation}"),
                None => obj.metadata.resource_version.unwrap_or_default(),
            };
            out.insert(key, version);
        }
    }
    out
}

/// Keys of `after` that `before` does not have, and keys of both whose version changed.
fn diff(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let created = after
        .keys()
        .filter(|k| !before.contains_key(*k))
        .cloned()
        .collect();
    let changed = after
        .iter()
        .filter(|(k, rv)| before.get(*k).is_some_and(|old| old != *rv))
        .map(|(k, _)| k.clone())
        .collect();
    (created, changed)
}

fn keys(objects: &[(&str, &str, &str)]) -> BTreeSet<String> {
    objects
        .iter()
        .map(|(kind, ns, name)| format!("{kind} {ns}/{name}"))
        .collect()
}

async fn kubectl_apply(kubeconfig: &Path, file: &Path) -> String {
    let kubeconfig = kubeconfig.to_path_buf();
    let file = file.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let output = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            // Keep kubectl's discovery cache out of the user's home directory.
            .arg("--cache-dir")
            .arg(kubeconfig.with_file_name("kubectl-cache"))
            .args(["apply", "-f"])
            .arg(&file)
            .output()
            .expect("kubectl on PATH (install kubectl, or set XTASK_SKIP_KUBECTL=1 to skip)");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "kubectl apply -f {} failed:\n{stdout}\n{}",
            file.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    })
    .await
    .expect("kubectl task")
}

fn kubectl_skipped() -> bool {
    if std::env::var_os("XTASK_SKIP_KUBECTL").is_some() {
        eprintln!("XTASK_SKIP_KUBECTL set: not running kubectl");
        return true;
    }
    false
}

/// The release files written to a temporary directory.
fn release_dir() -> tempfile::TempDir {
    let options = ReleaseOptions::parse("v1.2.3", "registry.test/agent-sandbox").unwrap();
    let manifests = render_release(&deploy_dir(), &options).unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_release(dir.path(), &manifests).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_creates_exactly_the_listed_objects() {
    if kubectl_skipped() {
        return;
    }
    let dir = release_dir();
    let cluster = devcluster::DevCluster::start(devcluster::Config {
        node_agent: false,
        kubeconfig_path: Some(dir.path().join("kubeconfig")),
        ..devcluster::Config::ephemeral()
    })
    .await
    .expect("devcluster starts");
    let client = cluster.client();
    // devcluster starts with the release's namespace; a user's cluster does not have it.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .delete(NS, &DeleteParams::default())
        .await
        .expect("delete the namespace");
    let deadline = Instant::now() + Duration::from_secs(30);
    while namespaces
        .get_opt(NS)
        .await
        .expect("get namespace")
        .is_some()
    {
        assert!(Instant::now() < deadline, "namespace {NS} never went");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    apply_the_release(&client, cluster.kubeconfig_path(), dir.path()).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_creates_exactly_the_listed_objects_on_the_real_control_plane() {
    if kubectl_skipped()
        || !realcluster::go_or_skip(
            "kubectl_apply_creates_exactly_the_listed_objects_on_the_real_control_plane",
        )
    {
        return;
    }
    let dir = release_dir();
    let cluster = realcluster::RealCluster::start(realcluster::Options {
        nodes: 1,
        ..realcluster::Options::default()
    })
    .await
    .expect("the real control plane starts");
    let kubeconfig = dir.path().join("kubeconfig");
    cluster
        .write_kubeconfig(&kubeconfig)
        .expect("admin kubeconfig");
    let client = cluster.client().await.expect("admin client");
    apply_the_release(&client, &kubeconfig, dir.path()).await;
    drop(cluster);
}

/// Applies `sandbox.yaml`, `extensions.yaml` and `sandbox-with-extensions.yaml` from `dir` in
/// turn to a cluster without the release, checking what each created and changed.
async fn apply_the_release(client: &kube::Client, kubeconfig: &Path, dir: &Path) {
    let client = client.clone();
    // sandbox.yaml on an empty cluster: exactly the core objects are created.
    let empty = snapshot(&client).await;
    let out = kubectl_apply(kubeconfig, &dir.join("sandbox.yaml")).await;
    let core = snapshot(&client).await;
    let (created, changed) = diff(&empty, &core);
    assert_eq!(
        created,
        keys(&[
            ("Namespace", "", NS),
            ("CustomResourceDefinition", "", "sandboxes.agents.x-k8s.io"),
            ("ServiceAccount", NS, "sandbox-controller"),
            ("ClusterRole", "", "agent-sandbox-controller"),
            ("ClusterRoleBinding", "", "agent-sandbox-controller"),
            ("Role", NS, "sandbox-controller-leader-election"),
            ("RoleBinding", NS, "sandbox-controller-leader-election"),
            ("Role", NS, "sandbox-controller-webhook-certs"),
            ("RoleBinding", NS, "sandbox-controller-webhook-certs"),
            ("Service", NS, "sandbox-controller-metrics"),
            ("Service", NS, "sandbox-controller-webhook"),
            ("Deployment", NS, "sandbox-controller"),
        ]),
        "kubectl said:\n{out}"
    );
    assert_eq!(changed, BTreeSet::new(), "kubectl said:\n{out}");
    assert!(out.lines().all(|l| l.ends_with(" created")), "{out}");

    // extensions.yaml after it: only the extension objects are created, nothing else changes.
    let out = kubectl_apply(kubeconfig, &dir.join("extensions.yaml")).await;
    let both = snapshot(&client).await;
    let (created, changed) = diff(&core, &both);
    assert_eq!(
        created,
        keys(&[
            (
                "CustomResourceDefinition",
                "",
                "sandboxtemplates.extensions.agents.x-k8s.io"
            ),
            (
                "CustomResourceDefinition",
                "",
                "sandboxwarmpools.extensions.agents.x-k8s.io"
            ),
            (
                "CustomResourceDefinition",
                "",
                "sandboxclaims.extensions.agents.x-k8s.io"
            ),
            ("ServiceAccount", NS, "extensions-controller"),
            ("ClusterRole", "", "agent-sandbox-controller-extensions"),
            (
                "ClusterRoleBinding",
                "",
                "agent-sandbox-controller-extensions"
            ),
            ("Role", NS, "extensions-controller-leader-election"),
            ("RoleBinding", NS, "extensions-controller-leader-election"),
            ("Role", NS, "extensions-controller-webhook-certs"),
            ("RoleBinding", NS, "extensions-controller-webhook-certs"),
            ("Service", NS, "extensions-controller-metrics"),
            ("Service", NS, "extensions-controller-webhook"),
            ("Deployment", NS, "extensions-controller"),
        ]),
        "kubectl said:\n{out}"
    );
    assert_eq!(changed, BTreeSet::new(), "kubectl said:\n{out}");

    // sandbox-with-extensions.yaml over both: the same objects, so nothing changes.
    let out = kubectl_apply(kubeconfig, &dir.join("sandbox-with-extensions.yaml")).await;
    assert_eq!(snapshot(&client).await, both, "kubectl said:\n{out}");
    assert_eq!(out.lines().count(), 25, "{out}");
    assert!(out.lines().all(|l| l.ends_with(" unchanged")), "{out}");
}
