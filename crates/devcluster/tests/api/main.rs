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
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

/// The API server under one test: devcluster, or with `AGENT_SANDBOX_CLUSTER=real` a fresh real
/// control plane (`realcluster`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
/// kwok), so every assertion here is checked against kube-apiserver too (docs/devcluster.md).
pub enum Cluster {
    Dev(Box<devcluster::Running>),
    Real(Box<RealGround>),
}

/// A real control plane of one test, its admin client, and its turn (one at a time per
/// process: each test assumes a cluster of its own).
pub struct RealGround {
    cluster: realcluster::RealCluster,
    client: kube::Client,
    kubeconfig: std::path::PathBuf,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl Cluster {
    pub fn client(&self) -> kube::Client {
        match self {
            Cluster::Dev(c) => c.client(),
            Cluster::Real(r) => r.client.clone(),
        }
    }

    /// The admin kubeconfig.
    pub fn kubeconfig_path(&self) -> &Path {
        match self {
            Cluster::Dev(c) => c.kubeconfig_path(),
            Cluster::Real(r) => &r.kubeconfig,
        }
    }

    /// devcluster's own handle; `None` on the real control plane (see [`devcluster_only`]).
    pub fn devcluster(&self) -> Option<&devcluster::Running> {
        match self {
            Cluster::Dev(c) => Some(c),
            Cluster::Real(_) => None,
        }
    }

    /// Forgets the history of changes up to `resource_version` (of the ConfigMaps of
    /// `default`), so a watch from it gets 410 Gone: devcluster compacts on demand; the real
    /// control plane (started with a short history, see [`start_with`]) compacts etcd every
    /// second, and this waits until a list at exactly that version is refused.
    pub async fn compact_history_past(&self, resource_version: &str) {
        match self {
            Cluster::Dev(c) => c.compact_history(),
            Cluster::Real(r) => {
                let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
                    Api::default_namespaced(r.client.clone());
                let params = kube::api::ListParams::default()
                    .at(resource_version)
                    .matching(kube::api::VersionMatch::Exact);
                let deadline = Instant::now() + Duration::from_secs(30);
                while !matches!(api.list(&params).await, Err(kube::Error::Api(ref s)) if s.code == 410)
                {
                    assert!(
                        Instant::now() < deadline,
                        "etcd did not compact past {resource_version} within 30 s"
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// Stops the server and removes its data.
    pub async fn shutdown(self) {
        match self {
            Cluster::Dev(c) => c.shutdown().await,
            Cluster::Real(r) => {
                let RealGround { cluster, _turn, .. } = *r;
                let _ = tokio::task::spawn_blocking(move || cluster.stop()).await;
            }
        }
    }
}

/// Whether this run is on the real control plane (a bad `AGENT_SANDBOX_CLUSTER` fails).
pub fn on_real() -> bool {
    realcluster::Ground::from_env().unwrap_or_else(|e| panic!("{e}")) == realcluster::Ground::Real
}

/// `true` on devcluster; on the real control plane prints one line saying why `test` does not
/// run there (`why`: what it checks that only devcluster has) and returns false.
pub fn devcluster_only(test: &str, why: &str) -> bool {
    if !on_real() {
        return true;
    }
    eprintln!("skipping {test} on the real control plane: {why}");
    false
}

/// A cluster for one test (node agent on, as by default; on the real control plane kwok's
/// nodes and the scheduler).
pub async fn start() -> Cluster {
    if on_real() {
        return start_real().await;
    }
    Cluster::Dev(Box::new(
        devcluster::DevCluster::start(devcluster::Config::ephemeral())
            .await
            .expect("devcluster starts"),
    ))
}

/// A cluster without simulated nodes (pods stay as written). The real control plane has its
/// nodes regardless: a test that needs Pods left alone is [`devcluster_only`].
pub async fn start_without_nodes() -> Cluster {
    if on_real() {
        return start_real().await;
    }
    Cluster::Dev(Box::new(
        devcluster::DevCluster::start(devcluster::Config {
            node_agent: false,
            ..devcluster::Config::ephemeral()
        })
        .await
        .expect("devcluster starts"),
    ))
}

/// A cluster for one test with `config` on devcluster. On the real control plane a
/// `history_limit` below devcluster's default asks for a short watch history
/// ([`realcluster::Options::short_history`]); the rest of `config` is devcluster's own, so a test
/// that depends on it is [`devcluster_only`].
pub async fn start_with(config: devcluster::Config) -> Cluster {
    if on_real() {
        return start_real_with(realcluster::Options {
            short_history: config.history_limit < devcluster::Config::ephemeral().history_limit,
            ..realcluster::Options::default()
        })
        .await;
    }
    Cluster::Dev(Box::new(
        devcluster::DevCluster::start(config)
            .await
            .expect("devcluster starts"),
    ))
}

async fn start_real() -> Cluster {
    start_real_with(realcluster::Options::default()).await
}

/// A fresh real control plane once the previous test's is stopped, with the `default`
/// namespace ready for Pods (the ServiceAccount admission plugin wants its `default`
/// ServiceAccount, which kube-controller-manager creates).
async fn start_real_with(options: realcluster::Options) -> Cluster {
    static TURN: std::sync::OnceLock<std::sync::Arc<tokio::sync::Mutex<()>>> =
        std::sync::OnceLock::new();
    assert!(
        realcluster::go_or_skip("devcluster API tests on the real control plane"),
        "AGENT_SANDBOX_CLUSTER=real needs Go to build the real control plane"
    );
    let turn = TURN
        .get_or_init(Default::default)
        .clone()
        .lock_owned()
        .await;
    let cluster = realcluster::RealCluster::start(options)
        .await
        .expect("the real control plane starts (docs/cluster.md)");
    let client = cluster.client().await.expect("admin client");
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(60);
    while accounts.get_opt("default").await.ok().flatten().is_none() {
        assert!(
            Instant::now() < deadline,
            "no default/default ServiceAccount within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // kube-controller-manager publishes `kube-root-ca.crt` into the namespace a moment later;
    // the tests start once it has, so nothing of the start-up lands in their watches.
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    while configmaps
        .get_opt("kube-root-ca.crt")
        .await
        .ok()
        .flatten()
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "no default/kube-root-ca.crt within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kubeconfig = cluster.kubeconfig_path();
    Cluster::Real(Box::new(RealGround {
        cluster,
        client,
        kubeconfig,
        _turn: turn,
    }))
}

/// Creates the four reference CRDs of `dir` (from `reference_spec::reference_crds()`) through
/// the API.
pub async fn install_reference_crds(client: &kube::Client, dir: &Path) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read CRD");
        let mut crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("parse CRD");
        // The reference CRDs convert through the controller's webhook, which these tests do
        // not run: kube-apiserver would refuse every read at another version. Without it each
        // version is served with only `apiVersion` rewritten, which is what devcluster does
        // for any strategy (docs/devcluster.md).
        crd.spec.conversion = None;
        api.create(&PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("creating {}: {e}", f.display()));
    }
    // kube-apiserver serves a new CRD's resource once it is Established, a moment after the
    // create (devcluster at once).
    let crds = api.list(&Default::default()).await.expect("list CRDs");
    for crd in crds.items {
        let name = crd.metadata.name.unwrap_or_default();
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        tokio::time::timeout(Duration::from_secs(10), established)
            .await
            .unwrap_or_else(|_| panic!("CRD {name} not Established within 10 s"))
            .expect("watching the CRD");
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
