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

pub use test_ground::{devcluster_only, on_real};

/// The API server under one test and its admin client: devcluster, or with
/// `AGENT_SANDBOX_CLUSTER=real` a fresh real control plane (`test_ground`: etcd, kube-apiserver,
/// kube-controller-manager, kube-scheduler, kwok), so every assertion here is checked against
/// kube-apiserver too (docs/devcluster.md).
pub struct Cluster {
    ground: test_ground::Cluster,
    client: kube::Client,
}

impl Cluster {
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The admin kubeconfig.
    pub fn kubeconfig_path(&self) -> &Path {
        self.ground.kubeconfig_path()
    }

    /// devcluster's own handle; `None` on the real control plane (see [`devcluster_only`]).
    pub fn devcluster(&self) -> Option<&devcluster::Running> {
        self.ground.devcluster()
    }

    /// Forgets the history of changes up to `resource_version` (of the ConfigMaps of
    /// `default`), so a watch from it gets 410 Gone: devcluster compacts on demand; the real
    /// control plane (started with a short history, see [`start_with`]) compacts etcd every
    /// second, and this waits until a list at exactly that version is refused.
    pub async fn compact_history_past(&self, resource_version: &str) {
        if let Some(dev) = self.devcluster() {
            dev.compact_history();
            return;
        }
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::default_namespaced(self.client.clone());
        let params = kube::api::ListParams::default()
            .at(resource_version)
            .matching(kube::api::VersionMatch::Exact);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !matches!(api.list(&params).await, Err(kube::Error::Api(ref s)) if s.code == 410) {
            assert!(
                Instant::now() < deadline,
                "etcd did not compact past {resource_version} within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops the server and removes its data.
    pub async fn shutdown(self) {
        self.ground.shutdown().await;
    }
}

/// A cluster for one test (node agent on, as by default; on the real control plane kwok's
/// nodes and the scheduler).
pub async fn start() -> Cluster {
    start_with(devcluster::Config::ephemeral()).await
}

/// A cluster without simulated nodes (pods stay as written). The real control plane has its
/// nodes regardless: a test that needs Pods left alone is [`devcluster_only`].
pub async fn start_without_nodes() -> Cluster {
    start_with(devcluster::Config {
        node_agent: false,
        ..devcluster::Config::ephemeral()
    })
    .await
}

/// A cluster for one test with `config` on devcluster; on the real control plane, what
/// [`test_ground::real_options`] takes of it (a short watch history), with the `default`
/// namespace ready for Pods (the ServiceAccount admission plugin wants its `default`
/// ServiceAccount, which kube-controller-manager creates).
pub async fn start_with(config: devcluster::Config) -> Cluster {
    if on_real() {
        assert!(
            realcluster::go_or_skip("devcluster API tests on the real control plane"),
            "AGENT_SANDBOX_CLUSTER=real needs Go to build the real control plane"
        );
    }
    let ground = test_ground::Cluster::start(config).await;
    let client = match &ground {
        test_ground::Cluster::Dev(dev) => dev.client(),
        test_ground::Cluster::Real(real) => {
            let client = real.cluster.client().await.expect("admin client");
            settle_real(&client).await;
            client
        }
    };
    Cluster { ground, client }
}

/// Waits for what kube-controller-manager puts in `default` just after the start: its
/// `default` ServiceAccount and `kube-root-ca.crt`, so nothing of the start-up lands in the
/// tests' watches.
async fn settle_real(client: &kube::Client) {
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
