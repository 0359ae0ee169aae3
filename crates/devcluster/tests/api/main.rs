//! End-to-end tests of devcluster against real clients: kube-rs `Api` and `Controller`, and
//! kubectl. Every test starts its own in-process cluster on a free port.

mod compat;
mod controller;
mod crds;
mod crud;
mod gc;
mod kubectl;
mod patching;
mod pod_lifecycle;
mod serving;
mod watch;

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

/// A cluster for one test (node agent on, as by default).
pub async fn start() -> devcluster::Running {
    devcluster::DevCluster::start(devcluster::Config::ephemeral())
        .await
        .expect("devcluster starts")
}

/// A cluster without simulated nodes (pods stay as written).
pub async fn start_without_nodes() -> devcluster::Running {
    devcluster::DevCluster::start(devcluster::Config {
        node_agent: false,
        ..devcluster::Config::ephemeral()
    })
    .await
    .expect("devcluster starts")
}

/// The shared spec folder: `$AGENT_SANDBOX_SPEC_DIR`, else the nearest `shared/spec` above the
/// crate (`<repo>/../shared/spec` for the main checkout and for worktrees alike).
pub fn spec_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("AGENT_SANDBOX_SPEC_DIR") {
        return PathBuf::from(dir);
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .map(|a| a.join("shared/spec"))
        .find(|p| p.join("reference-crds").is_dir())
        .unwrap_or_else(|| manifest.join("../../../shared/spec"))
}

/// Creates the four reference CRDs through the API.
pub async fn install_reference_crds(client: &kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let dir = spec_dir().join("reference-crds");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read CRD");
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("parse CRD");
        api.create(&PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("creating {}: {e}", f.display()));
    }
}

pub fn sandbox_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("agents.x-k8s.io", "v1beta1", "Sandbox"),
        "sandboxes",
    )
}

pub fn sandboxes(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &sandbox_resource())
}

/// Polls `check` every 20 ms until it yields `Some`, for at most 10 s.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The HTTP status code of a kube API error.
pub fn status_code(err: &kube::Error) -> u16 {
    match err {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other}"),
    }
}
